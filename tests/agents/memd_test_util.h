// tests/agents/memd_test_util.h — what the memd tests share beyond tests/test_util.h: unique
// segment names, RAII owners for segments and child processes.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fabric/fabric.h"
#include "fabric/segment.h"
#include "tests/test_util.h"

namespace memd_test {

using namespace std::chrono_literals;
using namespace tierce_test;

// A segment name nobody else uses: "/tierce.t<pid>.<random>.<tag>".
inline std::string unique_segment(const std::string& tag) {
  return "/tierce.t" + std::to_string(::getpid()) + "." + random_suffix() + "." + tag;
}

// Unlinks the named segments at scope end, whatever happened.
class SegmentNames {
 public:
  std::string add(const std::string& tag) {
    names_.push_back(unique_segment(tag));
    return names_.back();
  }
  ~SegmentNames() {
    for (auto& n : names_) tierce::fabric::SharedSegment::unlink(n);
  }

 private:
  std::vector<std::string> names_;
};

// The error code a call throws, or Ok.
template <class F>
tierce::fabric::Errc errc_of(F&& f) {
  try {
    f();
  } catch (const tierce::fabric::FabricError& e) {
    return e.code();
  }
  return tierce::fabric::Errc::Ok;
}

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
  // was killed by a signal (then killed() tells which).
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
      std::this_thread::sleep_for(5ms);
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

// Starts `binary args...` (a daemon under test) with stdout and stderr appended to `log_path`, no
// other descriptor inherited, an empty signal mask, and killed if the test process dies.
inline Child spawn_binary(const std::string& binary, const std::vector<std::string>& args,
                          const std::string& log_path) {
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork");
  if (pid == 0) {
    tierce_test::die_with_parent(parent);
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    for (int i = 3; i < 1024; ++i) ::close(i);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> argv;
    std::string bin = binary;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  return Child(pid);
}

// A child that creates segment `name` (so the child is its creator/owner), reports through a
// pipe, and exits when told to (or when the test process goes away).
class SegmentOwner {
 public:
  SegmentOwner(const std::string& name, size_t len) {
    int ready[2], go[2];
    if (::pipe(ready) != 0 || ::pipe(go) != 0) throw std::runtime_error("pipe");
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork");
    if (pid == 0) {
      // Only our two pipe ends: an inherited write end of another owner's pipe would keep that
      // owner from ever seeing EOF.
      for (int fd = 3; fd < 1024; ++fd)
        if (fd != ready[1] && fd != go[0]) ::close(fd);
      char ok = 'y';
      try {
        auto seg = tierce::fabric::SharedSegment::create(name, len);
        seg.data()[0] = 0x5a;
      } catch (...) {
        ok = 'n';
      }
      if (::write(ready[1], &ok, 1) != 1) ::_exit(3);
      char c;
      while (::read(go[0], &c, 1) < 0 && errno == EINTR) {
      }
      ::_exit(0);  // the mapping goes with us; the named object stays
    }
    child_ = Child(pid);
    ::close(ready[1]);
    ::close(go[0]);
    go_ = go[1];
    char ok = 0;
    if (::read(ready[0], &ok, 1) != 1 || ok != 'y') {
      ::close(ready[0]);
      throw std::runtime_error("the owner child could not create " + name);
    }
    ::close(ready[0]);
  }
  ~SegmentOwner() {
    if (go_ >= 0) ::close(go_);
  }
  pid_t pid() const { return child_.pid(); }
  // Makes the owner exit and reaps it.
  void exit_now() {
    if (go_ >= 0) ::close(go_);
    go_ = -1;
    child_.wait_exit(5000ms);
    child_.kill_now();
  }

 private:
  Child child_;
  int go_ = -1;
};

}  // namespace memd_test
