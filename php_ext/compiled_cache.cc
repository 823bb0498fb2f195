// php_ext/compiled_cache.cc — see compiled_cache.h.
#include "php_ext/compiled_cache.h"

#include <optional>

#include "sqldeps/shape.h"

namespace tierce::php {

namespace sd = tierce::sqldeps;

std::shared_ptr<const sd::Compiled> CompiledCache::get(std::string_view sql, sd::Params* values) {
  auto it = map_.find(sql);
  if (it != map_.end()) return it->second;
  if (values) {
    if (std::optional<sd::Shape> sh = sd::shape_of(sql)) {
      auto si = shapes_.find(sh->text);
      if (si == shapes_.end()) {
        if (shapes_.size() >= kMax) shapes_.clear();
        auto c = std::make_shared<const sd::Compiled>(sd::compile(sh->text, schema_));
        si = shapes_.emplace(std::move(sh->text), std::move(c)).first;
      }
      *values = std::move(sh->values);
      return si->second;
    }
  }
  if (map_.size() >= kMax) map_.clear();
  return map_.emplace(std::string(sql),
                      std::make_shared<const sd::Compiled>(sd::compile(sql, schema_)))
      .first->second;
}

}  // namespace tierce::php
