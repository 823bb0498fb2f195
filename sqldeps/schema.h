// sqldeps/schema.h — what the deriver knows about tables: their columns (with a coarse type, which
// decides how a compared value is canonicalized), their primary key, and views as the tables they
// read. Parsed from CREATE TABLE / CREATE VIEW statements as mysqldump or a schema.sql writes
// them; every other statement in the file is skipped. An empty Schema knows nothing: the deriver
// then assumes every table is keyed by `id` and uses no column values (deps.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tierce::sqldeps {

// How the server compares a column with a constant, which is what decides when two spellings of
// a value denote the same rows (deps.h and names.cc, canonical values).
enum class ColumnType : uint8_t {
  Integer,  // TINYINT..BIGINT, BOOL, BIT, YEAR: numeric comparison
  Text,     // CHAR, VARCHAR, TEXT, ENUM, SET, BINARY, BLOB: collation comparison
  Other,    // DECIMAL, FLOAT, DOUBLE; tables the Schema does not know: integers only
  Opaque,   // dates and times, YEAR, JSON, spatial, any other type: no value is trusted
};

struct TableInfo {
  std::vector<std::string> columns;      // lower-cased, in table order
  std::vector<ColumnType> types;         // parallel to `columns`
  std::vector<std::string> primary_key;  // lower-cased; empty: no primary key

  // Index of `column` (lower-cased) in `columns`, or -1.
  int column_index(std::string_view column) const;
  ColumnType type_of(std::string_view column) const;
};

class Schema {
 public:
  // CREATE TABLE / CREATE VIEW statements; anything else is skipped. Throws std::invalid_argument
  // ("schema line N: ...") on an unterminated string or comment, a statement that does not start
  // with a word, or a CREATE TABLE whose body it cannot read.
  static Schema parse_sql(std::string_view ddl);

  const TableInfo* find(std::string_view table) const;  // lower-cased name, no db qualifier
  // The base tables a view reads (lower-cased), or nullptr when `name` is no known view.
  const std::vector<std::string>* find_view(std::string_view name) const;

  void add_table(std::string name, TableInfo info);
  void add_view(std::string name, std::vector<std::string> tables);
  bool empty() const { return tables_.empty() && views_.empty(); }
  size_t table_count() const { return tables_.size(); }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, TableInfo, Hash, std::equal_to<>> tables_;
  std::unordered_map<std::string, std::vector<std::string>, Hash, std::equal_to<>> views_;
};

}  // namespace tierce::sqldeps
