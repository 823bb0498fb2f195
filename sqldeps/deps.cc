// sqldeps/deps.cc — the classifier and deriver (deps.h).
//
// compile(): tokens -> statements -> one Scanner per statement. The Scanner is a tolerant
// recursive descent over MySQL's query syntax that records only what the reader rules need: the
// table references of each query block (with aliases, derived tables and CTEs told apart), every
// column reference, and each block's WHERE range. What it cannot read makes a SELECT uncacheable
// and any other statement invalidate-all: never a guess.
//
// Why the writers are sound against the three reader rules (deps.h):
//   UPDATE T SET c.. WHERE k  row:T:K (rule 1 readers of that row) or rows:T (all rule 1
//                             readers); col:T:c / col:T:* (rule 2 and 3 readers that read c or
//                             `*`: a reader that reads no changed column sees no change, unless
//                             a changed column moves rows in or out of its value set:) vals:T:c.
//                             A changed key column moves a row between keys: rows:T, table:T.
//   INSERT                    table:T (rule 3); row:T:K or rows:T (rule 1); val:T:C:V or
//                             vals:T:C for every column (rule 2: the new row joins value V of C).
//   DELETE                    the same names for the rows it removes, by value unknown: vals:T:C.
//   REPLACE                   INSERT plus the DELETE of rows it cannot name (any unique key).
#include "sqldeps/deps.h"

#include <algorithm>
#include <unordered_set>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace tierce::sqldeps {

const char* to_string(Kind k) {
  switch (k) {
    case Kind::Read: return "read";
    case Kind::Write: return "write";
    case Kind::Begin: return "begin";
    case Kind::Commit: return "commit";
    case Kind::Rollback: return "rollback";
    case Kind::Savepoint: return "savepoint";
    case Kind::RollbackToSavepoint: return "rollback-to-savepoint";
    case Kind::Neutral: return "neutral";
    case Kind::Unknown: return "unknown";
  }
  return "?";
}

const char* to_string(Precision p) {
  switch (p) {
    case Precision::Exact: return "exact";
    case Precision::TableLevel: return "table-level";
    case Precision::Conservative: return "conservative";
  }
  return "?";
}

namespace {

using detail::ReadTable;
using detail::ValueRef;
using detail::WritePlan;

// ---- names -------------------------------------------------------------------------------------

bool plain_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '@' || c == '-';
}

std::string hashed(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  uint64_t h = XXH3_64bits(s.data(), s.size());
  std::string out(17, '~');
  for (int i = 0; i < 16; ++i) out[size_t(16 - i)] = kHex[(h >> (4 * i)) & 0xf];
  return out;
}

// A name part: as is when plain and short, else '~' + hash.
std::string encode(std::string_view s) {
  if (s.empty() || s.size() > 64) return hashed(s);
  for (unsigned char c : s)
    if (!plain_byte(c)) return hashed(s);
  return std::string(s);
}

std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return out;
}

std::string ident(std::string_view name) { return encode(lower_ascii(name)); }

// ---- canonical values (deps.h) -----------------------------------------------------------------

std::optional<std::string> integer_value(std::string_view s) {
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (i >= s.size()) return std::nullopt;
  for (size_t k = i; k < s.size(); ++k)
    if (s[k] < '0' || s[k] > '9') return std::nullopt;
  while (i + 1 < s.size() && s[i] == '0') ++i;
  std::string_view digits = s.substr(i);
  if (digits.size() > 15) return std::nullopt;
  if (digits == "0") return std::string("0");
  return neg ? "-" + std::string(digits) : std::string(digits);
}

std::optional<std::string> canonical(std::string_view raw, ColumnType type) {
  switch (type) {
    case ColumnType::Integer:
    case ColumnType::Other:
      return integer_value(raw);
    case ColumnType::Text: {
      size_t n = raw.size();
      while (n > 0 && raw[n - 1] == ' ') --n;
      std::string_view s = raw.substr(0, n);
      if (!s.empty()) {
        char c = s[0];
        if ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == ' ')
          return std::nullopt;
      }
      for (unsigned char c : s)
        if (c < 0x20 || c > 0x7e) return std::nullopt;
      return encode(lower_ascii(s));
    }
    case ColumnType::Opaque:
      return std::nullopt;
  }
  return std::nullopt;
}

// ---- the scanner ----------------------------------------------------------------------------------

bool in_list(std::string_view w, std::initializer_list<std::string_view> l) {
  for (auto x : l)
    if (w == x) return true;
  return false;
}

// Reserved in both MySQL 8 and MariaDB 10/11: never a bare column, alias or table name. Words not
// here may be columns, so they are (harmlessly, at worst) read as column references.
bool reserved(std::string_view w) {
  static const std::unordered_set<std::string_view> k = {
      "add", "all", "alter", "analyze", "and", "as", "asc", "before", "between", "bigint", "binary",
      "blob", "both", "by", "call", "cascade", "case", "change", "char", "character", "check",
      "collate", "column", "condition", "constraint", "continue", "convert", "create", "cross",
      "current_date", "current_time", "current_timestamp", "current_user", "cursor", "database",
      "databases", "day_hour", "day_microsecond", "day_minute", "day_second", "dec", "decimal",
      "declare", "default", "delayed", "delete", "desc", "describe", "deterministic", "distinct",
      "distinctrow", "div", "double", "drop", "dual", "each", "else", "elseif", "enclosed",
      "escaped", "exists", "exit", "explain", "false", "fetch", "float", "for", "force", "foreign",
      "from", "fulltext", "grant", "group", "having", "high_priority", "hour_microsecond",
      "hour_minute", "hour_second", "if", "ignore", "in", "index", "infile", "inner", "inout",
      "insensitive", "insert", "int", "integer", "interval", "into", "is", "iterate", "join", "key",
      "keys", "kill", "leading", "leave", "left", "like", "limit", "linear", "lines", "load",
      "localtime", "localtimestamp", "lock", "long", "longblob", "longtext", "loop",
      "low_priority", "match", "mediumblob", "mediumint", "mediumtext", "minute_microsecond",
      "minute_second", "mod", "modifies", "natural", "not", "no_write_to_binlog", "null", "numeric",
      "on", "optimize", "option", "optionally", "or", "order", "out", "outer", "outfile",
      "precision", "primary", "procedure", "purge", "range", "read", "reads", "real",
      "references", "regexp", "release", "rename", "repeat", "replace", "require", "restrict",
      "return", "revoke", "right", "rlike", "schema", "schemas", "second_microsecond", "select",
      "sensitive", "separator", "set", "show", "smallint", "spatial", "specific", "sql",
      "sqlexception", "sqlstate", "sqlwarning", "sql_big_result", "sql_calc_found_rows",
      "sql_small_result", "ssl", "starting", "straight_join", "table", "terminated", "then",
      "tinyblob", "tinyint", "tinytext", "to", "trailing", "trigger", "true", "undo", "union",
      "unique", "unlock", "unsigned", "update", "usage", "use", "using", "utc_date", "utc_time",
      "utc_timestamp", "values", "varbinary", "varchar", "varcharacter", "varying", "when",
      "where", "while", "with", "write", "xor", "year_month", "zerofill"};
  return k.count(w) != 0;
}

// Words that end an expression or a table list at the current level.
bool clause_word(std::string_view w) {
  static const std::unordered_set<std::string_view> k = {
      "from",  "where",     "group",   "having",  "order",   "limit",   "window",
      "union", "except",    "intersect", "into",  "for",     "lock",    "procedure",
      "on",    "using",     "join",    "inner",   "cross",   "left",    "right",
      "natural", "straight_join", "set", "values", "returning", "full"};
  return k.count(w) != 0;
}

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

  void fail(const std::string& why) {
    if (ok) {
      ok = false;
      error = why + near();
    }
    i = e_;
  }
  bool expect_op(std::string_view o) {
    if (op(o)) {
      ++i;
      return true;
    }
    fail("expected '" + std::string(o) + "'");
    return false;
  }
  bool expect_word(std::string_view w) {
    if (word(w)) {
      ++i;
      return true;
    }
    fail("expected " + std::string(w));
    return false;
  }
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
  bool query_start(size_t k) const {
    while (tok(k).op("(")) ++k;
    return tok(k).word("select") || tok(k).word("with");
  }

  // A query expression: [WITH ...] term {UNION|EXCEPT|INTERSECT term} [ORDER BY ...] [LIMIT ...].
  void query() {
    Depth d(*this);
    if (!ok) return;
    size_t ctes_before = ctes_.size();
    if (word("with")) with_clause();
    int last = term();
    while (ok && (word("union") || word("except") || word("intersect"))) {
      ++i;
      if (!accept("all")) accept("distinct");
      last = term();
    }
    tail_clauses(last);
    ctes_.resize(ctes_before);
  }

  // FROM / JOIN list of block `blk`, up to a word that is no part of it.
  void table_refs(int blk) {
    Depth d(*this);
    table_factor(blk);
    while (ok) {
      if (op(",")) {
        ++i;
        table_factor(blk);
        continue;
      }
      bool joined = false;
      while (!done() && cur().type == TokenType::Word &&
             in_list(cur().text, {"natural", "inner", "cross", "left", "right", "outer", "full",
                                  "straight_join", "join"})) {
        if (cur().text == "natural") blocks[size_t(blk)].star_all = true;
        bool is_join = cur().text == "join" || cur().text == "straight_join";
        ++i;
        if (is_join) {
          joined = true;
          break;
        }
      }
      if (!joined) return;
      table_factor(blk);
      while (ok && (word("on") || word("using"))) {
        if (accept("on")) {
          expr(blk, true);
        } else {
          ++i;
          if (!expect_op("(")) return;
          while (ok && !op(")")) {
            if (is_name(cur())) cols.push_back({"", name_of(cur()), blk});
            else if (!op(",")) return fail("expected a column in USING");
            ++i;
          }
          expect_op(")");
        }
      }
    }
  }

  // An expression (or a list of them) up to a clause word, a ')' or, with stop_at_comma, a ','.
  void expr(int blk, bool stop_at_comma) {
    Depth d(*this);
    while (ok && !done()) {
      const Token& t = cur();
      if (t.op(")")) return;
      if (t.op(",") && stop_at_comma) return;
      if (t.type == TokenType::Error) return fail("unreadable token");
      if (t.type == TokenType::Word && clause_word(t.text) &&
          !(tok(i + 1).op("(") && in_list(t.text, {"left", "right", "values", "insert", "replace"})))
        return;
      if (t.op("(")) {
        ++i;
        if (query_start(i)) {
          query();
        } else {
          paren_expr(blk);
        }
        expect_op(")");
        continue;
      }
      if (t.type == TokenType::Word && tok(i + 1).op("(")) {  // a function
        ++i;
        continue;
      }
      if (t.op("*")) {
        if (star_position()) blocks_star(blk);
        ++i;
        continue;
      }
      if (is_name(t)) {
        if (i > 0 && tok(i - 1).word("as")) {  // an alias
          ++i;
          continue;
        }
        column_ref(blk);
        continue;
      }
      ++i;
    }
  }

  // The table list of a DELETE (t1, t2.*): names or aliases.
  std::vector<std::string> target_list() {
    std::vector<std::string> out;
    while (ok && is_name(cur())) {
      std::string n = name_of(cur());
      ++i;
      while (op(".") && (is_name(tok(i + 1)) || tok(i + 1).op("*"))) {
        if (!tok(i + 1).op("*")) n = name_of(tok(i + 1));
        i += 2;
      }
      out.push_back(n);
      if (!op(",")) break;
      ++i;
    }
    if (out.empty()) fail("expected a table name");
    return out;
  }

  // A possibly qualified column at i: (qualifier, name); advances. nullopt (not advanced) if none.
  std::optional<std::pair<std::string, std::string>> column_name() {
    if (!is_name(cur())) return std::nullopt;
    std::vector<std::string> parts{name_of(cur())};
    size_t k = i + 1;
    while (tok(k).op(".") && is_name(tok(k + 1)) && parts.size() < 3) {
      parts.push_back(name_of(tok(k + 1)));
      k += 2;
    }
    i = k;
    std::string qual = parts.size() >= 2 ? parts[parts.size() - 2] : "";
    return std::make_pair(qual, parts.back());
  }

  RawValue raw_value_at(size_t& k) const {
    RawValue v;
    const Token& t = tok(k);
    if (t.type == TokenType::Param) {
      v.source = ValueRef::Source::Positional;
      v.index = uint32_t(t.param);
      ++k;
    } else if (t.type == TokenType::NamedParam) {
      v.source = ValueRef::Source::Named;
      v.index = named_index(t.text);
      ++k;
    } else if (t.type == TokenType::Number || t.type == TokenType::String) {
      v.source = ValueRef::Source::Literal;
      v.text = t.text;
      ++k;
    } else if ((t.op("-") || t.op("+")) && tok(k + 1).type == TokenType::Number) {
      v.source = ValueRef::Source::Literal;
      v.text = (t.op("-") ? "-" : "") + tok(k + 1).text;
      k += 2;
    } else {
      return v;  // Unknown, not advanced
    }
    return v;
  }
  bool is_value(size_t k) const {
    size_t j = k;
    return raw_value_at(j).source != ValueRef::Source::Unknown;
  }

  uint32_t named_index(const std::string& name) const {
    for (size_t j = 0; j < names_->size(); ++j)
      if ((*names_)[j] == name) return uint32_t(j);
    names_->push_back(name);
    return uint32_t(names_->size() - 1);
  }

  // Equalities of a WHERE range's top-level AND: (table ref, column, value).
  void pins(size_t b, size_t e, int blk, std::vector<PinRef>& out, int level = 0) {
    if (level > 32) return;
    std::vector<std::pair<size_t, size_t>> terms;
    int depth = 0, cases = 0, betweens = 0;
    size_t start = b;
    for (size_t k = b; k < e; ++k) {
      const Token& t = t_[k];
      if (t.op("(")) ++depth;
      else if (t.op(")")) --depth;
      if (depth != 0) continue;
      if (t.word("case")) ++cases;
      else if (t.word("end") && cases > 0) --cases;
      if (cases != 0) continue;
      if (t.word("between")) ++betweens;
      if (t.word("or") || t.word("xor") || t.op("||")) return;  // a disjunction pins nothing
      if (t.word("and") || t.op("&&")) {
        if (betweens > 0) {
          --betweens;
          continue;
        }
        terms.emplace_back(start, k);
        start = k + 1;
      }
    }
    terms.emplace_back(start, e);
    for (auto [tb, te] : terms) {
      if (te > tb + 1 && t_[tb].op("(") && matching(tb, te) == te - 1) {
        pins(tb + 1, te - 1, blk, out, level + 1);
        continue;
      }
      term_pin(tb, te, blk, out);
    }
  }

  // Index of the ')' matching the '(' at b, or e.
  size_t matching(size_t b, size_t e) const {
    int depth = 0;
    for (size_t k = b; k < e; ++k) {
      if (t_[k].op("(")) ++depth;
      if (t_[k].op(")") && --depth == 0) return k;
    }
    return e;
  }

  // Qualified name exactly [k, ..) as column: returns end or k.
  size_t column_at(size_t k, size_t e, std::string& qual, std::string& name) const {
    if (k >= e || !is_name(t_[k])) return k;
    std::vector<std::string> parts{name_of(t_[k])};
    size_t j = k + 1;
    while (j + 1 < e && t_[j].op(".") && is_name(t_[j + 1]) && parts.size() < 3) {
      parts.push_back(name_of(t_[j + 1]));
      j += 2;
    }
    if (j < e && t_[j].op("(")) return k;  // a function
    name = parts.back();
    qual = parts.size() >= 2 ? parts[parts.size() - 2] : "";
    return j;
  }

  void term_pin(size_t b, size_t e, int blk, std::vector<PinRef>& out) {
    std::string qual, name;
    RawValue v;
    size_t k = column_at(b, e, qual, name);
    if (k > b) {  // col = v | col <=> v | col IN (v)
      if (k < e && (t_[k].op("=") || t_[k].op("<=>"))) {
        size_t j = k + 1;
        v = raw_value_at(j);
        if (j != e) return;
      } else if (k + 1 < e && t_[k].word("in") && t_[k + 1].op("(")) {
        size_t j = k + 2;
        v = raw_value_at(j);
        if (!(j + 1 == e && t_[j].op(")"))) return;
      } else {
        return;
      }
    } else {  // v = col
      size_t j = b;
      v = raw_value_at(j);
      if (v.source == ValueRef::Source::Unknown || j >= e || !t_[j].op("=")) return;
      if (column_at(j + 1, e, qual, name) != e) return;
    }
    if (v.source == ValueRef::Source::Unknown) return;
    // Which table of the block the column belongs to.
    std::vector<size_t> mine;
    for (size_t r = 0; r < tables.size(); ++r)
      if (tables[r].block == blk) mine.push_back(r);
    std::optional<size_t> owner;
    if (!qual.empty()) {
      for (size_t r : mine)
        if (tables[r].alias == qual) {
          if (owner) return;  // ambiguous
          owner = r;
        }
    } else if (mine.size() == 1) {
      owner = mine[0];
      const TableInfo* info = info_of(tables[*owner]);
      if (info && info->column_index(name) < 0) return;  // an outer query's column
    } else {
      for (size_t r : mine) {
        const TableInfo* info = info_of(tables[r]);
        if (!info) return;  // unknown columns: cannot tell whose it is
        if (info->column_index(name) >= 0) {
          if (owner) return;
          owner = r;
        }
      }
    }
    if (!owner || tables[*owner].derived || tables[*owner].star) return;
    out.push_back({*owner, name, std::move(v)});
  }

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

  std::string near() const {
    if (done()) return " at the end";
    return " near '" + cur().text.substr(0, 32) + "'";
  }

  void with_clause() {
    ++i;
    bool recursive = accept("recursive");
    for (;;) {
      if (!is_name(cur())) return fail("expected a CTE name");
      std::string name = name_of(cur());
      ++i;
      if (op("(")) skip_parens();
      if (!expect_word("as")) return;
      if (recursive) ctes_.push_back(name);
      if (!expect_op("(")) return;
      query();
      if (!expect_op(")")) return;
      if (!recursive) ctes_.push_back(name);
      if (!op(",")) return;
      ++i;
    }
  }

  void skip_parens() {
    size_t m = matching(i, e_);
    if (m >= e_) return fail("unbalanced parentheses");
    i = m + 1;
  }

  // SELECT block, (query), TABLE t or VALUES ROW(..): the block it made (or -1).
  int term() {
    if (word("select")) return select_block();
    if (op("(")) {
      ++i;
      query();
      expect_op(")");
      return -1;
    }
    if (word("table")) {
      ++i;
      int blk = new_block();
      table_factor(blk);
      blocks[size_t(blk)].star_all = true;
      return blk;
    }
    if (word("values")) {
      ++i;
      int blk = new_block();
      expr(blk, false);
      return blk;
    }
    fail("expected SELECT");
    return -1;
  }

  int select_block() {
    ++i;
    int blk = new_block();
    expr(blk, false);  // select list (and modifiers)
    while (ok && !done()) {
      if (accept("from")) {
        table_refs(blk);
      } else if (accept("where")) {
        size_t b = i;
        expr(blk, false);
        blocks[size_t(blk)].where_b = b;
        blocks[size_t(blk)].where_e = i;
        blocks[size_t(blk)].has_where = true;
      } else if (!tail_clause(blk)) {
        break;
      }
    }
    return blk;
  }

  // GROUP BY, HAVING, WINDOW, ORDER BY, LIMIT, INTO, FOR UPDATE, LOCK IN SHARE MODE, PROCEDURE.
  bool tail_clause(int blk) {
    if (accept("group") || accept("order")) {
      expect_word("by");
      expr(blk, false);
    } else if (accept("having") || accept("window") || accept("limit") || accept("procedure")) {
      expr(blk, false);
    } else if (accept("into")) {
      expr(-1, false);  // @vars, OUTFILE 'f' ...: no columns of ours
    } else if (accept("for") || accept("lock")) {
      if (word("update") || word("share") || word("in")) locking = true;
      while (ok && !done() && (cur().type == TokenType::Word || cur().type == TokenType::QuotedName ||
                               op(",") || op(".")) &&
             !(cur().type == TokenType::Word && clause_word(cur().text) && cur().text != "for" &&
               cur().text != "lock"))
        ++i;
    } else {
      return false;
    }
    return true;
  }

  void tail_clauses(int last) {
    while (ok && !done() && tail_clause(last)) {
    }
  }

  void table_factor(int blk) {
    Depth d(*this);
    if (!ok) return;
    if (op("(") || word("lateral")) {
      accept("lateral");
      if (!op("(")) return fail("expected '('");
      if (query_start(i + 1)) {
        ++i;
        query();
        if (!expect_op(")")) return;
        derived_alias(blk);
      } else {
        ++i;
        table_refs(blk);
        expect_op(")");
      }
      return;
    }
    if (cur().type == TokenType::Word && tok(i + 1).op("(")) {  // JSON_TABLE(...) and the like
      ++i;
      ++i;
      paren_expr(blk);
      if (!expect_op(")")) return;
      derived_alias(blk);
      return;
    }
    if (!is_name(cur())) return fail("expected a table");
    bool qualified = tok(i + 1).op(".") && is_name(tok(i + 2));
    std::string name = name_of(cur());
    ++i;
    while (op(".") && is_name(tok(i + 1))) {
      name = name_of(tok(i + 1));
      i += 2;
    }
    if (accept("partition")) {
      if (op("(")) skip_parens();
    }
    std::string alias = name;
    if (accept("as")) {
      if (!is_name(cur())) return fail("expected an alias");
      alias = name_of(cur());
      ++i;
    } else if (is_name(cur()) && !(cur().type == TokenType::Word && clause_word(cur().text))) {
      alias = name_of(cur());
      ++i;
    }
    // Index hints: USE|IGNORE|FORCE INDEX|KEY [FOR JOIN|ORDER BY|GROUP BY] (list).
    while (ok && (word("use") || word("ignore") || word("force")) &&
           (tok(i + 1).word("index") || tok(i + 1).word("key"))) {
      i += 2;
      if (accept("for")) {
        if (!accept("join")) {
          if (!accept("order")) accept("group");
          accept("by");
        }
      }
      if (!op("(")) return fail("expected '(' after an index hint");
      skip_parens();
    }
    if (name == "dual" && !qualified) return;
    bool is_cte = !qualified && std::find(ctes_.begin(), ctes_.end(), name) != ctes_.end();
    if (is_cte) {
      tables.push_back({"", alias, blk, true, false});
      return;
    }
    if (schema_) {
      if (auto* base = schema_->find_view(name)) {
        for (auto& b : *base) tables.push_back({b, alias, blk, false, true});
        if (base->empty()) tables.push_back({"", alias, blk, true, false});
        return;
      }
    }
    tables.push_back({name, alias, blk, false, false});
  }

  void derived_alias(int blk) {
    std::string alias;
    if (accept("as")) {
      if (!is_name(cur())) return fail("expected an alias");
    }
    if (is_name(cur()) && !(cur().type == TokenType::Word && clause_word(cur().text))) {
      alias = name_of(cur());
      ++i;
      if (op("(")) skip_parens();  // column names
    }
    tables.push_back({"", alias, blk, true, false});
  }

  // Inside parentheses: anything, commas and clause words included, up to the matching ')'.
  void paren_expr(int blk) {
    Depth d(*this);
    while (ok && !done() && !op(")")) {
      size_t before = i;
      expr(blk, false);
      if (ok && i == before) {
        if (op(")")) break;
        if (cur().type == TokenType::Error) return fail("unreadable token");
        ++i;  // a clause word used inside a function: EXTRACT(DAY FROM d), TRIM(x FROM y)
      }
    }
  }

  bool star_position() const {
    if (i == 0) return true;
    const Token& p = tok(i - 1);
    if (p.op(",")) return true;
    if (p.type == TokenType::Word)
      return in_list(p.text, {"select", "all", "distinct", "distinctrow", "high_priority",
                              "straight_join", "sql_small_result", "sql_big_result",
                              "sql_buffer_result", "sql_no_cache", "sql_cache",
                              "sql_calc_found_rows"});
    return false;
  }

  void blocks_star(int blk) {
    if (blk >= 0) blocks[size_t(blk)].star_all = true;
  }

  void column_ref(int blk) {
    std::vector<std::string> parts{name_of(cur())};
    ++i;
    bool star = false;
    while (op(".") && parts.size() < 3) {
      if (is_name(tok(i + 1))) {
        parts.push_back(name_of(tok(i + 1)));
        i += 2;
      } else if (tok(i + 1).op("*")) {
        star = true;
        i += 2;
        break;
      } else {
        break;
      }
    }
    if (op("(")) return;  // db.function(...)
    if (blk < 0) return;
    if (star) cols.push_back({parts.back(), "", blk});
    else cols.push_back({parts.size() >= 2 ? parts[parts.size() - 2] : "", parts.back(), blk});
  }
};

// ---- from a scan to reader tables ------------------------------------------------------------------

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

// ---- writes ------------------------------------------------------------------------------------

void add_unique(std::vector<std::string>& v, std::string s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(std::move(s));
}

// An UPDATE of `set` columns on rows of `table` it does not name: what every reader of them needs.
void unpinned_update(WritePlan& w, const std::string& table, const TableInfo* info,
                     const std::vector<std::string>& set, bool all_columns) {
  std::string T = ident(table);
  add_unique(w.fixed, "rows:" + T);
  add_unique(w.fixed, "col:" + T + ":*");
  static const std::vector<std::string> kId{"id"};
  const std::vector<std::string>& pk = info ? info->primary_key : kId;
  bool key_changed = all_columns;
  for (const auto& c : set) {
    add_unique(w.fixed, "col:" + T + ":" + ident(c));
    add_unique(w.fixed, "vals:" + T + ":" + ident(c));
    if (std::find(pk.begin(), pk.end(), c) != pk.end()) key_changed = true;
  }
  // Rows it does not name may hold any value of any column: every value-pinned reader of T.
  if (info)
    for (const auto& c : info->columns) add_unique(w.fixed, "vals:" + T + ":" + ident(c));
  if (key_changed) add_unique(w.fixed, "table:" + T);
}

void all_values(WritePlan& w, const std::string& T, const TableInfo* info) {
  if (info)
    for (const auto& c : info->columns) add_unique(w.fixed, "vals:" + T + ":" + ident(c));
}

// The schema columns a value-pinned reader of T may pin (all but a one-column primary key).
void keyed_row_columns(WritePlan& w, const std::string& T, const TableInfo* info) {
  w.table = T;
  if (!info) return;  // no schema: no value-pinned readers of T
  const auto& pk = info->primary_key;
  for (const auto& c : info->columns) {
    if (pk.size() == 1 && pk[0] == c) continue;
    std::string C = ident(c);
    w.row_columns.push_back({C, "val:" + T + ":" + C + ":", "vals:" + T + ":" + C});
  }
}

// Key values of the single table `r` from the pins, or empty when the key is not fully pinned.
std::vector<ValueRef> pinned_key(const std::vector<PinRef>& pins, size_t r, const TableInfo* info) {
  static const std::vector<std::string> kId{"id"};
  const std::vector<std::string>& pk = info ? info->primary_key : kId;
  std::vector<ValueRef> key;
  for (const auto& k : pk) {
    auto it = std::find_if(pins.begin(), pins.end(),
                           [&](const PinRef& p) { return p.table == r && p.column == k; });
    if (it == pins.end()) return {};
    key.push_back(make_ref(it->value, info ? info->type_of(k) : ColumnType::Other));
    if (key.back().source == ValueRef::Source::Unknown) return {};
  }
  return key;
}

class StatementCompiler {
 public:
  StatementCompiler(const std::vector<Token>& t, size_t b, size_t e, const Schema& schema,
                    std::vector<std::string>& names)
      : t_(t), b_(b), e_(e), schema_(schema), names_(names) {}

  Statement run() {
    Statement st;
    for (size_t k = b_; k < e_; ++k)
      if (t_[k].type == TokenType::Error) {
        conservative(st, Kind::Unknown,
                     t_[k].text.size() == 1 ? "a byte that is no SQL"
                                            : "unterminated string, quoted name or comment");
        return st;
      }
    size_t k = b_;
    while (k < e_ && t_[k].op("(")) ++k;
    const Token& first = t_[k < e_ ? k : b_];
    const std::string& w = first.type == TokenType::Word ? first.text : std::string();
    if (w == "select" || w == "table" || (w == "values" && k == b_)) {
      read(st, b_);
    } else if (w == "with") {
      with_statement(st);
    } else if (k != b_) {
      conservative(st, Kind::Unknown, "a parenthesized statement that is no SELECT");
    } else if (w == "insert" || w == "replace") {
      insert(st, b_, w == "replace");
    } else if (w == "update") {
      update(st, b_);
    } else if (w == "delete") {
      remove(st, b_);
    } else {
      other(st, w);
    }
    return st;
  }

 private:
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

  void read(Statement& st, size_t from) {
    st.kind = Kind::Read;
    Scanner s(t_, from, e_, &schema_, &names_);
    s.query();
    if (s.ok && !s.done()) s.fail("unexpected token");
    if (!s.ok) return conservative(st, Kind::Read, "unreadable SELECT: " + s.error);
    build_reads(s, st);
    if (s.locking && s.blocks.size() == 1 && st.reads.size() == 1 && st.reads[0].keyed)
      plain_select_list(st, from, s.info_of(s.tables[0]));
  }

  // SELECT a, t.b, `c` FROM ...: result names that are the table's own columns.
  void plain_select_list(Statement& st, size_t from, const TableInfo* info) {
    size_t k = from;
    if (!word_at(k, "select")) return;
    ++k;
    std::vector<std::pair<std::string, ColumnType>> cols;
    while (k < e_) {
      if (!(t_[k].type == TokenType::Word || t_[k].type == TokenType::QuotedName)) return;
      if (t_[k].type == TokenType::Word && reserved(t_[k].text)) return;
      std::string name = t_[k].text;
      ++k;
      if (k < e_ && t_[k].op(".")) {  // t.col
        ++k;
        if (k >= e_ || !(t_[k].type == TokenType::Word || t_[k].type == TokenType::QuotedName)) return;
        name = t_[k].text;
        ++k;
      }
      std::string low = lower_ascii(name);
      if (info && info->column_index(low) < 0) return;
      cols.emplace_back(ident(low), info ? info->type_of(low) : ColumnType::Other);
      if (word_at(k, "from")) break;
      if (!(k < e_ && t_[k].op(","))) return;
      ++k;
    }
    if (!word_at(k, "from")) return;
    st.locking = true;
    st.fact_columns = std::move(cols);
  }

  // WITH ... SELECT, or WITH ... UPDATE/DELETE (MySQL 8): the main verb after the CTEs decides.
  void with_statement(Statement& st) {
    int depth = 0;
    for (size_t k = b_; k < e_; ++k) {
      if (t_[k].op("(")) ++depth;
      if (t_[k].op(")")) --depth;
      if (depth != 0) continue;
      if (t_[k].word("select") || t_[k].word("table") || t_[k].op("(")) return read(st, b_);
      if (t_[k].word("update") || t_[k].word("delete") || t_[k].word("insert") ||
          t_[k].word("replace"))
        return writes_all(st, "WITH before a write: not analyzed");
    }
    read(st, b_);
  }

  void finish_write(Statement& st, Scanner& s, bool exact, const std::string& why) {
    if (!s.ok || !s.done()) {
      std::string e = s.ok ? "unexpected token" : s.error;
      st.write = WritePlan{};
      return writes_all(st, "unreadable " + std::string(t_[b_].text) + ": " + e);
    }
    st.kind = Kind::Write;
    st.precision = exact ? Precision::Exact : Precision::TableLevel;
    if (!exact) st.reason = why;
  }

  // Resolves SET targets `(qual, col)` of a multi-table UPDATE to table refs.
  void update(Statement& st, size_t b) {
    Scanner s(t_, b + 1, e_, &schema_, &names_);
    while (s.accept("low_priority") || s.accept("ignore")) {
    }
    int blk = s.new_block();
    s.table_refs(blk);
    if (!s.expect_word("set")) return finish_write(st, s, false, "");
    std::vector<std::pair<std::string, std::string>> set;
    std::vector<RawValue> set_raw;  // the value SET gives, when it is one literal or parameter
    while (s.ok) {
      auto c = s.column_name();
      if (!c) {
        s.fail("expected a column");
        break;
      }
      set.push_back(*c);
      if (!s.expect_op("=")) break;
      size_t vb = s.i;
      s.expr(-1, true);
      size_t j = vb;
      RawValue v = s.raw_value_at(j);
      set_raw.push_back(j == s.i ? v : RawValue{});
      if (!s.op(",")) break;
      ++s.i;
    }
    std::vector<PinRef> pins;
    if (s.accept("where")) {
      size_t wb = s.i;
      s.expr(-1, false);
      s.pins(wb, s.i, blk, pins);
    }
    while (s.ok && (s.accept("order") || s.accept("limit"))) {
      s.accept("by");
      s.expr(-1, false);
    }
    if (!s.ok || !s.done()) return finish_write(st, s, false, "");
    WritePlan& w = st.write;
    std::vector<size_t> refs;
    for (size_t r = 0; r < s.tables.size(); ++r)
      if (!s.tables[r].derived) refs.push_back(r);
    if (refs.size() == 1 && s.tables.size() == 1 && !s.tables[0].star) {
      const TableRef& t = s.tables[0];
      const TableInfo* info = s.info_of(t);
      std::string T = ident(t.name);
      std::vector<std::string> cols;
      for (auto& c : set) cols.push_back(c.second);
      std::vector<ValueRef> key = pinned_key(pins, 0, info);
      unpinned_update(w, t.name, info, cols, false);
      bool key_changed = std::find(w.fixed.begin(), w.fixed.end(), "table:" + T) != w.fixed.end();
      if (!key.empty() && !key_changed) {  // the row is named: rows:T is not needed
        w.fixed.erase(std::find(w.fixed.begin(), w.fixed.end(), "rows:" + T));
        if (info)  // value-pinned readers: by the row's values (derive), not every value
          w.fixed.erase(std::remove_if(w.fixed.begin(), w.fixed.end(),
                                       [&](const std::string& n) {
                                         return n.rfind("vals:" + T + ":", 0) == 0;
                                       }),
                        w.fixed.end());
        w.row_prefix = "row:" + T + ":";
        w.rows = "rows:" + T;
        w.keys.push_back(std::move(key));
        keyed_row_columns(w, T, info);
        for (size_t j = 0; j < set.size() && j < set_raw.size(); ++j) {
          std::string C = ident(set[j].second);
          for (size_t x = 0; x < w.row_columns.size(); ++x)
            if (w.row_columns[x].column == C)
              w.set_values.emplace_back(x, make_ref(set_raw[j], info ? info->type_of(set[j].second)
                                                                     : ColumnType::Other));
        }
        return finish_write(st, s, true, "");
      }
      return finish_write(st, s, false,
                          key_changed ? "UPDATE of a key column" : "UPDATE not keyed by its primary key");
    }
    // Several tables: each one SET may reach, as an update of rows it does not name.
    for (size_t r : refs) {
      const TableRef& t = s.tables[r];
      const TableInfo* info = s.info_of(t);
      std::vector<std::string> cols;
      bool unknown = t.star;
      for (auto& [qual, col] : set) {
        bool mine = false;
        if (!qual.empty()) {
          bool resolved = false;
          for (size_t q = 0; q < s.tables.size(); ++q)
            if (s.tables[q].alias == qual) resolved = true;
          mine = resolved ? t.alias == qual : true;
        } else {
          mine = !info || info->column_index(col) >= 0;
        }
        if (mine) cols.push_back(col);
      }
      if (cols.empty() && !unknown) continue;
      unpinned_update(w, t.name, info, cols, unknown);
    }
    finish_write(st, s, false, "multi-table UPDATE");
  }

  void remove(Statement& st, size_t b) {
    Scanner s(t_, b + 1, e_, &schema_, &names_);
    while (s.accept("low_priority") || s.accept("quick") || s.accept("ignore")) {
    }
    int blk = s.new_block();
    std::vector<std::string> targets;
    bool multi = false;
    if (s.accept("from")) {
      bool using_form = false;
      int depth = 0;
      for (size_t k = s.i; k < e_; ++k) {
        if (t_[k].op("(")) ++depth;
        if (t_[k].op(")")) --depth;
        if (depth == 0 && t_[k].word("using")) using_form = true;
      }
      if (using_form) {
        targets = s.target_list();
        s.expect_word("using");
        multi = true;
      }
      s.table_refs(blk);
    } else {
      targets = s.target_list();
      s.expect_word("from");
      s.table_refs(blk);
      multi = true;
    }
    std::vector<PinRef> pins;
    if (s.accept("where")) {
      size_t wb = s.i;
      s.expr(-1, false);
      s.pins(wb, s.i, blk, pins);
    }
    while (s.ok && (s.accept("order") || s.accept("limit") || s.accept("returning"))) {
      s.accept("by");
      s.expr(-1, false);
    }
    if (!s.ok || !s.done()) return finish_write(st, s, false, "");
    WritePlan& w = st.write;
    if (!multi && s.tables.size() == 1 && !s.tables[0].derived && !s.tables[0].star) {
      const TableRef& t = s.tables[0];
      const TableInfo* info = s.info_of(t);
      std::string T = ident(t.name);
      add_unique(w.fixed, "table:" + T);
      std::vector<ValueRef> key = pinned_key(pins, 0, info);
      w.row_prefix = "row:" + T + ":";
      w.rows = "rows:" + T;
      bool exact = !key.empty();
      w.deletes = true;
      if (exact) keyed_row_columns(w, T, info);  // the row's values: derive
      else all_values(w, T, info);
      w.keys.push_back(std::move(key));
      return finish_write(st, s, exact, "DELETE not keyed by its primary key");
    }
    std::vector<size_t> refs;
    for (size_t r = 0; r < s.tables.size(); ++r) {
      if (s.tables[r].derived) continue;
      bool target = !multi;
      for (auto& n : targets)
        if (s.tables[r].alias == n || s.tables[r].name == n) target = true;
      if (target) refs.push_back(r);
    }
    if (refs.empty())  // targets we could not resolve: every table
      for (size_t r = 0; r < s.tables.size(); ++r)
        if (!s.tables[r].derived) refs.push_back(r);
    for (size_t r : refs) {
      const TableRef& t = s.tables[r];
      std::string T = ident(t.name);
      add_unique(w.fixed, "rows:" + T);
      add_unique(w.fixed, "table:" + T);
      all_values(w, T, s.info_of(t));
    }
    finish_write(st, s, false, "multi-table DELETE");
  }

  void insert(Statement& st, size_t b, bool replace) {
    Scanner s(t_, b + 1, e_, &schema_, &names_);
    while (s.accept("low_priority") || s.accept("delayed") || s.accept("high_priority") ||
           s.accept("ignore")) {
    }
    s.accept("into");
    auto target = s.column_name();  // db.table reads as (db, table)
    if (!target) {
      s.fail("expected a table");
      return finish_write(st, s, false, "");
    }
    std::string table = target->second;
    if (s.accept("partition") && s.op("(")) {
      size_t m = s.matching(s.i, e_);
      s.i = m < e_ ? m + 1 : e_;
    }
    std::vector<std::string> cols;
    bool have_cols = false;
    if (s.op("(") && !s.query_start(s.i + 1)) {
      ++s.i;
      have_cols = true;
      while (s.ok && !s.op(")")) {
        auto c = s.column_name();
        if (!c) {
          s.fail("expected a column");
          break;
        }
        cols.push_back(c->second);
        if (!s.op(",")) break;
        ++s.i;
      }
      s.expect_op(")");
    }
    std::vector<std::vector<RawValue>> rows;
    bool from_query = false;
    if (s.accept("values") || s.accept("value")) {
      for (;;) {
        s.accept("row");
        if (!s.expect_op("(")) break;
        std::vector<RawValue> row;
        while (s.ok && !s.op(")")) {
          size_t k = s.i;
          RawValue v = s.raw_value_at(k);
          if (v.source != ValueRef::Source::Unknown && (s.tok(k).op(",") || s.tok(k).op(")"))) {
            s.i = k;
          } else {
            v = RawValue{};
            s.expr(-1, true);
          }
          row.push_back(std::move(v));
          if (!s.op(",")) break;
          ++s.i;
        }
        s.expect_op(")");
        rows.push_back(std::move(row));
        if (!s.ok || !s.op(",")) break;
        ++s.i;
      }
    } else if (s.accept("set")) {
      have_cols = true;
      std::vector<RawValue> row;
      while (s.ok) {
        auto c = s.column_name();
        if (!c) {
          s.fail("expected a column");
          break;
        }
        cols.push_back(c->second);
        if (!s.expect_op("=")) break;
        size_t k = s.i;
        RawValue v = s.raw_value_at(k);
        if (v.source != ValueRef::Source::Unknown &&
            (k >= e_ || s.tok(k).op(",") || s.tok(k).word("on") || s.tok(k).word("returning"))) {
          s.i = k;
        } else {
          v = RawValue{};
          s.expr(-1, true);
        }
        row.push_back(std::move(v));
        if (!s.op(",")) break;
        ++s.i;
      }
      rows.push_back(std::move(row));
    } else if (s.query_start(s.i) || s.word("table")) {
      from_query = true;
      if (s.accept("table")) s.target_list();
      else s.query();
    } else {
      s.fail("expected VALUES, SET or SELECT");
    }
    if (s.accept("as")) {  // INSERT ... VALUES (...) AS new [(cols)]
      if (Scanner::is_name(s.cur())) ++s.i;
      if (s.op("(")) {
        size_t m = s.matching(s.i, e_);
        s.i = m < e_ ? m + 1 : e_;
      }
    }
    std::vector<std::string> on_dup;
    if (s.accept("on")) {
      if (s.expect_word("duplicate") && s.expect_word("key") && s.expect_word("update")) {
        while (s.ok) {
          auto c = s.column_name();
          if (!c) {
            s.fail("expected a column");
            break;
          }
          on_dup.push_back(c->second);
          if (!s.expect_op("=")) break;
          s.expr(-1, true);
          if (!s.op(",")) break;
          ++s.i;
        }
      }
    }
    if (s.accept("returning")) s.expr(-1, false);
    if (!s.ok || !s.done()) return finish_write(st, s, false, "");

    WritePlan& w = st.write;
    const TableInfo* info = schema_.find(table);
    std::string T = ident(table);
    if (schema_.find_view(table)) {
      for (auto& base : *schema_.find_view(table))
        unpinned_update(w, base, schema_.find(base), {}, true);
      return finish_write(st, s, false, "INSERT into a view");
    }
    add_unique(w.fixed, "table:" + T);
    bool exact = !from_query && on_dup.empty() && !replace;
    std::string why;
    if (from_query) {
      add_unique(w.fixed, "rows:" + T);
      all_values(w, T, info);
      why = "INSERT ... SELECT";
    } else {
      static const std::vector<std::string> kId{"id"};
      const std::vector<std::string>& pk = info ? info->primary_key : kId;
      w.row_prefix = "row:" + T + ":";
      w.rows = "rows:" + T;
      std::vector<std::string> value_cols;  // schema columns named by value
      if (info)
        for (const auto& c : info->columns)
          if (!(pk.size() == 1 && pk[0] == c)) value_cols.push_back(c);
      for (const auto& c : value_cols)
        w.value_columns.emplace_back("val:" + T + ":" + ident(c) + ":", "vals:" + T + ":" + ident(c));
      for (const auto& row : rows) {
        const std::vector<std::string>* names = have_cols ? &cols : info ? &info->columns : nullptr;
        bool usable = names && names->size() == row.size();
        auto value_of = [&](const std::string& c) -> ValueRef {
          if (!usable) return ValueRef{};
          for (size_t j = 0; j < names->size(); ++j)
            if ((*names)[j] == c)
              return make_ref(row[j], info ? info->type_of(c) : ColumnType::Other);
          return ValueRef{};  // not listed: its default
        };
        std::vector<ValueRef> key;
        for (const auto& k : pk) {
          key.push_back(value_of(k));
          if (key.back().source == ValueRef::Source::Unknown) {
            key.clear();
            break;
          }
        }
        if (key.empty()) {
          exact = false;
          why = "INSERT without its primary key";
        }
        w.keys.push_back(std::move(key));
        std::vector<ValueRef> vals;
        for (const auto& c : value_cols) vals.push_back(value_of(c));
        w.values.push_back(std::move(vals));
      }
    }
    if (!on_dup.empty()) {
      unpinned_update(w, table, info, on_dup, false);
      why = "INSERT ... ON DUPLICATE KEY UPDATE";
    }
    if (replace) {
      add_unique(w.fixed, "rows:" + T);
      add_unique(w.fixed, "col:" + T + ":*");
      all_values(w, T, info);
      why = "REPLACE deletes the rows it conflicts with";
    }
    finish_write(st, s, exact, why);
  }

  void other(Statement& st, const std::string& w) {
    auto neutral = [&] {
      st.kind = Kind::Neutral;
      st.precision = Precision::Exact;
    };
    auto simple = [&](Kind k) {
      st.kind = k;
      st.precision = Precision::Exact;
    };
    size_t n = e_ - b_;
    if (w == "begin") {
      if (word_at(b_ + 1, "not")) return conservative(st, Kind::Unknown, "BEGIN NOT ATOMIC block");
      return simple(Kind::Begin);
    }
    if (w == "start") {
      if (word_at(b_ + 1, "transaction")) return simple(Kind::Begin);
      return conservative(st, Kind::Unknown, "START " + (n > 1 ? t_[b_ + 1].text : std::string()));
    }
    if (w == "commit") return simple(Kind::Commit);
    if (w == "rollback") {
      for (size_t k = b_ + 1; k < e_; ++k)
        if (t_[k].word("to")) return simple(Kind::RollbackToSavepoint);
      return simple(Kind::Rollback);
    }
    if (w == "savepoint") return simple(Kind::Savepoint);
    if (w == "release" && word_at(b_ + 1, "savepoint")) return simple(Kind::Savepoint);
    if (w == "set") return set(st);
    if (in_list(w, {"show", "use", "do", "help", "describe", "desc", "prepare", "deallocate"}))
      return neutral();
    if (w == "unlock" && word_at(b_ + 1, "tables")) return neutral();
    if (w == "explain" || w == "analyze") {
      // EXPLAIN ANALYZE and MariaDB's ANALYZE <statement> run the statement.
      size_t k = b_ + 1;
      if (w == "explain") {
        if (!word_at(k, "analyze")) return neutral();
        ++k;
      } else if (word_at(k, "table") || word_at(k, "no_write_to_binlog") || word_at(k, "local")) {
        return neutral();
      }
      while (k < e_ && t_[k].word("format")) k += 3;  // FORMAT = TREE
      if (k >= e_) return neutral();
      StatementCompiler inner(t_, k, e_, schema_, names_);
      st = inner.run();
      if (st.kind != Kind::Write && st.kind != Kind::Unknown) {
        st = Statement{};
        neutral();
      }
      return;
    }
    if (w == "call") {
      st.kind = Kind::Write;
      st.precision = Precision::Conservative;
      st.reason = "CALL: stored procedure";
      st.invalidate_all = st.uncacheable = true;
      return;
    }
    if (w == "handler") {
      st.kind = Kind::Write;
      st.precision = Precision::Conservative;
      st.reason = "HANDLER: low-level table access";
      st.invalidate_all = st.uncacheable = true;
      return;
    }
    static constexpr std::string_view kWrites[] = {
        "truncate", "create", "alter",   "drop",  "rename", "load",    "lock",  "grant",
        "revoke",   "flush",  "optimize", "repair", "import", "install", "uninstall", "purge"};
    for (auto x : kWrites)
      if (w == x) {
        std::string up(w);
        for (auto& c : up) c = char(c - 'a' + 'A');
        return writes_all(st, up + ": may change any table");
      }
    conservative(st, Kind::Unknown,
                 w.empty() ? "not a statement it knows" : "unknown statement " + w);
  }

  // SET: neutral, with autocommit noted; SET @v = (SELECT ...) reads.
  void set(Statement& st) {
    st.kind = Kind::Neutral;
    st.precision = Precision::Exact;
    for (size_t k = b_ + 1; k < e_; ++k)
      if (t_[k].word("select")) {
        Scanner s(t_, b_ + 1, e_, &schema_, &names_);
        int blk = s.new_block();
        s.expr(blk, false);
        if (s.ok && !s.done()) s.fail("unexpected token");
        if (!s.ok) return conservative(st, Kind::Read, "unreadable SET: " + s.error);
        st.kind = Kind::Read;
        return build_reads(s, st);
      }
    int depth = 0;
    for (size_t k = b_ + 1; k + 2 < e_; ++k) {
      const Token& t = t_[k];
      if (t.op("(")) ++depth;
      if (t.op(")")) --depth;
      if (depth != 0) continue;
      bool is_ac = t.word("autocommit") ||
                   (t.type == TokenType::Variable &&
                    in_list(t.text, {"@@autocommit", "@@session.autocommit", "@@local.autocommit"}));
      if (!is_ac || !(t_[k + 1].op("=") || t_[k + 1].op(":="))) continue;
      const Token& v = t_[k + 2];
      std::string x = lower_ascii(v.text);
      if (x == "1" || x == "on" || x == "true") st.autocommit = true;
      else if (x == "0" || x == "off" || x == "false") st.autocommit = false;
    }
  }
};

// ---- derive ----------------------------------------------------------------------------------------

// Appends with dedup: linear while small, a hash set beyond.
class Appender {
 public:
  explicit Appender(std::vector<std::string>& v) : v_(v) {}
  void add(std::string s) {
    if (v_.size() < 48) {
      if (std::find(v_.begin(), v_.end(), s) != v_.end()) return;
      v_.push_back(std::move(s));
      return;
    }
    if (seen_.empty()) seen_.insert(v_.begin(), v_.end());
    if (!seen_.insert(s).second) return;
    v_.push_back(std::move(s));
  }

 private:
  std::vector<std::string>& v_;
  std::unordered_set<std::string> seen_;
};

struct Context {
  const Params& params;
  std::vector<const Value*> named;  // per Compiled::param_names
};

std::optional<std::string> resolve(const ValueRef& r, const Context& cx) {
  const Value* v = nullptr;
  switch (r.source) {
    case ValueRef::Source::Unknown: return std::nullopt;
    case ValueRef::Source::Literal: return r.literal;
    case ValueRef::Source::Positional:
      if (r.index < cx.params.positional.size()) v = &cx.params.positional[r.index];
      break;
    case ValueRef::Source::Named:
      if (r.index < cx.named.size()) v = cx.named[r.index];
      break;
  }
  if (!v || !*v) return std::nullopt;
  return canonical(**v, r.type);
}

// The key part of "row:T:K": values joined with '|' (hashed when long), or nullopt if one is
// unknown.
std::optional<std::string> row_key(const std::vector<ValueRef>& key, const Context& cx) {
  if (key.empty()) return std::nullopt;
  std::string k;
  for (size_t j = 0; j < key.size(); ++j) {
    auto v = resolve(key[j], cx);
    if (!v) return std::nullopt;
    if (j) k += '|';
    k += *v;
  }
  if (k.size() > 64) k = hashed(k);
  return k;
}

// "row:T:" -> "T"
std::string table_of_prefix(const std::string& row_prefix) {
  return row_prefix.size() > 5 ? row_prefix.substr(4, row_prefix.size() - 5) : std::string();
}

void derive_read(const Statement& st, const Context& cx, Appender& dep, Derived& out) {
  for (const ReadTable& t : st.reads) {
    if (t.keyed) {
      if (auto k = row_key(t.key, cx)) {
        dep.add(t.row_prefix + *k);
        dep.add(t.rows);
        if (st.locking) out.locked.push_back({table_of_prefix(t.row_prefix), *k, &st.fact_columns});
        continue;
      }
    }
    bool pinned = false;
    for (const auto& p : t.pins) {
      if (auto v = resolve(p.value, cx)) {
        dep.add(p.val_prefix + *v);
        dep.add(p.vals);
        pinned = true;
        break;
      }
    }
    if (pinned) continue;  // rule 2: every change to those rows names val:T:C:V or vals:T:C
    dep.add(t.table);
    for (const auto& c : t.columns) dep.add(c);
  }
}

void derive_write(const Statement& st, const Context& cx, Appender& inv, Derived& out,
                  const RowFacts* facts) {
  const WritePlan& w = st.write;
  for (const auto& f : w.fixed) {
    inv.add(f);
    if (f.rfind("rows:", 0) == 0) out.unkeyed_writes.push_back(f.substr(5));
  }
  for (const auto& key : w.keys) {
    auto k = row_key(key, cx);
    if (k) inv.add(w.row_prefix + *k);
    else {
      inv.add(w.rows);
      if (!w.table.empty()) out.unkeyed_writes.push_back(w.table);
    }
    if (w.table.empty()) continue;  // INSERT: its values below
    // UPDATE / DELETE of a keyed row: what the row held, per column, and what SET gives it.
    for (const auto& rc : w.row_columns) {
      const std::string* v = k && facts ? facts->value(w.table, *k, rc.column) : nullptr;
      inv.add(v ? rc.val_prefix + *v : rc.vals);
    }
    if (!k) continue;
    WrittenRow wr;
    wr.table = w.table;
    wr.key = *k;
    wr.deleted = w.deletes;
    for (const auto& [x, ref] : w.set_values) {
      auto v = resolve(ref, cx);
      inv.add(v ? w.row_columns[x].val_prefix + *v : w.row_columns[x].vals);
      wr.set.emplace_back(w.row_columns[x].column, v);
    }
    out.written.push_back(std::move(wr));
  }
  for (const auto& row : w.values)
    for (size_t j = 0; j < row.size() && j < w.value_columns.size(); ++j) {
      if (auto v = resolve(row[j], cx)) inv.add(w.value_columns[j].first + *v);
      else inv.add(w.value_columns[j].second);
    }
}

}  // namespace

namespace detail {
std::optional<std::vector<std::string>> tables_of_query(const std::vector<Token>& tokens, size_t b,
                                                        size_t e) {
  std::vector<std::string> names;
  Scanner s(tokens, b, e, nullptr, &names);
  s.query();
  if (!s.ok || !s.done()) return std::nullopt;
  std::vector<std::string> out;
  for (auto& t : s.tables)
    if (!t.derived && std::find(out.begin(), out.end(), t.name) == out.end()) out.push_back(t.name);
  return out;
}
}  // namespace detail

Compiled compile(std::string_view sql, const Schema& schema) {
  Compiled c;
  try {
    std::vector<Token> t = tokenize(sql);
    size_t b = 0;
    for (size_t i = 0; i <= t.size(); ++i) {
      if (i < t.size() && t[i].type == TokenType::Param) ++c.param_count;
      if (i < t.size() && t[i].type != TokenType::Semicolon) continue;
      if (i > b) c.statements.push_back(StatementCompiler(t, b, i, schema, c.param_names).run());
      b = i + 1;
    }
  } catch (const std::exception& e) {  // out of memory: say so, conservatively
    Statement st;
    st.kind = Kind::Unknown;
    st.reason = std::string("compile failed: ") + e.what();
    st.invalidate_all = st.uncacheable = true;
    c.statements.assign(1, std::move(st));
  }
  return c;
}

void derive(const Compiled& c, size_t statement, const Params& params, Derived& out,
            const RowFacts* facts) {
  if (statement >= c.statements.size()) return;
  Context cx{params, {}};
  if (!c.param_names.empty()) {
    cx.named.assign(c.param_names.size(), nullptr);
    for (const auto& [name, value] : params.named)
      for (size_t j = 0; j < c.param_names.size(); ++j)
        if (c.param_names[j] == name && !cx.named[j]) cx.named[j] = &value;
  }
  Appender dep(out.depends), inv(out.invalidates);
  const Statement& st = c.statements[statement];
  if (st.uncacheable) out.uncacheable = true;
  if (st.invalidate_all) out.invalidate_all = true;
  if (st.invalidate_all || st.uncacheable) return;
  if (st.kind == Kind::Read) derive_read(st, cx, dep, out);
  else if (st.kind == Kind::Write) derive_write(st, cx, inv, out, facts);
}

std::optional<std::string> fact_value(std::string_view raw, ColumnType type) {
  return canonical(raw, type);
}

void derive(const Compiled& c, const Params& params, Derived& out, const RowFacts* facts) {
  for (size_t i = 0; i < c.statements.size(); ++i) derive(c, i, params, out, facts);
}

}  // namespace tierce::sqldeps
