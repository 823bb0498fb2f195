// benchmarks/sqldeps/sqldeps_bench.cc — how long sqldeps::compile() (once per SQL text: the
// extension caches it) and sqldeps::derive() (once per execution) take on the sample
// application's statements, in ns per statement, one row per statement and a total.
//   tierce-sqldeps-bench [--schema FILE] [--iterations N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sqldeps/deps.h"

using namespace tierce::sqldeps;
using Clock = std::chrono::steady_clock;

namespace {

struct Sample {
  const char* page;
  const char* sql;
  std::vector<Value> params;
};

// sample/php: what item.php, category.php, user.php, index.php, deps.php, bid.php and edit.php run.
const std::vector<Sample>& samples() {
  static const std::vector<Sample> s{
      {"item", R"(SELECT i.id, i.name, i.description, i.initial_price, i.max_bid, i.nb_bids, i.end_date,
                    i.version, i.category_id, i.seller_id, u.nickname AS seller, c.name AS category
               FROM items i JOIN users u ON u.id = i.seller_id JOIN categories c ON c.id = i.category_id
              WHERE i.id = ?)", {"5"}},
      {"item bids", R"(SELECT b.id, b.amount, b.created, b.user_id, u.nickname
               FROM bids b JOIN users u ON u.id = b.user_id
              WHERE b.item_id = ? ORDER BY b.id DESC LIMIT 10)", {"5"}},
      {"category", "SELECT id, name, version FROM categories WHERE id = ?", {"3"}},
      {"category items", R"(SELECT id, name, max_bid, nb_bids, end_date FROM items WHERE category_id = ?
          ORDER BY id LIMIT ? OFFSET ?)", {"3", "25", "0"}},
      {"index", "SELECT id, name FROM categories ORDER BY id", {}},
      {"user", "SELECT id, nickname, rating, version FROM users WHERE id = ?", {"7"}},
      {"user selling", "SELECT id, name, max_bid, nb_bids FROM items WHERE seller_id = ? ORDER BY id LIMIT 100", {"7"}},
      {"user bids", "SELECT id, item_id, amount, created FROM bids WHERE user_id = ? ORDER BY id DESC LIMIT 10", {"7"}},
      {"deps", "SELECT id, name, max_bid, nb_bids, version FROM items WHERE id BETWEEN ? AND ? ORDER BY id", {"1", "8"}},
      {"bid lock", "SELECT category_id, seller_id FROM items WHERE id = ? FOR UPDATE", {"5"}},
      {"bid insert", "INSERT INTO bids (item_id, user_id, amount, created) VALUES (?, ?, ?, NOW())", {"5", "7", "12.50"}},
      {"bid item", R"(UPDATE items SET max_bid = GREATEST(max_bid, ?), nb_bids = nb_bids + 1,
                               version = version + 1 WHERE id = ?)", {"12.50", "5"}},
      {"bid category", "UPDATE categories SET version = version + 1 WHERE id = ?", {"3"}},
      {"edit item", R"(UPDATE items SET name = ?, description = ?, category_id = ?, version = version + 1
                         WHERE id = ?)", {"name", "a description", "4", "5"}},
      {"begin", "START TRANSACTION READ ONLY", {}},
  };
  return s;
}

template <class F>
double ns_per(long n, F&& f) {
  auto t0 = Clock::now();
  for (long k = 0; k < n; ++k) f();
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / double(n);
}

}  // namespace

int main(int argc, char** argv) {
  std::string schema_path = TIERCE_SAMPLE_SCHEMA;
  long iterations = 20000;
  for (int k = 1; k + 1 < argc; k += 2) {
    if (!std::strcmp(argv[k], "--schema")) schema_path = argv[k + 1];
    else if (!std::strcmp(argv[k], "--iterations")) iterations = std::atol(argv[k + 1]);
  }
  std::ifstream in(schema_path);
  std::stringstream ss;
  ss << in.rdbuf();
  Schema schema = Schema::parse_sql(ss.str());
  std::printf("%-16s %12s %12s %6s  %s\n", "statement", "compile ns", "derive ns", "names",
              "precision");
  double total_c = 0, total_d = 0;
  volatile size_t sink = 0;
  for (const Sample& s : samples()) {
    double c = ns_per(iterations, [&] { sink = sink + compile(s.sql, schema).statements.size(); });
    Compiled compiled = compile(s.sql, schema);
    Params p;
    p.positional = s.params;
    Derived out;
    double d = ns_per(iterations * 5, [&] {
      out.depends.clear();
      out.invalidates.clear();
      derive(compiled, p, out);
      sink = sink + out.depends.size();
    });
    total_c += c;
    total_d += d;
    std::printf("%-16s %12.0f %12.0f %6zu  %s\n", s.page, c, d,
                out.depends.size() + out.invalidates.size(),
                to_string(compiled.statements.at(0).precision));
  }
  size_t n = samples().size();
  std::printf("%-16s %12.0f %12.0f\n", "mean", total_c / double(n), total_d / double(n));
  return 0;
}
