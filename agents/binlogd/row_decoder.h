// agents/binlogd/row_decoder.h — MariaDB's ROW events read without libmariadb's value extraction:
// its mariadb_rpl_extract_rows (Connector/C 3.3) refuses DECIMAL, ENUM and DATETIME2 columns
// ("Malformed row data packet stream"), which the sample's tables have. What tierce-binlogd needs
// of a row is little: integers (as decimal text, signed or unsigned by the table map's
// SIGNEDNESS), and strings (VARCHAR, CHAR, TEXT/BLOB) as bytes; every other value is skipped by
// its exact size and read as unknown, which sqldeps::row_change_names names conservatively
// (vals:T:C). A row that cannot be read (a size past the event's end, a type this decoder does
// not know) is an error: the caller invalidates everything rather than guess.
//
// The formats are those of the binlog (MariaDB 10.11, binlog_row_image=FULL,
// binlog_row_metadata=FULL): the TABLE_MAP event's column types, per-column metadata and
// optional metadata (COLUMN_NAME, SIMPLE_PRIMARY_KEY, PRIMARY_KEY_WITH_PREFIX, SIGNEDNESS);
// a rows event's bitmaps and row images (a null bitmap over the present columns, then each
// present non-null value).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "sqldeps/rows.h"

namespace tierce::binlogd {

// What the TABLE_MAP event said of a table, decoded.
struct TableMap {
  uint64_t id = 0;
  std::string database;
  sqldeps::LoggedTable table;     // name, column names, comparison classes, primary key
  std::vector<uint8_t> types;     // binlog column types (MYSQL_TYPE_*), per column
  std::vector<uint16_t> meta;     // per-column metadata, decoded to one number (below)
  std::vector<bool> is_unsigned;  // per column (numeric columns only can be true)
};

// The raw parts of a TABLE_MAP event as Connector/C hands them over.
struct TableMapParts {
  uint64_t id = 0;
  std::string database, table;
  std::span<const uint8_t> column_types;   // one byte per column
  std::span<const uint8_t> metadata;       // the packed per-column metadata
  std::span<const uint8_t> signedness;     // the SIGNEDNESS bitmap (empty: none sent)
  std::span<const uint8_t> column_names;   // COLUMN_NAME: length-prefixed names
  std::span<const uint8_t> simple_pk;      // SIMPLE_PRIMARY_KEY: packed column indexes
  std::span<const uint8_t> prefixed_pk;    // PRIMARY_KEY_WITH_PREFIX: (index, prefix) pairs
};

// Fails (BINLOGD0101) when the metadata is shorter than the types need, or when a column has no
// name (binlog_row_metadata is not FULL: the caller says so).
base::Result<TableMap> decode_table_map(const TableMapParts& parts);

struct RowPair {
  sqldeps::RowImage before, after;  // before: Update, Delete; after: Insert, Update
};

// Every row of one rows event. `present` is the event's column bitmap (columns in the images),
// `present_after` the UPDATE's second bitmap (same as `present` for the other kinds).
base::Result<std::vector<RowPair>> decode_rows(const TableMap& t, sqldeps::RowChange kind,
                                               std::span<const uint8_t> present,
                                               std::span<const uint8_t> present_after,
                                               std::span<const uint8_t> rows);

// Whether decode_rows gives this type's values as text (integers, strings), so that nullopt in
// an image means NULL; other types are always nullopt there.
bool value_readable(uint8_t type, uint16_t meta);

// The comparison class sqldeps gives a column of this binlog type (the same classes as
// sqldeps/schema.cc gives the DDL type: integers, text, numbers, opaque).
sqldeps::ColumnType column_class(uint8_t type, uint16_t meta);

}  // namespace tierce::binlogd
