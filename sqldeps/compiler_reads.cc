// sqldeps/compiler_reads.cc — from a scan to reader tables (compiler.h): which tables a read
// names, which of the three reader rules (deps.h) each one can use, and by which columns it reads.
#include <algorithm>

#include "sqldeps/compiler.h"

namespace tierce::sqldeps::detail {

ValueRef make_ref(const RawValue& v, ColumnType type) {
  ValueRef r;
  r.type = type;
  r.source = v.source;
  r.index = v.index;
  if (v.source == ValueRef::Source::Literal) {
    auto c = canonical(v.text, type);
    if (c) r.literal = std::move(*c);
    else r.source = ValueRef::Source::Unknown;
  }
  return r;
}

namespace {

// Columns each table name is read by: "*" or the names.
struct ColumnUse {
  bool star = false;
  std::vector<std::string> names;
  void add(const std::string& c) {
    if (std::find(names.begin(), names.end(), c) == names.end()) names.push_back(c);
  }
};

std::vector<ColumnUse> column_uses(const Scanner& s) {
  std::vector<ColumnUse> use(s.tables.size());
  auto same_table = [&](size_t r, auto&& fn) {
    for (size_t q = 0; q < s.tables.size(); ++q)
      if (!s.tables[q].derived && s.tables[q].name == s.tables[r].name) fn(q);
  };
  for (size_t r = 0; r < s.tables.size(); ++r) {
    const TableRef& t = s.tables[r];
    if (t.derived) continue;
    if (t.star || (t.block >= 0 && s.blocks[size_t(t.block)].star_all))
      same_table(r, [&](size_t q) { use[q].star = true; });
  }
  for (const ColRef& c : s.cols) {
    std::vector<size_t> owners;
    if (!c.qual.empty()) {
      bool derived_qual = false;
      for (size_t r = 0; r < s.tables.size(); ++r)
        if (s.tables[r].alias == c.qual) {
          if (s.tables[r].derived) derived_qual = true;
          else owners.push_back(r);
        }
      if (owners.empty() && derived_qual) continue;  // its columns were scanned inside
    }
    if (owners.empty() && !c.name.empty()) {
      // Unqualified (or an unknown qualifier): the server looks in the column's own block
      // first; when a table there has it (by the Schema), it is theirs (or ambiguous with a
      // table the Schema does not know). Else any table of the statement may have it.
      bool found_here = false;
      for (size_t r = 0; r < s.tables.size(); ++r) {
        const TableInfo* info = s.info_of(s.tables[r]);
        if (!s.tables[r].derived && s.tables[r].block == c.block && info &&
            info->column_index(c.name) >= 0)
          found_here = true;
      }
      for (size_t r = 0; r < s.tables.size(); ++r) {
        if (s.tables[r].derived) continue;
        if (found_here && s.tables[r].block != c.block) continue;
        const TableInfo* info = s.info_of(s.tables[r]);
        if (!info || info->column_index(c.name) >= 0) owners.push_back(r);
      }
    }
    for (size_t r : owners)
      same_table(r, [&](size_t q) {
        if (c.name.empty()) use[q].star = true;
        else use[q].add(c.name);
      });
  }
  return use;
}

}  // namespace

void build_reads(Scanner& s, Statement& st) {
  std::vector<PinRef> pins;
  for (size_t b = 0; b < s.blocks.size(); ++b)
    if (s.blocks[b].has_where) s.pins(s.blocks[b].where_b, s.blocks[b].where_e, int(b), pins);
  std::vector<ColumnUse> use = column_uses(s);
  std::vector<std::string> loose;  // tables read at rule 3 for sure
  for (size_t r = 0; r < s.tables.size(); ++r) {
    const TableRef& t = s.tables[r];
    if (t.derived) continue;
    const TableInfo* info = s.info_of(t);
    std::string T = ident(t.name);
    ReadTable rt;
    rt.row_prefix = "row:" + T + ":";
    rt.rows = "rows:" + T;
    rt.table = "table:" + T;
    static const std::vector<std::string> kId{"id"};
    const std::vector<std::string>& pk = info ? info->primary_key : kId;
    if (!pk.empty() && !t.star) {
      rt.keyed = true;
      for (const auto& k : pk) {
        auto it = std::find_if(pins.begin(), pins.end(),
                               [&](const PinRef& p) { return p.table == r && p.column == k; });
        if (it == pins.end()) {
          rt.keyed = false;
          rt.key.clear();
          break;
        }
        rt.key.push_back(make_ref(it->value, info ? info->type_of(k) : ColumnType::Other));
        if (rt.key.back().source == ValueRef::Source::Unknown) {
          rt.keyed = false;
          rt.key.clear();
          break;
        }
      }
    }
    if (info) {
      for (const PinRef& p : pins) {
        if (p.table != r || info->column_index(p.column) < 0) continue;
        if (pk.size() == 1 && pk[0] == p.column) continue;  // rule 1's
        ValueRef v = make_ref(p.value, info->type_of(p.column));
        if (v.source == ValueRef::Source::Unknown) continue;
        std::string C = ident(p.column);
        rt.pins.push_back({"val:" + T + ":" + C + ":", "vals:" + T + ":" + C, std::move(v)});
      }
    }
    if (use[r].star) {
      rt.columns.push_back("col:" + T + ":*");
    } else {
      for (const auto& c : use[r].names) rt.columns.push_back("col:" + T + ":" + ident(c));
    }
    if (!rt.keyed && rt.pins.empty()) loose.push_back(t.name);
    st.reads.push_back(std::move(rt));
  }
  st.precision = Precision::Exact;
  if (!loose.empty()) {
    std::sort(loose.begin(), loose.end());
    loose.erase(std::unique(loose.begin(), loose.end()), loose.end());
    st.precision = Precision::TableLevel;
    st.reason = "not keyed by a primary key or a column value:";
    for (auto& l : loose) st.reason += " " + l;
  }
}

}  // namespace tierce::sqldeps::detail
