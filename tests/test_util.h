// tests/test_util.h — what every test binary may share: a private temp directory, files, a secret
// file, a free tcp port, a log capture, and polling with a deadline (tests wait for events, never
// for fixed times).
#pragma once

#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fabric/log.h"

// Defined in the ASan build. Its redzones, quarantine (freed blocks kept, up to 256 MiB) and
// fake stacks are part of a process's RSS there, so memory bounds (DoS probes) are asserted in the
// plain build only; the ASan build still runs the probes and checks everything else they check.
#if defined(__SANITIZE_ADDRESS__)
#define TIERCE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TIERCE_TEST_ASAN 1
#endif
#endif

// Defined in the TSan build (tools/tsan.sh). Its runtime keeps shadow memory and a few MB of
// state per thread; RSS bounds measured in the plain build do not hold there either.
#if defined(__SANITIZE_THREAD__)
#define TIERCE_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TIERCE_TEST_TSAN 1
#endif
#endif

namespace tierce_test {

using namespace std::chrono_literals;

// Boost.Test's macros are not thread-safe (BOOST_TEST_MESSAGE and the checks update the
// framework's global log state, which ThreadSanitizer reports): threads other than the test's own
// (worker threads, log sinks called from a daemon's threads) write their notes here instead. One
// fprintf per line: stdio serialises it.
inline void thread_message(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
}

inline std::string random_suffix() {
  std::random_device rd;
  std::ostringstream o;
  o << std::hex << ((uint64_t(rd()) << 32) | rd());
  return o.str();
}

// Call first in a forked child that will exec a daemon for a test, with the test process's pid
// taken before the fork: the daemon gets SIGKILL when the test process dies. A crash or a
// sanitizer abort skips the destructors that would stop it, and a daemon left holding ctest's
// output pipe makes ctest wait out the test's whole TIMEOUT.
inline void die_with_parent(pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // it died before the prctl
}

// A private directory under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/tierce-t-XXXXXX";
    // Unix socket paths are short (108 bytes): fall back to /tmp if TMPDIR is deep.
    if (tmpl.size() > 60) tmpl = "/tmp/tierce-t-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back(0);
    if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    path_ = buf.data();
    // Searchable by others (not listable): a server that drops to an account after opening what
    // it serves (tierce-ftpd opens a user's root as that account) must reach paths under here.
    ::chmod(path_.c_str(), 0711);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::string& text, mode_t mode = 0644) {
  {
    std::ofstream out(path, std::ios::trunc);
    out << text;
  }
  if (::chmod(path.c_str(), mode) != 0)
    throw std::runtime_error("chmod " + path + ": " + std::strerror(errno));
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh secret file (mode 0600) in `dir`; returns its path.
inline std::string make_secret(const TempDir& dir) {
  std::string p = dir / "secret";
  write_file(p, "test-secret-" + random_suffix() + random_suffix() + "\n", 0600);
  return p;
}

// A tcp port on 127.0.0.1 that was free a moment ago (for configurations that must name ports
// before the servers start).
// A free TCP port on 127.0.0.1 for a server a test is about to start, the way
// tools/tiercelab/procs.py's free_port picks one: below the kernel's ephemeral range (the kernel
// hands ports of that range to outgoing connections — other tests', MariaDB clients' — at any
// time, so a port it offered through bind(0) may be taken before the server binds it: seen as
// "bind 127.0.0.1:34457: Address already in use" under ctest -j2), random, checked by binding it,
// and never the same port twice in one process.
inline uint16_t free_port() {
  static std::mutex mu;
  static std::vector<uint16_t> handed_out;
  std::lock_guard lk(mu);
  int low = 32768;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &low) != 1) low = 32768;
    std::fclose(f);
  }
  constexpr int kLowest = 10000;
  std::random_device rd;
  std::mt19937 rng(rd());
  auto try_bind = [](uint16_t port) -> uint16_t {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    socklen_t len = sizeof a;
    if (ok) ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ok ? ntohs(a.sin_port) : 0;
  };
  auto fresh = [&](uint16_t p) {
    return p != 0 && std::find(handed_out.begin(), handed_out.end(), p) == handed_out.end();
  };
  for (int i = 0; i < 4000 && low - 1 - kLowest >= 1000; ++i) {
    uint16_t p = try_bind(uint16_t(std::uniform_int_distribution<int>(kLowest, low - 1)(rng)));
    if (fresh(p)) {
      handed_out.push_back(p);
      return p;
    }
  }
  for (int i = 0; i < 1000; ++i) {  // no room below the range: the kernel's choice
    uint16_t p = try_bind(0);
    if (fresh(p)) {
      handed_out.push_back(p);
      return p;
    }
  }
  throw std::runtime_error("free_port: no free port on 127.0.0.1");
}

// Collects log lines so tests can check which ids were logged, and how often.
struct LogCapture {
  std::mutex mu;
  std::vector<std::string> lines;
  tierce::fabric::LogSink sink() {
    return [this](tierce::fabric::LogLevel, std::string_view line) {
      std::lock_guard g(mu);
      lines.emplace_back(line);
    };
  }
  size_t count(const std::string& needle) {
    std::lock_guard g(mu);
    size_t n = 0;
    for (auto& l : lines) n += l.find(needle) != std::string::npos;
    return n;
  }
  std::string all() {
    std::lock_guard g(mu);
    std::string s;
    for (auto& l : lines) s += l + "\n";
    return s;
  }
};

// Polls `cond` until it holds or `limit` passes.
inline bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds limit = 5000ms,
                       std::chrono::milliseconds step = 10ms) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(step);
  }
}

}  // namespace tierce_test
