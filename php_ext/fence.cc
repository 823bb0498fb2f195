// php_ext/fence.cc — see fence.h.
#include "php_ext/fence.h"

#include <algorithm>
#include <cctype>

namespace tierce::php {

namespace sd = tierce::sqldeps;

FenceText fence_text(const sd::Compiled& c) {
  FenceText t;
  t.statements = c.statements.size();
  bool boundary = false;
  for (const sd::Statement& st : c.statements) {
    bool writes = st.kind == sd::Kind::Write || st.kind == sd::Kind::Unknown;
    // Statements the classifier cannot bound (DDL, LOCK TABLES, CALL, unknown words) may commit
    // by themselves; so may a write it could not read (counted with them: conservative).
    bool self_committing =
        st.kind == sd::Kind::Unknown || (st.kind == sd::Kind::Write && st.invalidate_all);
    bool ends = self_committing || st.kind == sd::Kind::Begin || st.kind == sd::Kind::Commit ||
                st.kind == sd::Kind::Rollback ||
                (st.kind == sd::Kind::Neutral && st.autocommit.has_value());
    if (writes) {
      if (!t.writes) t.self_committing = self_committing;
      t.writes = true;
      if (boundary) t.write_after_boundary = true;
    }
    if (ends) {
      boundary = true;
      t.ends_transaction = true;
    }
  }
  return t;
}

FenceText fence_text_unknown() {
  FenceText t;
  t.statements = 1;
  t.writes = t.self_committing = t.ends_transaction = true;
  return t;
}

std::string quote_table(std::string_view table) {
  std::string out = "`";
  for (char ch : table) {
    if (ch == '.') {
      out += "`.`";
    } else {
      if (ch == '`') out += '`';  // never with a validated name; doubled all the same
      out += ch;
    }
  }
  out += '`';
  return out;
}

std::string sql_literal(std::string_view s) {
  bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '.' || ch == '-';
  });
  if (plain) return "'" + std::string(s) + "'";
  // Anything else as hex: no quote, backslash or charset can change what it means (MariaDB
  // and MySQL still look the key up by the primary key: the plan is `const`).
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out = "X'";
  for (unsigned char ch : s) {
    out += kHex[ch >> 4];
    out += kHex[ch & 15];
  }
  out += '\'';
  return out;
}

std::string fence_check_sql(std::string_view table, std::string_view node) {
  return "SELECT state, epoch, changed_by, changed_at FROM " + quote_table(table) +
         " WHERE node = " + sql_literal(node) + " LOCK IN SHARE MODE";
}

FenceVerdict fence_verdict(const std::vector<std::vector<std::string>>& rows) {
  FenceVerdict v;
  if (rows.empty()) {
    v.state = FenceVerdict::State::Missing;
    return v;
  }
  const std::vector<std::string>& r = rows.front();
  auto at = [&](size_t i) { return i < r.size() ? r[i] : std::string(); };
  v.epoch = at(1);
  v.changed_by = at(2);
  v.changed_at = at(3);
  std::string state = at(0);
  for (char& ch : state) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (state == "in") {
    v.state = FenceVerdict::State::In;
  } else if (state == "out") {
    v.state = FenceVerdict::State::Out;
  } else {
    v.state = FenceVerdict::State::Error;
    v.error = "the row's state is '" + at(0) + "', neither 'in' nor 'out'";
  }
  return v;
}

FenceVerdict fence_failed(unsigned error_no, std::string_view error) {
  FenceVerdict v;
  v.state = FenceVerdict::State::Error;
  v.error = error_no ? std::to_string(error_no) + ": " + std::string(error) : std::string(error);
  if (v.error.empty()) v.error = "no answer";
  return v;
}

std::string fence_refusal(const FenceVerdict& v, std::string_view node, std::string_view table) {
  std::string n(node), tb(table);
  switch (v.state) {
    case FenceVerdict::State::In:
      return "";
    case FenceVerdict::State::Out: {
      std::string how = tb + ": epoch " + (v.epoch.empty() ? std::string("?") : v.epoch);
      if (!v.changed_by.empty()) how += ", by home " + v.changed_by;
      if (!v.changed_at.empty()) how += " at " + v.changed_at;
      return "PHPEXT0301 app node " + n + " is OUT of the fence (" + how +
             "): its writes are refused until the homes re-admit it (docs/coherence.md, "
             "docs/php_extension.md \"The fence check\")";
    }
    case FenceVerdict::State::Missing:
      return "PHPEXT0302 app node " + n + " has no row in " + tb +
             ": its writes are refused until the homes create it (the homes add one row per app "
             "node of the topology; docs/php_extension.md \"The fence check\")";
    case FenceVerdict::State::Error:
      break;
  }
  return "PHPEXT0303 the fence check of app node " + n + " failed (" + v.error +
         "): its write is refused (every write transaction must read its row of " + tb +
         " first; docs/php_extension.md \"The fence check\")";
}

int fence_refusal_code(const FenceVerdict& v) {
  switch (v.state) {
    case FenceVerdict::State::Out: return 301;
    case FenceVerdict::State::Missing: return 302;
    default: return 303;
  }
}

std::string fence_unfenceable(const FenceText& t, std::string_view node) {
  std::string n(node);
  if (t.write_after_boundary)
    return "PHPEXT0304 write refused: in one multi-statement text, a write follows a statement "
           "that ends the transaction (BEGIN, COMMIT, ROLLBACK, SET autocommit, DDL, CALL or a "
           "statement the extension cannot read); app node " +
           n +
           " can only check its row before the text, which does not cover that later "
           "transaction: send the statements separately (docs/php_extension.md \"The fence "
           "check\")";
  return "PHPEXT0304 write refused: several statements in one text in autocommit mode, through a "
         "call that leaves their results pending (mysqli::multi_query, PDO::query, a prepared "
         "statement): app node " +
         n +
         " cannot wrap them in one checked transaction: run them inside a transaction "
         "(begin_transaction() ... commit()), one by one, or with PDO::exec "
         "(docs/php_extension.md \"The fence check\")";
}

std::string fence_commit_failed(std::string_view node, std::string_view error) {
  return "PHPEXT0305 app node " + std::string(node) +
         ": an autocommit write ran in the fence's transaction, but its COMMIT failed (" +
         std::string(error) + "): the write is NOT committed";
}

std::string fence_outside_transaction(std::string_view node) {
  return "PHPEXT0306 tierce_fence_check() for app node " + std::string(node) +
         " ran outside a transaction: its lock ended with it and admits nothing; call it after "
         "begin_transaction() / beginTransaction() (or with autocommit off), before the "
         "transaction's first write";
}

FenceStep fence_plan(unsigned status, const FenceConn& c, const FenceText& t, bool drains_results) {
  if (t.write_after_boundary) return FenceStep::RefuseUnrun;
  bool in_trans = (status & kStatusInTrans) != 0;
  bool autocommit = (status & kStatusAutocommit) != 0;
  if (in_trans && c.refused) return t.self_committing ? FenceStep::RefuseUnrun : FenceStep::Refused;
  if (in_trans && c.checked) return FenceStep::Pass;
  if (in_trans || !autocommit) return FenceStep::CheckInTxn;
  // Autocommit: the check and the write must be one transaction. A COMMIT can follow the call
  // only when the connection is idle after it (every result read).
  if (t.statements > 1 && !drains_results) return FenceStep::RefuseUnrun;
  return FenceStep::Wrap;
}

}  // namespace tierce::php
