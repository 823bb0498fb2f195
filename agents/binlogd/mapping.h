// agents/binlogd/mapping.h — from a row change to the dependency names it invalidates, as the
// site's pages name what they depend on:
//   auto names   the names the PHP extension's automatic mode gives (sqldeps/rows.h: row:T:K,
//                val:T:C:V, table:T, col:T:C ...), derived from the row images and the table map
//   [[table]]    explicit templates for pages that name their dependencies themselves
//                (Tierce-Depends: item:42): `names = ["item:{id}", "category:{category_id}"]`,
//                each rendered with the before image and with the after image
// A table with neither (auto names off, no [[table]]) follows `unknown_tables`: invalidate
// everything (the default: a write nobody described may change any page) or ignore it.
// Only the databases listed are watched ([] = every database but the server's own: mysql,
// information_schema, performance_schema, sys).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "agents/binlogd/row_decoder.h"
#include "base/status.h"

namespace tierce::binlogd {

enum class UnknownTables { InvalidateAll, Ignore };

struct TableRule {
  std::string database;  // "" = any watched database (a rule naming the database comes first)
  std::string table;
  std::vector<std::string> templates;  // "item:{id}": text and {column} placeholders
};

struct MappingSettings {
  std::vector<std::string> databases;
  bool auto_names = false;
  UnknownTables unknown_tables = UnknownTables::InvalidateAll;
  std::vector<TableRule> tables;
};

class Mapping {
 public:
  // Checks every template (balanced braces, a column name in each placeholder, the text a valid
  // name part: printable, no space or comma). Fails with BINLOGD0110 naming the template.
  static base::Result<Mapping> make(MappingSettings settings);

  bool watched(std::string_view database) const;

  // Appends the names of one row change (an ignored table: none). A template whose column is
  // NULL in an image gives no name for that image (no page depends on "item:NULL"). A Status
  // that is not ok means "invalidate everything", its message says why: a placeholder naming a
  // column the table lacks, a value this agent cannot read (DECIMAL, dates), a rendered name
  // that is not a valid name.
  base::Status names(const TableMap& t, sqldeps::RowChange kind, const RowPair& row,
                     std::vector<std::string>& out) const;

  const MappingSettings& settings() const { return s_; }

 private:
  struct Part {
    bool column = false;
    std::string text;  // literal text, or the column's name
  };
  struct Compiled {
    size_t rule;  // index into s_.tables
    std::vector<std::vector<Part>> templates;
  };
  const Compiled* rule_for(std::string_view database, std::string_view table) const;
  base::Status render(const TableMap& t, const Compiled& c, const sqldeps::RowImage& image,
                      std::vector<std::string>& out) const;

  MappingSettings s_;
  std::vector<Compiled> compiled_;
};

// Whether `name` may be sent as a dependency name (coherence/protocol.h: 1..256 bytes, no space,
// comma, tab or control character).
bool valid_dependency_name(std::string_view name);

}  // namespace tierce::binlogd
