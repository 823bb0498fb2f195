// tests/ftp/server/ftpd_reload_test.cc — SIGHUP to the real tierce-ftpd (docs/ftp.md "Reload"):
// a user added to the file can log in afterwards and a removed one cannot; a session in progress
// goes on; a broken file keeps the running configuration (old users still log in); a changed
// listen address is reported as needing a restart and not applied. Run as root, the sessions run
// under privilege separation (the master keeps the user table the workers wipe).
#define BOOST_TEST_MODULE ftpd_reload
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <boost/test/unit_test.hpp>

#include "tests/ftp/server/ftpd_harness.h"

using namespace ftpd_test;
using tierce_test::TempDir;
using namespace std::chrono_literals;

namespace {

size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

struct Fixture {
  TempDir dir;
  std::string root = dir / "files";
  std::string hash = hash_of("secret-pw");
  std::unique_ptr<Server> server;

  Fixture() {
    ::mkdir(root.c_str(), 0755);
    give_to(root);
    server = std::make_unique<Server>(dir, body({"alice"}));
  }
  std::string body(const std::vector<std::string>& users, const std::string& extra = "") {
    std::string b = "workers = 2\nmax_sessions = 6\nlogin_fail_delay_ms = 10\n" + extra;
    for (auto& u : users)
      b += "[[user]]\nname = \"" + u + "\"\npassword = \"" + hash + "\"\nroot = \"" + root + "\"\n";
    return b;
  }
  // Rewrites the file as the harness wrote it (listen, ready_file first), then SIGHUP; waits for
  // the reload's outcome (`id`: FTPD0015 done, FTPD0014 failed).
  void reload(const std::string& text, const std::string& id,
              const std::string& listen = "127.0.0.1:0") {
    tierce_test::write_file(dir / "ftpd.toml", "listen = \"" + listen + "\"\nready_file = \"" +
                                                   dir / "ready" + "\"\n" + text);
    size_t before = count_of(server->log(), id);
    ::kill(server->pid(), SIGHUP);
    // FTPD0015 is logged when the master holds the new configuration: from then on no new
    // connection is served with the old one (docs/ftp.md) — not even one an old idle worker took
    // before its retirement reached it: the master answers its 'B' with 'O' and it says 421.
    BOOST_REQUIRE_MESSAGE(
        tierce_test::eventually([&] { return count_of(server->log(), id) > before; }, 10000ms),
        "no " + id + " after SIGHUP:\n" + server->log());
  }
  bool can_login(const std::string& user) {
    // A fresh connection: after a reload, served by a worker forked with the new configuration,
    // or turned away with 421 by one of the old configuration (then connect again, as FTP
    // clients do).
    for (int attempt = 0; attempt < 20; ++attempt) {
      Client c(server->port());
      auto greeting = c.reply();
      if (greeting.code == 421 && greeting.text().find("reloaded") != std::string::npos) {
        ++turned_away;
        continue;
      }
      if (greeting.code != 220) return false;
      return c.login(user, "secret-pw");
    }
    BOOST_FAIL("20 connections in a row turned away after a reload:\n" + server->log());
    return false;
  }
  int turned_away = 0;
};

}  // namespace

BOOST_AUTO_TEST_CASE(sighup_adds_and_removes_users) {
  Fixture f;
  BOOST_TEST(f.can_login("alice"));
  BOOST_TEST(!f.can_login("carol"));
  // A session logged in before the reload.
  Client before(f.server->port());
  BOOST_REQUIRE(before.reply().code == 220);
  BOOST_REQUIRE(before.login("alice", "secret-pw"));

  f.reload(f.body({"alice", "carol"}), "FTPD0015");
  std::string log = f.server->log();
  BOOST_TEST(log.find("FTPD0010 SIGHUP: reloading " + f.dir / "ftpd.toml") != std::string::npos,
             log);
  BOOST_TEST(
      log.find("FTPD0015 reload done: 2 user(s), 2 workers, max 6 sessions") != std::string::npos,
      log);
  BOOST_TEST(f.can_login("carol"));
  BOOST_TEST(f.can_login("alice"));
  BOOST_TEST(before.cmd("PWD").code == 257);  // the old session goes on

  f.reload(f.body({"carol"}), "FTPD0015");
  BOOST_TEST(!f.can_login("alice"));
  BOOST_TEST(f.can_login("carol"));
  BOOST_TEST(before.cmd("NOOP").code == 200);
  BOOST_TEST(f.server->log().find("FTPD0016") != std::string::npos, f.server->log());
}

// The window this closes: a connection an idle worker of the old configuration had already
// accepted when the reload came was served with the old users (a removed user logged in, seen
// once in CI's sanitizer run). Login right after each FTPD0015, many times, with the user
// removed and added in turn: the answer always follows the file. Whether a given round hits an
// old worker is up to the scheduler (FTPD0025 counts the ones that did); the answer must never
// be the old one.
BOOST_AUTO_TEST_CASE(no_connection_after_a_reload_is_served_with_the_old_users) {
  Fixture f;
  for (int round = 0; round < 15; ++round) {
    f.reload(f.body({"carol"}), "FTPD0015");
    BOOST_TEST(!f.can_login("alice"), "round " << round << ": alice removed, yet logged in");
    f.reload(f.body({"alice", "carol"}), "FTPD0015");
    BOOST_TEST(f.can_login("alice"), "round " << round << ": alice added, yet refused");
  }
  const std::string log = f.server->log();
  size_t old_workers = count_of(log, "FTPD0025");
  BOOST_TEST_MESSAGE(old_workers << " connection(s) reached a worker of the old configuration and "
                                    "were turned away; the client reconnected "
                                 << f.turned_away << " time(s)");
  BOOST_TEST(size_t(f.turned_away) == old_workers, log);
  BOOST_TEST(f.server->stop() == 0);
}

BOOST_AUTO_TEST_CASE(a_broken_file_keeps_the_running_configuration) {
  Fixture f;
  f.reload(f.body({"alice"}) + "[[user]]\nname = \"carol\n", "FTPD0014");  // unterminated string
  std::string log = f.server->log();
  BOOST_TEST(log.find("FTPD0014 reload failed, the running configuration stays in effect: " +
                      f.dir / "ftpd.toml:") != std::string::npos,
             log);
  BOOST_TEST(log.find("not valid TOML") != std::string::npos, log);
  BOOST_TEST(f.can_login("alice"));
  BOOST_TEST(!f.can_login("carol"));

  // A checked problem (not syntax): every problem is logged, nothing changes.
  f.reload(f.body({"alice", "carol"}, "login_timeout_s = \"soon\"\nbogus = 1\n"), "FTPD0014");
  log = f.server->log();
  BOOST_TEST(log.find("bogus: unknown key") != std::string::npos, log);
  BOOST_TEST(log.find("login_timeout_s: expected an integer") != std::string::npos, log);
  BOOST_TEST(f.can_login("alice"));
  BOOST_TEST(!f.can_login("carol"));

  // The file gone: the same.
  ::unlink((f.dir / "ftpd.toml").c_str());
  ::kill(f.server->pid(), SIGHUP);
  BOOST_TEST(tierce_test::eventually(
      [&] {
        return f.server->log().find("cannot read the configuration file") != std::string::npos;
      },
      10000ms));
  BOOST_TEST(f.can_login("alice"));
  BOOST_TEST(f.server->stop() == 0);
}

BOOST_AUTO_TEST_CASE(a_changed_listen_address_needs_a_restart) {
  Fixture f;
  uint16_t other = tierce_test::free_port();
  std::string listen = "127.0.0.1:" + std::to_string(other);
  f.reload(f.body({"alice", "carol"}), "FTPD0015", listen);
  std::string log = f.server->log();
  BOOST_TEST(log.find("restart tierce-ftpd to apply listen 127.0.0.1:0 -> " + listen +
                      " (the running values stay)") != std::string::npos,
             log);
  // The rest applied; still on the old port, nothing on the new one.
  BOOST_TEST(f.can_login("carol"));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(other);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_TEST(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0);
  ::close(fd);
}
