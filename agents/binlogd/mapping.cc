// agents/binlogd/mapping.cc — row changes to dependency names (mapping.h).
#include "agents/binlogd/mapping.h"

#include <algorithm>

namespace tierce::binlogd {
namespace {

using base::Code;

bool name_byte(unsigned char c) { return c > 0x20 && c != 0x7f && c != ','; }

std::string lower(std::string_view s) {
  std::string o(s);
  for (auto& c : o)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return o;
}

bool system_database(std::string_view d) {
  std::string l = lower(d);
  return l == "mysql" || l == "information_schema" || l == "performance_schema" || l == "sys";
}

void add(std::vector<std::string>& out, std::string s) {
  if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
}

}  // namespace

bool valid_dependency_name(std::string_view name) {
  if (name.empty() || name.size() > 256) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return name_byte(static_cast<unsigned char>(c)); });
}

base::Result<Mapping> Mapping::make(MappingSettings settings) {
  Mapping m;
  m.s_ = std::move(settings);
  for (size_t ri = 0; ri < m.s_.tables.size(); ++ri) {
    const TableRule& r = m.s_.tables[ri];
    Compiled c{ri, {}};
    for (const std::string& t : r.templates) {
      auto bad = [&](const std::string& why) {
        return base::Result<Mapping>(Code::InvalidArgument,
                                     "[[table]] " + r.table + ": template \"" + t + "\": " + why,
                                     "BINLOGD0110");
      };
      std::vector<Part> parts;
      size_t i = 0;
      while (i < t.size()) {
        if (t[i] == '{') {
          size_t j = t.find('}', i);
          if (j == std::string::npos) return bad("'{' without its '}'");
          std::string col = t.substr(i + 1, j - i - 1);
          if (col.empty() || col.find_first_of("{ \t") != std::string::npos)
            return bad("a placeholder must name a column, without spaces: {id}");
          parts.push_back({true, lower(col)});
          i = j + 1;
          continue;
        }
        if (t[i] == '}') return bad("'}' without its '{'");
        size_t j = t.find_first_of("{}", i);
        std::string text = t.substr(i, j == std::string::npos ? std::string::npos : j - i);
        if (!std::all_of(text.begin(), text.end(),
                         [](char ch) { return name_byte(static_cast<unsigned char>(ch)); }))
          return bad("a name has no spaces, commas or control characters");
        parts.push_back({false, text});
        i = j == std::string::npos ? t.size() : j;
      }
      if (parts.empty()) return bad("empty");
      c.templates.push_back(std::move(parts));
    }
    m.compiled_.push_back(std::move(c));
  }
  return m;
}

bool Mapping::watched(std::string_view database) const {
  if (s_.databases.empty()) return !system_database(database);
  std::string l = lower(database);
  return std::any_of(s_.databases.begin(), s_.databases.end(),
                     [&](const std::string& d) { return lower(d) == l; });
}

const Mapping::Compiled* Mapping::rule_for(std::string_view database,
                                           std::string_view table) const {
  // A rule naming the database ("db.items") before one for the table in any database
  // ("items"), whatever their order in the file; among equals, the first.
  std::string d = lower(database), t = lower(table);
  const Compiled* any = nullptr;
  for (const Compiled& c : compiled_) {
    const TableRule& r = s_.tables[c.rule];
    if (lower(r.table) != t) continue;
    if (!r.database.empty() && lower(r.database) == d) return &c;
    if (r.database.empty() && !any) any = &c;
  }
  return any;
}

base::Status Mapping::render(const TableMap& t, const Compiled& c,
                             const sqldeps::RowImage& image, std::vector<std::string>& out) const {
  for (const auto& parts : c.templates) {
    std::string name;
    bool null = false;
    for (const Part& p : parts) {
      if (!p.column) {
        name += p.text;
        continue;
      }
      size_t col = t.table.columns.size();
      for (size_t k = 0; k < t.table.columns.size(); ++k)
        if (lower(t.table.columns[k]) == p.text) col = k;
      if (col == t.table.columns.size())
        return {Code::InvalidArgument,
                t.database + "." + t.table.name + " has no column '" + p.text +
                    "' (a [[table]] template names it)",
                "BINLOGD0111"};
      static const std::optional<std::string> kAbsent;
      const auto& v = col < image.size() ? image[col] : kAbsent;
      if (!v) {
        // NULL and values this agent does not read look alike in the image; the type tells.
        if (col >= image.size() || !value_readable(t.types[col], t.meta[col]))
          return {Code::InvalidArgument,
                  t.database + "." + t.table.name + "." + t.table.columns[col] +
                      ": a value of this type cannot be read from the log for a template",
                  "BINLOGD0112"};
        null = true;
        break;
      }
      name += *v;
    }
    if (null) continue;
    if (!valid_dependency_name(name))
      return {Code::InvalidArgument,
              t.database + "." + t.table.name + ": the template gives \"" + name.substr(0, 60) +
                  "\", not a valid dependency name",
              "BINLOGD0113"};
    add(out, std::move(name));
  }
  return {};
}

base::Status Mapping::names(const TableMap& t, sqldeps::RowChange kind, const RowPair& row,
                            std::vector<std::string>& out) const {
  const Compiled* c = rule_for(t.database, t.table.name);
  if (!c && !s_.auto_names) {
    if (s_.unknown_tables == UnknownTables::Ignore) return {};
    return {Code::NotFound,
            "a row of " + t.database + "." + t.table.name +
                " changed, and no [[table]] describes it (unknown_tables = \"invalidate-all\")",
            "BINLOGD0114"};
  }
  if (c) {
    bool before = kind != sqldeps::RowChange::Insert, after = kind != sqldeps::RowChange::Delete;
    if (before)
      if (auto s = render(t, *c, row.before, out); !s.ok()) return s;
    if (after)
      if (auto s = render(t, *c, row.after, out); !s.ok()) return s;
  }
  if (s_.auto_names) sqldeps::row_change_names(t.table, kind, row.before, row.after, out);
  return {};
}

}  // namespace tierce::binlogd
