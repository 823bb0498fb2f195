// sqldeps/compiler.cc — the statement compiler (compiler.h): which kind a statement is, SELECT
// and WITH, SET, EXPLAIN, transactions, and the statements it can only treat as a whole.
#include "sqldeps/compiler.h"

namespace tierce::sqldeps::detail {

Statement StatementCompiler::run() {
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

void StatementCompiler::read(Statement& st, size_t from) {
  st.kind = Kind::Read;
  Scanner s(t_, from, e_, &schema_, &names_);
  s.query();
  if (s.ok && !s.done()) s.fail("unexpected token");
  if (!s.ok) return conservative(st, Kind::Read, "unreadable SELECT: " + s.error);
  build_reads(s, st);
  if (s.locking && s.blocks.size() == 1 && st.reads.size() == 1 && st.reads[0].keyed)
    plain_select_list(st, from, s.info_of(s.tables[0]));
}

void StatementCompiler::plain_select_list(Statement& st, size_t from, const TableInfo* info) {
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
      if (k >= e_ || !(t_[k].type == TokenType::Word || t_[k].type == TokenType::QuotedName))
        return;
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

void StatementCompiler::with_statement(Statement& st) {
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

void StatementCompiler::finish_write(Statement& st, Scanner& s, bool exact,
                                     const std::string& why) {
  if (!s.ok || !s.done()) {
    std::string e = s.ok ? "unexpected token" : s.error;
    st.write = WritePlan{};
    return writes_all(st, "unreadable " + std::string(t_[b_].text) + ": " + e);
  }
  st.kind = Kind::Write;
  st.precision = exact ? Precision::Exact : Precision::TableLevel;
  if (!exact) st.reason = why;
}

void StatementCompiler::other(Statement& st, const std::string& w) {
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

void StatementCompiler::set(Statement& st) {
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

}  // namespace tierce::sqldeps::detail
