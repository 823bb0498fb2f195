// sqldeps/scanner.cc — the query scanner (scanner.h).
#include "sqldeps/scanner.h"

#include <algorithm>
#include <unordered_set>

namespace tierce::sqldeps::detail {

bool in_list(std::string_view w, std::initializer_list<std::string_view> l) {
  for (auto x : l)
    if (w == x) return true;
  return false;
}

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

bool clause_word(std::string_view w) {
  static const std::unordered_set<std::string_view> k = {
      "from",  "where",     "group",   "having",  "order",   "limit",   "window",
      "union", "except",    "intersect", "into",  "for",     "lock",    "procedure",
      "on",    "using",     "join",    "inner",   "cross",   "left",    "right",
      "natural", "straight_join", "set", "values", "returning", "full"};
  return k.count(w) != 0;
}

void Scanner::fail(const std::string& why) {
  if (ok) {
    ok = false;
    error = why + near();
  }
  i = e_;
}

bool Scanner::expect_op(std::string_view o) {
  if (op(o)) {
    ++i;
    return true;
  }
  fail("expected '" + std::string(o) + "'");
  return false;
}

bool Scanner::expect_word(std::string_view w) {
  if (word(w)) {
    ++i;
    return true;
  }
  fail("expected " + std::string(w));
  return false;
}

bool Scanner::query_start(size_t k) const {
  while (tok(k).op("(")) ++k;
  return tok(k).word("select") || tok(k).word("with");
}

void Scanner::query() {
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

void Scanner::table_refs(int blk) {
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

void Scanner::expr(int blk, bool stop_at_comma) {
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

std::vector<std::string> Scanner::target_list() {
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

std::optional<std::pair<std::string, std::string>> Scanner::column_name() {
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

RawValue Scanner::raw_value_at(size_t& k) const {
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

bool Scanner::is_value(size_t k) const {
  size_t j = k;
  return raw_value_at(j).source != ValueRef::Source::Unknown;
}

uint32_t Scanner::named_index(const std::string& name) const {
  for (size_t j = 0; j < names_->size(); ++j)
    if ((*names_)[j] == name) return uint32_t(j);
  names_->push_back(name);
  return uint32_t(names_->size() - 1);
}

void Scanner::pins(size_t b, size_t e, int blk, std::vector<PinRef>& out, int level) {
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

size_t Scanner::matching(size_t b, size_t e) const {
  int depth = 0;
  for (size_t k = b; k < e; ++k) {
    if (t_[k].op("(")) ++depth;
    if (t_[k].op(")") && --depth == 0) return k;
  }
  return e;
}

size_t Scanner::column_at(size_t k, size_t e, std::string& qual, std::string& name) const {
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

void Scanner::term_pin(size_t b, size_t e, int blk, std::vector<PinRef>& out) {
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

std::string Scanner::near() const {
  if (done()) return " at the end";
  return " near '" + cur().text.substr(0, 32) + "'";
}

void Scanner::with_clause() {
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

void Scanner::skip_parens() {
  size_t m = matching(i, e_);
  if (m >= e_) return fail("unbalanced parentheses");
  i = m + 1;
}

int Scanner::term() {
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

int Scanner::select_block() {
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

bool Scanner::tail_clause(int blk) {
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

void Scanner::tail_clauses(int last) {
  while (ok && !done() && tail_clause(last)) {
  }
}

void Scanner::table_factor(int blk) {
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

void Scanner::derived_alias(int blk) {
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

void Scanner::paren_expr(int blk) {
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

bool Scanner::star_position() const {
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

void Scanner::blocks_star(int blk) {
  if (blk >= 0) blocks[size_t(blk)].star_all = true;
}

void Scanner::column_ref(int blk) {
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

}  // namespace tierce::sqldeps::detail
