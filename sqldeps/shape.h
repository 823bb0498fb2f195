// sqldeps/shape.h — the shape of a query text: its tokens with the literal values taken out (each
// becomes a `?`), so that texts differing only in their values share one compiled template:
// compile() once per shape, the values go to derive() as parameters. An app that inlines values
// (query("SELECT ... WHERE id = 42")) then pays one tokenization per new text, not a
// classification. derive(compile(shape.text), shape.values) names at least what
// derive(compile(text)) names (tests/sqldeps: equal on the sample's statements).
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "sqldeps/deps.h"

namespace tierce::sqldeps {

struct Shape {
  std::string text;  // the statement as SQL, literals replaced by `?`, tokens separated by spaces
  Params values;     // the literals in order, as positional parameters
};

// nullopt when the text is compiled as written instead: it has parameters of its own (prepared
// statements: their texts repeat anyway), an error token, more than one statement, no literal,
// or a first word other than SELECT, INSERT, UPDATE, DELETE, REPLACE (statements whose literals
// steer the classification itself, such as SET autocommit = 0, keep them).
std::optional<Shape> shape_of(std::string_view sql);

}  // namespace tierce::sqldeps
