// fabric/socket.cc
#include "fabric/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "fabric/errors.h"

namespace tierce::fabric {


namespace {

int poll_ms(Deadline d) {
  if (d == kNoDeadline) return -1;
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(d - std::chrono::steady_clock::now());
  if (left.count() <= 0) return 0;
  return int(std::min<long long>(left.count() + 1, 1 << 30));
}

void wait_for(int fd, short events, Deadline d) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = poll_ms(d);
    int r = ::poll(&p, 1, ms);
    if (r > 0) return;  // ready, or an error/hangup the next call will report
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_errno("poll");
    }
    if (std::chrono::steady_clock::now() >= d)
      throw FabricError(Errc::Timeout, "peer did not answer within the deadline");
  }
}

sockaddr_un unix_addr(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path)
    throw FabricError(Errc::Config, "unix socket path too long (max 107 bytes): " + path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

void set_nonblock(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void connect_with_deadline(int fd, const sockaddr* a, socklen_t len, Deadline d,
                           const std::string& what) {
  set_nonblock(fd);
  if (::connect(fd, a, len) == 0) return;
  if (errno != EINPROGRESS && errno != EAGAIN) throw_errno("connect " + what);
  wait_writable(fd, d);
  int err = 0;
  socklen_t el = sizeof err;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
  if (err != 0) {
    errno = err;
    if (err == ECONNREFUSED)
      throw FabricError(Errc::PeerClosed,
                        "connect " + what + ": connection refused (is the server running?)");
    throw_errno("connect " + what);
  }
}

}  // namespace

void wait_readable(int fd, Deadline d) {
  wait_for(fd, POLLIN, d);
}
void wait_writable(int fd, Deadline d) {
  wait_for(fd, POLLOUT, d);
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Fd tcp_listen(const std::string& host, uint16_t port, uint16_t* bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string ps = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), ps.c_str(), &hints, &res);
  if (rc != 0)
    throw FabricError(Errc::Config,
                      "cannot resolve listen host '" + host + "': " + gai_strerror(rc));
  Fd fd(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    freeaddrinfo(res);
    throw_errno("socket");
  }
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), res->ai_addr, res->ai_addrlen) != 0) {
    int e = errno;
    freeaddrinfo(res);
    errno = e;
    throw_errno("bind " + host + ":" + ps);
  }
  freeaddrinfo(res);
  if (::listen(fd.get(), 512) != 0) throw_errno("listen " + host + ":" + ps);
  sockaddr_storage ss{};
  socklen_t sl = sizeof ss;
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &sl);
  if (bound_port)
    *bound_port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                           : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

Fd unix_listen(const std::string& path) {
  sockaddr_un a = unix_addr(path);
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw_errno("socket(AF_UNIX)");
  // A stale socket file from a dead server would make bind fail: remove it only if nobody answers.
  Fd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0)
    throw FabricError(Errc::Config, "unix socket " + path + " is in use by a running server");
  ::unlink(path.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw_errno("bind " + path);
  // Group-accessible on purpose (an httpd group reaches memd); a failure would leave whatever
  // the umask gave, so it is an error, not something to ignore.
  if (::chmod(path.c_str(), 0660) != 0) throw_errno("chmod 0660 " + path);
  if (::listen(fd.get(), 512) != 0) throw_errno("listen " + path);
  return fd;
}

Fd tcp_connect(const std::string& host, uint16_t port, Deadline d) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string ps = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), ps.c_str(), &hints, &res);
  if (rc != 0)
    throw FabricError(Errc::Config, "cannot resolve '" + host + "': " + gai_strerror(rc));
  Fd fd(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) {
    freeaddrinfo(res);
    throw_errno("socket");
  }
  try {
    connect_with_deadline(fd.get(), res->ai_addr, res->ai_addrlen, d, host + ":" + ps);
  } catch (...) {
    freeaddrinfo(res);
    throw;
  }
  freeaddrinfo(res);
  set_nodelay(fd.get());
  return fd;
}

Fd unix_connect(const std::string& path, Deadline d) {
  sockaddr_un a = unix_addr(path);
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw_errno("socket(AF_UNIX)");
  connect_with_deadline(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a, d, path);
  return fd;
}

Fd accept_conn(int listen_fd, std::string* peer) {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t sl = sizeof ss;
    int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &sl, SOCK_CLOEXEC);
    if (fd >= 0) {
      if (peer) {
        char buf[INET6_ADDRSTRLEN] = "local";
        uint16_t port = 0;
        if (ss.ss_family == AF_INET) {
          auto* s = reinterpret_cast<sockaddr_in*>(&ss);
          inet_ntop(AF_INET, &s->sin_addr, buf, sizeof buf);
          port = ntohs(s->sin_port);
        } else if (ss.ss_family == AF_INET6) {
          auto* s = reinterpret_cast<sockaddr_in6*>(&ss);
          inet_ntop(AF_INET6, &s->sin6_addr, buf, sizeof buf);
          port = ntohs(s->sin6_port);
        }
        *peer = port ? std::string(buf) + ":" + std::to_string(port) : std::string(buf);
      }
      if (ss.ss_family != AF_UNIX) set_nodelay(fd);
      return Fd(fd);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE) {
      ::usleep(10000);  // out of descriptors: back off instead of spinning
      continue;
    }
    return Fd();  // EINVAL/EBADF after shutdown: the listener is closed
  }
}

void send_all(int fd, const void* buf, size_t len, Deadline d) {
  auto* p = static_cast<const uint8_t*>(buf);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= size_t(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_writable(fd, d);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
      throw FabricError(Errc::PeerClosed, "peer closed the connection");
    throw_errno("send");
  }
}

size_t recv_some(int fd, void* buf, size_t len, Deadline d) {
  for (;;) {
    ssize_t n = ::recv(fd, buf, len, MSG_DONTWAIT);
    if (n >= 0) return size_t(n);
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_readable(fd, d);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) throw FabricError(Errc::PeerClosed, "peer reset the connection");
    throw_errno("recv");
  }
}

std::optional<size_t> recv_spin(int fd, void* buf, size_t len, std::chrono::microseconds spin) {
  auto until = std::chrono::steady_clock::now() + spin;
  for (int i = 0;; ++i) {
    ssize_t n = ::recv(fd, buf, len, MSG_DONTWAIT);
    if (n >= 0) return size_t(n);
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return std::nullopt;
    if ((i & 15) == 15 && std::chrono::steady_clock::now() >= until) return std::nullopt;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

bool recv_exact(int fd, void* buf, size_t len, Deadline d, bool eof_ok) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t got = 0;
  while (got < len) {
    size_t n = recv_some(fd, p + got, len - got, d);
    if (n == 0) {
      if (got == 0 && eof_ok) return false;
      throw FabricError(Errc::PeerClosed, "peer closed the connection");
    }
    got += n;
  }
  return true;
}

void send_with_fd(int sock, const void* buf, size_t len, int fd_to_pass, Deadline d) {
  iovec iov{const_cast<void*>(buf), len};
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctrl;
  m.msg_controllen = sizeof ctrl;
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd_to_pass, sizeof(int));
  for (;;) {
    ssize_t n = ::sendmsg(sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      if (size_t(n) < len) send_all(sock, static_cast<const uint8_t*>(buf) + n, len - size_t(n), d);
      return;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_writable(sock, d);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET)
      throw FabricError(Errc::PeerClosed, "peer closed the connection");
    throw_errno("sendmsg");
  }
}

void recv_with_fd(int sock, void* buf, size_t len, int* fd_out, Deadline d) {
  *fd_out = -1;
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{buf, len};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctrl;
  m.msg_controllen = sizeof ctrl;
  ssize_t n;
  for (;;) {
    n = ::recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n >= 0) break;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_readable(sock, d);
      continue;
    }
    if (errno == EINTR) continue;
    throw_errno("recvmsg");
  }
  if (n == 0) throw FabricError(Errc::PeerClosed, "peer closed the connection");
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
      std::memcpy(fd_out, CMSG_DATA(c), sizeof(int));
  if (size_t(n) < len) recv_exact(sock, static_cast<uint8_t*>(buf) + n, len - size_t(n), d);
}

}  // namespace tierce::fabric
