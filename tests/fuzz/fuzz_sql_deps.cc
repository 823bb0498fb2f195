// tests/fuzz/fuzz_sql_deps.cc — fuzz target for the SQL dependency deriver (sqldeps/deps.h): any
// byte string an application (or an attacker through it) can send as SQL goes through compile()
// and derive() with the sample schema and with no schema. Besides "no crash, no hang, no
// exception", every name is a valid coherence dependency name (printable, no ',' or space,
// <= 256 bytes), derive() deduplicates, and a statement that is not Exact says why.
//
// Built twice (tests/fuzz/CMakeLists.txt): with -DTIERCE_LIBFUZZER under libFuzzer, and without
// it with the deterministic replay driver at the bottom of this file:
//   fuzz_sql_deps_replay [--iterations N] [--write-seeds DIR] [FILE...]
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "sqldeps/deps.h"

using namespace tierce::sqldeps;

namespace {

std::string_view g_input;

[[noreturn]] void violated(const char* what, int line) {
  std::fprintf(stderr, "fuzz_sql_deps: invariant violated: %s (line %d) on input \"", what, line);
  for (unsigned char c : g_input) {
    if (c >= 32 && c < 127 && c != '\\' && c != '"')
      std::fputc(c, stderr);
    else
      std::fprintf(stderr, "\\x%02x", c);
  }
  std::fprintf(stderr, "\"\n");
  std::abort();
}

}  // namespace

#define FUZZ_CHECK(cond)                    \
  do {                                      \
    if (!(cond)) violated(#cond, __LINE__); \
  } while (0)

namespace {

uint64_t g_statements = 0, g_reads = 0, g_writes = 0, g_names = 0;

const Schema& sample_schema() {
  static const Schema s = Schema::parse_sql(R"(
CREATE TABLE categories (id INT UNSIGNED NOT NULL PRIMARY KEY, name VARCHAR(64) NOT NULL,
  version BIGINT UNSIGNED NOT NULL DEFAULT 1);
CREATE TABLE users (id INT UNSIGNED NOT NULL PRIMARY KEY, nickname VARCHAR(64) NOT NULL,
  rating INT NOT NULL DEFAULT 0, version BIGINT UNSIGNED NOT NULL DEFAULT 1);
CREATE TABLE items (id INT UNSIGNED NOT NULL PRIMARY KEY, category_id INT UNSIGNED NOT NULL,
  seller_id INT UNSIGNED NOT NULL, name VARCHAR(128) NOT NULL, description TEXT NOT NULL,
  initial_price DECIMAL(10,2) NOT NULL, max_bid DECIMAL(10,2) NOT NULL DEFAULT 0,
  nb_bids INT UNSIGNED NOT NULL DEFAULT 0, end_date DATETIME NOT NULL,
  version BIGINT UNSIGNED NOT NULL DEFAULT 1, KEY items_category (category_id, id));
CREATE TABLE bids (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, item_id INT UNSIGNED
  NOT NULL, user_id INT UNSIGNED NOT NULL, amount DECIMAL(10,2) NOT NULL, created DATETIME NOT NULL);
CREATE TABLE lines (order_id INT, line INT, sku VARCHAR(8), PRIMARY KEY (order_id, line));
CREATE VIEW busy AS SELECT i.id, COUNT(*) n FROM items i JOIN bids b ON b.item_id = i.id GROUP BY i.id;
)");
  return s;
}

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 256) return false;
  for (unsigned char c : n)
    if (c < 0x21 || c == 0x7f || c == ',') return false;
  return true;
}

void check(std::string_view sql, const Schema& schema, uint8_t salt) {
  Compiled c = compile(sql, schema);
  for (const Statement& st : c.statements) {
    ++g_statements;
    g_reads += st.kind == Kind::Read;
    g_writes += st.kind == Kind::Write;
    if (st.precision != Precision::Exact) FUZZ_CHECK(!st.reason.empty());
    if (st.invalidate_all || st.uncacheable) FUZZ_CHECK(st.precision == Precision::Conservative);
  }
  // Parameters: known, unknown and odd values, some named ones missing.
  Params p;
  for (size_t k = 0; k < c.param_count; ++k) {
    switch ((salt + k) % 5) {
      case 0: p.positional.push_back(std::to_string(k)); break;
      case 1: p.positional.push_back(std::nullopt); break;
      case 2: p.positional.push_back(std::string("Ab c,\x01\xff")); break;
      case 3: p.positional.push_back(std::string(300, '9')); break;
      default: p.positional.push_back("-0007"); break;
    }
  }
  for (size_t k = 0; k < c.param_names.size(); ++k)
    if ((salt + k) % 3) p.named.emplace_back(c.param_names[k], std::to_string(k));
  Derived d;
  derive(c, p, d);
  for (const auto* v : {&d.depends, &d.invalidates}) {
    std::set<std::string> seen;
    for (const auto& n : *v) {
      ++g_names;
      FUZZ_CHECK(valid_name(n));
      FUZZ_CHECK(seen.insert(n).second);
    }
  }
}

}  // namespace

// For the replay driver's report: how deep the inputs got.
extern "C" void fuzz_sql_deps_stats(uint64_t* statements, uint64_t* reads, uint64_t* writes,
                                    uint64_t* names) {
  *statements = g_statements;
  *reads = g_reads;
  *writes = g_writes;
  *names = g_names;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  g_input = in;
  static const Schema none;
  uint8_t salt = size ? data[0] : 0;
  check(in, sample_schema(), salt);
  check(in, none, uint8_t(salt + 1));
  return 0;
}

#ifndef TIERCE_LIBFUZZER
// ---- deterministic replay driver (any compiler; in ctest) ---------------------------------------
#include <random>
#include <vector>

#include "replay_args.h"

static std::vector<std::string> seeds() {
  return {
      "SELECT i.id, i.name, u.nickname AS seller, c.name AS category FROM items i JOIN users u ON "
      "u.id = i.seller_id JOIN categories c ON c.id = i.category_id WHERE i.id = ?",
      "SELECT b.id, b.amount, u.nickname FROM bids b JOIN users u ON u.id = b.user_id WHERE "
      "b.item_id = ? ORDER BY b.id DESC LIMIT 10",
      "SELECT id, name, max_bid FROM items WHERE category_id = ? ORDER BY id LIMIT ? OFFSET ?",
      "INSERT INTO bids (item_id, user_id, amount, created) VALUES (?, ?, ?, NOW())",
      "UPDATE items SET max_bid = GREATEST(max_bid, ?), nb_bids = nb_bids + 1 WHERE id = ?",
      "DELETE b FROM bids b JOIN items i ON i.id = b.item_id WHERE i.id = :item; COMMIT",
      "WITH RECURSIVE t (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 5) SELECT * FROM "
      "t, busy WHERE busy.id = 3",
      "/*!50001 REPLACE INTO lines VALUES (1, 2, 'x') */; SET autocommit=0; START TRANSACTION",
      "SELECT `it``ems`.* FROM `rubis`.`it``ems` -- c\n WHERE x IN (SELECT y FROM z # d\n) OR "
      "a BETWEEN 1 AND 2",
      "INSERT INTO users SET id = 1, nickname = _utf8mb4'Bob' ON DUPLICATE KEY UPDATE rating = "
      "VALUES(rating) + 1",
      "SELECT CASE WHEN a AND id = 1 THEN 'x' END FROM items WHERE (id = 1 AND (name = N'a'))",
      "CALL p(?); TRUNCATE x; LOCK TABLES t WRITE; XA START 'x'; EXPLAIN ANALYZE DELETE FROM t",
  };
}

int main(int argc, char** argv) {
  tierce_fuzz::Driver<decltype(seeds())::value_type> d;
  d.name = "fuzz_sql_deps";
  d.iterations = 60000;
  d.seeds = seeds();
  d.rng_seed = 20240611;
  // This format's own mutations (what is worth changing in it).
  {
    tierce_fuzz::TextMutations m;
    m.tokens = {"'", "\"", "`", "(", ")", ";", "?", ":n", "/*", "*/", "/*!", "-- ", "#", "\n", "\\",
                " AND ", " OR ", " = ", ",", ".", "*", " SELECT ", " FROM ", " WHERE ", " JOIN ",
                " UNION ", "WITH ", " IN (", "0x", "X'", "@", std::string(1, '\0'), "\xff",
                " BETWEEN ", " CASE ", " END ", "id", " SET ", " VALUES "};
    m.finish = [](std::string& v, std::mt19937_64& rng) {
      if (rng() % 256 == 0) v = std::string(2000 + rng() % 2000, '(') + v;  // nesting limit
    };
    d.mutate = m;
  }
  return tierce_fuzz::replay_main(argc, argv, d);
}
#endif  // TIERCE_LIBFUZZER
