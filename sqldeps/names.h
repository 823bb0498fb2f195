// sqldeps/names.h — internal (not installed): the spelling of a dependency name's parts and the
// canonical form of a value (deps.h: "Names", "Canonical values"), shared by the statement
// compiler and the deriver.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "sqldeps/schema.h"

namespace tierce::sqldeps::detail {

// '~' and 16 lower-case hex digits of XXH3-64 of `s`.
std::string hashed(std::string_view s);
// A name part: as is when plain and short, else '~' + hash.
std::string encode(std::string_view s);
std::string lower_ascii(std::string_view s);
// A table or column name as names spell it: lower-cased, encoded.
std::string ident(std::string_view name);
// The value part of val:T:C:V for `raw` compared with a column of `type`, or nullopt when the
// server's comparison is not simple enough for one spelling to stand for the value.
std::optional<std::string> canonical(std::string_view raw, ColumnType type);

}  // namespace tierce::sqldeps::detail
