// sqldeps/rows.cc — the names of a row change read from the change log (rows.h).
#include "sqldeps/rows.h"

#include <algorithm>

#include "sqldeps/names.h"

namespace tierce::sqldeps {
namespace {

using detail::canonical;
using detail::hashed;
using detail::ident;

void add(std::vector<std::string>& out, std::string s) {
  if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
}

const std::optional<std::string>& value_at(const RowImage& row, size_t i) {
  static const std::optional<std::string> kUnknown;
  return i < row.size() ? row[i] : kUnknown;
}

std::optional<std::string> canonical_at(const RowImage& row, size_t i, ColumnType type) {
  const auto& v = value_at(row, i);
  if (!v) return std::nullopt;
  return canonical(*v, type);
}

// The key part of row:T:K exactly as deps.cc's row_key spells it: the canonical values of the
// key columns joined with '|', hashed when longer than 64 bytes.
// `types[j]` is how key column `cols[j]` is compared.
std::optional<std::string> key_of(const RowImage& row, const std::vector<size_t>& cols,
                                  const std::vector<ColumnType>& types) {
  if (cols.empty()) return std::nullopt;
  std::string k;
  for (size_t j = 0; j < cols.size(); ++j) {
    auto v = canonical_at(row, cols[j], j < types.size() ? types[j] : ColumnType::Opaque);
    if (!v) return std::nullopt;
    if (j) k += '|';
    k += *v;
  }
  if (k.size() > 64) k = hashed(k);
  return k;
}

// Whether column i may differ between the images (unknown on either side: it may).
bool may_differ(const RowImage& a, const RowImage& b, size_t i) {
  const auto& x = value_at(a, i);
  const auto& y = value_at(b, i);
  return !x || !y || *x != *y;
}

struct Namer {
  const LoggedTable& t;
  std::vector<std::string>& out;
  std::string T = ident(t.name);
  std::optional<size_t> id_column;  // a column `id` that is not the whole primary key

  Namer(const LoggedTable& table, std::vector<std::string>& o) : t(table), out(o) {
    for (size_t i = 0; i < t.columns.size(); ++i)
      if (detail::lower_ascii(t.columns[i]) == "id" &&
          !(t.primary_key.size() == 1 && t.primary_key[0] == i))
        id_column = i;
  }

  ColumnType type(size_t i) const { return i < t.types.size() ? t.types[i] : ColumnType::Opaque; }

  // Rule 1 for one image.
  void row(const RowImage& r) {
    std::vector<ColumnType> key_types;
    for (size_t i : t.primary_key) key_types.push_back(type(i));
    if (auto k = key_of(r, t.primary_key, key_types)) add(out, "row:" + T + ":" + *k);
    else add(out, "rows:" + T);
    if (id_column) {
      // A reader without the schema keys T by `id`, compared as a number (deps.h).
      if (auto k = key_of(r, {*id_column}, {ColumnType::Other})) add(out, "row:" + T + ":" + *k);
      else add(out, "rows:" + T);
    }
  }
  // Rule 2 for one image: every column's value.
  void values(const RowImage& r) {
    for (size_t i = 0; i < t.columns.size(); ++i) {
      std::string C = ident(t.columns[i]);
      if (auto v = canonical_at(r, i, type(i))) add(out, "val:" + T + ":" + C + ":" + *v);
      else add(out, "vals:" + T + ":" + C);
    }
  }
  bool key_moved(const RowImage& a, const RowImage& b) const {
    if (t.primary_key.empty()) return true;  // no key: a reader cannot tell the rows apart
    for (size_t i : t.primary_key)
      if (may_differ(a, b, i)) return true;
    if (id_column && may_differ(a, b, *id_column)) return true;
    return false;
  }
};

}  // namespace

const char* to_string(RowChange c) {
  switch (c) {
    case RowChange::Insert: return "insert";
    case RowChange::Update: return "update";
    case RowChange::Delete: return "delete";
  }
  return "?";
}

void row_change_names(const LoggedTable& table, RowChange change, const RowImage& before,
                      const RowImage& after, std::vector<std::string>& out) {
  Namer n(table, out);
  switch (change) {
    case RowChange::Insert:
    case RowChange::Delete: {
      const RowImage& r = change == RowChange::Insert ? after : before;
      n.row(r);
      n.values(r);
      add(out, "table:" + n.T);
      return;
    }
    case RowChange::Update: {
      bool changed = false;
      size_t columns = std::max({table.columns.size(), before.size(), after.size()});
      for (size_t i = 0; i < columns; ++i)
        if (may_differ(before, after, i)) {
          changed = true;
          if (i < table.columns.size()) add(out, "col:" + n.T + ":" + ident(table.columns[i]));
        }
      if (!changed) return;
      add(out, "col:" + n.T + ":*");
      n.row(before);
      n.row(after);
      n.values(before);
      n.values(after);
      if (n.key_moved(before, after)) add(out, "table:" + n.T);
      return;
    }
  }
}

}  // namespace tierce::sqldeps
