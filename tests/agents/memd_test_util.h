// tests/agents/memd_test_util.h — what the memd tests share beyond tests/test_util.h: unique
// segment names, RAII owners for segments and child processes, and MemdFixture (a real
// tierce-memd with one role section, over tcp and shm).
#pragma once

#include <boost/test/unit_test.hpp>

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
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fabric/fabric.h"
#include "fabric/segment.h"
#include "tests/support/process.h"
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

// Child and spawn come from tests/support/process.h (one way to start a process in a test).
using tierce_test::Child;

// Starts `binary args...` (a daemon under test) with stdout and stderr appended to `log_path`.
inline Child spawn_binary(const std::string& binary, const std::vector<std::string>& args,
                          const std::string& log_path) {
  return tierce_test::spawn(binary, args, log_path);
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

// A real tierce-memd in its own temporary directory (secret, config, log, ready file, shm socket),
// listening on tcp and shm, with the role section a test suite gives (role_section()). The
// process is SIGKILLed at scope end; a derived fixture unlinks its role's segments after that.
class MemdFixture {
 public:
  MemdFixture(std::string binary, const std::string& node_prefix)
      : node(node_prefix + std::to_string(::getpid()) + "-" + random_suffix().substr(0, 8)),
        binary_(std::move(binary)) {}
  virtual ~MemdFixture() { memd.kill_now(); }
  MemdFixture(const MemdFixture&) = delete;
  MemdFixture& operator=(const MemdFixture&) = delete;

  TempDir dir;
  std::string secret_path = make_secret(dir);
  tierce::fabric::Secret secret = tierce::fabric::Secret::from_file(secret_path);
  std::string node;
  std::string config_path = dir / "memd.toml";
  std::string log_path = dir / "memd.log";
  std::string ready_path = dir / "memd.ready";
  std::string sock_path = dir / "memd.sock";
  std::string tcp_listen = "tcp://127.0.0.1:0";  // a restart may keep the port
  Child memd;

  // The role's configuration (e.g. "[pool]\nbytes = ...\n"), appended to the [memd] table.
  virtual std::string role_section() { return ""; }

  std::string config_text(const std::string& role) {
    return "[memd]\nnode = \"" + node + "\"\nlisten = [\"" + tcp_listen + "\", \"shm://" +
           sock_path + "\"]\nsecret_file = \"" + secret_path + "\"\nready_file = \"" + ready_path +
           "\"\nlog = \"stderr\"\nlog_level = \"debug\"\nheartbeat_ms = 10\nlease_ms = 200\n"
           "rescan_ms = 50\n\n" +
           role;
  }
  std::string log() { return read_file(log_path); }

  // Starts tierce-memd with `args`, its output appended to `log_path`.
  Child spawn(const std::vector<std::string>& args, const std::string& log_path) {
    return spawn_binary(binary_, args, log_path);
  }

  // Writes the configuration, starts memd in the foreground and waits for its ready file.
  void start() {
    ::unlink(ready_path.c_str());
    write_file(config_path, config_text(role_section()));
    memd = spawn({"--foreground", "-c", config_path}, log_path);
    bool ready = eventually(
        [&] {
          if (::access(ready_path.c_str(), F_OK) == 0) return true;
          memd.wait_exit(0ms);
          if (!memd.running())
            throw std::runtime_error("tierce-memd exited during startup:\n" + log());
          return false;
        },
        10s);
    BOOST_TEST_INFO("memd log:\n" << log());
    BOOST_TEST_REQUIRE(ready);
  }
  // SIGTERM, and a clean exit (0) within 5 s.
  void stop() {
    memd.signal(SIGTERM);
    BOOST_TEST(memd.wait_exit(5000ms) == 0);
  }
  // The address of `scheme` ("tcp", "shm") memd wrote to its ready file.
  std::string uri(const std::string& scheme) {
    std::istringstream in(read_file(ready_path));
    for (std::string u; std::getline(in, u);)
      if (u.rfind(scheme + "://", 0) == 0) return u;
    throw std::runtime_error("no " + scheme + " address in the ready file");
  }
  std::unique_ptr<tierce::fabric::Connection> connect(const std::string& scheme) {
    tierce::fabric::ClientOptions o;
    o.secret = secret;
    o.op_timeout = 2000ms;
    return tierce::fabric::connect(uri(scheme), o);
  }
  // Runs the binary with `args` to its end; returns its exit code and output.
  int run(const std::vector<std::string>& args, std::string* out) {
    std::string path = dir / ("run-" + random_suffix() + ".out");
    Child c = spawn(args, path);
    int code = c.wait_exit(10000ms);
    *out = read_file(path);
    return code;
  }

 private:
  std::string binary_;
};

}  // namespace memd_test
