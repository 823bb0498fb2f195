// ftp_adts/client/net.cc — TCP connect with a deadline, fd ownership (net.h).
#include "ftp_adts/client/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ftp_adts/client/errors.h"

namespace tierce::ftpc {

bool wait_fd(int fd, bool for_write, Millis timeout) {
  pollfd p{fd, short(for_write ? POLLOUT : POLLIN), 0};
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (left.count() < 0) left = Millis(0);
    int r = ::poll(&p, 1, int(left.count()));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return true;  // let the following read/write report the error
  }
}

Fd connect_tcp(const std::string& host, uint16_t port, Millis timeout, bool nodelay) {
  std::string where = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                      std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0)
    throw ClientError(Exit::Network, "cannot connect to " + where + ": " + gai_strerror(gai));
  std::string last = "no address";
  auto deadline = std::chrono::steady_clock::now() + timeout;
  Fd result;
  for (addrinfo* a = res; a && !result; a = a->ai_next) {
    Fd s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!s) {
      last = std::strerror(errno);
      continue;
    }
    if (::connect(s.get(), a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last = std::strerror(errno);
        continue;
      }
      auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !wait_fd(s.get(), true, left)) {
        last = "timed out after " + std::to_string(timeout.count() / 1000) + " s";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = std::strerror(err);
        continue;
      }
    }
    int fl = ::fcntl(s.get(), F_GETFL);
    ::fcntl(s.get(), F_SETFL, fl & ~O_NONBLOCK);
    if (nodelay) {
      int one = 1;
      ::setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    result = std::move(s);
  }
  ::freeaddrinfo(res);
  if (!result) throw ClientError(Exit::Network, "cannot connect to " + where + ": " + last);
  return result;
}

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
  } else if (ss.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      ::inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], buf, sizeof buf);
    } else {
      ::inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
    }
  }
  return buf;
}

}  // namespace tierce::ftpc
