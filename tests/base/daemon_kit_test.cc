// tests/base/daemon_kit_test.cc — base/daemon_kit.h with real processes: each daemon is a forked
// child running DaemonKit::run; its hooks tell the test what ran through a pipe ("start",
// "reload", "usr1", "stop"), and the test sends real signals and reads the real pid and ready
// files.
#define BOOST_TEST_MODULE base_daemon_kit
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "base/daemon_kit.h"

using namespace tierce;

namespace {

bool exists(const std::string& path) {
  return ::access(path.c_str(), F_OK) == 0;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Waits up to 10 s for `path` to appear.
bool wait_for_file(const std::string& path) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!exists(path)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Waits up to 10 s for `path` to go.
bool wait_for_gone(const std::string& path) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (exists(path)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// A temporary directory with the daemon's pid and ready files, removed at the end.
struct Dir {
  Dir() {
    char tmpl[] = "/tmp/daemon_kit_test.XXXXXX";
    BOOST_TEST_REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~Dir() { (void)!std::system(("rm -rf " + path).c_str()); }
  std::string pid_file() const { return path + "/d.pid"; }
  std::string ready_file() const { return path + "/d.ready"; }
  std::string path;
};

// How the test daemon behaves.
struct Behaviour {
  bool background = false;
  bool fail_start = false;  // the start hook fails (exit 1)
  bool hold_start = false;  // the start hook waits for the test's go
  int serve_code = -1;      // >= 0: a serve hook returning it instead of the loop
};

// One daemon in a forked child. Its hooks write one line per event to `events`.
class Daemon {
 public:
  Daemon(const Dir& dir, Behaviour b) {
    int ev[2], go[2];
    BOOST_TEST_REQUIRE(::pipe(ev) == 0);
    BOOST_TEST_REQUIRE(::pipe(go) == 0);
    std::cout.flush();  // or a child prints the test log's buffer again
    std::fflush(nullptr);
    pid_ = ::fork();
    BOOST_TEST_REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(ev[0]);
      ::close(go[1]);
      ::_exit(child(dir, b, ev[1], go[0]));
    }
    ::close(ev[1]);
    ::close(go[0]);
    events_ = ev[0];
    go_ = go[1];
  }
  ~Daemon() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(events_);
    ::close(go_);
  }

  pid_t pid() const { return pid_; }
  void signal(int sig) { BOOST_TEST_REQUIRE(::kill(pid_, sig) == 0); }
  void go() { BOOST_TEST_REQUIRE(::write(go_, "g", 1) == 1); }

  // The next event line, "" when none within 10 s (or the child closed the pipe).
  std::string next_event() {
    std::string line;
    for (;;) {
      pollfd p{events_, POLLIN, 0};
      if (::poll(&p, 1, 10000) <= 0) return "";
      char c;
      if (::read(events_, &c, 1) != 1) return "";
      if (c == '\n') return line;
      line += c;
    }
  }

  // The exit code (128 + signal when killed); waits up to 10 s, then kills.
  int wait_exit() {
    int st = 0;
    for (int i = 0; i < 1000; ++i) {
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

 private:
  static void say(int fd, const std::string& line) {
    std::string s = line + "\n";
    (void)!::write(fd, s.data(), s.size());
  }

  static int child(const Dir& dir, const Behaviour& b, int ev, int go) {
    base::DaemonSpec spec;
    spec.program = "daemon_kit_test";
    spec.foreground = !b.background;
    spec.to_stderr = true;
    spec.pid_file = dir.pid_file();
    spec.ready_file = dir.ready_file();
    spec.clear_ready_file = true;
    spec.remove_ready_file = true;
    spec.signals = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};
    base::DaemonMessages m;
    m.pid_file_held = [](pid_t pid) { return "TEST0001 pid file held by " + std::to_string(pid); };
    m.pid_file_failed = [](const std::string& why) { return "TEST0002 pid file: " + why; };
    m.signals_failed = "TEST0003 signals: ";
    m.ready_file_failed = [](const std::string& why) { return "TEST0004 ready file: " + why; };
    m.stopping = "TEST0005 received ";
    base::DaemonKit kit(std::move(spec), std::move(m));
    base::DaemonHooks h;
    h.start = [&](base::DaemonKit& k) -> int {
      // What a launcher could see while the server is still starting.
      say(ev, std::string("start pid_file=") + (exists(dir.pid_file()) ? "yes" : "no") +
                  " ready_file=" + (exists(dir.ready_file()) ? "yes" : "no"));
      if (b.hold_start) {
        char c;
        if (::read(go, &c, 1) != 1) return k.fail(base::kExitFailure, "TEST0006 no go");
      }
      if (b.fail_start) return k.fail(base::kExitFailure, "TEST0007 the start failed");
      return base::kExitOk;
    };
    h.ready_text = [] { return std::string("uri of the test daemon\n"); };
    h.reload = [&] { say(ev, "reload"); };
    h.signal = [&](base::Signal sig) {
      if (sig.number == SIGUSR1) say(ev, "usr1");
    };
    h.stop = [&] { say(ev, "stop"); };
    if (b.serve_code >= 0) h.serve = [&](base::DaemonKit&) { return b.serve_code; };
    return kit.run(h);
  }

  pid_t pid_ = -1;
  int events_ = -1, go_ = -1;
  bool reaped_ = false;
};

}  // namespace

BOOST_AUTO_TEST_CASE(pid_file_names_the_daemon_and_goes_at_the_stop) {
  Dir dir;
  Daemon d(dir, {});
  BOOST_TEST(d.next_event() == "start pid_file=yes ready_file=no");
  BOOST_TEST_REQUIRE(wait_for_file(dir.ready_file()));
  BOOST_TEST(std::atoi(read_file(dir.pid_file()).c_str()) == d.pid());
  d.signal(SIGTERM);
  BOOST_TEST(d.next_event() == "stop");
  BOOST_TEST(d.wait_exit() == base::kExitOk);
  BOOST_TEST(!exists(dir.pid_file()));
  BOOST_TEST(!exists(dir.ready_file()));
}

BOOST_AUTO_TEST_CASE(a_second_start_is_refused_with_exit_3_while_the_first_runs) {
  Dir dir;
  Daemon first(dir, {});
  BOOST_TEST(first.next_event() == "start pid_file=yes ready_file=no");
  BOOST_TEST_REQUIRE(wait_for_file(dir.ready_file()));
  Daemon second(dir, {});
  BOOST_TEST(second.wait_exit() == base::kExitRunning);
  BOOST_TEST(second.next_event() == "");  // its start hook never ran
  // In the background, the starting process exits with the daemon's 3 as well.
  Daemon third(dir, {/*background=*/true});
  BOOST_TEST(third.wait_exit() == base::kExitRunning);
  BOOST_TEST(std::atoi(read_file(dir.pid_file()).c_str()) == first.pid());
  BOOST_TEST(exists(dir.ready_file()));  // the first one's, left alone
  first.signal(SIGINT);
  BOOST_TEST(first.next_event() == "stop");
  BOOST_TEST(first.wait_exit() == base::kExitOk);
  BOOST_TEST(!exists(dir.pid_file()));
}

BOOST_AUTO_TEST_CASE(sighup_reaches_the_reload_hook_and_usr1_the_signal_hook) {
  Dir dir;
  Daemon d(dir, {});
  BOOST_TEST_REQUIRE(d.next_event().rfind("start", 0) == 0);
  BOOST_TEST_REQUIRE(wait_for_file(dir.ready_file()));
  d.signal(SIGHUP);
  BOOST_TEST(d.next_event() == "reload");
  d.signal(SIGUSR1);
  BOOST_TEST(d.next_event() == "usr1");
  d.signal(SIGHUP);
  BOOST_TEST(d.next_event() == "reload");
  BOOST_TEST(::kill(d.pid(), 0) == 0);  // still running
  d.signal(SIGTERM);
  BOOST_TEST(d.next_event() == "stop");
  BOOST_TEST(d.wait_exit() == base::kExitOk);
}

BOOST_AUTO_TEST_CASE(the_ready_file_comes_only_after_the_start_hook_succeeded) {
  Dir dir;
  { std::ofstream(dir.ready_file()) << "left by an earlier run\n"; }
  Behaviour b;
  b.hold_start = true;
  Daemon d(dir, b);
  // The old ready file is gone before the start hook runs, and no new one while it runs.
  BOOST_TEST(d.next_event() == "start pid_file=yes ready_file=no");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  BOOST_TEST(!exists(dir.ready_file()));
  d.go();
  BOOST_TEST_REQUIRE(wait_for_file(dir.ready_file()));
  BOOST_TEST(read_file(dir.ready_file()) == "uri of the test daemon\n");
  d.signal(SIGTERM);
  BOOST_TEST(d.next_event() == "stop");
  BOOST_TEST(d.wait_exit() == base::kExitOk);
}

BOOST_AUTO_TEST_CASE(a_failing_start_hook_exits_1_and_leaves_no_pid_or_ready_file) {
  for (bool background : {false, true}) {
    Dir dir;
    Behaviour b;
    b.background = background;
    b.fail_start = true;
    Daemon d(dir, b);
    BOOST_TEST(d.wait_exit() == base::kExitFailure, "background " << background);
    // In the background the starting process exits on the report, just before the daemon
    // releases its pid file.
    BOOST_TEST(wait_for_gone(dir.pid_file()));
    BOOST_TEST(!exists(dir.ready_file()));
    if (!background) {  // the daemon is this child; in the background, its grandchild
      BOOST_TEST(d.next_event() == "start pid_file=yes ready_file=no");
      BOOST_TEST(d.next_event() == "");  // no stop hook: nothing was serving
    }
  }
}

BOOST_AUTO_TEST_CASE(a_serve_hook_replaces_the_loop_and_its_code_is_the_exit_code) {
  Dir dir;
  Behaviour b;
  b.serve_code = 7;
  Daemon d(dir, b);
  BOOST_TEST(d.wait_exit() == 7);
  BOOST_TEST(d.next_event() == "start pid_file=yes ready_file=no");
  BOOST_TEST(d.next_event() == "stop");
  BOOST_TEST(!exists(dir.pid_file()));
}
