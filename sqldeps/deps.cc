// sqldeps/deps.cc — the public API of the classifier and deriver (deps.h): compile() splits a
// text into statements and hands each to the statement compiler (compiler.h, with its query
// scanner in scanner.h); derive() fills the compiled templates with the bound parameters.
#include "sqldeps/deps.h"

#include <algorithm>
#include <unordered_set>

#include "sqldeps/compiler.h"
#include "sqldeps/names.h"

namespace tierce::sqldeps {

const char* to_string(Kind k) {
  switch (k) {
    case Kind::Read: return "read";
    case Kind::Write: return "write";
    case Kind::Begin: return "begin";
    case Kind::Commit: return "commit";
    case Kind::Rollback: return "rollback";
    case Kind::Savepoint: return "savepoint";
    case Kind::RollbackToSavepoint: return "rollback-to-savepoint";
    case Kind::Neutral: return "neutral";
    case Kind::Unknown: return "unknown";
  }
  return "?";
}

const char* to_string(Precision p) {
  switch (p) {
    case Precision::Exact: return "exact";
    case Precision::TableLevel: return "table-level";
    case Precision::Conservative: return "conservative";
  }
  return "?";
}

namespace {

using detail::canonical;
using detail::hashed;
using detail::ReadTable;
using detail::StatementCompiler;
using detail::ValueRef;
using detail::WritePlan;

// ---- derive -------------------------------------------------------------------------------------

// Appends with dedup: linear while small, a hash set beyond.
class Appender {
 public:
  explicit Appender(std::vector<std::string>& v) : v_(v) {}
  void add(std::string s) {
    if (v_.size() < 48) {
      if (std::find(v_.begin(), v_.end(), s) != v_.end()) return;
      v_.push_back(std::move(s));
      return;
    }
    if (seen_.empty()) seen_.insert(v_.begin(), v_.end());
    if (!seen_.insert(s).second) return;
    v_.push_back(std::move(s));
  }

 private:
  std::vector<std::string>& v_;
  std::unordered_set<std::string> seen_;
};

struct Context {
  const Params& params;
  std::vector<const Value*> named;  // per Compiled::param_names
};

std::optional<std::string> resolve(const ValueRef& r, const Context& cx) {
  const Value* v = nullptr;
  switch (r.source) {
    case ValueRef::Source::Unknown: return std::nullopt;
    case ValueRef::Source::Literal: return r.literal;
    case ValueRef::Source::Positional:
      if (r.index < cx.params.positional.size()) v = &cx.params.positional[r.index];
      break;
    case ValueRef::Source::Named:
      if (r.index < cx.named.size()) v = cx.named[r.index];
      break;
  }
  if (!v || !*v) return std::nullopt;
  return canonical(**v, r.type);
}

// The key part of "row:T:K": values joined with '|' (hashed when long), or nullopt if one is
// unknown.
std::optional<std::string> row_key(const std::vector<ValueRef>& key, const Context& cx) {
  if (key.empty()) return std::nullopt;
  std::string k;
  for (size_t j = 0; j < key.size(); ++j) {
    auto v = resolve(key[j], cx);
    if (!v) return std::nullopt;
    if (j) k += '|';
    k += *v;
  }
  if (k.size() > 64) k = hashed(k);
  return k;
}

// "row:T:" -> "T"
std::string table_of_prefix(const std::string& row_prefix) {
  return row_prefix.size() > 5 ? row_prefix.substr(4, row_prefix.size() - 5) : std::string();
}

void derive_read(const Statement& st, const Context& cx, Appender& dep, Derived& out) {
  for (const ReadTable& t : st.reads) {
    if (t.keyed) {
      if (auto k = row_key(t.key, cx)) {
        dep.add(t.row_prefix + *k);
        dep.add(t.rows);
        if (st.locking) out.locked.push_back({table_of_prefix(t.row_prefix), *k, &st.fact_columns});
        continue;
      }
    }
    bool pinned = false;
    for (const auto& p : t.pins) {
      if (auto v = resolve(p.value, cx)) {
        dep.add(p.val_prefix + *v);
        dep.add(p.vals);
        pinned = true;
        break;
      }
    }
    if (pinned) continue;  // rule 2: every change to those rows names val:T:C:V or vals:T:C
    dep.add(t.table);
    for (const auto& c : t.columns) dep.add(c);
  }
}

void derive_write(const Statement& st, const Context& cx, Appender& inv, Derived& out,
                  const RowFacts* facts) {
  const WritePlan& w = st.write;
  for (const auto& f : w.fixed) {
    inv.add(f);
    if (f.rfind("rows:", 0) == 0) out.unkeyed_writes.push_back(f.substr(5));
  }
  for (const auto& key : w.keys) {
    auto k = row_key(key, cx);
    if (k) inv.add(w.row_prefix + *k);
    else {
      inv.add(w.rows);
      if (!w.table.empty()) out.unkeyed_writes.push_back(w.table);
    }
    if (w.table.empty()) continue;  // INSERT: its values below
    // UPDATE / DELETE of a keyed row: what the row held, per column, and what SET gives it.
    for (const auto& rc : w.row_columns) {
      const std::string* v = k && facts ? facts->value(w.table, *k, rc.column) : nullptr;
      inv.add(v ? rc.val_prefix + *v : rc.vals);
    }
    if (!k) continue;
    WrittenRow wr;
    wr.table = w.table;
    wr.key = *k;
    wr.deleted = w.deletes;
    for (const auto& [x, ref] : w.set_values) {
      auto v = resolve(ref, cx);
      inv.add(v ? w.row_columns[x].val_prefix + *v : w.row_columns[x].vals);
      wr.set.emplace_back(w.row_columns[x].column, v);
    }
    out.written.push_back(std::move(wr));
  }
  for (const auto& row : w.values)
    for (size_t j = 0; j < row.size() && j < w.value_columns.size(); ++j) {
      if (auto v = resolve(row[j], cx)) inv.add(w.value_columns[j].first + *v);
      else inv.add(w.value_columns[j].second);
    }
}

}  // namespace

Compiled compile(std::string_view sql, const Schema& schema) {
  Compiled c;
  try {
    std::vector<Token> t = tokenize(sql);
    size_t b = 0;
    for (size_t i = 0; i <= t.size(); ++i) {
      if (i < t.size() && t[i].type == TokenType::Param) ++c.param_count;
      if (i < t.size() && t[i].type != TokenType::Semicolon) continue;
      if (i > b) c.statements.push_back(StatementCompiler(t, b, i, schema, c.param_names).run());
      b = i + 1;
    }
  } catch (const std::exception& e) {  // out of memory: say so, conservatively
    Statement st;
    st.kind = Kind::Unknown;
    st.reason = std::string("compile failed: ") + e.what();
    st.invalidate_all = st.uncacheable = true;
    c.statements.assign(1, std::move(st));
  }
  return c;
}

void derive(const Compiled& c, size_t statement, const Params& params, Derived& out,
            const RowFacts* facts) {
  if (statement >= c.statements.size()) return;
  Context cx{params, {}};
  if (!c.param_names.empty()) {
    cx.named.assign(c.param_names.size(), nullptr);
    for (const auto& [name, value] : params.named)
      for (size_t j = 0; j < c.param_names.size(); ++j)
        if (c.param_names[j] == name && !cx.named[j]) cx.named[j] = &value;
  }
  Appender dep(out.depends), inv(out.invalidates);
  const Statement& st = c.statements[statement];
  if (st.uncacheable) out.uncacheable = true;
  if (st.invalidate_all) out.invalidate_all = true;
  if (st.invalidate_all || st.uncacheable) return;
  if (st.kind == Kind::Read) derive_read(st, cx, dep, out);
  else if (st.kind == Kind::Write) derive_write(st, cx, inv, out, facts);
}

std::optional<std::string> fact_value(std::string_view raw, ColumnType type) {
  return canonical(raw, type);
}

void derive(const Compiled& c, const Params& params, Derived& out, const RowFacts* facts) {
  for (size_t i = 0; i < c.statements.size(); ++i) derive(c, i, params, out, facts);
}

}  // namespace tierce::sqldeps
