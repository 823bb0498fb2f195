// sqldeps/compiler_writes.cc — INSERT, REPLACE, UPDATE and DELETE (compiler.h): what a write
// invalidates, as a WritePlan that derive() fills with the bound parameters.
//
// Why the writers are sound against the three reader rules (deps.h):
//   UPDATE T SET c.. WHERE k  row:T:K (rule 1 readers of that row) or rows:T (all rule 1
//                             readers); col:T:c / col:T:* (rule 2 and 3 readers that read c or
//                             `*`: a reader that reads no changed column sees no change, unless
//                             a changed column moves rows in or out of its value set:) vals:T:c.
//                             A changed key column moves a row between keys: rows:T, table:T.
//   INSERT                    table:T (rule 3); row:T:K or rows:T (rule 1); val:T:C:V or
//                             vals:T:C for every column (rule 2: the new row joins value V of C).
//   DELETE                    the same names for the rows it removes, by value unknown: vals:T:C.
//   REPLACE                   INSERT plus the DELETE of rows it cannot name (any unique key).
#include <algorithm>

#include "sqldeps/compiler.h"

namespace tierce::sqldeps::detail {
namespace {

void add_unique(std::vector<std::string>& v, std::string s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(std::move(s));
}

// An UPDATE of `set` columns on rows of `table` it does not name: what every reader of them needs.
void unpinned_update(WritePlan& w, const std::string& table, const TableInfo* info,
                     const std::vector<std::string>& set, bool all_columns) {
  std::string T = ident(table);
  add_unique(w.fixed, "rows:" + T);
  add_unique(w.fixed, "col:" + T + ":*");
  static const std::vector<std::string> kId{"id"};
  const std::vector<std::string>& pk = info ? info->primary_key : kId;
  bool key_changed = all_columns;
  for (const auto& c : set) {
    add_unique(w.fixed, "col:" + T + ":" + ident(c));
    add_unique(w.fixed, "vals:" + T + ":" + ident(c));
    if (std::find(pk.begin(), pk.end(), c) != pk.end()) key_changed = true;
  }
  // Rows it does not name may hold any value of any column: every value-pinned reader of T.
  if (info)
    for (const auto& c : info->columns) add_unique(w.fixed, "vals:" + T + ":" + ident(c));
  if (key_changed) add_unique(w.fixed, "table:" + T);
}

void all_values(WritePlan& w, const std::string& T, const TableInfo* info) {
  if (info)
    for (const auto& c : info->columns) add_unique(w.fixed, "vals:" + T + ":" + ident(c));
}

// The schema columns a value-pinned reader of T may pin (all but a one-column primary key).
void keyed_row_columns(WritePlan& w, const std::string& T, const TableInfo* info) {
  w.table = T;
  if (!info) return;  // no schema: no value-pinned readers of T
  const auto& pk = info->primary_key;
  for (const auto& c : info->columns) {
    if (pk.size() == 1 && pk[0] == c) continue;
    std::string C = ident(c);
    w.row_columns.push_back({C, "val:" + T + ":" + C + ":", "vals:" + T + ":" + C});
  }
}

// Key values of the single table `r` from the pins, or empty when the key is not fully pinned.
std::vector<ValueRef> pinned_key(const std::vector<PinRef>& pins, size_t r, const TableInfo* info) {
  static const std::vector<std::string> kId{"id"};
  const std::vector<std::string>& pk = info ? info->primary_key : kId;
  std::vector<ValueRef> key;
  for (const auto& k : pk) {
    auto it = std::find_if(pins.begin(), pins.end(),
                           [&](const PinRef& p) { return p.table == r && p.column == k; });
    if (it == pins.end()) return {};
    key.push_back(make_ref(it->value, info ? info->type_of(k) : ColumnType::Other));
    if (key.back().source == ValueRef::Source::Unknown) return {};
  }
  return key;
}

}  // namespace

void StatementCompiler::update(Statement& st, size_t b) {
  Scanner s(t_, b + 1, e_, &schema_, &names_);
  while (s.accept("low_priority") || s.accept("ignore")) {
  }
  int blk = s.new_block();
  s.table_refs(blk);
  if (!s.expect_word("set")) return finish_write(st, s, false, "");
  SetList set;
  std::vector<RawValue> set_raw;  // the value SET gives, when it is one literal or parameter
  update_set_list(s, set, set_raw);
  std::vector<PinRef> pins;
  if (s.accept("where")) {
    size_t wb = s.i;
    s.expr(-1, false);
    s.pins(wb, s.i, blk, pins);
  }
  while (s.ok && (s.accept("order") || s.accept("limit"))) {
    s.accept("by");
    s.expr(-1, false);
  }
  if (!s.ok || !s.done()) return finish_write(st, s, false, "");
  std::vector<size_t> refs;
  for (size_t r = 0; r < s.tables.size(); ++r)
    if (!s.tables[r].derived) refs.push_back(r);
  if (refs.size() == 1 && s.tables.size() == 1 && !s.tables[0].star)
    return update_one_table(st, s, set, set_raw, pins);
  // Several tables: each one SET may reach, as an update of rows it does not name.
  WritePlan& w = st.write;
  for (size_t r : refs) {
    const TableRef& t = s.tables[r];
    const TableInfo* info = s.info_of(t);
    std::vector<std::string> cols;
    bool unknown = t.star;
    for (auto& [qual, col] : set) {
      bool mine = false;
      if (!qual.empty()) {
        bool resolved = false;
        for (size_t q = 0; q < s.tables.size(); ++q)
          if (s.tables[q].alias == qual) resolved = true;
        mine = resolved ? t.alias == qual : true;
      } else {
        mine = !info || info->column_index(col) >= 0;
      }
      if (mine) cols.push_back(col);
    }
    if (cols.empty() && !unknown) continue;
    unpinned_update(w, t.name, info, cols, unknown);
  }
  finish_write(st, s, false, "multi-table UPDATE");
}

// SET a = 1, t.b = ?, ...: the columns, and each one's value when it is a literal or parameter.
void StatementCompiler::update_set_list(Scanner& s, SetList& set, std::vector<RawValue>& set_raw) {
  while (s.ok) {
    auto c = s.column_name();
    if (!c) {
      s.fail("expected a column");
      break;
    }
    set.push_back(*c);
    if (!s.expect_op("=")) break;
    size_t vb = s.i;
    s.expr(-1, true);
    size_t j = vb;
    RawValue v = s.raw_value_at(j);
    set_raw.push_back(j == s.i ? v : RawValue{});
    if (!s.op(",")) break;
    ++s.i;
  }
}

// UPDATE of one table: keyed by its primary key (and the key unchanged), the row by name.
void StatementCompiler::update_one_table(Statement& st, Scanner& s, const SetList& set,
                                         const std::vector<RawValue>& set_raw,
                                         const std::vector<PinRef>& pins) {
  WritePlan& w = st.write;
  const TableRef& t = s.tables[0];
  const TableInfo* info = s.info_of(t);
  std::string T = ident(t.name);
  std::vector<std::string> cols;
  for (auto& c : set) cols.push_back(c.second);
  std::vector<ValueRef> key = pinned_key(pins, 0, info);
  unpinned_update(w, t.name, info, cols, false);
  bool key_changed = std::find(w.fixed.begin(), w.fixed.end(), "table:" + T) != w.fixed.end();
  if (!key.empty() && !key_changed) {  // the row is named: rows:T is not needed
    w.fixed.erase(std::find(w.fixed.begin(), w.fixed.end(), "rows:" + T));
    if (info)  // value-pinned readers: by the row's values (derive), not every value
      w.fixed.erase(std::remove_if(w.fixed.begin(), w.fixed.end(),
                                   [&](const std::string& n) {
                                     return n.rfind("vals:" + T + ":", 0) == 0;
                                   }),
                    w.fixed.end());
    w.row_prefix = "row:" + T + ":";
    w.rows = "rows:" + T;
    w.keys.push_back(std::move(key));
    keyed_row_columns(w, T, info);
    for (size_t j = 0; j < set.size() && j < set_raw.size(); ++j) {
      std::string C = ident(set[j].second);
      for (size_t x = 0; x < w.row_columns.size(); ++x)
        if (w.row_columns[x].column == C)
          w.set_values.emplace_back(x, make_ref(set_raw[j], info ? info->type_of(set[j].second)
                                                                 : ColumnType::Other));
    }
    return finish_write(st, s, true, "");
  }
  return finish_write(st, s, false,
                      key_changed ? "UPDATE of a key column"
                                  : "UPDATE not keyed by its primary key");
}
void StatementCompiler::remove(Statement& st, size_t b) {
  Scanner s(t_, b + 1, e_, &schema_, &names_);
  while (s.accept("low_priority") || s.accept("quick") || s.accept("ignore")) {
  }
  int blk = s.new_block();
  std::vector<std::string> targets;
  bool multi = false;
  if (s.accept("from")) {
    bool using_form = false;
    int depth = 0;
    for (size_t k = s.i; k < e_; ++k) {
      if (t_[k].op("(")) ++depth;
      if (t_[k].op(")")) --depth;
      if (depth == 0 && t_[k].word("using")) using_form = true;
    }
    if (using_form) {
      targets = s.target_list();
      s.expect_word("using");
      multi = true;
    }
    s.table_refs(blk);
  } else {
    targets = s.target_list();
    s.expect_word("from");
    s.table_refs(blk);
    multi = true;
  }
  std::vector<PinRef> pins;
  if (s.accept("where")) {
    size_t wb = s.i;
    s.expr(-1, false);
    s.pins(wb, s.i, blk, pins);
  }
  while (s.ok && (s.accept("order") || s.accept("limit") || s.accept("returning"))) {
    s.accept("by");
    s.expr(-1, false);
  }
  if (!s.ok || !s.done()) return finish_write(st, s, false, "");
  WritePlan& w = st.write;
  if (!multi && s.tables.size() == 1 && !s.tables[0].derived && !s.tables[0].star) {
    const TableRef& t = s.tables[0];
    const TableInfo* info = s.info_of(t);
    std::string T = ident(t.name);
    add_unique(w.fixed, "table:" + T);
    std::vector<ValueRef> key = pinned_key(pins, 0, info);
    w.row_prefix = "row:" + T + ":";
    w.rows = "rows:" + T;
    bool exact = !key.empty();
    w.deletes = true;
    if (exact) keyed_row_columns(w, T, info);  // the row's values: derive
    else all_values(w, T, info);
    w.keys.push_back(std::move(key));
    return finish_write(st, s, exact, "DELETE not keyed by its primary key");
  }
  std::vector<size_t> refs;
  for (size_t r = 0; r < s.tables.size(); ++r) {
    if (s.tables[r].derived) continue;
    bool target = !multi;
    for (auto& n : targets)
      if (s.tables[r].alias == n || s.tables[r].name == n) target = true;
    if (target) refs.push_back(r);
  }
  if (refs.empty())  // targets we could not resolve: every table
    for (size_t r = 0; r < s.tables.size(); ++r)
      if (!s.tables[r].derived) refs.push_back(r);
  for (size_t r : refs) {
    const TableRef& t = s.tables[r];
    std::string T = ident(t.name);
    add_unique(w.fixed, "rows:" + T);
    add_unique(w.fixed, "table:" + T);
    all_values(w, T, s.info_of(t));
  }
  finish_write(st, s, false, "multi-table DELETE");
}

// What an INSERT or REPLACE names, as the scanner read it.
struct StatementCompiler::InsertParts {
  std::string table;
  std::vector<std::string> cols;  // the column list, or SET's columns
  bool have_cols = false;
  std::vector<std::vector<RawValue>> rows;  // per row, per column (Unknown: an expression)
  bool from_query = false;                  // INSERT ... SELECT / TABLE
  std::vector<std::string> on_dup;          // ON DUPLICATE KEY UPDATE columns
};

void StatementCompiler::insert(Statement& st, size_t b, bool replace) {
  Scanner s(t_, b + 1, e_, &schema_, &names_);
  while (s.accept("low_priority") || s.accept("delayed") || s.accept("high_priority") ||
         s.accept("ignore")) {
  }
  s.accept("into");
  auto target = s.column_name();  // db.table reads as (db, table)
  if (!target) {
    s.fail("expected a table");
    return finish_write(st, s, false, "");
  }
  InsertParts p;
  p.table = target->second;
  if (s.accept("partition") && s.op("(")) {
    size_t m = s.matching(s.i, e_);
    s.i = m < e_ ? m + 1 : e_;
  }
  insert_columns(s, p);
  if (s.accept("values") || s.accept("value")) {
    insert_values(s, p);
  } else if (s.accept("set")) {
    insert_set(s, p);
  } else if (s.query_start(s.i) || s.word("table")) {
    p.from_query = true;
    if (s.accept("table")) s.target_list();
    else s.query();
  } else {
    s.fail("expected VALUES, SET or SELECT");
  }
  insert_tail(s, p);
  if (!s.ok || !s.done()) return finish_write(st, s, false, "");
  insert_plan(st, s, p, replace);
}

// (a, b, ...) before VALUES or SELECT.
void StatementCompiler::insert_columns(Scanner& s, InsertParts& p) {
  if (!(s.op("(") && !s.query_start(s.i + 1))) return;
  ++s.i;
  p.have_cols = true;
  while (s.ok && !s.op(")")) {
    auto c = s.column_name();
    if (!c) {
      s.fail("expected a column");
      break;
    }
    p.cols.push_back(c->second);
    if (!s.op(",")) break;
    ++s.i;
  }
  s.expect_op(")");
}

// VALUES (..), (..) / VALUES ROW(..): a literal or parameter per column, or an expression.
void StatementCompiler::insert_values(Scanner& s, InsertParts& p) {
  for (;;) {
    s.accept("row");
    if (!s.expect_op("(")) break;
    std::vector<RawValue> row;
    while (s.ok && !s.op(")")) {
      size_t k = s.i;
      RawValue v = s.raw_value_at(k);
      if (v.source != ValueRef::Source::Unknown && (s.tok(k).op(",") || s.tok(k).op(")"))) {
        s.i = k;
      } else {
        v = RawValue{};
        s.expr(-1, true);
      }
      row.push_back(std::move(v));
      if (!s.op(",")) break;
      ++s.i;
    }
    s.expect_op(")");
    p.rows.push_back(std::move(row));
    if (!s.ok || !s.op(",")) break;
    ++s.i;
  }
}

// SET a = 1, b = ?: one row.
void StatementCompiler::insert_set(Scanner& s, InsertParts& p) {
  p.have_cols = true;
  std::vector<RawValue> row;
  while (s.ok) {
    auto c = s.column_name();
    if (!c) {
      s.fail("expected a column");
      break;
    }
    p.cols.push_back(c->second);
    if (!s.expect_op("=")) break;
    size_t k = s.i;
    RawValue v = s.raw_value_at(k);
    if (v.source != ValueRef::Source::Unknown &&
        (k >= e_ || s.tok(k).op(",") || s.tok(k).word("on") || s.tok(k).word("returning"))) {
      s.i = k;
    } else {
      v = RawValue{};
      s.expr(-1, true);
    }
    row.push_back(std::move(v));
    if (!s.op(",")) break;
    ++s.i;
  }
  p.rows.push_back(std::move(row));
}

// AS alias [(cols)], ON DUPLICATE KEY UPDATE ..., RETURNING ...
void StatementCompiler::insert_tail(Scanner& s, InsertParts& p) {
  if (s.accept("as")) {  // INSERT ... VALUES (...) AS new [(cols)]
    if (Scanner::is_name(s.cur())) ++s.i;
    if (s.op("(")) {
      size_t m = s.matching(s.i, e_);
      s.i = m < e_ ? m + 1 : e_;
    }
  }
  if (s.accept("on")) {
    if (s.expect_word("duplicate") && s.expect_word("key") && s.expect_word("update")) {
      while (s.ok) {
        auto c = s.column_name();
        if (!c) {
          s.fail("expected a column");
          break;
        }
        p.on_dup.push_back(c->second);
        if (!s.expect_op("=")) break;
        s.expr(-1, true);
        if (!s.op(",")) break;
        ++s.i;
      }
    }
  }
  if (s.accept("returning")) s.expr(-1, false);
}

void StatementCompiler::insert_plan(Statement& st, Scanner& s, const InsertParts& p, bool replace) {
  WritePlan& w = st.write;
  const TableInfo* info = schema_.find(p.table);
  std::string T = ident(p.table);
  if (schema_.find_view(p.table)) {
    for (auto& base : *schema_.find_view(p.table))
      unpinned_update(w, base, schema_.find(base), {}, true);
    return finish_write(st, s, false, "INSERT into a view");
  }
  add_unique(w.fixed, "table:" + T);
  bool exact = !p.from_query && p.on_dup.empty() && !replace;
  std::string why;
  if (p.from_query) {
    add_unique(w.fixed, "rows:" + T);
    all_values(w, T, info);
    why = "INSERT ... SELECT";
  } else {
    insert_rows(w, p, exact, why);
  }
  if (!p.on_dup.empty()) {
    unpinned_update(w, p.table, info, p.on_dup, false);
    why = "INSERT ... ON DUPLICATE KEY UPDATE";
  }
  if (replace) {
    add_unique(w.fixed, "rows:" + T);
    add_unique(w.fixed, "col:" + T + ":*");
    all_values(w, T, info);
    why = "REPLACE deletes the rows it conflicts with";
  }
  finish_write(st, s, exact, why);
}

// VALUES / SET rows: each one's key (row:T:K, or rows:T when a key value is unknown) and values.
void StatementCompiler::insert_rows(WritePlan& w, const InsertParts& p, bool& exact,
                                    std::string& why) {
  const TableInfo* info = schema_.find(p.table);
  std::string T = ident(p.table);
  static const std::vector<std::string> kId{"id"};
  const std::vector<std::string>& pk = info ? info->primary_key : kId;
  w.row_prefix = "row:" + T + ":";
  w.rows = "rows:" + T;
  std::vector<std::string> value_cols;  // schema columns named by value
  if (info)
    for (const auto& c : info->columns)
      if (!(pk.size() == 1 && pk[0] == c)) value_cols.push_back(c);
  for (const auto& c : value_cols)
    w.value_columns.emplace_back("val:" + T + ":" + ident(c) + ":", "vals:" + T + ":" + ident(c));
  for (const auto& row : p.rows) {
    const std::vector<std::string>* names = p.have_cols ? &p.cols : info ? &info->columns : nullptr;
    bool usable = names && names->size() == row.size();
    auto value_of = [&](const std::string& c) -> ValueRef {
      if (!usable) return ValueRef{};
      for (size_t j = 0; j < names->size(); ++j)
        if ((*names)[j] == c)
          return make_ref(row[j], info ? info->type_of(c) : ColumnType::Other);
      return ValueRef{};  // not listed: its default
    };
    std::vector<ValueRef> key;
    for (const auto& k : pk) {
      key.push_back(value_of(k));
      if (key.back().source == ValueRef::Source::Unknown) {
        key.clear();
        break;
      }
    }
    if (key.empty()) {
      exact = false;
      why = "INSERT without its primary key";
    }
    w.keys.push_back(std::move(key));
    std::vector<ValueRef> vals;
    for (const auto& c : value_cols) vals.push_back(value_of(c));
    w.values.push_back(std::move(vals));
  }
}

}  // namespace tierce::sqldeps::detail
