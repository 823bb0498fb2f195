// tests/php/php_test_util.h — what the PHP embed tests share: child processes with their output
// in a log, and a private MariaDB server (mariadb-install-db, then mariadbd on a socket of its
// own, no TCP).
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "tests/agents/memd_test_util.h"
#include "tests/support/process.h"

namespace php_test {

using namespace std::chrono_literals;

// Starts argv[0] (PATH searched) with stdout and stderr appended to `log`; dies with this process.
using tierce_test::spawn;
using tierce_test::run_cmd;

// The last 3000 bytes of a file (for failure messages).
inline std::string tail_of(const std::string& path) {
  std::string t;
  try {
    t = tierce_test::read_file(path);
  } catch (...) {
    return "(no " + path + ")";
  }
  return t.size() > 3000 ? t.substr(t.size() - 3000) : t;
}

// Whether a program is on PATH (a test that needs a missing system package skips, saying so).
inline bool on_path(const std::string& program) {
  return run_cmd({"sh", "-c", "command -v " + program + " >/dev/null"}, "/dev/null") == 0;
}

// A private MariaDB server under `base` (its socket there, no networking). It runs as this (root)
// user: one that switches to `mysql` loses die_with_parent (the kernel clears the parent-death
// signal on a uid change) and would outlive a test that crashed.
class MariaDb {
 public:
  void start(const std::string& base, const std::string& log, const std::string& sql_log) {
    ::mkdir(base.c_str(), 0755);
    std::string data = base + "/data";
    // A private tmpdir: two bootstraps at once (ctest -j) in one /tmp collide on their temporary
    // tables' names ("Unknown table 'mysql.tmp_user_sys'", "Error on delete of '/tmp/#sql-...'").
    std::string tmp = base + "/tmp";
    ::mkdir(tmp.c_str(), 0755);
    sock_ = base + "/mysqld.sock";  // in a directory the server may write
    log_ = log;
    sql_log_ = sql_log;
    out_ = base + "/sql-value.out";
    BOOST_REQUIRE_MESSAGE(
        run_cmd({"mariadb-install-db", "--no-defaults", "--user=root", "--datadir=" + data, "--tmpdir=" + tmp,
                 "--auth-root-authentication-method=socket", "--skip-test-db"},
                log) == 0,
        "mariadb-install-db failed:\n"
            << tail_of(log));
    child_ = spawn({"mariadbd", "--no-defaults", "--user=root", "--datadir=" + data, "--tmpdir=" + tmp,
                    "--socket=" + sock_,
               "--skip-networking", "--innodb-buffer-pool-size=64M",
               "--pid-file=" + base + "/mysqld.pid"},
                   log);
    BOOST_REQUIRE_MESSAGE(tierce_test::eventually([&] { return sql("SELECT 1") == 0; }, 60s),
                          "MariaDB did not start:\n"
                              << tail_of(log) << tail_of(sql_log));
  }
  const std::string& socket() const { return sock_; }
  tierce_test::Child& child() { return child_; }
  // Runs `q` with the mariadb client as root; its exit code.
  int sql(const std::string& q) const {
    return run_cmd({"mariadb", "--no-defaults", "-S", sock_, "-uroot", "-e", q}, sql_log_);
  }
  // The first value `q` returns in database `db`, "" when it fails.
  std::string sql_value(const std::string& q, const std::string& db = "t") const {
    ::unlink(out_.c_str());
    if (run_cmd({"mariadb", "--no-defaults", "-S", sock_, "-uroot", "-N", "-B", db, "-e", q},
                out_) != 0)
      return "";
    std::string v = tierce_test::read_file(out_);
    while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
    return v;
  }

 private:
  tierce_test::Child child_;
  std::string sock_, log_, sql_log_, out_;
};

}  // namespace php_test
