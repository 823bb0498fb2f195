// tests/ftp/wanem/wanem_test.cc — tierce-wanem, the WAN emulator relay, run as a real process
// (docs/ftp.md "tierce-wanem"): bytes arrive intact both ways, FIN and resets propagate, the
// delay, rate and window bound what a connection can do (lower bounds on time only: a relay
// that is slower than configured on a busy machine is not a failure, one that is faster is),
// port ranges map in order, bad arguments exit 2 and a busy port exits 1. The --control socket:
// each command answers, a cut direction holds its bytes (existing and new connections; the target
// does not even see a new connection while to-target is cut) while the other flows, heal delivers
// everything held intact, delay changes the delay of what is read afterwards.
//
// One executable; ctest runs each test case as its own test (wanem_<case>).
#define BOOST_TEST_MODULE wanem
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"

#ifndef TIERCE_WANEM_BINARY
#error "TIERCE_WANEM_BINARY must name the tierce-wanem executable"
#endif

extern char** environ;

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using tierce_test::TempDir;

// ---- sockets ------------------------------------------------------------------------------------

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    reset();
    fd = o.fd;
    o.fd = -1;
    return *this;
  }
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  int get() const { return fd; }
};

void set_timeouts(int fd, std::chrono::seconds s = 30s) {
  timeval tv{};
  tv.tv_sec = s.count();
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// A listener on 127.0.0.1:port (0 = any); returns an invalid Fd if the port is taken.
Fd listen_on(uint16_t port) {
  Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return Fd();
  if (::listen(s.get(), 64) != 0) return Fd();
  return s;
}

uint16_t port_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// Accepts one connection, waiting at most 30 s.
Fd accept_one(int lfd) {
  pollfd p{lfd, POLLIN, 0};
  if (::poll(&p, 1, 30000) != 1) return Fd();
  Fd c(::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC));
  if (c.get() >= 0) set_timeouts(c.get());
  return c;
}

Fd connect_to(uint16_t port) {
  Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  ::setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  set_timeouts(s.get());
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return Fd();
  return s;
}

bool send_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}
bool send_str(int fd, const std::string& s) {
  return send_all(fd, reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// Reads until EOF (or an error, or `limit` bytes); `err` gets errno of a failed read (0 = EOF).
std::vector<uint8_t> recv_all(int fd, size_t limit = SIZE_MAX, int* err = nullptr) {
  std::vector<uint8_t> out;
  std::vector<uint8_t> buf(1 << 18);
  if (err) *err = 0;
  while (out.size() < limit) {
    ssize_t r = ::recv(fd, buf.data(), std::min(buf.size(), limit - out.size()), 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      if (err) *err = errno;
      break;
    }
    if (r == 0) break;
    out.insert(out.end(), buf.begin(), buf.begin() + r);
  }
  return out;
}
std::string recv_str(int fd, size_t limit = SIZE_MAX, int* err = nullptr) {
  auto v = recv_all(fd, limit, err);
  return std::string(v.begin(), v.end());
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t x = rng();
    std::memcpy(&v[i], &x, 8);
  }
  for (size_t i = n & ~size_t(7); i < n; ++i) v[i] = uint8_t(rng());
  return v;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- the relay process ----------------------------------------------------------------------------

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal or did not finish
  std::string output;  // stdout + stderr
};

// Runs tierce-wanem with `args` to completion (for the argument checks), at most 20 s.
RunResult run_wanem(const std::vector<std::string>& args) {
  TempDir dir;
  std::string out = dir / "out";
  std::vector<std::string> argv{TIERCE_WANEM_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  RunResult r;
  if (rc != 0) return r;
  int status = 0;
  bool done = tierce_test::eventually(
      [&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 20000ms);
  if (!done) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  } else if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  }
  r.output = tierce_test::read_file(out);
  return r;
}

// A running relay; stopped with SIGTERM by stop() or the destructor. stop() returns the exit code.
// With `control`, it listens on control_path() for runtime commands.
class Wanem {
 public:
  explicit Wanem(std::vector<std::string> args, bool control = false) {
    std::string ready = dir_ / "ready";
    log_ = dir_ / "log";
    args.push_back("--ready-file");
    args.push_back(ready);
    if (control) {
      control_ = dir_ / "ctl";
      args.push_back("--control");
      args.push_back(control_);
    }
    std::vector<std::string> argv{TIERCE_WANEM_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    int rc = posix_spawn(&pid_, argv[0].c_str(), &fa, nullptr, cargv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    BOOST_REQUIRE_MESSAGE(rc == 0, "cannot start " << argv[0] << ": " << std::strerror(rc));
    bool ok = tierce_test::eventually(
        [&] {
          struct stat st{};
          return ::stat(ready.c_str(), &st) == 0 || ::waitpid(pid_, &status_, WNOHANG) == pid_;
        },
        15000ms);
    struct stat st{};
    BOOST_REQUIRE_MESSAGE(ok && ::stat(ready.c_str(), &st) == 0,
                          "tierce-wanem did not get ready:\n" << log());
    BOOST_CHECK(log().find("tierce-wanem: ready") != std::string::npos);
  }
  ~Wanem() {
    if (pid_ > 0) stop();
  }
  Wanem(const Wanem&) = delete;
  Wanem& operator=(const Wanem&) = delete;

  int stop() {
    if (pid_ <= 0) return exit_code_;
    ::kill(pid_, SIGTERM);
    bool done = tierce_test::eventually(
        [&] { return ::waitpid(pid_, &status_, WNOHANG) == pid_; }, 10000ms);
    if (!done) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
    }
    exit_code_ = done && WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
    pid_ = -1;
    return exit_code_;
  }
  std::string log() const { return tierce_test::read_file(log_); }
  const std::string& control_path() const { return control_; }

  // Sends one command line over a fresh connection to the control socket; returns the answer
  // line without its newline ("" when there was none within 10 s).
  std::string control(const std::string& command) const {
    Fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    set_timeouts(s.get(), 10s);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", control_.c_str());
    if (::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return "";
    if (!send_str(s.get(), command + "\n")) return "";
    std::string answer;
    char ch;
    while (::recv(s.get(), &ch, 1, 0) == 1 && ch != '\n') answer += ch;
    return answer;
  }

 private:
  TempDir dir_;
  std::string log_;
  std::string control_;
  pid_t pid_ = -1;
  int status_ = 0;
  int exit_code_ = -1;
};

std::string fwd(uint16_t listen, uint16_t target) {
  return "127.0.0.1:" + std::to_string(listen) + "=127.0.0.1:" + std::to_string(target);
}

// A target server in a thread; `serve` gets each accepted connection (one at a time).
class Target {
 public:
  template <class F>
  Target(F serve, int connections = 1) : Target(listen_on(0), serve, connections) {}
  template <class F>
  Target(Fd listener, F serve, int connections = 1) : lfd_(std::move(listener)) {
    BOOST_REQUIRE(lfd_.get() >= 0);
    port_ = port_of(lfd_.get());
    thread_ = std::thread([this, serve, connections] {
      for (int i = 0; i < connections; ++i) {
        Fd c = accept_one(lfd_.get());
        if (c.get() < 0) return;
        serve(c);
      }
    });
  }
  ~Target() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  uint16_t port() const { return port_; }

 private:
  Fd lfd_;
  uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace

// 20 MB of random bytes each way at once through a small, odd-sized window (the ring wraps at
// unaligned offsets) with a delay: what the echo server sends back is exactly what was sent.
BOOST_AUTO_TEST_CASE(intact) {
  constexpr size_t kBytes = 20'000'000;
  const auto data = random_bytes(kBytes, 42);
  Target echo([](Fd& c) {
    std::vector<uint8_t> buf(1 << 16);
    for (;;) {
      ssize_t r = ::recv(c.get(), buf.data(), buf.size(), 0);
      if (r <= 0) break;
      if (!send_all(c.get(), buf.data(), size_t(r))) break;
    }
    ::shutdown(c.get(), SHUT_WR);
  });
  uint16_t lport = tierce_test::free_port();
  Wanem relay({"--forward", fwd(lport, echo.port()), "--delay-us", "200", "--window", "100003"});
  Fd c = connect_to(lport);
  BOOST_REQUIRE(c.get() >= 0);
  std::atomic<bool> sent_ok{false};
  std::thread sender([&] {
    sent_ok = send_all(c.get(), data.data(), data.size());
    ::shutdown(c.get(), SHUT_WR);
  });
  auto back = recv_all(c.get());
  sender.join();
  BOOST_CHECK(sent_ok);
  BOOST_REQUIRE_EQUAL(back.size(), data.size());
  BOOST_CHECK(back == data);
  echo.join();
  BOOST_CHECK_EQUAL(relay.stop(), 0);
  BOOST_CHECK(relay.log().find("20000000 bytes to targets, 20000000 bytes to clients") !=
              std::string::npos);
}

// The client half-closes: the target sees its bytes and then EOF, and can still answer over the
// other direction, which the client reads to the target's own EOF.
BOOST_AUTO_TEST_CASE(half_close) {
  std::string got_by_target;
  Target t([&](Fd& c) {
    got_by_target = recv_str(c.get());  // to EOF: only possible if the FIN came through
    send_str(c.get(), "answer after your FIN");
    ::shutdown(c.get(), SHUT_WR);
    recv_str(c.get());
  });
  uint16_t lport = tierce_test::free_port();
  Wanem relay({"--forward", fwd(lport, t.port()), "--delay-us", "1000"});
  Fd c = connect_to(lport);
  BOOST_REQUIRE(c.get() >= 0);
  BOOST_REQUIRE(send_str(c.get(), "question"));
  ::shutdown(c.get(), SHUT_WR);
  int err = -1;
  BOOST_CHECK_EQUAL(recv_str(c.get(), SIZE_MAX, &err), "answer after your FIN");
  BOOST_CHECK_EQUAL(err, 0);  // a clean EOF, not a timeout or reset
  c.reset();
  t.join();
  BOOST_CHECK_EQUAL(got_by_target, "question");
  BOOST_CHECK_EQUAL(relay.stop(), 0);
}

// A 1-byte ping-pong: every round trip takes at least 2 x the one-way delay.
BOOST_AUTO_TEST_CASE(delay) {
  constexpr int kDelayUs = 20000;
  constexpr int kRounds = 5;
  Target t([&](Fd& c) {
    char b;
    for (int i = 0; i < kRounds; ++i) {
      if (::recv(c.get(), &b, 1, 0) != 1) return;
      if (::send(c.get(), &b, 1, MSG_NOSIGNAL) != 1) return;
    }
  });
  uint16_t lport = tierce_test::free_port();
  Wanem relay({"--forward", fwd(lport, t.port()), "--delay-us", std::to_string(kDelayUs)});
  Fd c = connect_to(lport);
  BOOST_REQUIRE(c.get() >= 0);
  double min_rtt = 1e9;
  for (int i = 0; i < kRounds; ++i) {
    char b = char('a' + i);
    auto t0 = Clock::now();
    BOOST_REQUIRE_EQUAL(::send(c.get(), &b, 1, MSG_NOSIGNAL), 1);
    char r = 0;
    BOOST_REQUIRE_EQUAL(::recv(c.get(), &r, 1, 0), 1);
    min_rtt = std::min(min_rtt, seconds_since(t0));
    BOOST_CHECK_EQUAL(r, b);
  }
  BOOST_TEST_MESSAGE("smallest round trip " << min_rtt * 1e6 << " us");
  BOOST_CHECK_GE(min_rtt, 2 * kDelayUs / 1e6);
  c.reset();
  t.join();
  BOOST_CHECK_EQUAL(relay.stop(), 0);
}

// --rate: N bytes cannot arrive in less than N / rate (the token bucket starts empty).
BOOST_AUTO_TEST_CASE(rate) {
  constexpr size_t kBytes = 2'000'000;
  constexpr double kRate = 5'000'000;  // bytes/s -> at least 0.4 s
  const auto data = random_bytes(kBytes, 7);
  std::vector<uint8_t> got;
  Clock::time_point done;
  Target t([&](Fd& c) {
    got = recv_all(c.get());
    done = Clock::now();
  });
  uint16_t lport = tierce_test::free_port();
  Wanem relay({"--forward", fwd(lport, t.port()), "--delay-us", "0", "--rate", "5M"});
  auto t0 = Clock::now();
  Fd c = connect_to(lport);
  BOOST_REQUIRE(c.get() >= 0);
  BOOST_REQUIRE(send_all(c.get(), data.data(), data.size()));
  ::shutdown(c.get(), SHUT_WR);
  t.join();
  double secs = std::chrono::duration<double>(done - t0).count();
  BOOST_TEST_MESSAGE(kBytes << " bytes in " << secs << " s");
  BOOST_CHECK(got == data);
  BOOST_CHECK_GE(secs, kBytes / kRate);
  BOOST_CHECK_EQUAL(relay.stop(), 0);
}

// --window: one connection gets at most window / (2 x delay); N bytes take at least
// (N / window - 1) round trips (the first window goes at once).
BOOST_AUTO_TEST_CASE(window) {
  constexpr size_t kWindow = 64 << 10;
  constexpr size_t kBytes = 32 * kWindow;  // 2 MiB
  constexpr int kDelayUs = 5000;           // round trip 10 ms -> >= 0.31 s
  const auto data = random_bytes(kBytes, 9);
  std::vector<uint8_t> got;
  Clock::time_point done;
  Target t([&](Fd& c) {
    got = recv_all(c.get());
    done = Clock::now();
  });
  uint16_t lport = tierce_test::free_port();
  Wanem relay({"--forward", fwd(lport, t.port()), "--delay-us", std::to_string(kDelayUs),
               "--window", std::to_string(kWindow)});
  auto t0 = Clock::now();
  Fd c = connect_to(lport);
  BOOST_REQUIRE(c.get() >= 0);
  BOOST_REQUIRE(send_all(c.get(), data.data(), data.size()));
  ::shutdown(c.get(), SHUT_WR);
  t.join();
  double secs = std::chrono::duration<double>(done - t0).count();
  double bound = (double(kBytes) / kWindow - 1) * 2 * kDelayUs / 1e6;
  BOOST_TEST_MESSAGE(kBytes << " bytes in " << secs << " s (bound " << bound << " s)");
  BOOST_CHECK(got == data);
  BOOST_CHECK_GE(secs, bound);
  BOOST_CHECK_EQUAL(relay.stop(), 0);
}

// A port range is listened on port by port and mapped in order onto the target range.
BOOST_AUTO_TEST_CASE(range) {
  constexpr int kPorts = 4;
  // Two runs of kPorts consecutive free ports: targets (held open) and the relay's (probed).
  std::vector<Fd> targets;
  uint16_t tbase = 0, lbase = 0;
  std::mt19937 rng(std::random_device{}());
  for (int attempt = 0; attempt < 200 && !lbase; ++attempt) {
    uint16_t base = uint16_t(20000 + rng() % 30000);
    std::vector<Fd> held;
    for (int i = 0; i < kPorts; ++i) {
      Fd f = listen_on(uint16_t(base + i));
      if (f.get() < 0) break;
      held.push_back(std::move(f));
    }
    if (int(held.size()) != kPorts) continue;
    if (!tbase) {
      tbase = base;
      targets = std::move(held);
    } else if (base + kPorts <= tbase || base >= tbase + kPorts) {
      lbase = base;  // `held` closes here; the relay binds them right after
    }
  }
  BOOST_REQUIRE_MESSAGE(lbase, "no run of free ports found");
  std::vector<std::thread> servers;
  for (int i = 0; i < kPorts; ++i) {
    servers.emplace_back([&, i] {
      Fd c = accept_one(targets[i].get());
      if (c.get() >= 0) send_str(c.get(), "target " + std::to_string(i));
    });
  }
  auto range = [](uint16_t b) {
    return std::to_string(b) + "-" + std::to_string(b + kPorts - 1);
  };
  Wanem relay({"--forward", "127.0.0.1:" + range(lbase) + "=127.0.0.1:" + range(tbase),
               "--delay-us", "100"});
  for (int i = kPorts - 1; i >= 0; --i) {
    Fd c = connect_to(uint16_t(lbase + i));
    BOOST_REQUIRE(c.get() >= 0);
    BOOST_CHECK_EQUAL(recv_str(c.get()), "target " + std::to_string(i));
  }
  for (auto& s : servers) s.join();
  BOOST_CHECK_EQUAL(relay.stop(), 0);
}

// The target resets the connection after a last message: the client still gets the message,
// then loses the connection (EOF or reset), and does not hang.
BOOST_AUTO_TEST_CASE(reset) {
  Target t([](Fd& c) {
    char b[16];
    (void)!::recv(c.get(), b, sizeof b, 0);
    send_str(c.get(), "last words");
    linger lg{1, 0};
    ::setsockopt(c.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    c.reset();  // RST
  });
  uint16_t lport = tierce_test::free_port();
  Wanem relay({"--forward", fwd(lport, t.port()), "--delay-us", "2000"});
  Fd c = connect_to(lport);
  BOOST_REQUIRE(c.get() >= 0);
  BOOST_REQUIRE(send_str(c.get(), "hello"));
  t.join();
  int err = -1;
  BOOST_CHECK_EQUAL(recv_str(c.get(), SIZE_MAX, &err), "last words");
  BOOST_CHECK_MESSAGE(err == 0 || err == ECONNRESET, "read ended with " << std::strerror(err));
  // Whatever the client sends now does not go anywhere: sooner or later it fails.
  bool failed = tierce_test::eventually(
      [&] { return ::send(c.get(), "x", 1, MSG_NOSIGNAL) < 0; }, 5000ms, 20ms);
  BOOST_CHECK(failed);
  BOOST_CHECK_EQUAL(relay.stop(), 0);
}

// Nothing listens at the target: the accepted client connection is closed, not left hanging.
BOOST_AUTO_TEST_CASE(refused) {
  uint16_t dead = tierce_test::free_port();
  uint16_t lport = tierce_test::free_port();
  Wanem relay({"--forward", fwd(lport, dead), "--delay-us", "0"});
  Fd c = connect_to(lport);
  BOOST_REQUIRE(c.get() >= 0);
  int err = -1;
  BOOST_CHECK_EQUAL(recv_str(c.get(), SIZE_MAX, &err), "");
  BOOST_CHECK_MESSAGE(err == 0 || err == ECONNRESET, "read ended with " << std::strerror(err));
  BOOST_CHECK_EQUAL(relay.stop(), 0);
  BOOST_CHECK(relay.log().find("failed: Connection refused") != std::string::npos);
}

// Bad command lines exit 2 with a message naming the problem; a port that is taken exits 1.
BOOST_AUTO_TEST_CASE(bad_args) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::string ok = "127.0.0.1:40000=127.0.0.1:40001";
  const std::vector<Case> cases = {
      {{}, "--forward"},
      {{"--delay-us", "10"}, "at least one --forward"},
      {{"--forward", ok}, "--delay-us is required"},
      {{"--forward", "127.0.0.1:40000", "--delay-us", "0"}, "LISTEN=TARGET"},
      {{"--forward", "127.0.0.1:70000=127.0.0.1:1", "--delay-us", "0"}, "not in 1..65535"},
      {{"--forward", "127.0.0.1:0=127.0.0.1:1", "--delay-us", "0"}, "not in 1..65535"},
      {{"--forward", "127.0.0.1:x=127.0.0.1:1", "--delay-us", "0"}, "bad port"},
      {{"--forward", "127.0.0.1:100-90=127.0.0.1:1-11", "--delay-us", "0"}, "ends before"},
      {{"--forward", "127.0.0.1:100-110=127.0.0.1:200-205", "--delay-us", "0"}, "equal length"},
      {{"--forward", "no-such-host.invalid:1=127.0.0.1:2", "--delay-us", "0"}, "cannot resolve"},
      {{"--forward", ok, "--delay-us", "abc"}, "not a non-negative number"},
      {{"--forward", ok, "--delay-us", "-5"}, "not a non-negative number"},
      {{"--forward", ok, "--delay-us", "99999999999"}, "60 s"},
      {{"--forward", ok, "--delay-us", "0", "--rate", "0"}, "--rate"},
      {{"--forward", ok, "--delay-us", "0", "--window", "5X"}, "unknown suffix"},
      {{"--forward", ok, "--delay-us", "0", "--window", "99999999999999999999999"}, "too large"},
      {{"--forward", ok, "--delay-us"}, "needs a value"},
      {{"--forward", ok, "--delay-us", "0", "--bogus"}, "unknown argument"},
      {{"--forward", "/127.0.0.1:1=127.0.0.1:2", "--delay-us", "0"}, "network namespace name"},
      {{"--forward", "a b/127.0.0.1:1=127.0.0.1:2", "--delay-us", "0"}, "network namespace name"},
      {{"--forward", "../127.0.0.1:1=127.0.0.1:2", "--delay-us", "0"}, "network namespace name"},
      {{"--forward", "ns/127.0.0.1=127.0.0.1:2", "--delay-us", "0"}, "not host:port"},
  };
  for (const auto& c : cases) {
    RunResult r = run_wanem(c.args);
    std::string line;
    for (auto& a : c.args) line += a + " ";
    BOOST_CHECK_MESSAGE(r.exit_code == 2, "'" << line << "' exited " << r.exit_code);
    BOOST_CHECK_MESSAGE(r.output.find(c.says) != std::string::npos,
                        "'" << line << "' said: " << r.output << " (expected '" << c.says << "')");
  }
  RunResult help = run_wanem({"--help"});
  BOOST_CHECK_EQUAL(help.exit_code, 0);
  BOOST_CHECK(help.output.find("--window") != std::string::npos);

  Fd busy = listen_on(0);
  BOOST_REQUIRE(busy.get() >= 0);
  RunResult r = run_wanem({"--forward", fwd(port_of(busy.get()), 1), "--delay-us", "0"});
  BOOST_CHECK_EQUAL(r.exit_code, 1);
  BOOST_CHECK_MESSAGE(r.output.find("cannot bind") != std::string::npos, r.output);
}

// ---- runtime control (--control) ------------------------------------------------------------------

namespace {

// Waits up to `ms` for something to read on fd; true if there is (or EOF/error).
bool readable_within(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1;
}

// Reads exactly n bytes (30 s socket timeout); "" on EOF/error before.
std::string recv_n(int fd, size_t n) {
  std::string s = recv_str(fd, n);
  return s.size() == n ? s : std::string();
}

// The value of `key=` in a status answer, or -1.
long long status_value(const std::string& status, const std::string& key) {
  auto p = status.find(" " + key + "=");
  if (p == std::string::npos) return -1;
  return std::atoll(status.c_str() + p + key.size() + 2);
}

}  // namespace

// Every command answers one line: "ok ..." or "error: ..."; bad commands change nothing; --send
// is the command-line client (exit 0 on ok, 1 on error or no relay).
BOOST_AUTO_TEST_CASE(control_commands) {
  Target t([](Fd&) {}, 0);  // a port to forward to; nothing connects (no 30 s accept at the end)
  uint16_t lport = tierce_test::free_port();
  Wanem relay({"--forward", fwd(lport, t.port()), "--delay-us", "150"}, true);
  BOOST_CHECK(relay.log().find("control " + relay.control_path()) != std::string::npos);
  std::string st = relay.control("status");
  BOOST_CHECK_MESSAGE(st.rfind("ok cut=none delay_us=150 connections=0", 0) == 0, st);
  BOOST_CHECK_EQUAL(relay.control("cut to-target"), "ok cut=to-target");
  BOOST_CHECK_EQUAL(relay.control("cut to-client"), "ok cut=both");
  BOOST_CHECK_EQUAL(relay.control("heal to-target"), "ok cut=to-client");
  BOOST_CHECK_EQUAL(relay.control("heal"), "ok cut=none");
  BOOST_CHECK_EQUAL(relay.control("cut both"), "ok cut=both");
  BOOST_CHECK_EQUAL(relay.control("heal both"), "ok cut=none");
  BOOST_CHECK_EQUAL(relay.control("delay 2500"), "ok delay_us=2500");
  BOOST_CHECK_EQUAL(relay.control("  delay 1k  "), "ok delay_us=1000");
  for (std::string bad : {"", "cut", "cut sideways", "cut both extra", "heal up", "delay",
                          "delay -1", "delay x", "delay 99999999999", "status now", "reset all",
                          "frobnicate"}) {
    std::string a = relay.control(bad);
    BOOST_CHECK_MESSAGE(a.rfind("error: ", 0) == 0, "'" << bad << "' answered '" << a << "'");
  }
  st = relay.control("status");
  BOOST_CHECK_MESSAGE(st.rfind("ok cut=none delay_us=1000 ", 0) == 0, st);  // errors changed nothing

  // Several commands on one connection, answered in order.
  {
    Fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    set_timeouts(s.get(), 10s);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", relay.control_path().c_str());
    BOOST_REQUIRE(::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    BOOST_REQUIRE(send_str(s.get(), "cut to-client\r\ndelay 0\nheal\n"));
    std::string want = "ok cut=to-client\nok delay_us=0\nok cut=none\n";
    BOOST_CHECK_EQUAL(recv_n(s.get(), want.size()), want);
  }

  RunResult ok = run_wanem({"--control", relay.control_path(), "--send", "cut to-client"});
  BOOST_CHECK_EQUAL(ok.exit_code, 0);
  BOOST_CHECK_EQUAL(ok.output, "ok cut=to-client\n");
  RunResult err = run_wanem({"--control", relay.control_path(), "--send", "cut nowhere"});
  BOOST_CHECK_EQUAL(err.exit_code, 1);
  BOOST_CHECK(err.output.rfind("error: ", 0) == 0);
  BOOST_CHECK_EQUAL(relay.control("heal"), "ok cut=none");
  RunResult none = run_wanem({"--control", relay.control_path() + ".absent", "--send", "status"});
  BOOST_CHECK_EQUAL(none.exit_code, 1);
  BOOST_CHECK(none.output.find("cannot connect") != std::string::npos);
  BOOST_CHECK_EQUAL(run_wanem({"--send", "status"}).exit_code, 2);  // no --control

  // A second relay may not take over a live control socket; a stale one (file left behind) is
  // replaced. The socket file goes away when the relay stops.
  RunResult twice = run_wanem({"--forward", fwd(tierce_test::free_port(), t.port()),
                               "--delay-us", "0", "--control", relay.control_path()});
  BOOST_CHECK_EQUAL(twice.exit_code, 1);
  BOOST_CHECK_MESSAGE(twice.output.find("another relay answers") != std::string::npos,
                      twice.output);
  std::string path = relay.control_path();
  BOOST_CHECK_EQUAL(relay.stop(), 0);
  struct stat sst{};
  BOOST_CHECK(::stat(path.c_str(), &sst) != 0);
  BOOST_CHECK(relay.log().find("control: cut to-target") != std::string::npos);
}

// redirect HOST:PORT (an on-path redirect): the existing connection is reset, every new one goes
// to the other target; redirect off restores the configured one. Bad targets are refused.
BOOST_AUTO_TEST_CASE(redirect_sends_new_connections_elsewhere) {
  Fd first = listen_on(0), second = listen_on(0);
  BOOST_REQUIRE(first.get() >= 0 && second.get() >= 0);
  uint16_t lport = tierce_test::free_port();
  Wanem relay({"--forward", fwd(lport, port_of(first.get())), "--delay-us", "0"}, true);
  Fd c = connect_to(lport);
  BOOST_REQUIRE(c.get() >= 0);
  Fd s = accept_one(first.get());
  BOOST_REQUIRE(s.get() >= 0);
  BOOST_REQUIRE(send_str(c.get(), "hello"));
  BOOST_CHECK_EQUAL(recv_n(s.get(), 5), "hello");

  const std::string to = "127.0.0.1:" + std::to_string(port_of(second.get()));
  BOOST_CHECK_EQUAL(relay.control("redirect " + to), "ok redirect=" + to + " reset=1");
  char b;
  BOOST_CHECK(::recv(c.get(), &b, 1, 0) <= 0);  // the old connection was reset (or ended)
  Fd c2 = connect_to(lport);
  BOOST_REQUIRE(c2.get() >= 0);
  BOOST_REQUIRE(send_str(c2.get(), "where"));
  Fd s2 = accept_one(second.get());  // the other target got it
  BOOST_REQUIRE(s2.get() >= 0);
  BOOST_CHECK_EQUAL(recv_n(s2.get(), 5), "where");
  BOOST_CHECK(!readable_within(first.get(), 300));  // and the configured one nothing
  std::string st = relay.control("status");
  BOOST_CHECK_MESSAGE(st.find(" redirect=" + to) != std::string::npos, st);

  BOOST_CHECK_EQUAL(relay.control("redirect off"), "ok redirect=off reset=1");
  Fd c3 = connect_to(lport);
  BOOST_REQUIRE(c3.get() >= 0);
  Fd s3 = accept_one(first.get());
  BOOST_CHECK(s3.get() >= 0);
  for (std::string bad : {"redirect", "redirect nowhere", "redirect 127.0.0.1:1-3", "redirect a b"}) {
    std::string a = relay.control(bad);
    BOOST_CHECK_MESSAGE(a.rfind("error: ", 0) == 0, "'" << bad << "' answered '" << a << "'");
  }
  BOOST_CHECK_EQUAL(relay.stop(), 0);
  BOOST_CHECK(relay.log().find("control: redirect " + to) != std::string::npos);
}

// The nemesis's connection reset (issue 33): "reset" resets every open connection, both peers see
// it end, and the relay keeps relaying new connections to the same target.
BOOST_AUTO_TEST_CASE(control_reset_resets_open_connections) {
  Fd target = listen_on(0);
  BOOST_REQUIRE(target.get() >= 0);
  uint16_t lport = tierce_test::free_port();
  Wanem relay({"--forward", fwd(lport, port_of(target.get())), "--delay-us", "0"}, true);
  Fd c = connect_to(lport);
  BOOST_REQUIRE(c.get() >= 0);
  Fd s = accept_one(target.get());
  BOOST_REQUIRE(s.get() >= 0);
  BOOST_REQUIRE(send_str(c.get(), "hello"));
  BOOST_CHECK_EQUAL(recv_n(s.get(), 5), "hello");
  BOOST_CHECK_EQUAL(relay.control("reset"), "ok reset=1");
  char b;
  BOOST_CHECK(::recv(c.get(), &b, 1, 0) <= 0);  // the client's end: reset
  BOOST_CHECK(::recv(s.get(), &b, 1, 0) <= 0);  // and the target's
  Fd c2 = connect_to(lport);
  BOOST_REQUIRE(c2.get() >= 0);
  Fd s2 = accept_one(target.get());
  BOOST_REQUIRE(s2.get() >= 0);
  BOOST_REQUIRE(send_str(c2.get(), "again"));
  BOOST_CHECK_EQUAL(recv_n(s2.get(), 5), "again");
  BOOST_CHECK(relay.control("reset now").rfind("error: ", 0) == 0);
  BOOST_CHECK_EQUAL(relay.stop(), 0);
  BOOST_CHECK(relay.log().find("control: reset (1 connection(s) reset)") != std::string::npos);
}

// An established connection: a cut direction holds its bytes (24 MB: the relay reads up to the
// window, then the socket buffers fill and the sender blocks; nothing is reset) while the other
// direction flows; heal delivers everything, intact and in order. Then the same the other way.
BOOST_AUTO_TEST_CASE(cut_holds_one_direction) {
  constexpr size_t kBytes = 24'000'000;  // more than the window and both socket buffers
  const auto data = random_bytes(kBytes, 1234);
  Fd server;
  std::atomic<bool> accepted{false};
  Target t(
      [&](Fd& c) {
        server = std::move(c);
        accepted = true;
      },
      1);
  uint16_t lport = tierce_test::free_port();
  Wanem relay({"--forward", fwd(lport, t.port()), "--delay-us", "0", "--window", "256Ki"}, true);
  Fd c = connect_to(lport);
  BOOST_REQUIRE(c.get() >= 0);
  BOOST_REQUIRE(tierce_test::eventually([&] { return accepted.load(); }, 10000ms));
  t.join();
  BOOST_REQUIRE(send_str(c.get(), "hello"));
  BOOST_REQUIRE_EQUAL(recv_n(server.get(), 5), "hello");

  // to-target cut: the client's bytes stop at the relay, the target's still reach the client.
  BOOST_REQUIRE_EQUAL(relay.control("cut to-target"), "ok cut=to-target");
  std::atomic<bool> sent{false};
  std::thread sender([&] {
    sent = send_all(c.get(), data.data(), data.size());
  });
  BOOST_CHECK(tierce_test::eventually(
      [&] { return status_value(relay.control("status"), "held_to_target") >= 256 * 1024; },
      10000ms));
  BOOST_CHECK(!readable_within(server.get(), 500));  // nothing arrived, no FIN, no reset
  for (int i = 0; i < 3; ++i) {
    BOOST_REQUIRE(send_str(server.get(), "pong" + std::to_string(i)));
    BOOST_CHECK_EQUAL(recv_n(c.get(), 5), "pong" + std::to_string(i));
  }
  BOOST_CHECK(!sent.load());  // the sender is blocked: backpressure, not an unbounded buffer
  BOOST_CHECK_EQUAL(status_value(relay.control("status"), "held_to_target"), 256 * 1024);
  BOOST_REQUIRE_EQUAL(relay.control("heal"), "ok cut=none");
  auto got = recv_all(server.get(), kBytes);
  sender.join();
  BOOST_CHECK(sent.load());
  BOOST_REQUIRE_EQUAL(got.size(), data.size());
  BOOST_CHECK(got == data);

  // to-client cut: the target's bytes are held, the client's flow.
  BOOST_REQUIRE_EQUAL(relay.control("cut to-client"), "ok cut=to-client");
  std::atomic<bool> sent_back{false};
  std::thread back([&] { sent_back = send_all(server.get(), data.data(), data.size()); });
  BOOST_CHECK(tierce_test::eventually(
      [&] { return status_value(relay.control("status"), "held_to_client") >= 256 * 1024; },
      10000ms));
  BOOST_CHECK(!readable_within(c.get(), 500));
  for (int i = 0; i < 3; ++i) {
    BOOST_REQUIRE(send_str(c.get(), "ping" + std::to_string(i)));
    BOOST_CHECK_EQUAL(recv_n(server.get(), 5), "ping" + std::to_string(i));
  }
  BOOST_REQUIRE_EQUAL(relay.control("heal to-client"), "ok cut=none");
  got = recv_all(c.get(), kBytes);
  back.join();
  BOOST_CHECK(sent_back.load());
  BOOST_REQUIRE_EQUAL(got.size(), data.size());
  BOOST_CHECK(got == data);

  // A FIN is held like the bytes before it.
  BOOST_REQUIRE_EQUAL(relay.control("cut to-client"), "ok cut=to-client");
  ::shutdown(server.get(), SHUT_WR);
  BOOST_CHECK(!readable_within(c.get(), 500));
  BOOST_REQUIRE_EQUAL(relay.control("heal"), "ok cut=none");
  int err = -1;
  BOOST_CHECK_EQUAL(recv_str(c.get(), SIZE_MAX, &err), "");
  BOOST_CHECK_EQUAL(err, 0);  // a clean EOF, delivered after the heal
  BOOST_CHECK_EQUAL(relay.stop(), 0);
}

// New connections while cut: accepted by the relay, but with to-target cut the target does not
// see them at all until the heal; with only to-client cut the target sees them and their bytes,
// and its answers wait for the heal.
BOOST_AUTO_TEST_CASE(cut_new_connections) {
  Fd lfd = listen_on(0);
  BOOST_REQUIRE(lfd.get() >= 0);
  uint16_t lport = tierce_test::free_port();
  Wanem relay({"--forward", fwd(lport, port_of(lfd.get())), "--delay-us", "1000"}, true);

  BOOST_REQUIRE_EQUAL(relay.control("cut both"), "ok cut=both");
  Fd c = connect_to(lport);
  BOOST_REQUIRE(c.get() >= 0);  // accepted
  BOOST_REQUIRE(send_str(c.get(), "request"));
  BOOST_CHECK(!readable_within(lfd.get(), 700));  // the target saw no connection
  std::string st = relay.control("status");
  BOOST_CHECK_MESSAGE(status_value(st, "pending_connects") == 1, st);
  BOOST_CHECK_MESSAGE(status_value(st, "held_to_target") == 7, st);
  BOOST_REQUIRE_EQUAL(relay.control("heal to-target"), "ok cut=to-client");
  Fd s = accept_one(lfd.get());
  BOOST_REQUIRE(s.get() >= 0);
  BOOST_CHECK_EQUAL(recv_n(s.get(), 7), "request");
  BOOST_REQUIRE(send_str(s.get(), "answer"));
  BOOST_CHECK(!readable_within(c.get(), 500));  // to-client is still cut
  BOOST_REQUIRE_EQUAL(relay.control("heal"), "ok cut=none");
  BOOST_CHECK_EQUAL(recv_n(c.get(), 6), "answer");

  // Only to-client cut: the target gets the connection and the request at once.
  BOOST_REQUIRE_EQUAL(relay.control("cut to-client"), "ok cut=to-client");
  Fd c2 = connect_to(lport);
  BOOST_REQUIRE(c2.get() >= 0);
  BOOST_REQUIRE(send_str(c2.get(), "second"));
  Fd s2 = accept_one(lfd.get());
  BOOST_REQUIRE(s2.get() >= 0);
  BOOST_CHECK_EQUAL(recv_n(s2.get(), 6), "second");
  BOOST_REQUIRE(send_str(s2.get(), "reply2"));
  BOOST_CHECK(!readable_within(c2.get(), 500));
  BOOST_REQUIRE_EQUAL(relay.control("heal"), "ok cut=none");
  BOOST_CHECK_EQUAL(recv_n(c2.get(), 6), "reply2");
  BOOST_CHECK_EQUAL(relay.stop(), 0);
}

// delay US applies to bytes read afterwards: round trips take at least 2 x the new delay; after
// "delay 0" they are short again (well under the 2 x 25 ms they took).
BOOST_AUTO_TEST_CASE(delay_change) {
  constexpr int kRounds = 6;
  Target t([&](Fd& c) {
    char b;
    while (::recv(c.get(), &b, 1, 0) == 1)
      if (::send(c.get(), &b, 1, MSG_NOSIGNAL) != 1) return;
  });
  uint16_t lport = tierce_test::free_port();
  Wanem relay({"--forward", fwd(lport, t.port()), "--delay-us", "0"}, true);
  Fd c = connect_to(lport);
  BOOST_REQUIRE(c.get() >= 0);
  auto min_rtt = [&] {
    double m = 1e9;
    for (int i = 0; i < kRounds; ++i) {
      char b = 'x', r = 0;
      auto t0 = Clock::now();
      if (::send(c.get(), &b, 1, MSG_NOSIGNAL) != 1 || ::recv(c.get(), &r, 1, 0) != 1) return -1.0;
      m = std::min(m, seconds_since(t0));
    }
    return m;
  };
  double before = min_rtt();
  BOOST_REQUIRE_EQUAL(relay.control("delay 25000"), "ok delay_us=25000");
  double slow = min_rtt();
  BOOST_REQUIRE_EQUAL(relay.control("delay 0"), "ok delay_us=0");
  double fast = min_rtt();
  BOOST_TEST_MESSAGE("smallest round trips: " << before * 1e6 << " us, after delay 25000: "
                                              << slow * 1e6 << " us, after delay 0: " << fast * 1e6
                                              << " us");
  BOOST_CHECK_GE(before, 0);
  BOOST_CHECK_GE(slow, 0.050);
  BOOST_CHECK_GE(fast, 0);
  BOOST_CHECK_LT(fast, 0.050);
  c.reset();
  t.join();
  BOOST_CHECK_EQUAL(relay.stop(), 0);
}

// ---- network namespaces (NETNS/host:port) -------------------------------------------------------

namespace {

// Two namespaces made with `ip netns add` (loopback up), deleted by the destructor.
class Namespaces {
 public:
  explicit Namespaces(std::vector<std::string> names) : names_(std::move(names)) {
    for (auto& n : names_) {
      ok_ = ok_ &&
            std::system(("ip netns add " + n + " && ip -n " + n + " link set lo up").c_str()) == 0;
      made_.push_back(n);
    }
  }
  ~Namespaces() {
    for (auto& n : made_) (void)!std::system(("ip netns delete " + n + " 2>/dev/null").c_str());
  }
  bool ok() const { return ok_; }

 private:
  std::vector<std::string> names_, made_;
  bool ok_ = true;
};

// Runs f() with this thread in network namespace `name`; back in ours afterwards.
template <class F>
auto in_netns(const std::string& name, F f) {
  Fd home(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  Fd ns(::open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC));
  BOOST_REQUIRE(home.get() >= 0 && ns.get() >= 0);
  BOOST_REQUIRE(::setns(ns.get(), CLONE_NEWNET) == 0);
  auto r = f();
  BOOST_REQUIRE(::setns(home.get(), CLONE_NEWNET) == 0);
  return r;
}

}  // namespace

// A relay in our namespace links two others that share nothing (no veth, no route): it listens
// in A and connects in B, as tierce-cluster and benchmarks/dlm use it to emulate links between
// hosts with one process. 127.0.0.1 is a different address in each of the three namespaces.
BOOST_AUTO_TEST_CASE(netns) {
  if (::geteuid() != 0 || std::system("ip netns list >/dev/null 2>&1") != 0) {
    BOOST_TEST_MESSAGE("SKIP: needs root and ip(8) to make network namespaces");
    std::exit(77);
  }
  const std::string a = "twn" + std::to_string(::getpid()) + "a",
                    b = "twn" + std::to_string(::getpid()) + "b";
  Namespaces spaces({a, b});
  BOOST_REQUIRE_MESSAGE(spaces.ok(), "ip netns add failed");
  Fd listener = in_netns(b, [] { return listen_on(0); });
  BOOST_REQUIRE(listener.get() >= 0);
  const uint16_t tport = port_of(listener.get());
  Target echo(std::move(listener), [](Fd& c) {
    char buf[256];
    ssize_t r = ::recv(c.get(), buf, sizeof buf, 0);
    if (r > 0) (void)send_all(c.get(), reinterpret_cast<const uint8_t*>(buf), size_t(r));
  });
  const uint16_t lport = 47123;  // any: namespace A is fresh, nothing listens there
  Wanem relay(
      {"--forward",
       a + "/127.0.0.1:" + std::to_string(lport) + "=" + b + "/127.0.0.1:" + std::to_string(tport),
       "--delay-us", "1000"});
  Fd c = in_netns(a, [&] { return connect_to(lport); });
  BOOST_REQUIRE_MESSAGE(c.get() >= 0, "no connection to the relay in namespace " << a);
  auto t0 = Clock::now();
  BOOST_REQUIRE(send_str(c.get(), "across namespaces"));
  char buf[64] = {};
  ssize_t r = ::recv(c.get(), buf, sizeof buf, MSG_WAITALL);
  BOOST_CHECK_EQUAL(std::string(buf, r > 0 ? size_t(r) : 0), "across namespaces");
  BOOST_CHECK(Clock::now() - t0 >= 2ms);  // 1 ms each way
  echo.join();
  // The listener is in A only: B's 127.0.0.1:lport is closed.
  Fd in_b = in_netns(b, [&] { return connect_to(lport); });
  BOOST_CHECK(in_b.get() < 0);
  BOOST_CHECK_EQUAL(relay.stop(), 0);
  BOOST_CHECK_MESSAGE(relay.log().find("1 connections (0 failed to connect), 17 bytes to targets, "
                                       "17 bytes to clients") != std::string::npos,
                      relay.log());

  // A namespace that does not exist: exit 1 at start, saying how to make one.
  RunResult missing =
      run_wanem({"--forward", "twn-absent/127.0.0.1:1=127.0.0.1:2", "--delay-us", "0"});
  BOOST_CHECK_EQUAL(missing.exit_code, 1);
  BOOST_CHECK_MESSAGE(missing.output.find("ip netns add twn-absent") != std::string::npos,
                      missing.output);
}
