// sqldeps/scanner.h — internal (not installed): the query scanner under compile() (deps.h). A
// tolerant recursive descent over MySQL's query syntax, run on the tokens of one statement
// (lexer.h), that records only what the reader rules need: the table references of each query
// block (with aliases, derived tables and CTEs told apart), every column reference, each block's
// WHERE range, and the equalities of a WHERE's top-level AND. What it cannot read sets `ok` to
// false with an `error` in words; it never throws on its input and never reads past its range.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sqldeps/deps.h"
#include "sqldeps/lexer.h"
#include "sqldeps/names.h"
#include "sqldeps/schema.h"

namespace tierce::sqldeps::detail {

bool in_list(std::string_view w, std::initializer_list<std::string_view> l);
// Reserved in both MySQL 8 and MariaDB 10/11: never a bare column, alias or table name. Words not
// here may be columns, so they are (harmlessly, at worst) read as column references.
bool reserved(std::string_view w);
// Words that end an expression or a table list at the current level.
bool clause_word(std::string_view w);

struct TableRef {
  std::string name;   // base table, lower-cased ("" when derived)
  std::string alias;  // what columns are qualified with (alias or name), lower-cased
  int block = -1;
  bool derived = false;  // derived table, CTE, JSON_TABLE: its columns come from scanned queries
  bool star = false;     // read as a whole (a view's base table)
};
struct ColRef {
  std::string qual;  // table or alias, lower-cased; "" when unqualified
  std::string name;  // lower-cased; "" for `*`
  int block = -1;
};
struct Block {
  size_t where_b = 0, where_e = 0;
  bool has_where = false;
  bool star_all = false;  // unqualified `*` or NATURAL JOIN: every table of the block, `*`
};
// A value as written, before the column's type canonicalizes it.
struct RawValue {
  ValueRef::Source source = ValueRef::Source::Unknown;
  uint32_t index = 0;
  std::string text;
};
struct PinRef {
  size_t table;  // index in Scanner::tables
  std::string column;
  RawValue value;
};

// Scans tokens [b, e) of `t` from `i` on; the statement compiler drives it clause by clause
// (query(), table_refs(), expr(), ...) and reads what it recorded. `schema` may be null (no
// column is then known to belong to a table); `param_names` collects the distinct `:name`s.
class Scanner {
 public:
  Scanner(const std::vector<Token>& t, size_t b, size_t e, const Schema* schema,
          std::vector<std::string>* param_names)
      : i(b), t_(t), e_(e), schema_(schema), names_(param_names) {}

  std::vector<TableRef> tables;
  std::vector<ColRef> cols;
  std::vector<Block> blocks;
  bool locking = false;  // FOR UPDATE / FOR SHARE / LOCK IN SHARE MODE seen
  bool ok = true;
  std::string error;
  size_t i;

  bool done() const { return i >= e_; }
  const Token& tok(size_t k) const { return k < e_ ? t_[k] : end_token(); }
  const Token& cur() const { return tok(i); }
  bool word(std::string_view w) const { return cur().word(w); }
  bool op(std::string_view o) const { return cur().op(o); }

  // Records the first failure (with where it happened) and stops the scan.
  void fail(const std::string& why);
  bool expect_op(std::string_view o);
  bool expect_word(std::string_view w);
  bool accept(std::string_view w) {
    if (word(w)) {
      ++i;
      return true;
    }
    return false;
  }

  static bool is_name(const Token& t) {
    return (t.type == TokenType::Word && !reserved(t.text)) || t.type == TokenType::QuotedName;
  }
  static std::string name_of(const Token& t) { return lower_ascii(t.text); }

  int new_block() {
    blocks.emplace_back();
    return int(blocks.size() - 1);
  }

  // SELECT / WITH / (SELECT ...) at k.
  bool query_start(size_t k) const;
  // A query expression: [WITH ...] term {UNION|EXCEPT|INTERSECT term} [ORDER BY ...] [LIMIT ...].
  void query();
  // FROM / JOIN list of block `blk`, up to a word that is no part of it.
  void table_refs(int blk);
  // An expression (or a list of them) up to a clause word, a ')' or, with stop_at_comma, a ','.
  void expr(int blk, bool stop_at_comma);
  // The table list of a DELETE (t1, t2.*): names or aliases.
  std::vector<std::string> target_list();
  // A possibly qualified column at i: (qualifier, name); advances. nullopt (not advanced) if none.
  std::optional<std::pair<std::string, std::string>> column_name();
  // A literal, a signed number or a parameter at k (advances k past it), else Unknown (k kept).
  RawValue raw_value_at(size_t& k) const;
  bool is_value(size_t k) const;
  uint32_t named_index(const std::string& name) const;
  // Equalities of a WHERE range's top-level AND: (table ref, column, value).
  void pins(size_t b, size_t e, int blk, std::vector<PinRef>& out, int level = 0);
  // Index of the ')' matching the '(' at b, or e.
  size_t matching(size_t b, size_t e) const;
  // Qualified name exactly [k, ..) as column: returns end or k.
  size_t column_at(size_t k, size_t e, std::string& qual, std::string& name) const;
  void term_pin(size_t b, size_t e, int blk, std::vector<PinRef>& out);

  const TableInfo* info_of(const TableRef& r) const {
    return schema_ && !r.derived ? schema_->find(r.name) : nullptr;
  }

 private:
  const std::vector<Token>& t_;
  size_t e_;
  const Schema* schema_;
  std::vector<std::string>* names_;
  std::vector<std::string> ctes_;
  int depth_ = 0;

  struct Depth {
    Scanner& s;
    explicit Depth(Scanner& sc) : s(sc) {
      if (++s.depth_ > 150) s.fail("nested too deep");
    }
    ~Depth() { --s.depth_; }
  };

  static const Token& end_token() {
    static const Token t{TokenType::Semicolon, 0, -1, ";"};
    return t;
  }

  std::string near() const;
  void with_clause();
  void skip_parens();
  // SELECT block, (query), TABLE t or VALUES ROW(..): the block it made (or -1).
  int term();
  int select_block();
  // GROUP BY, HAVING, WINDOW, ORDER BY, LIMIT, INTO, FOR UPDATE, LOCK IN SHARE MODE, PROCEDURE.
  bool tail_clause(int blk);
  void tail_clauses(int last);
  void table_factor(int blk);
  void derived_alias(int blk);
  // Inside parentheses: anything, commas and clause words included, up to the matching ')'.
  void paren_expr(int blk);
  bool star_position() const;
  void blocks_star(int blk);
  void column_ref(int blk);
};

}  // namespace tierce::sqldeps::detail
