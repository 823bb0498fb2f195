// tests/agents/binlogd_mapping_test.cc — tierce-binlogd's mapping from row changes to dependency
// names (agents/binlogd/mapping.h): [[table]] templates rendered with the before and the after
// image, NULL skipping a name, values the agent cannot read (DECIMAL, dates, ENUM) and columns the
// table lacks turning into invalidate-all, templates refused by Mapping::make, database-qualified
// rules, which databases are watched, tables nobody described (unknown_tables), and the automatic
// names of sqldeps (auto_names).
#define BOOST_TEST_MODULE binlogd_mapping
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "agents/binlogd/mapping.h"

using namespace tierce::binlogd;
using tierce::base::Code;
using tierce::sqldeps::RowChange;
using tierce::sqldeps::RowImage;

namespace {

// Binlog column types (mariadb_com.h).
constexpr uint8_t kLong = 3, kVarchar = 15, kDateTime2 = 18, kNewDecimal = 246, kString = 254,
                  kEnum = 247;

// rubis.items as its TABLE_MAP would describe it (decode_table_map's result).
TableMap items(const std::string& db = "rubis", const std::string& name = "items") {
  TableMap t;
  t.id = 1;
  t.database = db;
  t.table.name = name;
  struct Col {
    const char* name;
    uint8_t type;
    uint16_t meta;
    bool is_unsigned;
  };
  for (const Col& c : {Col{"id", kLong, 0, true}, Col{"category_id", kLong, 0, true},
                       Col{"seller_id", kLong, 0, true}, Col{"Name", kVarchar, 128, false},
                       Col{"price", kNewDecimal, 10 | 2 << 8, false},
                       Col{"end_date", kDateTime2, 0, false},
                       Col{"status", kString, kEnum | 1 << 8, false}}) {
    t.table.columns.push_back(c.name);
    t.types.push_back(c.type);
    t.meta.push_back(c.meta);
    t.is_unsigned.push_back(c.is_unsigned);
    t.table.types.push_back(column_class(c.type, c.meta));
  }
  t.table.primary_key = {0};
  return t;
}

// An image of items: the readable columns given, the others unknown (as the decoder leaves them).
RowImage row(std::optional<std::string> id, std::optional<std::string> category,
             std::optional<std::string> seller, std::optional<std::string> name = "lamp") {
  return {id, category, seller, name, std::nullopt, std::nullopt, std::nullopt};
}

Mapping make(MappingSettings s) {
  auto m = Mapping::make(std::move(s));
  BOOST_REQUIRE_MESSAGE(m.ok(), m.message());
  return std::move(*m);
}

MappingSettings rules(std::vector<TableRule> tables) {
  MappingSettings s;
  s.tables = std::move(tables);
  return s;
}

const std::vector<std::string> kItemNames = {"item:{id}", "category:{category_id}",
                                             "user:{seller_id}"};

std::vector<std::string> names_of(const Mapping& m, const TableMap& t, RowChange k,
                                  const RowPair& p) {
  std::vector<std::string> out;
  auto s = m.names(t, k, p, out);
  BOOST_REQUIRE_MESSAGE(s.ok(), s.message());
  return out;
}

// The failure's msgid ("ok" when names() succeeded).
std::string failure(const Mapping& m, const TableMap& t, RowChange k, const RowPair& p) {
  std::vector<std::string> out;
  auto s = m.names(t, k, p, out);
  return s.ok() ? "ok" : std::string(s.msgid());
}

using Names = std::vector<std::string>;

}  // namespace

BOOST_AUTO_TEST_CASE(templates_render_the_before_and_the_after_image) {
  Mapping m = make(rules({{"", "items", kItemNames}}));
  TableMap t = items();
  // An update moving item 42 from category 7 to 8: both categories' pages change.
  RowPair moved{row("42", "7", "3"), row("42", "8", "3")};
  BOOST_TEST(names_of(m, t, RowChange::Update, moved) ==
                 Names({"item:42", "category:7", "user:3", "category:8"}),
             boost::test_tools::per_element());
  // An insert names its after image only, a delete its before image only.
  RowPair inserted{{}, row("43", "9", "4")};
  BOOST_TEST(names_of(m, t, RowChange::Insert, inserted) ==
                 Names({"item:43", "category:9", "user:4"}),
             boost::test_tools::per_element());
  RowPair deleted{row("44", "1", "2"), {}};
  BOOST_TEST(names_of(m, t, RowChange::Delete, deleted) ==
                 Names({"item:44", "category:1", "user:2"}),
             boost::test_tools::per_element());
  // Text and several placeholders in one template; a placeholder's case does not matter.
  Mapping m2 = make(rules({{"", "items", {"{ID}-{name}@cat:{Category_Id}", "all-items"}}}));
  BOOST_TEST(names_of(m2, t, RowChange::Insert, inserted) == Names({"43-lamp@cat:9", "all-items"}),
             boost::test_tools::per_element());
  // Names are appended to what `out` holds, without duplicates.
  std::vector<std::string> out = {"item:42"};
  BOOST_TEST(m.names(t, RowChange::Update, moved, out).ok());
  BOOST_TEST(out == Names({"item:42", "category:7", "user:3", "category:8"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_null_value_gives_no_name) {
  Mapping m = make(rules({{"", "items", {"item:{id}", "user:{seller_id}", "pair:{id}:{seller_id}"}}}));
  TableMap t = items();
  // The seller was NULL before the update and is 5 after it.
  RowPair p{row("42", "7", std::nullopt), row("42", "7", "5")};
  BOOST_TEST(names_of(m, t, RowChange::Update, p) == Names({"item:42", "user:5", "pair:42:5"}),
             boost::test_tools::per_element());
  // NULL on both sides: none of the templates with it.
  RowPair q{row("42", "7", std::nullopt), row("42", "8", std::nullopt)};
  BOOST_TEST(names_of(m, t, RowChange::Update, q) == Names({"item:42"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(unreadable_values_and_missing_columns_invalidate_everything) {
  TableMap t = items();
  RowPair p{row("42", "7", "3"), row("42", "8", "3")};
  // DECIMAL, DATETIME2 and ENUM values are not read from the log: a template naming one cannot
  // be rendered, and a Status that is not ok means invalidate-all.
  for (const char* tpl : {"price:{price}", "end:{end_date}", "status:{status}"}) {
    Mapping m = make(rules({{"", "items", {"item:{id}", tpl}}}));
    BOOST_TEST(failure(m, t, RowChange::Update, p) == "BINLOGD0112", tpl);
    BOOST_TEST(failure(m, t, RowChange::Insert, RowPair{{}, row("1", "1", "1")}) == "BINLOGD0112",
               tpl);
  }
  // A column the table does not have.
  Mapping m = make(rules({{"", "items", {"item:{id}", "shop:{shop_id}"}}}));
  std::vector<std::string> out;
  auto s = m.names(t, RowChange::Update, p, out);
  BOOST_TEST(!s.ok());
  BOOST_TEST(s.msgid() == "BINLOGD0111");
  BOOST_TEST(s.message().find("shop_id") != std::string::npos, s.message());
  // An image shorter than the table (a column the event did not carry): unknown, not NULL.
  Mapping m2 = make(rules({{"", "items", {"user:{seller_id}"}}}));
  RowPair shortp{{}, RowImage{std::string("42"), std::string("7")}};
  BOOST_TEST(failure(m2, t, RowChange::Insert, shortp) == "BINLOGD0112");
}

BOOST_AUTO_TEST_CASE(a_rendered_name_that_is_no_valid_name_invalidates_everything) {
  Mapping m = make(rules({{"", "items", {"name:{name}"}}}));
  TableMap t = items();
  for (std::string bad : {std::string("big lamp"), std::string("a,b"), std::string("tab\there"),
                          std::string(300, 'x')}) {
    RowPair p{{}, row("1", "1", "1", bad)};
    BOOST_TEST(failure(m, t, RowChange::Insert, p) == "BINLOGD0113", bad);
  }
  BOOST_TEST(names_of(m, t, RowChange::Insert, RowPair{{}, row("1", "1", "1", "lamp")}) ==
                 Names({"name:lamp"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(make_refuses_invalid_templates) {
  for (const char* tpl : {"item:{id", "item:id}", "item:{}", "{", "}", "item:{a{b}", "item {id}",
                          "a,b:{id}", "", "x\x01:{id}", "item:{id}}", "item:{ id }"}) {
    auto m = Mapping::make(rules({{"", "items", {"ok:{id}", tpl}}}));
    BOOST_TEST(!m.ok(), "accepted \"" << tpl << "\"");
    if (m.ok()) continue;
    BOOST_TEST(m.status().msgid() == "BINLOGD0110");
    BOOST_TEST(m.message().find("items") != std::string::npos, m.message());
    BOOST_TEST(m.message().find(std::string("\"") + tpl + "\"") != std::string::npos, m.message());
  }
  for (const char* tpl : {"item:{id}", "{id}", "cat:{category_id}:{id}", "categories"})
    BOOST_TEST(Mapping::make(rules({{"", "items", {tpl}}})).ok(), tpl);
}

BOOST_AUTO_TEST_CASE(database_qualified_rules) {
  MappingSettings s = rules({{"Rubis", "Items", {"item:{id}"}}});
  s.unknown_tables = UnknownTables::Ignore;
  Mapping m = make(s);
  RowPair p{{}, row("42", "7", "3")};
  // rubis.items (any case): the rule; shop.items: no rule, ignored here.
  BOOST_TEST(names_of(m, items("rubis"), RowChange::Insert, p) == Names({"item:42"}),
             boost::test_tools::per_element());
  BOOST_TEST(names_of(m, items("RUBIS", "ITEMS"), RowChange::Insert, p) == Names({"item:42"}),
             boost::test_tools::per_element());
  BOOST_TEST(names_of(m, items("shop"), RowChange::Insert, p).empty());
  // ... or invalidate-all when unknown tables are.
  s.unknown_tables = UnknownTables::InvalidateAll;
  Mapping strict = make(s);
  BOOST_TEST(failure(strict, items("shop"), RowChange::Insert, p) == "BINLOGD0114");
  BOOST_TEST(failure(strict, items("rubis"), RowChange::Insert, p) == "ok");
}

// A rule for db.items is more specific than a rule for items in any database: it applies to
// db.items whichever of the two the file lists first.
BOOST_AUTO_TEST_CASE(a_qualified_rule_wins_over_an_unqualified_one) {
  RowPair p{{}, row("42", "7", "3")};
  for (bool qualified_first : {false, true}) {
    std::vector<TableRule> r = {{"", "items", {"any:{id}"}}, {"rubis", "items", {"rubis:{id}"}}};
    if (qualified_first) std::swap(r[0], r[1]);
    Mapping m = make(rules(r));
    BOOST_TEST(names_of(m, items("rubis"), RowChange::Insert, p) == Names({"rubis:42"}),
               boost::test_tools::per_element());
    BOOST_TEST(names_of(m, items("shop"), RowChange::Insert, p) == Names({"any:42"}),
               boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(watched_databases) {
  MappingSettings listed;
  listed.databases = {"Rubis", "shop", "mysql"};
  listed.auto_names = true;
  Mapping m = make(listed);
  BOOST_TEST(m.watched("rubis"));
  BOOST_TEST(m.watched("RUBIS"));
  BOOST_TEST(m.watched("Shop"));
  BOOST_TEST(m.watched("mysql"), "listed explicitly");
  BOOST_TEST(!m.watched("other"));
  BOOST_TEST(!m.watched("rubis2"));
  BOOST_TEST(!m.watched(""));
  // [] = every database but the server's own.
  MappingSettings all;
  all.auto_names = true;
  Mapping a = make(all);
  for (const char* d : {"rubis", "shop", "sys2", "mysql_app"}) BOOST_TEST(a.watched(d), d);
  for (const char* d : {"mysql", "MySQL", "information_schema", "INFORMATION_SCHEMA",
                        "performance_schema", "sys", "SYS"})
    BOOST_TEST(!a.watched(d), d);
}

BOOST_AUTO_TEST_CASE(tables_nobody_described) {
  TableMap t = items("rubis", "bids");
  RowPair p{{}, row("42", "7", "3")};
  MappingSettings s = rules({{"", "items", kItemNames}});
  s.unknown_tables = UnknownTables::Ignore;
  Mapping ignore = make(s);
  BOOST_TEST(names_of(ignore, t, RowChange::Insert, p).empty());
  s.unknown_tables = UnknownTables::InvalidateAll;
  Mapping all = make(s);
  std::vector<std::string> out;
  auto st = all.names(t, RowChange::Insert, p, out);
  BOOST_TEST(!st.ok());
  BOOST_TEST(st.msgid() == "BINLOGD0114");
  BOOST_TEST(st.message().find("rubis.bids") != std::string::npos, st.message());
  BOOST_TEST(out.empty());
  // Described tables still map as usual.
  BOOST_TEST(names_of(all, items(), RowChange::Insert, p) ==
                 Names({"item:42", "category:7", "user:3"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(auto_names_are_sqldeps_names) {
  auto has = [](const Names& n, const std::string& x) {
    return std::find(n.begin(), n.end(), x) != n.end();
  };
  MappingSettings s;
  s.auto_names = true;
  s.unknown_tables = UnknownTables::InvalidateAll;  // not used: auto names describe every table
  Mapping m = make(s);
  TableMap t = items();
  Names ins = names_of(m, t, RowChange::Insert, RowPair{{}, row("42", "7", "3")});
  BOOST_TEST(has(ins, "row:items:42"));
  BOOST_TEST(has(ins, "table:items"));
  BOOST_TEST(has(ins, "val:items:category_id:7"));
  BOOST_TEST(has(ins, "vals:items:price"), "a value not read: any value of the column");
  // An update of the category: the row, the column, both values.
  Names upd = names_of(m, t, RowChange::Update, RowPair{row("42", "7", "3"), row("42", "8", "3")});
  BOOST_TEST(has(upd, "row:items:42"));
  BOOST_TEST(has(upd, "col:items:category_id"));
  BOOST_TEST(has(upd, "val:items:category_id:7"));
  BOOST_TEST(has(upd, "val:items:category_id:8"));
  // With a [[table]] too: its names first, then the automatic ones.
  s.tables = {{"", "items", {"item:{id}"}}};
  Mapping both = make(s);
  Names b = names_of(both, t, RowChange::Insert, RowPair{{}, row("42", "7", "3")});
  BOOST_REQUIRE(!b.empty());
  BOOST_TEST(b[0] == "item:42");
  BOOST_TEST(has(b, "row:items:42"));
  // A table no rule names: auto names only (unknown_tables does not apply).
  Names bids = names_of(both, items("rubis", "bids"), RowChange::Delete,
                        RowPair{row("9", "1", "1"), {}});
  BOOST_TEST(has(bids, "row:bids:9"));
  BOOST_TEST(!has(bids, "item:9"));
}

BOOST_AUTO_TEST_CASE(valid_dependency_names) {
  BOOST_TEST(valid_dependency_name("item:42"));
  BOOST_TEST(valid_dependency_name(std::string(256, 'a')));
  BOOST_TEST(!valid_dependency_name(std::string(257, 'a')));
  BOOST_TEST(!valid_dependency_name(""));
  BOOST_TEST(!valid_dependency_name("a b"));
  BOOST_TEST(!valid_dependency_name("a,b"));
  BOOST_TEST(!valid_dependency_name("a\tb"));
  BOOST_TEST(!valid_dependency_name("a\x7f"));
  BOOST_TEST(valid_dependency_name("caf\xc3\xa9"), "UTF-8 bytes are name bytes");
}
