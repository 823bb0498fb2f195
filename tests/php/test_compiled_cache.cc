// tests/php/test_compiled_cache.cc — php_ext/compiled_cache.h alone: a prepared text is compiled
// once, texts with inlined values share their shape's compilation and hand back their values, and
// the cache stays bounded.
#define BOOST_TEST_MODULE php_compiled_cache
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <string>

#include "php_ext/compiled_cache.h"

using namespace tierce::php;
namespace sd = tierce::sqldeps;

BOOST_AUTO_TEST_CASE(a_prepared_text_is_compiled_once) {
  sd::Schema schema;
  CompiledCache cache(schema);
  auto a = cache.get("SELECT * FROM items WHERE id = ?");
  auto b = cache.get("SELECT * FROM items WHERE id = ?");
  BOOST_TEST(a.get() == b.get());
  BOOST_TEST(cache.texts() == 1u);
  BOOST_TEST(cache.shapes() == 0u);
}

BOOST_AUTO_TEST_CASE(texts_with_values_share_their_shape_and_give_their_values) {
  sd::Schema schema;
  CompiledCache cache(schema);
  sd::Params p42, p7;
  auto a = cache.get("SELECT * FROM items WHERE id = 42", &p42);
  auto b = cache.get("SELECT * FROM items WHERE id = 7", &p7);
  BOOST_TEST(a.get() == b.get());
  BOOST_TEST(cache.shapes() == 1u);
  BOOST_TEST(cache.texts() == 0u);  // a text with literals is not kept by itself
  BOOST_REQUIRE(p42.positional.size() == 1u);
  BOOST_REQUIRE(p7.positional.size() == 1u);
  BOOST_TEST(p42.positional[0].value_or("") == "42");
  BOOST_TEST(p7.positional[0].value_or("") == "7");
  // Without a place for the values the text is compiled as written.
  auto c = cache.get("SELECT * FROM items WHERE id = 42");
  BOOST_TEST(c.get() != a.get());
  BOOST_TEST(cache.texts() == 1u);
}

BOOST_AUTO_TEST_CASE(a_text_without_literals_is_kept_by_its_text) {
  sd::Schema schema;
  CompiledCache cache(schema);
  sd::Params p;
  auto a = cache.get("SELECT * FROM items", &p);
  BOOST_TEST(cache.texts() == 1u);
  BOOST_TEST(cache.shapes() == 0u);
  BOOST_TEST(p.positional.empty());
  BOOST_TEST(cache.get("SELECT * FROM items").get() == a.get());
}

BOOST_AUTO_TEST_CASE(the_cache_is_bounded) {
  sd::Schema schema;
  CompiledCache cache(schema);
  for (size_t i = 0; i < CompiledCache::kMax; ++i)
    cache.get("SELECT * FROM t" + std::to_string(i) + " WHERE id = ?");
  BOOST_TEST(cache.texts() == CompiledCache::kMax);
  auto kept = cache.get("SELECT * FROM t0 WHERE id = ?");  // still there: not compiled again
  BOOST_TEST(cache.texts() == CompiledCache::kMax);
  cache.get("SELECT * FROM another WHERE id = ?");  // one more: the map starts again
  BOOST_TEST(cache.texts() == 1u);
  BOOST_TEST(kept != nullptr);  // a compilation handed out stays valid
}
