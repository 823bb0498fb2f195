// tests/support/process.h — child processes for tests, one way: `spawn` starts a program (a
// daemon under test, a system server, a client) with its output appended to a log, and returns
// a `Child` that is always gone at scope end (SIGKILLed if still running, then reaped). Every C++
// test that starts a process uses these (the Python drivers use tools/tiercelab).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/test_util.h"

namespace tierce_test {

// A child process that is always gone at scope end: SIGKILLed if still running, then reaped.
class Child {
 public:
  Child() = default;
  explicit Child(pid_t pid) : pid_(pid) {}
  Child(Child&& o) noexcept : pid_(std::exchange(o.pid_, -1)), status_(o.status_) {}
  Child& operator=(Child&& o) noexcept {
    if (this != &o) {
      kill_now();
      pid_ = std::exchange(o.pid_, -1);
      status_ = o.status_;
    }
    return *this;
  }
  ~Child() { kill_now(); }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }

  void signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // Waits up to `limit` for the child to exit; returns its exit code, or -1 on timeout / when it
  // was killed by a signal (then killed_by() tells which).
  int wait_exit(std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (pid_ > 0) {
      int st = 0;
      pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        status_ = st;
        break;
      }
      if (r < 0) return -1;
      if (std::chrono::steady_clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  }
  // Waits for the exit however long it takes; the exit code, or -1 when killed by a signal.
  int wait() {
    if (pid_ > 0) {
      int st = 0;
      while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
      status_ = st;
      pid_ = -1;
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  }
  int killed_by() const { return WIFSIGNALED(status_) ? WTERMSIG(status_) : 0; }
  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    status_ = st;
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
};

// Where a spawned process reads and writes: files, opened in the child. `out` and `err` may name
// the same file (then both go to it); `append` keeps what the files held.
struct Stdio {
  std::string in = "/dev/null";
  std::string out;
  std::string err;
  bool append = true;
};

// Starts argv (argv[0] searched on PATH when it has no '/') with its standard descriptors on
// `io`, no other descriptor inherited, an empty signal mask, and killed if the test process dies.
// Exit code 127 in the child: the program could not be executed.
inline Child spawn(const std::vector<std::string>& argv, const Stdio& io) {
  if (argv.empty()) throw std::invalid_argument("spawn: no program");
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    die_with_parent(parent);
    const int mode = O_WRONLY | O_CREAT | (io.append ? O_APPEND : O_TRUNC);
    int in = ::open(io.in.c_str(), O_RDONLY);
    if (in >= 0) ::dup2(in, 0);
    int out = ::open(io.out.c_str(), mode, 0644);
    if (out >= 0) ::dup2(out, 1);
    int err = io.err == io.out ? out : ::open(io.err.c_str(), mode, 0644);
    if (err >= 0) ::dup2(err, 2);
    for (int i = 3; i < 1024; ++i) ::close(i);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<std::string> copy = argv;
    std::vector<char*> a;
    for (auto& s : copy) a.push_back(s.data());
    a.push_back(nullptr);
    ::execvp(a[0], a.data());
    ::_exit(127);
  }
  return Child(pid);
}

// Starts argv with stdout and stderr appended to `log_path`, stdin /dev/null.
inline Child spawn(const std::vector<std::string>& argv, const std::string& log_path) {
  return spawn(argv, Stdio{"/dev/null", log_path, log_path, true});
}

// `binary args...` (the form the daemon tests use), output appended to `log_path`.
inline Child spawn(const std::string& binary, const std::vector<std::string>& args,
                   const std::string& log_path) {
  std::vector<std::string> argv{binary};
  argv.insert(argv.end(), args.begin(), args.end());
  return spawn(argv, log_path);
}

// `binary args...` on `io`.
inline Child spawn(const std::string& binary, const std::vector<std::string>& args,
                   const Stdio& io) {
  std::vector<std::string> argv{binary};
  argv.insert(argv.end(), args.begin(), args.end());
  return spawn(argv, io);
}

// Runs a command to its end; its exit code (-1 when killed by a signal).
inline int run_cmd(const std::vector<std::string>& argv, const std::string& log_path) {
  return spawn(argv, log_path).wait();
}

// Runs fn in a forked child with stderr on a pipe: (its wait status, what it wrote to stderr).
// For tests of what aborts (TIERCE_CHECK): SIGABRT keeps its default action in the child, so a
// test framework's handler does not turn the abort into a report.
template <class Fn>
std::pair<int, std::string> in_child(Fn fn) {
  int p[2];
  if (::pipe(p) != 0) throw std::runtime_error("pipe: " + std::string(std::strerror(errno)));
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    ::dup2(p[1], STDERR_FILENO);
    ::close(p[0]);
    std::signal(SIGABRT, SIG_DFL);
    fn();
    ::_exit(0);
  }
  ::close(p[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {status, out};
}

}  // namespace tierce_test
