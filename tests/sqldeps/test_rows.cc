// tests/sqldeps/test_rows.cc — the names of a row change read from the change log
// (sqldeps/rows.h): exact sets for each kind of change, and the property that matters — a row
// change that changes a PHP reader's result shares a name with what that reader depends on
// (deps.h derive(), with and without a schema) — checked on random readers and random changes
// against an in-memory table; and a negative control: changes to other rows share none with a
// reader keyed by its row.
#define BOOST_TEST_MODULE sqldeps_rows
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "sqldeps/deps.h"
#include "sqldeps/rows.h"
#include "sqldeps/schema.h"

using namespace tierce::sqldeps;
using Names = std::set<std::string>;

namespace {

const char* kDdl =
    "CREATE TABLE items (id INT NOT NULL, name VARCHAR(64), category INT, version INT,"
    " updated DATETIME, PRIMARY KEY (id));";

LoggedTable items() {
  return {"items",
          {"id", "name", "category", "version", "updated"},
          {ColumnType::Integer, ColumnType::Text, ColumnType::Integer, ColumnType::Integer,
           ColumnType::Opaque},
          {0}};
}

Names names(RowChange c, const RowImage& before, const RowImage& after,
            const LoggedTable& t = items()) {
  std::vector<std::string> out;
  row_change_names(t, c, before, after, out);
  BOOST_TEST(std::set<std::string>(out.begin(), out.end()).size() == out.size());  // no duplicates
  return Names(out.begin(), out.end());
}

bool intersects(const Names& a, const std::vector<std::string>& b) {
  return std::any_of(b.begin(), b.end(), [&](const std::string& s) { return a.count(s) > 0; });
}

}  // namespace

BOOST_AUTO_TEST_CASE(insert_names_the_row_its_values_and_membership) {
  Names n = names(RowChange::Insert, {}, {"42", "Lamp", "7", "1", "2026-11-29 10:00:00"});
  Names want{"row:items:42",       "val:items:id:42",     "val:items:name:lamp",
             "val:items:category:7", "val:items:version:1", "vals:items:updated",
             "table:items"};
  BOOST_TEST(n == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(update_names_changed_columns_both_images_and_no_membership) {
  Names n = names(RowChange::Update, {"42", "Lamp", "7", "1", std::nullopt},
                  {"42", "Lamp.", "7", "2", std::nullopt});
  BOOST_TEST(n.count("row:items:42"));
  BOOST_TEST(n.count("col:items:name"));
  BOOST_TEST(n.count("col:items:version"));
  BOOST_TEST(n.count("col:items:*"));
  BOOST_TEST(n.count("col:items:updated"));  // NULL on both sides: it may have changed
  BOOST_TEST(!n.count("col:items:category"));
  BOOST_TEST(n.count("val:items:name:lamp"));
  BOOST_TEST(n.count("val:items:name:lamp."));
  BOOST_TEST(n.count("val:items:category:7"));  // the row's content changed for value readers
  BOOST_TEST(n.count("val:items:version:1"));
  BOOST_TEST(n.count("val:items:version:2"));
  BOOST_TEST(!n.count("table:items"));  // the key did not move
}

BOOST_AUTO_TEST_CASE(update_moving_the_key_names_membership_and_both_rows) {
  Names n = names(RowChange::Update, {"42", "a", "7", "1", "x"}, {"43", "a", "7", "1", "x"});
  BOOST_TEST(n.count("row:items:42"));
  BOOST_TEST(n.count("row:items:43"));
  BOOST_TEST(n.count("table:items"));
  BOOST_TEST(n.count("col:items:id"));
}

BOOST_AUTO_TEST_CASE(an_update_that_changed_nothing_names_nothing) {
  BOOST_TEST(names(RowChange::Update, {"42", "a", "7", "1", "x"}, {"42", "a", "7", "1", "x"})
                 .empty());
}

BOOST_AUTO_TEST_CASE(delete_names_what_the_row_held) {
  Names n = names(RowChange::Delete, {"5", "Desk", "3", "9", std::nullopt}, {});
  BOOST_TEST(n.count("row:items:5"));
  BOOST_TEST(n.count("val:items:category:3"));
  BOOST_TEST(n.count("table:items"));
}

BOOST_AUTO_TEST_CASE(unknown_key_values_fall_back_to_rows) {
  LoggedTable t{"Log Book", {"code", "id", "text"},
                {ColumnType::Text, ColumnType::Integer, ColumnType::Text}, {0}};
  // A key with no canonical form (non-ASCII): rows:T; the `id` column that is not the key is
  // named as a reader without the schema keys it.
  Names n = names(RowChange::Insert, {}, {"\xc3\xa9t\xc3\xa9", "17", "hello"}, t);
  std::string T = "~";  // "log book" is not plain: hashed
  bool has_rows = false, has_id_row = false;
  for (const auto& s : n) {
    if (s.rfind("rows:~", 0) == 0) has_rows = true;
    if (s.rfind("row:~", 0) == 0 && s.size() > 3 && s.substr(s.size() - 3) == ":17")
      has_id_row = true;
  }
  BOOST_TEST(has_rows);
  BOOST_TEST(has_id_row);
  // No primary key at all: rows:T and, on update, membership.
  LoggedTable nokey{"events", {"a"}, {ColumnType::Integer}, {}};
  Names u = names(RowChange::Update, {"1"}, {"2"}, nokey);
  BOOST_TEST(u.count("rows:events"));
  BOOST_TEST(u.count("table:events"));
}

BOOST_AUTO_TEST_CASE(long_composite_keys_are_hashed_as_the_reader_hashes_them) {
  Schema s = Schema::parse_sql(
      "CREATE TABLE pairs (a VARCHAR(80), b VARCHAR(80), v INT, PRIMARY KEY (a, b));");
  std::string a(40, 'x'), b(40, 'y');
  Derived d;
  derive(compile("SELECT v FROM pairs WHERE a = ? AND b = ?", s), Params{{a, b}, {}}, d);
  LoggedTable t{"pairs", {"a", "b", "v"}, {ColumnType::Text, ColumnType::Text, ColumnType::Integer},
                {0, 1}};
  Names n = names(RowChange::Update, {a, b, "1"}, {a, b, "2"}, t);
  BOOST_TEST(intersects(n, d.depends));
  BOOST_TEST(std::any_of(d.depends.begin(), d.depends.end(),
                         [](const std::string& x) { return x.rfind("row:pairs:~", 0) == 0; }));
}

// ---- the property, on random readers and random changes --------------------------------------

namespace {

struct Row {
  int id;
  std::string name;
  int category, version;
};

std::string fold(std::string s) {  // the collation: case-insensitive, trailing spaces ignored
  while (!s.empty() && s.back() == ' ') s.pop_back();
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

struct Reader {
  std::string sql;
  std::vector<Value> params;
  // What the page would show, from the table's rows (by id).
  std::string (*eval)(const std::map<int, Row>&, const std::vector<Value>&);
};

std::string row_text(const Row& r) {
  return std::to_string(r.id) + "|" + r.name + "|" + std::to_string(r.category) + "|" +
         std::to_string(r.version);
}

std::vector<Reader> readers(std::mt19937& rng) {
  auto k = std::to_string(rng() % 12), c = std::to_string(rng() % 4), v = std::to_string(rng() % 6);
  static const char* kNames[] = {"lamp", "Lamp ", "desk", "chair"};
  std::string s = kNames[rng() % 4];
  return {
      {"SELECT * FROM items WHERE id = ?", {k},
       [](const std::map<int, Row>& t, const std::vector<Value>& p) {
         auto it = t.find(std::stoi(*p[0]));
         return it == t.end() ? std::string("none") : row_text(it->second);
       }},
      {"SELECT id, name FROM items WHERE category = ?", {c},
       [](const std::map<int, Row>& t, const std::vector<Value>& p) {
         std::string out;
         for (const auto& [id, r] : t)
           if (r.category == std::stoi(*p[0])) out += std::to_string(id) + ":" + r.name + ";";
         return out;
       }},
      {"SELECT COUNT(*) FROM items", {},
       [](const std::map<int, Row>& t, const std::vector<Value>&) { return std::to_string(t.size()); }},
      {"SELECT name FROM items WHERE version > ?", {v},
       [](const std::map<int, Row>& t, const std::vector<Value>& p) {
         std::string out;
         for (const auto& [id, r] : t)
           if (r.version > std::stoi(*p[0])) out += std::to_string(id) + ":" + r.name + ";";
         return out;
       }},
      {"SELECT id, version FROM items WHERE name = ?", {s},
       [](const std::map<int, Row>& t, const std::vector<Value>& p) {
         std::string out;
         for (const auto& [id, r] : t)
           if (fold(r.name) == fold(*p[0]))
             out += std::to_string(id) + ":" + std::to_string(r.version) + ";";
         return out;
       }},
      {"SELECT name FROM items WHERE category = ? AND id = ?", {c, k},
       [](const std::map<int, Row>& t, const std::vector<Value>& p) {
         auto it = t.find(std::stoi(*p[1]));
         return it == t.end() || it->second.category != std::stoi(*p[0]) ? std::string("none")
                                                                           : it->second.name;
       }},
  };
}

RowImage image(const Row& r) {
  return {std::to_string(r.id), r.name, std::to_string(r.category), std::to_string(r.version),
          std::nullopt};
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_change_that_changes_a_readers_result_shares_a_name_with_it) {
  const Schema with = Schema::parse_sql(kDdl);
  const Schema without;
  std::mt19937 rng(20261129);
  static const char* kNames[] = {"lamp", "LAMP", "desk", "chair", "lamp  "};
  std::map<int, Row> table;
  for (int i = 0; i < 8; ++i) table[i] = {i, kNames[i % 5], i % 4, i % 6};
  size_t affected = 0, checked = 0;
  for (int step = 0; step < 3000; ++step) {
    std::map<int, Row> next = table;
    RowChange kind;
    RowImage before, after;
    int pick = int(rng() % 12);
    if (!table.count(pick)) {
      kind = RowChange::Insert;
      next[pick] = {pick, kNames[rng() % 5], int(rng() % 4), int(rng() % 6)};
      after = image(next[pick]);
    } else if (rng() % 4 == 0) {
      kind = RowChange::Delete;
      before = image(table[pick]);
      next.erase(pick);
    } else {
      kind = RowChange::Update;
      Row r = table[pick];
      before = image(r);
      switch (rng() % 4) {
        case 0: r.name = kNames[rng() % 5]; break;
        case 1: r.category = int(rng() % 4); break;
        case 2: r.version = int(rng() % 6); break;
        case 3: {  // move the key to a free id
          int to = int(rng() % 12);
          if (next.count(to)) break;
          next.erase(r.id);
          r.id = to;
          break;
        }
      }
      next[r.id] = r;
      after = image(r);
    }
    Names inv = names(kind, before, after);
    for (const Schema* s : {&with, &without})
      for (const Reader& rd : readers(rng)) {
        Derived d;
        derive(compile(rd.sql, *s), Params{rd.params, {}}, d);
        BOOST_REQUIRE(!d.uncacheable);
        ++checked;
        if (rd.eval(table, rd.params) == rd.eval(next, rd.params)) continue;
        ++affected;
        BOOST_TEST(intersects(inv, d.depends), "step " << step << ": " << to_string(kind)
                                                        << " of row " << pick << " changes "
                                                        << rd.sql << " but shares no name");
      }
    table = std::move(next);
  }
  BOOST_TEST_MESSAGE(affected << " of " << checked << " reader results changed");
  BOOST_TEST(affected > 1000);  // the property was exercised
}

BOOST_AUTO_TEST_CASE(changes_to_other_rows_do_not_touch_a_keyed_reader) {
  const Schema with = Schema::parse_sql(kDdl);
  Derived d;
  derive(compile("SELECT * FROM items WHERE id = ?", with), Params{{std::string("3")}, {}}, d);
  for (int id : {1, 2, 4, 40}) {
    auto s = std::to_string(id);
    BOOST_TEST(!intersects(names(RowChange::Update, {s, "a", "1", "1", "x"},
                                 {s, "b", "1", "2", "x"}),
                           d.depends));
    BOOST_TEST(!intersects(names(RowChange::Insert, {}, {s, "a", "1", "1", "x"}), d.depends));
  }
}
