// benchmarks/binlog/binlog_load.cc — row changes straight to MariaDB at a target rate, for
// benchmarks/binlog/run.py: THREADS connections, each committing transactions of ROWS single-row
// UPDATEs of the sample's items (version + 1) on a schedule (open loop: a late transaction is not
// made up by a burst), and printing one line per committed transaction:
//   COMMIT_NS GTID ROWS       (CLOCK_REALTIME when COMMIT returned; GTID from @@last_gtid)
// run.py matches the GTIDs with tierce-binlogd's audit file (its ack times) for the lag of each.
//
//   tierce-binlog-load HOST PORT USER PASSWORD DATABASE ROWS_PER_S SECONDS
//                      [--rows-per-txn 10] [--threads 4] [--items 10000] [--seed 1]
#include <mysql.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

struct Args {
  std::string host, user, password, db;
  unsigned port = 3306;
  double rows_per_s = 1000, seconds = 10;
  int rows_per_txn = 10, threads = 4, items = 10000;
  unsigned seed = 1;
};

std::mutex out_mu;
std::atomic<long> errors{0}, late{0};

bool q(MYSQL* m, const std::string& sql) {
  if (mysql_query(m, sql.c_str()) == 0) {
    if (MYSQL_RES* r = mysql_store_result(m)) mysql_free_result(r);
    return true;
  }
  if (errors.fetch_add(1) < 5) std::fprintf(stderr, "tierce-binlog-load: %s: %s\n", sql.c_str(), mysql_error(m));
  return false;
}

void worker(const Args& a, int idx) {
  MYSQL* m = mysql_init(nullptr);
  unsigned timeout = 10;
  mysql_optionsv(m, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
  mysql_optionsv(m, MYSQL_OPT_READ_TIMEOUT, &timeout);
  if (!mysql_real_connect(m, a.host.c_str(), a.user.c_str(), a.password.c_str(), a.db.c_str(), a.port,
                          nullptr, 0)) {
    std::fprintf(stderr, "tierce-binlog-load: connect: %s\n", mysql_error(m));
    errors++;
    return;
  }
  std::mt19937 rng(a.seed * 7919 + unsigned(idx));
  // Each thread its own slice of the items: no two transactions wait for one row's lock.
  int slice = std::max(1, a.items / a.threads), base = idx * slice + 1;
  double txn_per_s = a.rows_per_s / a.rows_per_txn / a.threads;
  auto interval = std::chrono::nanoseconds(int64_t(1e9 / txn_per_s));
  auto start = std::chrono::steady_clock::now() + interval * idx / a.threads;
  auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(int64_t(a.seconds * 1e9));
  std::vector<std::string> lines;
  for (auto due = start; due < end; due += interval) {
    auto now = std::chrono::steady_clock::now();
    if (now < due) std::this_thread::sleep_until(due);
    else if (now - due > std::chrono::milliseconds(50)) late++;
    if (!q(m, "BEGIN")) continue;
    bool ok = true;
    for (int k = 0; k < a.rows_per_txn && ok; ++k) {
      int id = base + int(rng() % unsigned(slice));
      ok = q(m, "UPDATE items SET version = version + 1 WHERE id = " + std::to_string(id));
    }
    if (!ok || !q(m, "COMMIT")) {
      q(m, "ROLLBACK");
      continue;
    }
    uint64_t t = realtime_ns();
    std::string gtid;
    if (mysql_query(m, "SELECT @@last_gtid") == 0) {
      if (MYSQL_RES* r = mysql_store_result(m)) {
        if (MYSQL_ROW row = mysql_fetch_row(r); row && row[0]) gtid = row[0];
        mysql_free_result(r);
      }
    }
    lines.push_back(std::to_string(t) + " " + gtid + " " + std::to_string(a.rows_per_txn) + "\n");
  }
  mysql_close(m);
  std::lock_guard<std::mutex> l(out_mu);
  for (const auto& s : lines) std::fputs(s.c_str(), stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr,
                 "usage: tierce-binlog-load HOST PORT USER PASSWORD DATABASE ROWS_PER_S SECONDS "
                 "[--rows-per-txn N] [--threads N] [--items N] [--seed N]\n");
    return 2;
  }
  Args a;
  a.host = argv[1];
  a.port = unsigned(std::atoi(argv[2]));
  a.user = argv[3];
  a.password = argv[4];
  a.db = argv[5];
  a.rows_per_s = std::atof(argv[6]);
  a.seconds = std::atof(argv[7]);
  for (int i = 8; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    int v = std::atoi(argv[i + 1]);
    if (k == "--rows-per-txn") a.rows_per_txn = std::max(1, v);
    else if (k == "--threads") a.threads = std::max(1, v);
    else if (k == "--items") a.items = std::max(1, v);
    else if (k == "--seed") a.seed = unsigned(v);
    else {
      std::fprintf(stderr, "tierce-binlog-load: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (a.rows_per_s <= 0 || a.seconds <= 0) return 2;
  mysql_library_init(0, nullptr, nullptr);
  std::vector<std::thread> t;
  for (int i = 0; i < a.threads; ++i) t.emplace_back(worker, std::cref(a), i);
  for (auto& x : t) x.join();
  std::fprintf(stderr, "tierce-binlog-load: %ld errors, %ld transactions started > 50 ms late\n",
               errors.load(), late.load());
  mysql_library_end();
  return errors.load() > 0 ? 1 : 0;
}
