// sqldeps/rows.h — what a row change read from the database's change log invalidates: the same
// names (deps.h, "Names") a write through the PHP extension names, derived from the row images
// instead of the statement. tierce-binlogd (agents/binlogd) calls it for every row of every ROW
// event: a write made by any client (cron, an admin's UPDATE, another service) then invalidates
// what the PHP path's readers depend on.
//
// With both images in hand the change is exact: every column's value before and after is known.
// What is named, per reader rule of deps.h:
//   rule 1  row:T:K of the row's key before and after (rows:T when a key value has no canonical
//           form, or the table has no primary key); also row:T:<id> when the table has a column
//           `id` that is not its whole primary key (a reader whose schema does not know T
//           assumes it is keyed by `id`).
//   rule 2  val:T:C:V for every column C of the row before and after (vals:T:C when V has no
//           canonical form: NULL, dates, ENUM/SET positions, non-ASCII text): a value-pinned
//           reader sees the row's membership and its content.
//   rule 3  table:T on INSERT, DELETE and an UPDATE that moves the key; col:T:C for every
//           column an UPDATE changed, and col:T:* for any UPDATE that changed something.
// An UPDATE that changed nothing (the images are equal) names nothing.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sqldeps/schema.h"

namespace tierce::sqldeps {

enum class RowChange : uint8_t { Insert, Update, Delete };
const char* to_string(RowChange c);

// A table as the change log describes it (binlog_row_metadata=FULL): its columns in table order,
// how the server compares each with a constant, and its primary key (indexes into `columns`).
struct LoggedTable {
  std::string name;                  // without the database
  std::vector<std::string> columns;  // as the server spells them
  std::vector<ColumnType> types;     // parallel to `columns`
  std::vector<size_t> primary_key;   // empty: none
};

// One row image: each column's value as text (integers in decimal), nullopt for NULL or for a
// value whose text the reader of the log could not give (then it counts as unknown).
using RowImage = std::vector<std::optional<std::string>>;

// Appends (deduplicated within `out`) what the change of one row invalidates. `before` is used for
// Update and Delete, `after` for Insert and Update; an image shorter than the table's columns
// reads the missing columns as unknown.
void row_change_names(const LoggedTable& table, RowChange change, const RowImage& before,
                      const RowImage& after, std::vector<std::string>& out);

}  // namespace tierce::sqldeps
