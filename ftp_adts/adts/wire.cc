// ftp_adts/adts/wire.cc — ADTS stream formats and deadline-bounded socket primitives.
#include "ftp_adts/adts/wire.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace tierce::adts::wire {

std::string to_string(HelloStatus s) {
  switch (s) {
    case HelloStatus::Ok: return "ok";
    case HelloStatus::BadMagic: return "bad HELLO magic";
    case HelloStatus::BadVersion: return "unsupported HELLO version";
    case HelloStatus::BadCookie: return "wrong cookie";
    case HelloStatus::BadStreamCount: return "wrong stream count";
    case HelloStatus::BadIndex: return "bad or duplicate stream index";
  }
  return "status " + std::to_string(static_cast<uint32_t>(s));
}

void put_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint16_t get_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void encode(const Hello& h, uint8_t out[kHelloSize]) {
  put_u32(out, h.magic);
  put_u16(out + 4, h.version);
  put_u16(out + 6, h.index);
  put_u16(out + 8, h.streams);
  put_u16(out + 10, h.reserved);
  put_u64(out + 12, h.cookie);
  std::memset(out + 20, 0, kHelloSize - 20);  // 24-byte frame: 4 bytes of padding after cookie
}

Hello decode_hello(const uint8_t in[kHelloSize]) {
  Hello h;
  h.magic = get_u32(in);
  h.version = get_u16(in + 4);
  h.index = get_u16(in + 6);
  h.streams = get_u16(in + 8);
  h.reserved = get_u16(in + 10);
  h.cookie = get_u64(in + 12);
  return h;
}

void encode(const Header& h, uint8_t out[kHeaderSize]) {
  put_u32(out, h.magic);
  out[4] = static_cast<uint8_t>(h.type);
  out[5] = out[6] = out[7] = 0;
  put_u64(out + 8, h.transfer_id);
  put_u64(out + 16, h.offset);
  put_u64(out + 24, h.length);
}

Header decode_header(const uint8_t in[kHeaderSize]) {
  Header h;
  h.magic = get_u32(in);
  if (h.magic != kBlockMagic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "bad block magic 0x%08x (expected 0x%08x)", h.magic,
                  kBlockMagic);
    throw AdtsError(AdtsError::Code::Protocol, buf);
  }
  uint8_t t = in[4];
  if (t < 1 || t > 4)
    throw AdtsError(AdtsError::Code::Protocol, "unknown block type " + std::to_string(t));
  h.type = static_cast<BlockType>(t);
  h.transfer_id = get_u64(in + 8);
  h.offset = get_u64(in + 16);
  h.length = get_u64(in + 24);
  return h;
}

// ---- sockets ----------------------------------------------------------------------------------

std::string errno_text(int e) {
  char buf[128];
  return std::string(strerror_r(e, buf, sizeof buf));
}

void throw_errno(AdtsError::Code c, const std::string& what, int e) {
  throw AdtsError(c, what + ": " + errno_text(e));
}

void throw_no_progress(const char* what, Millis timeout) {
  throw AdtsError(AdtsError::Code::Timeout, std::string("no progress ") + what + " within " +
                                                std::to_string(timeout.count()) + " ms");
}

void set_nonblocking(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
    throw_errno(AdtsError::Code::LocalIo, "fcntl(O_NONBLOCK)", errno);
}

void tune_socket(int fd) {
  // Headers are small writes followed by bulk payload: let Nagle coalesce nothing we care about,
  // but never delay the END that closes a transfer.
  int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

bool is_peer_gone(int e) {
  return e == EPIPE || e == ECONNRESET || e == ENOTCONN || e == ECONNABORTED || e == ETIMEDOUT ||
         e == EHOSTUNREACH || e == ENETUNREACH || e == ESHUTDOWN;
}

short wait_fd(int fd, short events, Millis timeout, const char* what) {
  pollfd p{fd, events, 0};
  for (;;) {
    int ms = timeout.count() > INT32_MAX ? INT32_MAX : int(timeout.count());
    int r = ::poll(&p, 1, ms);
    if (r > 0) return p.revents;
    if (r == 0) throw_no_progress(what, timeout);
    if (errno != EINTR) throw_errno(AdtsError::Code::LocalIo, "poll", errno);
  }
}

void send_all(int fd, const void* buf, size_t n, Millis timeout) {
  auto p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= size_t(w);
      continue;
    }
    int e = errno;
    if (w < 0 && e == EINTR) continue;
    if (w < 0 && (e == EAGAIN || e == EWOULDBLOCK)) {
      wait_fd(fd, POLLOUT, timeout, "sending to the peer");
      continue;
    }
    if (w < 0 && is_peer_gone(e)) throw_errno(AdtsError::Code::PeerClosed, "send", e);
    throw_errno(AdtsError::Code::PeerClosed, "send", w < 0 ? e : EPIPE);
  }
}

void recv_all(int fd, void* buf, size_t n, Millis timeout) {
  auto p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= size_t(r);
      continue;
    }
    if (r == 0) throw AdtsError(AdtsError::Code::PeerClosed, "stream closed by the peer");
    int e = errno;
    if (e == EINTR) continue;
    if (e == EAGAIN || e == EWOULDBLOCK) {
      wait_fd(fd, POLLIN, timeout, "receiving from the peer");
      continue;
    }
    throw_errno(AdtsError::Code::PeerClosed, "recv", e);
  }
}

void discard(int fd, uint64_t n, Millis timeout) {
  uint8_t buf[16384];
  while (n > 0) {
    size_t k = n < sizeof buf ? size_t(n) : sizeof buf;
    recv_all(fd, buf, k, timeout);
    n -= k;
  }
}

SigpipeGuard::SigpipeGuard() {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  was_blocked_ = sigismember(&old, SIGPIPE) == 1;
}

SigpipeGuard::~SigpipeGuard() {
  if (!was_pending_) {
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) == 1) {
      timespec zero{0, 0};
      while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
  }
  if (!was_blocked_) {
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_UNBLOCK, &pipe_set, nullptr);
  }
}

uint64_t sendfile_some(int sock, int file, uint64_t off, uint64_t len, Millis timeout) {
  SigpipeGuard no_sigpipe;
  uint64_t done = 0;
  while (done < len) {
    off_t o = off_t(off + done);
    size_t want = size_t(std::min<uint64_t>(len - done, 1u << 30));
    ssize_t w = ::sendfile(sock, file, &o, want);
    if (w > 0) {
      done += uint64_t(w);
      continue;
    }
    if (w == 0) return done;  // the file ended early
    int e = errno;
    if (e == EINTR) continue;
    if (e == EAGAIN || e == EWOULDBLOCK) {
      wait_fd(sock, POLLOUT, timeout, "sending to the peer");
      continue;
    }
    if (is_peer_gone(e)) throw_errno(AdtsError::Code::PeerClosed, "sendfile", e);
    throw_errno(AdtsError::Code::LocalIo, "sendfile (reading the file)", e);
  }
  return done;
}

int connect_tcp(const std::string& host, uint16_t port, Millis timeout) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string ps = std::to_string(port);
  int g = ::getaddrinfo(host.c_str(), ps.c_str(), &hints, &res);
  if (g != 0)
    throw AdtsError(AdtsError::Code::Config, "cannot resolve " + host + ": " + gai_strerror(g));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(res, freeaddrinfo);
  std::string last = "no address";
  AdtsError::Code last_code = AdtsError::Code::PeerClosed;
  for (addrinfo* a = res; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!fd) {
      last = "socket: " + errno_text(errno);
      continue;
    }
    int r = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
    if (r < 0 && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      int ms = int(std::min<int64_t>(timeout.count(), INT32_MAX));
      int pr;
      do pr = ::poll(&p, 1, ms);
      while (pr < 0 && errno == EINTR);
      if (pr == 0) {
        last = "connect timed out after " + std::to_string(timeout.count()) + " ms";
        last_code = AdtsError::Code::Timeout;
        continue;
      }
      int err = 0;
      socklen_t el = sizeof err;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &el);
      if (err != 0) {
        last = errno_text(err);
        last_code = AdtsError::Code::PeerClosed;
        continue;
      }
    } else if (r < 0) {
      last = errno_text(errno);
      last_code = AdtsError::Code::PeerClosed;
      continue;
    }
    tune_socket(fd.get());
    return fd.release();
  }
  throw AdtsError(last_code, "connect to " + host + ":" + ps + ": " + last);
}

std::string numeric_host(const sockaddr* sa) {
  if (!sa) return {};
  char host[INET6_ADDRSTRLEN] = "";
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, host, sizeof host);
  } else if (sa->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a))
      ::inet_ntop(AF_INET, &a.s6_addr[12], host, sizeof host);
    else
      ::inet_ntop(AF_INET6, &a, host, sizeof host);
  }
  return host;
}

}  // namespace tierce::adts::wire
