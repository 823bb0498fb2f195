// sqldeps/deps.h — from the SQL a PHP application runs to cache dependency names: a GET page that
// ran SELECTs depends on names, a write invalidates names, and a page is invalidated when a write
// invalidates any name it depends on. compile() classifies a SQL text once (it is cached per text
// by the caller: prepared statements run many times); derive() substitutes the bound parameters
// and appends the names, cheaply.
//
// Names (valid coherence dependency names: printable, no ',' or space, <= 256 bytes). T and C are
// lower-cased table/column names without db qualifier; V a canonical value (below). Identifiers
// and values made of [A-Za-z0-9_.@-] only and <= 64 bytes are written as they are, others as '~'
// and 16 lower-case hex digits of XXH3-64 of their (lower-cased) bytes.
//   row:T:K     the row of T whose primary key is K (composite keys: values joined with '|')
//   rows:T      every row of T (writes to T that do not name the whole primary key)
//   table:T     membership of T (rows inserted or deleted)
//   col:T:C     column C of any row of T;   col:T:*  any column
//   val:T:C:V   the rows of T whose C equals V (membership by value);  vals:T:C  by C, any value
//
// Readers, per table reference T (aliases resolved, subqueries and CTE bodies included):
//   1. the top-level AND of its block's WHERE pins every primary-key column of T by equality to a
//      constant or a known parameter:  row:T:K, rows:T
//   2. else T is in the Schema and the AND pins some column C:  val:T:C:V, vals:T:C (every change
//      to a row whose C is V names val:T:C:V, or vals:T:C when the writer cannot tell)
//   3. else:  table:T and the col:T:X names
// Writers name, for every row they may change, what those three readers depend on
// (compiler_writes.cc has the per-statement rules and why each is sound). A write keyed by a
// primary key names, for each column C of the schema, val:T:C:V when the caller knows the row's
// current V (RowFacts: the row was read with FOR UPDATE / LOCK IN SHARE MODE in the open
// transaction, so it cannot change before the write commits), else vals:T:C.
//
// Canonical values (what makes two spellings of a value one name): the server's comparison rules
// decide, so a value counts only where they are simple. An integer (sign, digits, leading zeros,
// quoted or not, at most 15 significant digits so that a comparison in double precision cannot
// merge two of them) is its decimal form, for integer and decimal columns and for tables the
// Schema does not know. A text column takes text with printable ASCII only, not starting like a
// number (an integer- or double-bound parameter compares numerically: '42abc' = 42), compared
// case-insensitively with trailing spaces ignored: it is lower-cased and right-trimmed. Anything
// else (dates, YEAR, JSON, hex and bit literals, NULL, expressions) is an unknown value: a reader
// pinning by it falls back to the next rule, a writer storing it invalidates vals:T:C.
//
// Known limits: views are mapped to their tables only when the Schema parsed their CREATE VIEW
// (else a view is read as a table of that name); stored functions called by a statement (and
// triggers, and sequences) may touch tables the statement does not name; a table missing from the
// Schema is assumed keyed by `id`, and in a correlated subquery an unqualified column of such a
// table is assumed to be its own; SELECT ... INTO @v then reading @v elsewhere is only as sound as
// the read of that SELECT (the variable carries no dependency of its own).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sqldeps/lexer.h"
#include "sqldeps/schema.h"

namespace tierce::sqldeps {

// A parameter value as PHP bound it: text (ints as decimal) or unknown (NULL, blob, object).
using Value = std::optional<std::string>;
struct Params {
  std::vector<Value> positional;                      // for `?` in order
  std::vector<std::pair<std::string, Value>> named;  // PDO `:name` (name without ':')
};

enum class Kind : uint8_t {
  Read,
  Write,
  Begin,
  Commit,
  Rollback,
  Savepoint,  // SAVEPOINT x, RELEASE SAVEPOINT x
  RollbackToSavepoint,
  Neutral,  // SET, SHOW, USE, DO, EXPLAIN, DESCRIBE, HELP, ...
  Unknown,  // may read or write anything: invalidate_all and uncacheable
};
enum class Precision : uint8_t {
  Exact,         // row / value level
  TableLevel,    // some table is named as a whole
  Conservative,  // invalidate-all or uncacheable
};
const char* to_string(Kind k);
const char* to_string(Precision p);

namespace detail {
// Where a compared or stored value comes from; canonicalized by the column's type.
struct ValueRef {
  enum class Source : uint8_t { Unknown, Literal, Positional, Named };
  Source source = Source::Unknown;
  ColumnType type = ColumnType::Other;
  uint32_t index = 0;   // Positional: the `?` number; Named: index in Compiled::param_names
  std::string literal;  // Literal: the value's name part already (canonical, encoded)
};
// One table reference of a read, with what each of the three reader rules needs.
struct ReadTable {
  std::string row_prefix;          // "row:T:"
  std::string rows;                // "rows:T"
  std::string table;               // "table:T"
  bool keyed = false;              // rule 1 possible: `key` has one value per primary-key column
  std::vector<ValueRef> key;
  struct Pin {
    std::string val_prefix;  // "val:T:C:"
    std::string vals;        // "vals:T:C"
    ValueRef value;
  };
  std::vector<Pin> pins;             // rule 2 candidates, in WHERE order
  std::vector<std::string> columns;  // "col:T:X" ("col:T:*") for rules 2 and 3
};
// What a write invalidates: `fixed` always; per row either row:T:K (all key values known) or
// rows:T; per row and column either val:T:C:V or vals:T:C.
struct WritePlan {
  std::vector<std::string> fixed;
  std::string row_prefix, rows;                // of the single keyed table
  std::vector<std::vector<ValueRef>> keys;     // per row; empty vector: rows:T
  std::vector<std::pair<std::string, std::string>> value_columns;  // ("val:T:C:", "vals:T:C")
  std::vector<std::vector<ValueRef>> values;  // per row, parallel to value_columns
  // UPDATE / DELETE of keyed rows: per schema column (ident C, "val:T:C:", "vals:T:C") what the
  // row held (RowFacts, else vals), and the values SET gives (index into row_columns).
  std::string table;  // ident T of the keyed table
  struct RowColumn {
    std::string column, val_prefix, vals;
  };
  std::vector<RowColumn> row_columns;
  std::vector<std::pair<size_t, ValueRef>> set_values;
  bool deletes = false;  // a DELETE (the keyed row is gone afterwards)
};
// The base tables a query reads (lower-cased; CTEs and derived tables excluded), or nullopt when
// the query cannot be read. For Schema's CREATE VIEW.
std::optional<std::vector<std::string>> tables_of_query(const std::vector<Token>& tokens, size_t b,
                                                        size_t e);
}  // namespace detail

// One compiled statement: a template whose parameters derive() fills.
struct Statement {
  Kind kind = Kind::Unknown;
  Precision precision = Precision::Conservative;
  std::string reason;                // why not Exact, in words
  std::optional<bool> autocommit;    // SET autocommit = 0|1|ON|OFF (Kind::Neutral)
  bool invalidate_all = false;       // a write it cannot bound
  bool uncacheable = false;          // a read it cannot bound
  std::vector<detail::ReadTable> reads;
  detail::WritePlan write;
  // A locking read (FOR UPDATE, FOR SHARE, LOCK IN SHARE MODE) of one table keyed by its primary
  // key whose select list is plain columns: the result row's values are facts about that row
  // until the transaction ends (Derived::locked_row, RowFacts).
  bool locking = false;
  std::vector<std::pair<std::string, ColumnType>> fact_columns;  // result name (= column ident)
};

struct Compiled {
  std::vector<Statement> statements;
  size_t param_count = 0;                // `?` in the whole text
  std::vector<std::string> param_names;  // distinct `:name`s, first use first
};

// Splits on ';' outside strings/comments, tokenizes, classifies. Never throws on any input.
Compiled compile(std::string_view sql, const Schema& schema);

// What a caller knows of rows a write may change: the value part (as in val:T:C:V) of column C
// (ident) of the row of table T (ident) keyed K (the part after "row:T:"), or nullptr. Only facts
// that cannot change before the write commits (a locking read in the same open transaction).
class RowFacts {
 public:
  virtual ~RowFacts() = default;
  virtual const std::string* value(std::string_view table, std::string_view key,
                                   std::string_view column) const = 0;
};

// The row a locking read pinned (Statement::locking): its table and key as names use them, and
// the columns of its result that are facts about it.
struct LockedRow {
  std::string table, key;
  const std::vector<std::pair<std::string, ColumnType>>* columns = nullptr;
};

// A write keyed by a primary key: which row of which table (for callers that keep RowFacts up to
// date: after the write, the SET columns hold `set` values, or unknown values when nullopt).
struct WrittenRow {
  std::string table, key;
  bool deleted = false;
  std::vector<std::pair<std::string, std::optional<std::string>>> set;  // column ident, value
};

struct Derived {
  std::vector<std::string> depends;      // for reads
  std::vector<std::string> invalidates;  // for writes
  bool invalidate_all = false;  // a write it cannot bound (DDL, CALL, TRUNCATE, LOAD DATA, ...)
  bool uncacheable = false;     // a read it cannot bound: the page must not be cached
  std::vector<LockedRow> locked;      // locking reads keyed by a primary key
  std::vector<WrittenRow> written;    // keyed UPDATE / DELETE rows
  std::vector<std::string> unkeyed_writes;  // tables written by rows it cannot name (ident)
};

// The value part of a fact: `raw` as a result row holds it, canonical for a column of `type`
// (nullopt: not a value names trust, e.g. dates, NULL).
std::optional<std::string> fact_value(std::string_view raw, ColumnType type);

// Appends the names of every statement of `c` with `params` substituted (deduplicated within
// `out`). A parameter missing from `params` counts as unknown.
void derive(const Compiled& c, const Params& params, Derived& out,
            const RowFacts* facts = nullptr);
// The same for statement `statement` of `c` only (callers that follow transactions statement by
// statement: BEGIN; UPDATE ...; COMMIT in one multi-statement text).
void derive(const Compiled& c, size_t statement, const Params& params, Derived& out,
            const RowFacts* facts = nullptr);

}  // namespace tierce::sqldeps
