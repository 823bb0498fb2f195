// ftp_adts/server/data.cc — plain data connections (data.h). The zero-copy paths (TYPE I without
// TLS) are adts::send_file/receive_file with the control connection as their watch fd and the ABOR
// check as their per-chunk hook; the TYPE A and TLS paths go through a buffer here.
#include "ftp_adts/server/data.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "ftp_adts/adts/adts.h"

namespace tierce::ftpd {

namespace {

constexpr size_t kBufferChunk = 256 << 10;  // user-buffer paths

using Clock = std::chrono::steady_clock;

int to_poll_ms(Millis m) {
  return int(std::clamp<long long>(m.count(), 0, INT32_MAX));
}

void set_nonblocking(int fd, bool on) {
  int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

enum class Wait { Ready, Abort, Timeout };

// Waits until the data socket is ready for `events`, watching the control socket for ABOR.
Wait wait_for(int fd, short events, const TransferOptions& o) {
  pollfd p[2] = {{fd, events, 0}, {o.control_fd, POLLIN, 0}};
  nfds_t n = o.control_fd >= 0 ? 2 : 1;
  auto deadline = Clock::now() + o.timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    if (left.count() <= 0) return Wait::Timeout;
    int r = ::poll(p, n, to_poll_ms(left));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return Wait::Timeout;
    if (n == 2 && p[1].revents) {
      if (o.abort && o.abort()) return Wait::Abort;
      // Not ABOR (a pipelined command, now buffered by the session): keep going. Stop watching
      // the control socket if it keeps signalling without being consumed (HUP).
      if (p[1].revents & (POLLHUP | POLLERR)) n = 1;
      p[1].revents = 0;
    }
    if (p[0].revents) return Wait::Ready;
  }
}

// For the blocking TLS paths: an ABOR waiting on the control socket?
bool abort_pending(const TransferOptions& o) {
  if (o.control_fd < 0) return false;
  pollfd p{o.control_fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && o.abort && o.abort();
}

TransferResult fail(TransferResult r, TransferResult::Status s, std::string what) {
  r.status = s;
  r.error = std::move(what);
  return r;
}

// Runs one zero-copy move (adts::send_file/receive_file) on the non-blocking data socket: r.bytes
// follows its progress, an ABOR between chunks or while it waits stops it, and its AdtsError
// becomes the transfer's status.
template <typename MoveFn>
TransferResult zero_copy_move(DataConn& c, const TransferOptions& o, MoveFn&& move) {
  TransferResult r;
  r.zero_copy = true;
  uint64_t copied = 0;
  adts::PlainOptions po;
  po.on_chunk = [&](uint64_t done) {
    r.bytes = done;
    return !abort_pending(o);
  };
  po.watch_fd = o.control_fd;
  po.short_file_ok = true;  // a file that shrank under us: send what there was
  po.copied = &copied;
  po.receive_by_splice = o.receive_splice;
  po.max_bytes = o.max_bytes;
  set_nonblocking(c.fd(), true);
  try {
    r.bytes = move(po);
  } catch (const adts::AdtsError& e) {
    using Code = adts::AdtsError::Code;
    switch (e.code()) {
      case Code::Aborted:
        return fail(r, TransferResult::Status::Aborted, "aborted");
      case Code::Timeout:
        return fail(r, TransferResult::Status::Timeout, "no progress on the data connection");
      case Code::PeerClosed:
        return fail(r, TransferResult::Status::PeerError, e.what());
      case Code::TooLarge:
        return fail(r, TransferResult::Status::Quota, e.what());
      default:
        return fail(r, TransferResult::Status::LocalError, e.what());
    }
  }
  set_nonblocking(c.fd(), false);
  r.zero_copy = copied == 0;
  return r;
}

// Writes all of `bytes` to the data connection (plain or TLS): a result with its status and
// error (no bytes counted: the caller counts what it gave).
TransferResult write_all(DataConn& c, std::string_view bytes, const TransferOptions& o) {
  if (auto* t = c.tls()) {
    if (abort_pending(o)) return fail({}, TransferResult::Status::Aborted, "aborted");
    try {
      t->set_timeout(o.timeout);
      t->write_all({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
    } catch (const ftp::TlsError& e) {
      return fail({}, TransferResult::Status::PeerError, e.what());
    }
    return {};
  }
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(c.fd(), bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      Wait w = wait_for(c.fd(), POLLOUT, o);
      if (w == Wait::Abort) return fail({}, TransferResult::Status::Aborted, "aborted");
      if (w == Wait::Timeout)
        return fail({}, TransferResult::Status::Timeout, "no progress on the data connection");
      continue;
    }
    return fail({}, TransferResult::Status::PeerError, std::strerror(errno));
  }
  return {};
}

}  // namespace

// ---- SockAddr ----

uint16_t SockAddr::port() const {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

void SockAddr::set_port(uint16_t p) {
  if (ss.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(p);
  if (ss.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(p);
}

std::string SockAddr::host() const {
  char buf[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
  } else if (ss.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a))
      inet_ntop(AF_INET, &a.s6_addr[12], buf, sizeof buf);
    else
      inet_ntop(AF_INET6, &a, buf, sizeof buf);
  }
  return buf;
}

bool SockAddr::same_host(const SockAddr& o) const {
  return host() == o.host();
}

SockAddr SockAddr::local_of(int fd) {
  SockAddr a;
  a.len = sizeof a.ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a.ss), &a.len) != 0) a.len = 0;
  return a;
}

SockAddr SockAddr::peer_of(int fd) {
  SockAddr a;
  a.len = sizeof a.ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a.ss), &a.len) != 0) a.len = 0;
  return a;
}

bool SockAddr::parse(const std::string& host, uint16_t port, SockAddr* out) {
  SockAddr a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&a.ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    a.len = sizeof *v4;
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    a.len = sizeof *v6;
  } else {
    return false;
  }
  *out = a;
  return true;
}

// ---- DataConn ----

DataConn::~DataConn() {
  tls_.reset();
  ::close(fd_);
}

void DataConn::start_tls(std::shared_ptr<ftp::TlsContext> ctx, Millis timeout) {
  tls_ = ftp::TlsConnection::accept(std::move(ctx), fd_, timeout);
}

void DataConn::finish() {
  if (tls_) {
    try {
      tls_->shutdown();
    } catch (...) {
    }
  }
}

// ---- DataPort ----

DataPort::~DataPort() {
  reset();
}

void DataPort::reset() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
  active_ = false;
}

// The kernel's ephemeral port range (net.ipv4.ip_local_port_range), read once.
static std::pair<uint16_t, uint16_t> ephemeral_port_range() {
  static const std::pair<uint16_t, uint16_t> range = [] {
    unsigned lo = 32768, hi = 60999;
    if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
      unsigned a = 0, b = 0;
      if (std::fscanf(f, "%u %u", &a, &b) == 2 && a >= 1024 && a <= b && b <= 65535) {
        lo = a;
        hi = b;
      }
      std::fclose(f);
    }
    return std::pair<uint16_t, uint16_t>(uint16_t(lo), uint16_t(hi));
  }();
  return range;
}

int DataPort::listen_passive(const SockAddr& local, uint16_t lo, uint16_t hi) {
  reset();
  // Tries one port: a fresh socket, SO_REUSEADDR, bind, listen. Without SO_REUSEADDR a port whose
  // last data connection is in TIME_WAIT (the server closed it first, as after every RETR) cannot
  // be bound for 60 s: a mirror of a few thousand files would walk the whole range on every PASV
  // and then fail. With it, two sessions may bind the same port and the second one's listen()
  // fails with EADDRINUSE: that is one more port to skip, not an error.
  auto try_port = [&](uint16_t port) -> int {
    int fd = ::socket(local.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    SockAddr a = local;
    a.set_port(port);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a.ss), a.len) != 0 || ::listen(fd, 4) != 0) {
      int err = errno;
      ::close(fd);
      return -err;
    }
    return fd;
  };
  static thread_local std::mt19937 rng{std::random_device{}()};
  int fd = -EADDRINUSE;
  if (lo == 0) {
    // Any port: a random one of the ephemeral range, bound explicitly with SO_REUSEADDR (as
    // vsftpd does). Not bind(0): the kernel's pick never takes a port that has a TIME_WAIT
    // socket, and with the tens of thousands a mirror leaves behind it scans the whole range on
    // every PASV (milliseconds of kernel CPU per file) and then fails with EADDRINUSE.
    auto [first, last] = ephemeral_port_range();
    for (int i = 0; i < 512 && fd == -EADDRINUSE; ++i)
      fd = try_port(uint16_t(first + rng() % (unsigned(last - first) + 1)));
    if (fd == -EADDRINUSE) fd = try_port(0);
  } else {
    // Start at a random port of the range so concurrent sessions rarely collide.
    unsigned span = unsigned(hi - lo) + 1;
    unsigned start = rng() % span;
    for (unsigned i = 0; i < span && fd == -EADDRINUSE; ++i)
      fd = try_port(uint16_t(lo + (start + i) % span));
  }
  if (fd < 0) return fd;
  listen_fd_ = fd;
  return SockAddr::local_of(fd).port();
}

void DataPort::set_active(const SockAddr& target) {
  reset();
  target_ = target;
  active_ = true;
}

base::Result<std::unique_ptr<DataConn>> DataPort::open(
    const SockAddr& peer, Millis timeout, const std::function<void(const std::string&)>& log) {
  auto deadline = Clock::now() + timeout;
  if (listen_fd_ >= 0) {
    for (;;) {
      auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
      pollfd p{listen_fd_, POLLIN, 0};
      int r = left.count() > 0 ? ::poll(&p, 1, to_poll_ms(left)) : 0;
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) {
        reset();
        return base::Status(base::Code::DeadlineExceeded,
                            "the client did not connect to the passive port in time");
      }
      SockAddr from;
      from.len = sizeof from.ss;
      int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from.ss), &from.len,
                         SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
        const int e = errno;
        reset();
        return base::Status(base::Code::Internal, std::string("accept: ") + std::strerror(e));
      }
      if (!from.same_host(peer)) {
        // Someone else raced for the port (passive-mode hijack): drop, keep waiting.
        if (log) log("data connection from " + from.host() + " dropped: not the control peer " +
                     peer.host());
        ::close(fd);
        continue;
      }
      reset();  // one connection per PASV
      return {std::make_unique<DataConn>(fd)};
    }
  }
  if (active_) {
    SockAddr t = target_;
    reset();
    int fd = ::socket(t.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
      return base::Status(base::Code::Internal, std::string("socket: ") + std::strerror(errno));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&t.ss), t.len) != 0 && errno != EINPROGRESS) {
      std::string why =
          "connect to " + t.host() + ":" + std::to_string(t.port()) + ": " + std::strerror(errno);
      ::close(fd);
      return base::Status(base::Code::Unavailable, std::move(why));
    }
    pollfd p{fd, POLLOUT, 0};
    int r;
    do {
      auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
      r = left.count() > 0 ? ::poll(&p, 1, to_poll_ms(left)) : 0;
    } while (r < 0 && errno == EINTR);
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (r > 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (r <= 0 || soerr != 0) {
      std::string why = "connect to " + t.host() + ":" + std::to_string(t.port()) + ": " +
                        (r <= 0 ? "timed out" : std::strerror(soerr));
      ::close(fd);
      return base::Status(r <= 0 ? base::Code::DeadlineExceeded : base::Code::Unavailable,
                          std::move(why));
    }
    set_nonblocking(fd, false);
    return {std::make_unique<DataConn>(fd)};
  }
  return base::Status(base::Code::FailedPrecondition, "use PORT or PASV first");
}

// ---- TYPE A ----

std::string to_crlf(std::string_view in, bool* prev_cr) {
  std::string out;
  out.reserve(in.size() + in.size() / 16);
  for (char c : in) {
    if (c == '\n' && !*prev_cr) out.push_back('\r');
    out.push_back(c);
    *prev_cr = c == '\r';
  }
  return out;
}

std::string from_crlf(std::string_view in, bool* held_cr) {
  std::string out;
  out.reserve(in.size() + 1);
  for (char c : in) {
    if (*held_cr) {
      *held_cr = false;
      if (c != '\n') out.push_back('\r');  // a lone CR is data
    }
    if (c == '\r') {
      *held_cr = true;
      continue;
    }
    out.push_back(c);
  }
  return out;
}

// ---- transfers ----

TransferResult send_file(DataConn& c, int file_fd, uint64_t offset, const TransferOptions& o) {
  TransferResult r;
  struct stat st;
  if (::fstat(file_fd, &st) != 0)
    return fail(r, TransferResult::Status::LocalError, std::strerror(errno));
  uint64_t size = uint64_t(st.st_size);
  if (o.zero_copy && !o.ascii && !c.tls() && S_ISREG(st.st_mode)) {
    uint64_t length = size > offset ? size - offset : 0;
    return zero_copy_move(c, o, [&](const adts::PlainOptions& po) {
      return adts::send_file(c.fd(), file_fd, offset, length, o.timeout, po);
    });
  }
  if (!c.tls()) set_nonblocking(c.fd(), true);
  std::vector<char> buf(kBufferChunk);
  uint64_t off = offset;
  bool prev_cr = false;
  for (;;) {
    ssize_t n = ::pread(file_fd, buf.data(), buf.size(), off_t(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(r, TransferResult::Status::LocalError, std::strerror(errno));
    if (n == 0) break;
    off += uint64_t(n);
    std::string_view chunk(buf.data(), size_t(n));
    std::string converted;
    if (o.ascii) {
      converted = to_crlf(chunk, &prev_cr);
      chunk = converted;
    }
    const TransferResult w = write_all(c, chunk, o);
    if (w.status != TransferResult::Status::Ok) return fail(r, w.status, w.error);
    r.bytes += chunk.size();
  }
  if (!c.tls()) set_nonblocking(c.fd(), false);
  return r;
}

TransferResult send_bytes(DataConn& c, std::string_view bytes, const TransferOptions& o) {
  TransferResult r;
  if (!c.tls()) set_nonblocking(c.fd(), true);
  const TransferResult w = write_all(c, bytes, o);
  if (!c.tls()) set_nonblocking(c.fd(), false);
  if (w.status != TransferResult::Status::Ok) return fail(r, w.status, w.error);
  r.bytes = bytes.size();
  return r;
}

namespace {

// Writes buf at *off (advanced by what was written).
base::Status pwrite_all(int fd, const char* p, size_t n, uint64_t* off) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, off_t(*off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return base::Status(base::Code::Internal,
                          std::string("write: ") + (w < 0 ? std::strerror(errno) : "no space"));
    p += w;
    n -= size_t(w);
    *off += uint64_t(w);
  }
  return {};
}

}  // namespace

TransferResult receive_file(DataConn& c, int file_fd, uint64_t offset, const TransferOptions& o) {
  if (o.zero_copy && !o.ascii && !c.tls()) {
    return zero_copy_move(c, o, [&](const adts::PlainOptions& po) {
      return adts::receive_file(c.fd(), file_fd, offset, o.timeout, po);
    });
  }
  TransferResult r;
  uint64_t off = offset;
  if (!c.tls()) set_nonblocking(c.fd(), true);
  std::vector<char> buf(kBufferChunk);
  bool held_cr = false;
  for (;;) {
    size_t got = 0;
    if (auto* t = c.tls()) {
      if (abort_pending(o)) return fail(r, TransferResult::Status::Aborted, "aborted");
      try {
        t->set_timeout(o.timeout);
        got = t->read_some({reinterpret_cast<uint8_t*>(buf.data()), buf.size()});
      } catch (const ftp::TlsError& e) {
        return fail(r, TransferResult::Status::PeerError, e.what());
      }
      if (got == 0) break;
    } else {
      ssize_t n = ::recv(c.fd(), buf.data(), buf.size(), 0);
      if (n == 0) break;
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) {
          Wait w = wait_for(c.fd(), POLLIN, o);
          if (w == Wait::Abort) return fail(r, TransferResult::Status::Aborted, "aborted");
          if (w == Wait::Timeout)
            return fail(r, TransferResult::Status::Timeout, "no progress on the data connection");
          continue;
        }
        return fail(r, TransferResult::Status::PeerError, std::strerror(errno));
      }
      got = size_t(n);
    }
    bool over = got > o.max_bytes - r.bytes;
    if (over) got = size_t(o.max_bytes - r.bytes);  // what fits goes to the file, then 552
    r.bytes += got;
    if (o.ascii) {
      std::string conv = from_crlf({buf.data(), got}, &held_cr);
      if (base::Status w = pwrite_all(file_fd, conv.data(), conv.size(), &off); !w.ok())
        return fail(r, TransferResult::Status::LocalError, w.message());
    } else if (base::Status w = pwrite_all(file_fd, buf.data(), got, &off); !w.ok()) {
      return fail(r, TransferResult::Status::LocalError, w.message());
    }
    if (over)
      return fail(r, TransferResult::Status::Quota,
                  "more than the limit of " + std::to_string(o.max_bytes) + " bytes");
  }
  if (held_cr) {
    if (base::Status w = pwrite_all(file_fd, "\r", 1, &off); !w.ok())
      return fail(r, TransferResult::Status::LocalError, w.message());
  }
  return r;
}

}  // namespace tierce::ftpd
