// tests/dlm/client/lockd_user_test.cc — tierce-lockd --user (docs/dlm.md "Running as a user"): the
// real binary started as root with --user nobody binds its socket and writes its pid file as
// root, then runs as nobody (all four uids and gids, from /proc), still grants and releases a
// lock to tierce-lock, and stops cleanly, removing its pid file. An unknown account is exit 2.
// Needs root: skipped, saying so, without it.
#define BOOST_TEST_MODULE lockd_user
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/test_util.h"

#ifndef TIERCE_LOCKD_BINARY
#error "TIERCE_LOCKD_BINARY must name the tierce-lockd executable"
#endif
#ifndef TIERCE_LOCK_BINARY
#error "TIERCE_LOCK_BINARY must name the tierce-lock executable"
#endif

using namespace tierce_test;

namespace {

boost::test_tools::assertion_result needs_root(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result r(::geteuid() == 0);
  r.message() << "skipped: starting tierce-lockd as root to see it drop to a user needs root";
  return r;
}

// A child running `args`, stdout and stderr appended to `log`; SIGKILLed at scope end if alive.
struct Proc {
  pid_t pid = -1;
  Proc(const std::vector<std::string>& args, const std::string& log) {
    pid_t parent = ::getpid();
    pid = ::fork();
    if (pid == 0) {
      die_with_parent(parent);
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  Proc(const Proc&) = delete;
  ~Proc() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  // The exit code, or -1 if it has not exited within `limit`.
  int wait(std::chrono::milliseconds limit) {
    int st = 0;
    bool done = eventually([&] { return ::waitpid(pid, &st, WNOHANG) == pid; }, limit);
    if (!done) return -1;
    pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
};

struct Fixture {
  TempDir dir;
  std::string topo = dir / "cluster.toml", sock = dir / "lockd.sock", pid_file = dir / "lockd.pid",
              log = dir / "lockd.log";
  Fixture() {
    write_file(dir / "secret", "lockd-user-secret-0123456789abcdef\n", 0600);
    write_file(topo, "[cluster]\nname = \"u\"\nsecret_file = \"" + dir / "secret" +
                         "\"\ntransport = \"shm\"\n[dlm]\nalgorithm = \"ncosed\"\n"
                         "[[node]]\nname = \"n1\"\nlockd = [\"shm://" + dir / "n1-fabric.sock" +
                         "\"]\n");
  }
  std::vector<std::string> lockd_args(const std::string& user) {
    return {TIERCE_LOCKD_BINARY, "-t", topo, "-n", "n1", "-s", sock, "-d", dir / "state",
            "-p", pid_file, "--user", user, "-f"};
  }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(lockd_user, Fixture)

BOOST_AUTO_TEST_CASE(started_as_root_drops_to_user_and_still_serves,
                     *boost::unit_test::precondition(needs_root)) {
  passwd* pw = ::getpwnam("nobody");
  BOOST_TEST_REQUIRE(pw);
  const std::string u = std::to_string(pw->pw_uid), g = std::to_string(pw->pw_gid);
  // The user removes its pid file and socket at stop: their directory is its.
  BOOST_TEST_REQUIRE(::chown(dir.path().c_str(), pw->pw_uid, pw->pw_gid) == 0);
  Proc lockd(lockd_args("nobody"), log);
  bool up = eventually([&] { return read_file(log).find("LOCKD0042") != std::string::npos; },
                       10000ms);
  BOOST_TEST_INFO("lockd log:\n" << read_file(log));
  BOOST_TEST_REQUIRE(up);

  std::string status = read_file("/proc/" + std::to_string(lockd.pid) + "/status");
  BOOST_TEST_INFO(status);
  BOOST_TEST(status.find("\nUid:\t" + u + "\t" + u + "\t" + u + "\t" + u + "\n") !=
             std::string::npos);
  BOOST_TEST(status.find("\nGid:\t" + g + "\t" + g + "\t" + g + "\t" + g + "\n") !=
             std::string::npos);
  BOOST_TEST(status.find("\nNoNewPrivs:\t1\n") != std::string::npos);
  // The socket keeps its mode (0660) and group (root's, who may lock); its owner is the user.
  struct stat st {};
  BOOST_TEST_REQUIRE(::stat(sock.c_str(), &st) == 0);
  BOOST_TEST((st.st_mode & 0777) == 0660u);
  BOOST_TEST(st.st_uid == pw->pw_uid);
  BOOST_TEST(st.st_gid == 0u);
  BOOST_TEST(std::stol(read_file(pid_file)) == long(lockd.pid));

  // Still serving: tierce-lock acquires, runs the command under the lock, releases.
  std::string marker = dir / "ran";
  Proc cli({TIERCE_LOCK_BINARY, "--socket", sock, "job", "/bin/sh", "-c",
            "echo \"$TIERCE_LOCK_TOKEN\" > " + marker},
           dir / "cli.log");
  BOOST_TEST(cli.wait(10000ms) == 0);
  BOOST_TEST_INFO("tierce-lock:\n" << read_file(dir / "cli.log"));
  BOOST_TEST(!read_file(marker).empty());
  Proc again({TIERCE_LOCK_BINARY, "--socket", sock, "-w", "0", "job", "true"}, dir / "cli2.log");
  BOOST_TEST(again.wait(10000ms) == 0);  // released: free again at once

  ::kill(lockd.pid, SIGTERM);
  BOOST_TEST(lockd.wait(5000ms) == 0);
  BOOST_TEST(::access(pid_file.c_str(), F_OK) != 0);
  BOOST_TEST(::access(sock.c_str(), F_OK) != 0);
}

BOOST_AUTO_TEST_CASE(unknown_user_exits_2_naming_it) {
  std::string bad = "tierce-no-such-user-" + random_suffix();
  Proc lockd(lockd_args(bad), log);
  BOOST_TEST(lockd.wait(5000ms) == 2);
  BOOST_TEST_INFO(read_file(log));
  BOOST_TEST(read_file(log).find("--user \"" + bad + "\": no such account") != std::string::npos);
  BOOST_TEST(::access(pid_file.c_str(), F_OK) != 0);
}

BOOST_AUTO_TEST_CASE(help_names_the_option) {
  std::string out = dir / "help.log";
  Proc h({TIERCE_LOCKD_BINARY, "--help"}, out);
  BOOST_TEST(h.wait(5000ms) == 0);
  BOOST_TEST(read_file(out).find("--user NAME") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
