// php_ext/compiled_cache.h — the tierce PHP extension's compiled SQL, kept per process (plain C++,
// tested alone in tests/php/test_compiled_cache.cc): by text for prepared statements and texts
// without literals, and by shape (sqldeps/shape.h) for query() texts with inlined values. A text
// with literals is never kept by itself (apps that inline values make most texts new): it costs
// one pass of the lexer and a lookup of its shape, not a classification.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "php_ext/tracker.h"
#include "sqldeps/deps.h"

namespace tierce::php {

class CompiledCache {
 public:
  // Each map is cleared when it reaches this many texts (an app's set of texts is small; one that
  // makes texts without end does not grow the process).
  static constexpr size_t kMax = 4096;

  // `schema` is read at each compilation (the extension loads it after constructing the cache).
  explicit CompiledCache(const sqldeps::Schema& schema) : schema_(schema) {}

  // `values` null: the text as written (a prepared statement's: its values come at execute);
  // else the text's literals are put in `values` when it is compiled by its shape.
  std::shared_ptr<const sqldeps::Compiled> get(std::string_view sql,
                                               sqldeps::Params* values = nullptr);

  size_t texts() const { return map_.size(); }
  size_t shapes() const { return shapes_.size(); }

 private:
  using Map = std::unordered_map<std::string, std::shared_ptr<const sqldeps::Compiled>,
                                 TransparentHash, std::equal_to<>>;
  const sqldeps::Schema& schema_;
  Map map_;     // by text as written
  Map shapes_;  // by shape
};

}  // namespace tierce::php
