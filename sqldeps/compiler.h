// sqldeps/compiler.h — internal (not installed): compiles one statement of a text into a
// Statement (deps.h). compile() splits a text on ';' and runs one StatementCompiler per
// statement; the compiler picks the statement kind by its verb and drives a Scanner (scanner.h)
// over the clauses that kind has. What it cannot read makes a SELECT uncacheable and any other
// statement invalidate-all: never a guess.
//
// Files: compiler.cc (dispatch, SELECT, WITH, SET, EXPLAIN, transactions, DDL and the rest),
// compiler_reads.cc (from a scan to reader tables), compiler_writes.cc (INSERT, REPLACE, UPDATE,
// DELETE, and why the names each one invalidates are sound).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sqldeps/deps.h"
#include "sqldeps/lexer.h"
#include "sqldeps/scanner.h"
#include "sqldeps/schema.h"

namespace tierce::sqldeps::detail {

// A value as written, canonicalized for a column of `type` (a literal that is no value of that
// type becomes Unknown).
ValueRef make_ref(const RawValue& v, ColumnType type);
// The reader tables of what `s` scanned, into st.reads, with st.precision and st.reason.
void build_reads(Scanner& s, Statement& st);

// Compiles tokens [b, e) of `t` (one statement, no ';'); `names` collects the distinct `:name`
// parameters of the whole text (Compiled::param_names). Never throws on its input.
class StatementCompiler {
 public:
  StatementCompiler(const std::vector<Token>& t, size_t b, size_t e, const Schema& schema,
                    std::vector<std::string>& names)
      : t_(t), b_(b), e_(e), schema_(schema), names_(names) {}

  Statement run();

 private:
  struct InsertParts;  // compiler_writes.cc
  using SetList = std::vector<std::pair<std::string, std::string>>;  // (qualifier, column)

  const std::vector<Token>& t_;
  size_t b_, e_;
  const Schema& schema_;
  std::vector<std::string>& names_;

  static void conservative(Statement& st, Kind kind, std::string reason) {
    st.kind = kind;
    st.precision = Precision::Conservative;
    st.reason = std::move(reason);
    st.invalidate_all = kind != Kind::Read;
    st.uncacheable = kind != Kind::Write;
  }
  static void writes_all(Statement& st, std::string reason) {
    conservative(st, Kind::Write, std::move(reason));
  }

  bool word_at(size_t k, std::string_view w) const { return k < e_ && t_[k].word(w); }

  // compiler.cc
  void read(Statement& st, size_t from);
  // SELECT a, t.b, `c` FROM ...: result names that are the table's own columns.
  void plain_select_list(Statement& st, size_t from, const TableInfo* info);
  // WITH ... SELECT, or WITH ... UPDATE/DELETE (MySQL 8): the main verb after the CTEs decides.
  void with_statement(Statement& st);
  void finish_write(Statement& st, Scanner& s, bool exact, const std::string& why);
  void other(Statement& st, const std::string& w);
  // SET: neutral, with autocommit noted; SET @v = (SELECT ...) reads.
  void set(Statement& st);

  // compiler_writes.cc
  // Resolves SET targets `(qual, col)` of a multi-table UPDATE to table refs.
  void update(Statement& st, size_t b);
  void update_set_list(Scanner& s, SetList& set, std::vector<RawValue>& set_raw);
  void update_one_table(Statement& st, Scanner& s, const SetList& set,
                        const std::vector<RawValue>& set_raw, const std::vector<PinRef>& pins);
  void remove(Statement& st, size_t b);
  void insert(Statement& st, size_t b, bool replace);
  void insert_columns(Scanner& s, InsertParts& p);
  void insert_values(Scanner& s, InsertParts& p);
  void insert_set(Scanner& s, InsertParts& p);
  void insert_tail(Scanner& s, InsertParts& p);
  void insert_plan(Statement& st, Scanner& s, const InsertParts& p, bool replace);
  void insert_rows(WritePlan& w, const InsertParts& p, bool& exact, std::string& why);
};

}  // namespace tierce::sqldeps::detail
