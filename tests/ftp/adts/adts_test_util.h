// tests/ftp/adts/adts_test_util.h — what the ADTS tests share: a connected session pair over
// loopback, random files, running a send and a receive at the same time.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <exception>
#include <future>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ftp_adts/adts/adts.h"
#include "tests/test_util.h"

namespace adts_test {

using namespace tierce::adts;

struct SessionPair {
  std::unique_ptr<Session> server;  // the Listener side
  std::unique_ptr<Session> client;  // the connect() side
};

inline SessionPair make_pair(const SessionParams& p) {
  Listener l("127.0.0.1", 0, 0, p);
  auto fut = std::async(std::launch::async, [&] { return connect("127.0.0.1", l.port(), p); });
  SessionPair sp;
  sp.server = l.accept();
  sp.client = fut.get();
  return sp;
}

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; i += 4) {
    uint32_t x = rng();
    for (size_t k = 0; k < 4 && i + k < n; ++k) v[i + k] = uint8_t(x >> (8 * k));
  }
  return v;
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("open " + path);
  size_t off = 0;
  while (off < b.size()) {
    ssize_t w = ::write(fd, b.data() + off, b.size() - off);
    if (w <= 0) throw std::runtime_error("write " + path);
    off += size_t(w);
  }
  ::close(fd);
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::string s = tierce_test::read_file(path);
  return std::vector<uint8_t>(s.begin(), s.end());
}

// An fd closed at scope exit.
struct FileFd {
  int fd;
  FileFd(const std::string& path, int flags) : fd(::open(path.c_str(), flags | O_CLOEXEC, 0644)) {
    if (fd < 0) throw std::runtime_error("open " + path);
  }
  ~FileFd() { ::close(fd); }
};

// Result of one side of a transfer: the byte count or the error code.
struct Outcome {
  uint64_t bytes = 0;
  std::optional<AdtsError::Code> error;
  std::string what;
};

template <class F>
Outcome capture(F&& f) {
  Outcome o;
  try {
    o.bytes = f();
  } catch (const AdtsError& e) {
    o.error = e.code();
    o.what = e.what();
  }
  return o;
}

// Runs `send` on a thread and `recv` on the caller; returns both outcomes.
template <class S, class R>
std::pair<Outcome, Outcome> transfer(S&& send, R&& recv) {
  Outcome so;
  std::thread t([&] { so = capture(send); });
  Outcome ro = capture(recv);
  t.join();
  return {so, ro};
}

}  // namespace adts_test
