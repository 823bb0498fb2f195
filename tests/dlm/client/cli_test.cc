// tests/dlm/client/cli_test.cc — the real tierce-lock program and the C API (c_api_probe, a C
// program linking libtierce_lock.so) as child processes, against an IpcServer + TestLockService
// in this process: exit codes, environment, conflicts, waiting, lost holds (--on-lost), signal
// forwarding, --status, usage errors.
#define BOOST_TEST_MODULE dlm_cli
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>

#include "dlm/client.h"
#include "test_util.h"

extern char** environ;

using namespace dlm_test;
using tierce::dlm::LockClient;
using tierce::dlm::Mode;

namespace {

// A child process, killed and reaped if the test leaves it running.
struct Child {
  pid_t pid = -1;
  int out_fd = -1;  // its stdout, when piped
  Child() = default;
  Child(Child&& o) noexcept : pid(std::exchange(o.pid, -1)), out_fd(std::exchange(o.out_fd, -1)) {}
  Child& operator=(Child&& o) noexcept {
    if (this != &o) {
      reap();
      pid = std::exchange(o.pid, -1);
      out_fd = std::exchange(o.out_fd, -1);
    }
    return *this;
  }
  ~Child() { reap(); }
  void reap() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
    if (out_fd >= 0) ::close(out_fd);
    out_fd = -1;
  }
  // Its exit code (128+N for signal N), or -1 if it did not end within `limit` (then killed).
  int wait(std::chrono::milliseconds limit = 20s) {
    auto until = std::chrono::steady_clock::now() + limit;
    int st = 0;
    for (;;) {
      pid_t w = ::waitpid(pid, &st, WNOHANG);
      if (w == pid) break;
      if (std::chrono::steady_clock::now() > until) return -1;
      std::this_thread::sleep_for(2ms);
    }
    pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  bool running() { return pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0; }
  // One line of its piped stdout (blocking up to `ms`).
  std::string read_line(int ms = 10000) {
    std::string line;
    char c;
    while (readable(out_fd, ms) && ::read(out_fd, &c, 1) == 1 && c != '\n') line += c;
    return line;
  }
};

// Runs argv with stderr to `err_file` and stdout to `out_file` (or a pipe when empty).
Child spawn(const std::vector<std::string>& args, const std::string& err_file,
            const std::string& out_file = {}) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  int p[2] = {-1, -1};
  if (out_file.empty()) {
    if (::pipe(p) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    posix_spawn_file_actions_addclose(&fa, p[1]);
  } else {
    posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  posix_spawn_file_actions_addopen(&fa, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  Child c;
  int rc = posix_spawn(&c.pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (p[1] >= 0) ::close(p[1]);
  c.out_fd = p[0];
  if (rc != 0) throw std::runtime_error("posix_spawn " + args[0] + ": " + std::strerror(rc));
  return c;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct CliFixture : ServerFixture {
  std::string err = dir / "stderr";
  std::string out = dir / "stdout";
  // tierce-lock --socket <sock> args...
  Child lock_cmd(std::vector<std::string> args) {
    args.insert(args.begin(), {TIERCE_LOCK_BINARY, "--socket", sock});
    return spawn(args, err, out);
  }
  int run(std::vector<std::string> args) { return lock_cmd(std::move(args)).wait(); }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(runs_the_command_with_its_token_and_returns_its_status, CliFixture) {
  std::string f = dir / "env";
  // Inside: the environment, and proof that the lock is held (a nested -n fails with 1).
  std::string script = "echo \"$TIERCE_LOCK_NAME $TIERCE_LOCK_MODE $TIERCE_LOCK_TOKEN\" > " + f +
                       "; " TIERCE_LOCK_BINARY " --socket " + sock +
                       " -n job true; echo \"nested $?\" >> " + f + "; exit 7";
  BOOST_TEST(run({"job", "sh", "-c", script}) == 7, slurp(err));
  BOOST_TEST(slurp(f) == "job exclusive 1001\nnested 1\n");
  BOOST_TEST(eventually([&] { return svc.holders("job").empty(); }));  // released at the end
  BOOST_TEST(eventually([&] { return ipc->clients() == 0; }));

  // Shared: a nested shared lock is granted; -c after NAME, as in flock(1).
  script = "echo \"$TIERCE_LOCK_MODE $TIERCE_LOCK_TOKEN\" > " + f +
           "; " TIERCE_LOCK_BINARY " --socket " + sock + " -s -n job true; echo \"nested $?\" >> " +
           f + "; exit 0";
  BOOST_TEST(run({"-s", "job", "-c", script}) == 0, slurp(err));
  BOOST_TEST(slurp(f) == "shared 1002\nnested 0\n");
  BOOST_TEST(run({"-c", "exit 5", "job"}) == 5);
  BOOST_TEST(run({"job", "true"}) == 0);
  BOOST_TEST(run({"job", "false"}) == 1);
  BOOST_TEST(run({"job", "sh", "-c", "kill -USR1 $$"}) == 128 + SIGUSR1);
}

BOOST_FIXTURE_TEST_CASE(conflicts_give_the_conflict_code, CliFixture) {
  LockClient holder(sock);
  auto h = holder.lock("busy", Mode::Exclusive);
  std::string marker = dir / "ran";
  BOOST_TEST(run({"-n", "busy", "touch", marker}) == 1);
  BOOST_TEST(!std::filesystem::exists(marker));  // the command never ran
  BOOST_TEST(run({"-n", "-E", "42", "busy", "true"}) == 42);
  BOOST_TEST(run({"-s", "-n", "busy", "true"}) == 1);
  auto t0 = std::chrono::steady_clock::now();
  BOOST_TEST(run({"-w", "0.3", "busy", "true"}) == 1);
  auto took = std::chrono::steady_clock::now() - t0;
  BOOST_TEST((took >= 290ms));
  BOOST_TEST((took < 3000ms));
  BOOST_TEST(run({"-w", "0", "-E", "9", "busy", "true"}) == 9);
  BOOST_TEST(svc.waiters("busy") == 0u);
  BOOST_TEST(run({"-n", "free", "true"}) == 0);
}

// A grant read after its lockd's lease ended is released by the library (LeaseLost): the CLI asks
// again while its wait allows, then gives the conflict code with the reason; never runs COMMAND.
BOOST_FIXTURE_TEST_CASE(a_lapsed_grant_is_asked_again_within_the_wait, CliFixture) {
  std::string marker = dir / "ran";
  svc.set_grant_lease(-1ms);
  auto t0 = std::chrono::steady_clock::now();
  BOOST_TEST(run({"-w", "0.3", "lapsed", "touch", marker}) == 1);
  auto took = std::chrono::steady_clock::now() - t0;
  BOOST_TEST((took >= 290ms));
  BOOST_TEST(slurp(err).find("lease") != std::string::npos, slurp(err));
  BOOST_TEST(run({"-n", "-E", "7", "lapsed", "touch", marker}) == 7);
  BOOST_TEST(!std::filesystem::exists(marker));
  BOOST_TEST(svc.acquires() >= 4u);  // asked again, not given up at the first LeaseLost
  BOOST_TEST(eventually([&] { return svc.holders("lapsed").empty(); }));
  svc.set_grant_lease(std::chrono::nanoseconds(10s));  // read in time: used
  BOOST_TEST(run({"-w", "1", "lapsed", "touch", marker}) == 0, slurp(err));
  BOOST_TEST(std::filesystem::exists(marker));
}

BOOST_FIXTURE_TEST_CASE(waits_for_the_holder, CliFixture) {
  LockClient holder(sock);
  auto h = holder.lock("queue", Mode::Exclusive);
  auto c = lock_cmd({"queue", "sh", "-c", "exit 3"});
  BOOST_TEST_REQUIRE(eventually([&] { return svc.waiters("queue") == 1; }));
  std::this_thread::sleep_for(100ms);
  BOOST_TEST(c.running());
  h.unlock();
  BOOST_TEST(c.wait() == 3);
}

BOOST_FIXTURE_TEST_CASE(lost_hold_terminates_the_command, CliFixture) {
  auto c = lock_cmd({"lost", "sleep", "30"});
  BOOST_TEST_REQUIRE(eventually([&] { return svc.holders("lost").size() == 1; }));
  auto t0 = std::chrono::steady_clock::now();
  BOOST_TEST_REQUIRE(svc.revoke(svc.holders("lost")[0].hold, "lease lost: home n2 silent"));
  BOOST_TEST(c.wait(10s) == 75);
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < 5s));
  auto e = slurp(err);
  BOOST_TEST(e.find("LOST") != std::string::npos, e);
  BOOST_TEST(e.find("home n2 silent") != std::string::npos, e);
  BOOST_TEST(e.find("SIGTERM") != std::string::npos, e);
  BOOST_TEST(e.find("killed by signal 15") != std::string::npos, e);
}

BOOST_FIXTURE_TEST_CASE(on_lost_kill_and_ignore, CliFixture) {
  auto c = lock_cmd({"--on-lost=kill", "lost", "sleep", "30"});
  BOOST_TEST_REQUIRE(eventually([&] { return svc.holders("lost").size() == 1; }));
  svc.revoke(svc.holders("lost")[0].hold);
  BOOST_TEST(c.wait(10s) == 75);
  BOOST_TEST(slurp(err).find("killed by signal 9") != std::string::npos, slurp(err));

  std::string f = dir / "finished";
  c = lock_cmd({"--on-lost", "ignore", "lost", "sh", "-c", "sleep 0.5; touch " + f + "; exit 4"});
  BOOST_TEST_REQUIRE(eventually([&] { return svc.holders("lost").size() == 1; }));
  svc.revoke(svc.holders("lost")[0].hold);
  BOOST_TEST(c.wait(10s) == 75);
  BOOST_TEST(std::filesystem::exists(f));  // it ran to its end
  BOOST_TEST(slurp(err).find("exited with status 4") != std::string::npos, slurp(err));
}

BOOST_FIXTURE_TEST_CASE(lockd_going_away_counts_as_lost, CliFixture) {
  auto c = lock_cmd({"gone", "sleep", "30"});
  BOOST_TEST_REQUIRE(eventually([&] { return svc.holders("gone").size() == 1; }));
  ipc->stop();
  BOOST_TEST(c.wait(10s) == 75);
  BOOST_TEST(slurp(err).find("SIGTERM") != std::string::npos, slurp(err));
}

BOOST_FIXTURE_TEST_CASE(signals_are_forwarded_to_the_command, CliFixture) {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    auto c = lock_cmd({"sig", "sleep", "30"});
    BOOST_TEST_REQUIRE(eventually([&] { return svc.holders("sig").size() == 1; }));
    std::this_thread::sleep_for(50ms);  // let it reach its poll loop
    ::kill(c.pid, sig);
    BOOST_TEST(c.wait(10s) == 128 + sig);
    BOOST_TEST(eventually([&] { return svc.holders("sig").empty(); }));
  }
}

BOOST_FIXTURE_TEST_CASE(usage_and_environment_errors, CliFixture) {
  BOOST_TEST(run({}) == 2);
  BOOST_TEST(slurp(err).find("no lock NAME") != std::string::npos, slurp(err));
  BOOST_TEST(run({"name"}) == 2);
  BOOST_TEST(run({"--on-lost=maybe", "name", "true"}) == 2);
  BOOST_TEST(run({"-w", "soon", "name", "true"}) == 2);
  BOOST_TEST(run({"-E", "300", "name", "true"}) == 2);
  BOOST_TEST(run({"name", "-c"}) == 2);
  BOOST_TEST(run({std::string(300, 'n'), "true"}) == 2);
  BOOST_TEST(run({"name", "/nonexistent/command"}) == 127);
  BOOST_TEST(slurp(err).find("cannot run") != std::string::npos, slurp(err));
  BOOST_TEST(eventually([&] { return svc.holders("name").empty(); }));
  BOOST_TEST(
      spawn({TIERCE_LOCK_BINARY, "--socket", dir / "none.sock", "x", "true"}, err, out).wait() ==
      69);
  BOOST_TEST(slurp(err).find("is tierce-lockd running") != std::string::npos, slurp(err));
  BOOST_TEST(spawn({TIERCE_LOCK_BINARY, "--help"}, err, out).wait() == 0);
  auto help = slurp(out);
  for (auto w : {"Exit status", "--on-lost", "TIERCE_LOCK_TOKEN", "--status", "-c", "75", "69"})
    BOOST_TEST(help.find(w) != std::string::npos, w);
}

BOOST_FIXTURE_TEST_CASE(status_prints_lockds_report, CliFixture) {
  std::string text;
  for (int i = 0; text.size() < 20000; ++i) text += "member " + std::to_string(i) + " up\n";
  svc.set_status_text(text);
  BOOST_TEST(run({"--status"}) == 0);
  BOOST_TEST(slurp(out) == text);
  BOOST_TEST(
      spawn({TIERCE_LOCK_BINARY, "--status", "--socket", dir / "none.sock"}, err, out).wait() ==
      69);
}

BOOST_FIXTURE_TEST_CASE(c_api_round_trip, CliFixture) {
  Child c = spawn({C_API_PROBE_BINARY, sock}, err);
  std::string line = c.read_line();
  BOOST_TEST_REQUIRE(line.rfind("HOLD ", 0) == 0, line << " / " << slurp(err));
  uint64_t hold = std::stoull(line.substr(5));
  BOOST_TEST_REQUIRE(svc.holders("c-api-rev").size() == 1u);
  BOOST_TEST(svc.holders("c-api-rev")[0].hold == hold);
  BOOST_TEST(svc.revoke(hold, "probe revocation"));
  BOOST_TEST(c.read_line() == "OK", slurp(err));
  BOOST_TEST(c.wait() == 0, slurp(err));
  BOOST_TEST(eventually([&] { return svc.total_holds() == 0; }));
}

// max_locks_per_uid reaches tierce-lock as TooMany with lockd's message, printed; COMMAND never
// runs.
BOOST_AUTO_TEST_CASE(uid_quota_is_reported_by_the_cli) {
  tierce::lockd::IpcOptions o;
  o.max_locks_per_uid = 1;
  ServerFixture s(false, o);
  LockClient holder(s.sock);  // same uid as the CLI: takes the whole quota
  auto h = holder.lock("held", Mode::Exclusive);
  std::string err = s.dir / "stderr", marker = s.dir / "ran";
  Child c = spawn({TIERCE_LOCK_BINARY, "--socket", s.sock, "other", "touch", marker}, err,
                  s.dir / "stdout");
  int code = c.wait();
  std::string e = slurp(err);
  BOOST_TEST(code != 0, e);
  BOOST_TEST(e.find("max_locks_per_uid 1") != std::string::npos, e);
  BOOST_TEST(!std::filesystem::exists(marker));
  h.unlock();
  c = spawn({TIERCE_LOCK_BINARY, "--socket", s.sock, "other", "touch", marker}, err,
            s.dir / "stdout");
  BOOST_TEST(c.wait() == 0, slurp(err));
  BOOST_TEST(std::filesystem::exists(marker));
}
