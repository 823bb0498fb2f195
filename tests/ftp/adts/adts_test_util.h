// tests/ftp/adts/adts_test_util.h — what the ADTS tests share: a connected session pair over
// loopback, random files, running a send and a receive at the same time.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include <cerrno>
#include <exception>
#include <stdexcept>
#include <future>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ftp_adts/adts/adts.h"
#include "ftp_adts/adts/wire.h"
#include "tests/test_util.h"

namespace adts_test {

using namespace tierce::adts;
namespace wire = tierce::adts::wire;

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

// A hand-made client (or accepted) stream for speaking the wire format byte by byte: blocking
// loopback socket with 10 s send/receive timeouts, so a test never hangs on it.
struct RawStream {
  int fd = -1;
  explicit RawStream(uint16_t port) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      throw std::runtime_error("connect to 127.0.0.1:" + std::to_string(port) + " failed");
    }
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  explicit RawStream(int accepted) : fd(accepted) {}
  RawStream(const RawStream&) = delete;
  RawStream& operator=(const RawStream&) = delete;
  ~RawStream() {
    if (fd >= 0) ::close(fd);
  }
  void write(const void* p, size_t n) {
    BOOST_REQUIRE_EQUAL(::send(fd, p, n, MSG_NOSIGNAL), ssize_t(n));
  }
  void read(void* p, size_t n) {
    for (size_t got = 0; got < n;) {
      ssize_t r = ::recv(fd, static_cast<uint8_t*>(p) + got, n - got, 0);
      BOOST_REQUIRE_GT(r, 0);
      got += size_t(r);
    }
  }
  void hello(uint64_t cookie, uint16_t index = 0, uint16_t streams = 1) {
    wire::Hello h;
    h.index = index;
    h.streams = streams;
    h.cookie = cookie;
    uint8_t b[wire::kHelloSize];
    wire::encode(h, b);
    write(b, sizeof b);
  }
  // The HELLO-ACK status, or -1 if the stream closed without one.
  int ack() {
    uint8_t b[wire::kAckSize];
    size_t got = 0;
    while (got < sizeof b) {
      ssize_t r = ::recv(fd, b + got, sizeof b - got, 0);
      if (r <= 0) return -1;
      got += size_t(r);
    }
    BOOST_CHECK_EQUAL(wire::get_u32(b), wire::kAckMagic);
    return int(wire::get_u32(b + 4));
  }
  void header(wire::BlockType t, uint64_t id, uint64_t off, uint64_t len,
              uint32_t magic = wire::kBlockMagic) {
    uint8_t b[wire::kHeaderSize];
    wire::encode(wire::Header{magic, t, id, off, len}, b);
    write(b, sizeof b);
  }
  void payload(size_t n, uint8_t fill = 0x5a) {
    std::vector<uint8_t> z(n, fill);
    write(z.data(), n);
  }
  void data(uint64_t id, uint64_t off, size_t len, uint8_t fill) {
    header(wire::BlockType::Data, id, off, len);
    payload(len, fill);
  }
  // true when the server closed the connection (EOF or reset) rather than the 10 s timeout.
  bool closed_by_peer() {
    char c;
    ssize_t r = ::recv(fd, &c, 1, 0);
    return r == 0 || (r < 0 && (errno == ECONNRESET || errno == EPIPE));
  }
};

// The errno of a connect() to 127.0.0.1:port (0 when it connected).
inline int connect_errno(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  int err = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

}  // namespace adts_test
