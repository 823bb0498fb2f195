// agents/memd/arbiter_db.cc — see arbiter_db.h.
#include "agents/memd/arbiter_db.h"

#include <mysql.h>

#include <set>

namespace tierce::memd {

using coherence::ArbiterError;
using coherence::ArbiterRow;

std::string MariaDbArbiter::schema_sql(const std::string& table) {
  return "CREATE TABLE IF NOT EXISTS " + table +
         " (\n"
         "  node VARCHAR(64) NOT NULL PRIMARY KEY,\n"
         "  epoch BIGINT UNSIGNED NOT NULL,\n"
         "  state ENUM('in','out') NOT NULL,\n"
         "  changed_by VARCHAR(64) NOT NULL DEFAULT '',\n"
         "  changed_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)\n"
         "    ON UPDATE CURRENT_TIMESTAMP(3)\n"
         ") ENGINE=InnoDB;\n"
         "CREATE TABLE IF NOT EXISTS " + table +
         "_track (\n"
         "  node VARCHAR(64) NOT NULL,\n"
         "  home VARCHAR(64) NOT NULL,\n"
         "  epoch BIGINT UNSIGNED NOT NULL,\n"
         "  PRIMARY KEY (node, home)\n"
         ") ENGINE=InnoDB;\n";
}

MariaDbArbiter::MariaDbArbiter(const cluster::ArbiterSettings& s, unsigned io_timeout_s,
                               unsigned lock_wait_s)
    : s_(s), password_(s.password()), io_timeout_s_(io_timeout_s), lock_wait_s_(lock_wait_s) {
  if (!s_.enabled()) throw std::invalid_argument("MariaDbArbiter: [arbiter] table is not set");
}

MariaDbArbiter::~MariaDbArbiter() {
  if (db_) mysql_close(db_);
}

std::string MariaDbArbiter::describe() const {
  return s_.table + " at " + (s_.socket.empty() ? s_.host + ":" + std::to_string(s_.port) : s_.socket) +
         " as " + s_.user;
}

void MariaDbArbiter::fail(const std::string& what) {
  std::string msg = what;
  if (db_) {
    msg += ": " + std::string(mysql_error(db_)) + " (error " + std::to_string(mysql_errno(db_)) + ")";
    mysql_close(db_);  // a fresh connection next time: no half-done transaction survives
    db_ = nullptr;
  }
  throw ArbiterError(describe() + ": " + msg);
}

MYSQL* MariaDbArbiter::conn() {
  if (db_) return db_;
  MYSQL* m = mysql_init(nullptr);
  if (!m) throw ArbiterError(describe() + ": out of memory (mysql_init)");
  unsigned ct = io_timeout_s_, rt = io_timeout_s_ + lock_wait_s_, wt = io_timeout_s_;
  mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &ct);
  mysql_options(m, MYSQL_OPT_READ_TIMEOUT, &rt);
  mysql_options(m, MYSQL_OPT_WRITE_TIMEOUT, &wt);
  if (!mysql_real_connect(m, s_.socket.empty() ? s_.host.c_str() : nullptr, s_.user.c_str(),
                          password_.c_str(), nullptr, s_.socket.empty() ? s_.port : 0,
                          s_.socket.empty() ? nullptr : s_.socket.c_str(), 0)) {
    std::string e = std::string(mysql_error(m)) + " (error " + std::to_string(mysql_errno(m)) + ")";
    mysql_close(m);
    throw ArbiterError(describe() + ": cannot connect: " + e);
  }
  db_ = m;
  exec("SET SESSION innodb_lock_wait_timeout = " + std::to_string(lock_wait_s_));
  return db_;
}

void MariaDbArbiter::exec(const std::string& sql) {
  MYSQL* m = conn();
  if (mysql_real_query(m, sql.data(), sql.size()) != 0) fail(sql.substr(0, 80));
  // Drain any result (statements here return none, but be safe).
  if (MYSQL_RES* r = mysql_store_result(m)) mysql_free_result(r);
}

std::vector<std::vector<std::string>> MariaDbArbiter::query(const std::string& sql) {
  MYSQL* m = conn();
  if (mysql_real_query(m, sql.data(), sql.size()) != 0) fail(sql.substr(0, 80));
  MYSQL_RES* r = mysql_store_result(m);
  if (!r) fail("no result for " + sql.substr(0, 80));
  std::vector<std::vector<std::string>> rows;
  unsigned nf = mysql_num_fields(r);
  while (MYSQL_ROW row = mysql_fetch_row(r)) {
    unsigned long* len = mysql_fetch_lengths(r);
    std::vector<std::string> v;
    for (unsigned i = 0; i < nf; ++i) v.emplace_back(row[i] ? std::string(row[i], len[i]) : "");
    rows.push_back(std::move(v));
  }
  mysql_free_result(r);
  return rows;
}

std::string MariaDbArbiter::quote(const std::string& v) {
  MYSQL* m = conn();
  std::string out(v.size() * 2 + 1, '\0');
  unsigned long n = mysql_real_escape_string(m, out.data(), v.data(), v.size());
  out.resize(n);
  return "'" + out + "'";
}

void MariaDbArbiter::rollback_quietly() {
  if (!db_) return;
  mysql_real_query(db_, "ROLLBACK", 8);
}

void MariaDbArbiter::ensure(const std::vector<std::string>& nodes) {
  std::lock_guard lk(mu_);
  std::string sql = schema_sql(s_.table);
  for (size_t at = 0; at < sql.size();) {  // one statement at a time (no multi-statements)
    size_t end = sql.find(";\n", at);
    exec(sql.substr(at, end - at));
    at = end + 2;
  }
  for (const auto& n : nodes)
    exec("INSERT IGNORE INTO " + s_.table + " (node, epoch, state, changed_by) VALUES (" +
         quote(n) + ", 1, 'out', 'created')");
}

std::map<std::string, ArbiterRow> MariaDbArbiter::rows() {
  std::lock_guard lk(mu_);
  std::map<std::string, ArbiterRow> out;
  for (auto& r : query("SELECT node, epoch, state, changed_by FROM " + s_.table)) {
    if (r.size() != 4) fail("unexpected columns in " + s_.table);
    out[r[0]] = ArbiterRow{std::stoull(r[1]), r[2] == "in", r[3]};
  }
  return out;
}

uint64_t MariaDbArbiter::drop(const std::string& node, const std::string& by) {
  std::lock_guard lk(mu_);
  try {
    exec("START TRANSACTION");
    // A home whose own node is out drops nobody: when two app nodes lose each other (a partition
    // between live nodes, both reaching the database), the first drop wins and the other side
    // stays fenced instead of refusing every node's writes. (Two drops at once: InnoDB sees the
    // deadlock of these share locks and rolls one back.)
    auto me = query("SELECT state FROM " + s_.table + " WHERE node = " + quote(by) +
                    " LOCK IN SHARE MODE");
    if (me.empty() || me[0][0] != "in") {
      rollback_quietly();
      throw ArbiterError(describe() + ": " + by + " is " + (me.empty() ? "not in the table" : "out") +
                         " itself: it drops no other node (a home whose node is in does)");
    }
    // The X lock: waits for every transaction of `node` that read its row (S lock) to end.
    auto r = query("SELECT epoch FROM " + s_.table + " WHERE node = " + quote(node) + " FOR UPDATE");
    if (r.empty()) {
      rollback_quietly();
      throw ArbiterError(describe() + ": no row for node " + node + " (the homes create it)");
    }
    uint64_t epoch = std::stoull(r[0][0]) + 1;
    exec("UPDATE " + s_.table + " SET epoch = " + std::to_string(epoch) +
         ", state = 'out', changed_by = " + quote(by) + " WHERE node = " + quote(node));
    exec("COMMIT");
    return epoch;
  } catch (...) {
    rollback_quietly();
    throw;
  }
}

ArbiterRow MariaDbArbiter::track(const std::string& node, const std::string& home, uint64_t epoch,
                                 const std::vector<std::string>& homes) {
  std::lock_guard lk(mu_);
  try {
    exec("START TRANSACTION");
    auto r = query("SELECT epoch, state, changed_by FROM " + s_.table + " WHERE node = " +
                   quote(node) + " FOR UPDATE");
    if (r.empty()) {
      rollback_quietly();
      throw ArbiterError(describe() + ": no row for node " + node + " (the homes create it)");
    }
    ArbiterRow row{std::stoull(r[0][0]), r[0][1] == "in", r[0][2]};
    if (row.epoch != epoch) {
      exec("COMMIT");
      return row;
    }
    exec("INSERT INTO " + s_.track_table() + " (node, home, epoch) VALUES (" + quote(node) + ", " +
         quote(home) + ", " + std::to_string(epoch) + ") ON DUPLICATE KEY UPDATE epoch = VALUES(epoch)");
    if (!row.in) {
      std::set<std::string> uniq(homes.begin(), homes.end());
      std::string list;
      for (const auto& h : uniq) list += (list.empty() ? "" : ", ") + quote(h);
      // A locking read: the latest committed records (every recorder holds the row lock first).
      auto c = query("SELECT COUNT(*) FROM " + s_.track_table() + " WHERE node = " + quote(node) +
                     " AND epoch = " + std::to_string(epoch) + " AND home IN (" + list +
                     ") LOCK IN SHARE MODE");
      if (!c.empty() && std::stoull(c[0][0]) == uniq.size()) {
        exec("UPDATE " + s_.table + " SET state = 'in', changed_by = " + quote(home) +
             " WHERE node = " + quote(node));
        row.in = true;
        row.changed_by = home;
      }
    }
    exec("COMMIT");
    return row;
  } catch (...) {
    rollback_quietly();
    throw;
  }
}

}  // namespace tierce::memd
