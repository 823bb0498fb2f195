// tools/tierce-check/sqlwriter.cc — --sql-writers: threads that update MariaDB directly, as a cron
// job or an administrator would, bypassing PHP (so no invalidation is sent: only a change-log
// agent such as tierce-binlogd can make the proxies drop the pages). Each transaction changes what
// the sample app's update pages change (sample/php/bid.php, edit.php), in their lock order (item,
// then categories, then users by ascending id), reads the new versions back while the rows are
// still locked, and commits; one WriteRec (sql = true) per entity, with the time COMMIT was sent
// and the time it returned (the commit time the bounded-staleness check counts from).
#include "check.h"

#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace tcheck {
namespace {

// One connection; closed (and reopened by the next transaction) after a client-side error, so no
// half-done transaction survives a lost connection.
class SqlConn {
 public:
  explicit SqlConn(const Options& o) : o_(o) {}
  ~SqlConn() { close(); }
  SqlConn(const SqlConn&) = delete;
  SqlConn& operator=(const SqlConn&) = delete;

  // Connects when not connected. false: kind "sql_connect" and err.
  bool ensure(std::string& kind, std::string& err) {
    if (db_) return true;
    MYSQL* m = mysql_init(nullptr);
    if (!m) {
      kind = "sql_connect";
      err = "out of memory (mysql_init)";
      return false;
    }
    // Whole seconds (libmariadb's unit), at least 1; a lock wait shorter than the read timeout,
    // so a blocked statement ends as an error from the server, never as a hang.
    unsigned io = unsigned(std::max(1.0, std::ceil(o_.timeout)));
    unsigned rt = 2 * io + 1;
    mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &io);
    mysql_options(m, MYSQL_OPT_READ_TIMEOUT, &rt);
    mysql_options(m, MYSQL_OPT_WRITE_TIMEOUT, &io);
    const MariaDbTarget& t = o_.mariadb;
    const std::string user = t.user.value_or("tierce"), password = t.password.value_or("tierce"),
                      database = t.database.value_or("rubis");
    if (!mysql_real_connect(m, t.host.c_str(), user.c_str(), password.c_str(), database.c_str(), t.port, nullptr,
                            0)) {
      kind = "sql_connect";
      err = std::string(mysql_error(m)) + " (error " + std::to_string(mysql_errno(m)) + ")";
      mysql_close(m);
      return false;
    }
    db_ = m;
    return exec("SET SESSION innodb_lock_wait_timeout = " + std::to_string(io), kind, err);
  }

  // A statement without a result set. false: kind (by error number) and err.
  bool exec(const std::string& sql, std::string& kind, std::string& err) {
    if (mysql_real_query(db_, sql.data(), sql.size()) != 0) return failed(sql, kind, err);
    if (MYSQL_RES* r = mysql_store_result(db_)) mysql_free_result(r);
    return true;
  }

  // The first row of a query (empty when none). false: kind and err.
  bool row(const std::string& sql, std::vector<std::string>& out, std::string& kind, std::string& err) {
    out.clear();
    if (mysql_real_query(db_, sql.data(), sql.size()) != 0) return failed(sql, kind, err);
    MYSQL_RES* r = mysql_store_result(db_);
    if (!r) return failed(sql, kind, err);
    if (MYSQL_ROW rw = mysql_fetch_row(r)) {
      unsigned long* len = mysql_fetch_lengths(r);
      for (unsigned i = 0; i < mysql_num_fields(r); ++i) out.emplace_back(rw[i] ? std::string(rw[i], len[i]) : "");
    }
    mysql_free_result(r);
    return true;
  }

  // After a failed statement: ROLLBACK when the connection still works, else close it.
  void abandon() {
    if (!db_) return;
    if (mysql_real_query(db_, "ROLLBACK", 8) != 0) close();
  }

  void close() {
    if (db_) mysql_close(db_);
    db_ = nullptr;
  }
 private:
  bool failed(const std::string& sql, std::string& kind, std::string& err) {
    unsigned e = mysql_errno(db_);
    if (e == ER_LOCK_DEADLOCK) kind = "sql_deadlock";
    else if (e == ER_LOCK_WAIT_TIMEOUT) kind = "sql_lock_wait_timeout";
    else if (e >= CR_MIN_ERROR) kind = "sql_connection";  // lost, gone, read/write timeout
    else kind = "sql_error";
    err = sql.substr(0, 60) + ": " + mysql_error(db_) + " (error " + std::to_string(e) + ")";
    if (e >= CR_MIN_ERROR) close();
    return false;
  }

  const Options& o_;
  MYSQL* db_ = nullptr;
};

// What one transaction does: bid.php's changes (a bid of `user`) or edit.php's (a new name and
// description); the category is never moved.
struct SqlOp {
  bool bid = false;
  int item = 0, user = 0;
  std::string amount, name, description;
  std::string what;  // for reports
};

struct SqlTxn {
  std::vector<std::pair<uint64_t, uint64_t>> versions;  // entity -> version after the transaction
  int64_t t_commit_sent = 0, t_commit = 0;
};

uint64_t to_u64(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 10); }

// The changes of `op` between the item's locking read and the read-back, in the app's lock order.
bool apply(SqlConn& c, const SqlOp& op, int cat, int seller, std::vector<int>& users, std::string& kind,
           std::string& err) {
  const std::string item = std::to_string(op.item);
  if (op.bid) {
    std::vector<std::string> r;
    if (!c.row("SELECT id FROM users WHERE id = " + std::to_string(op.user), r, kind, err)) return false;
    if (r.empty()) {
      kind = "sql_no_row";
      err = "no user " + std::to_string(op.user);
      return false;
    }
    if (!c.exec("INSERT INTO bids (item_id, user_id, amount, created) VALUES (" + item + ", " +
                    std::to_string(op.user) + ", " + op.amount + ", NOW())",
                kind, err) ||
        !c.exec("UPDATE items SET max_bid = GREATEST(max_bid, " + op.amount +
                    "), nb_bids = nb_bids + 1, version = version + 1 WHERE id = " + item,
                kind, err))
      return false;
    users = {op.user, seller};
  } else {
    // name and description: letters, digits, spaces and '-' only (made by sql_writer): no quoting needed
    if (!c.exec("UPDATE items SET name = '" + op.name + "', description = '" + op.description +
                    "', version = version + 1 WHERE id = " + item,
                kind, err))
      return false;
    users = {seller};
  }
  std::sort(users.begin(), users.end());
  users.erase(std::unique(users.begin(), users.end()), users.end());
  if (!c.exec("UPDATE categories SET version = version + 1 WHERE id = " + std::to_string(cat), kind, err))
    return false;
  for (int u : users)
    if (!c.exec("UPDATE users SET version = version + 1 WHERE id = " + std::to_string(u), kind, err)) return false;
  return true;
}

// One transaction. false: kind and err (rolled back, or the connection closed).
bool run_txn(SqlConn& c, const SqlOp& op, SqlTxn& txn, std::string& kind, std::string& err) {
  if (!c.ensure(kind, err)) return false;
  std::vector<std::string> r;
  const std::string item = std::to_string(op.item);
  auto bail = [&] {
    c.abandon();
    return false;
  };
  if (!c.exec("START TRANSACTION", kind, err)) return bail();
  if (!c.row("SELECT category_id, seller_id FROM items WHERE id = " + item + " FOR UPDATE", r, kind, err))
    return bail();
  if (r.size() != 2) {
    kind = "sql_no_row";
    err = "no item " + item;
    return bail();
  }
  const int cat = int(to_u64(r[0])), seller = int(to_u64(r[1]));
  std::vector<int> users;
  if (!apply(c, op, cat, seller, users, kind, err)) return bail();
  // The new versions, read back while the rows are still locked (ours until COMMIT).
  std::string q = "SELECT (SELECT version FROM items WHERE id = " + item +
                  "), (SELECT version FROM categories WHERE id = " + std::to_string(cat) + ")";
  for (int u : users) q += ", (SELECT version FROM users WHERE id = " + std::to_string(u) + ")";
  if (!c.row(q, r, kind, err)) return bail();
  if (r.size() != 2 + users.size()) {
    kind = "sql_error";
    err = "the versions' read-back returned no row";
    return bail();
  }
  txn.versions = {{make_key(kItem, uint64_t(op.item)), to_u64(r[0])}, {make_key(kCategory, uint64_t(cat)), to_u64(r[1])}};
  for (size_t i = 0; i < users.size(); ++i) txn.versions.emplace_back(make_key(kUser, uint64_t(users[i])), to_u64(r[2 + i]));
  txn.t_commit_sent = now_ns();
  // A failed COMMIT may or may not have committed: the write is not recorded (an error), which
  // can only hide a stale read, never invent one.
  if (!c.exec("COMMIT", kind, err)) return bail();
  txn.t_commit = now_ns();
  return true;
}

SqlOp pick_op(const Shared& sh, std::mt19937_64& rng, int idx, long long& seq) {
  SqlOp op;
  op.item = sh.hot_items[rng() % sh.hot_items.size()];
  if (rng() % 100 < 70) {
    op.bid = true;
    op.user = sh.hot_users[rng() % sh.hot_users.size()];
    char amount[32];
    std::snprintf(amount, sizeof amount, "%llu.%02llu", (unsigned long long)(1 + rng() % 9999),
                  (unsigned long long)(rng() % 100));
    op.amount = amount;
    op.what = "SQL bid item " + std::to_string(op.item) + " user " + std::to_string(op.user) + " amount " + amount;
  } else {
    std::string tag = std::to_string(idx) + "-" + std::to_string(++seq);
    op.name = "item " + std::to_string(op.item) + " sql edit " + tag;
    op.description = "edited in SQL by tierce-check sql writer " + tag;
    op.what = "SQL edit item " + std::to_string(op.item) + " name '" + op.name + "'";
  }
  return op;
}

}  // namespace

void sql_init() { mysql_library_init(0, nullptr, nullptr); }

void sql_writer(Shared& sh, int idx, ThreadOut& out) {
  mysql_thread_init();
  std::mt19937_64 rng(sh.opt->seed * 3000017 + uint64_t(idx) * 15485863 + 11);
  SqlConn conn(*sh.opt);
  const std::string target = "mariadb " + sh.opt->mariadb.text();
  long long seq = 0;
  // --sql-rate: this thread's share of it, beside the budget, until the readers are done.
  const double rate = sh.opt->sql_rate > 0 && sh.opt->readers > 0 ? sh.opt->sql_rate / sh.opt->sql_writers : 0;
  const int64_t interval = rate > 0 ? int64_t(1e9 / rate) : 0;
  int64_t due = now_ns() + (interval ? interval * idx / std::max(1, sh.opt->sql_writers) : 0);
  for (;;) {
    int64_t t_start = 0;
    if (interval) {
      while (!sh.stop.load() && sh.readers_left.load() > 0 && now_ns() < due &&
             !(sh.stop_at && now_ns() >= sh.stop_at))
        std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<int64_t>(due - now_ns(), 20'000'000)));
      if (sh.stop.load() || sh.readers_left.load() == 0 || (sh.stop_at && now_ns() >= sh.stop_at)) break;
      t_start = now_ns();
      due += interval;
      if (due < t_start) due = t_start;  // late: no burst to catch up
    } else {
      if (!may_go(sh, true)) break;
      long long n = sh.w_started.fetch_add(1);
      if (sh.w_budget >= 0 && n >= sh.w_budget) break;
      t_start = next_slot(sh, true);  // --rate: the scheduled time (latency from it)
      if (t_start == 0) break;
    }
    SqlOp op = pick_op(sh, rng, idx, seq);
    out.writes_total++;
    out.sql_writes_total++;
    SqlTxn txn;
    std::string kind, err;
    bool ok = run_txn(conn, op, txn, kind, err);
    int64_t t_end = now_ns();
    sh.w_done++;
    if (sh.record_ops) out.ops.push_back({t_start, t_end, true, ok});
    if (!ok) {
      note_error(sh, out, true, kind, target, op.what + ": " + err);
      if (kind == "sql_connect") std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    out.writes_ok++;
    out.sql_writes_ok++;
    out.sql_lat_ms.push_back(double(txn.t_commit - t_start) / 1e6);
    for (const auto& [key, version] : txn.versions) {
      WriteRec w;
      w.key = key;
      w.version = version;
      w.t_start = t_start;
      w.t_commit_sent = txn.t_commit_sent;
      w.t_ret = txn.t_commit;
      w.sql = true;
      w.what = op.what;
      out.writes.push_back(std::move(w));
    }
  }
  conn.close();
  mysql_thread_end();
  sh.writers_left--;
}

}  // namespace tcheck
