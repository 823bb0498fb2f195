// http.cc — see http.h.
#include "http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace tcheck {

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

const char* err_kind_name(ErrKind k) {
  switch (k) {
    case ErrKind::None: return "none";
    case ErrKind::Connect: return "connect";
    case ErrKind::Timeout: return "timeout";
    case ErrKind::Io: return "io";
    case ErrKind::Protocol: return "protocol";
  }
  return "?";
}

static std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

static std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\r')) --b;
  return s.substr(a, b - a);
}

bool parse_url(const std::string& s, Url& out, std::string& err) {
  const std::string scheme = "http://";
  if (s.compare(0, scheme.size(), scheme) != 0) {
    err = "URL must start with http:// (got '" + s + "')";
    return false;
  }
  std::string rest = s.substr(scheme.size());
  size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  std::string path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (path.empty() || path.back() != '/') path += '/';
  if (hostport.empty()) {
    err = "URL has no host: '" + s + "'";
    return false;
  }
  Url u;
  u.text = s;
  u.base = path;
  size_t colon = hostport.rfind(':');
  if (colon != std::string::npos && hostport.find(']') == std::string::npos) {
    u.host = hostport.substr(0, colon);
    std::string p = hostport.substr(colon + 1);
    char* end = nullptr;
    long v = std::strtol(p.c_str(), &end, 10);
    if (p.empty() || *end || v < 1 || v > 65535) {
      err = "bad port in URL '" + s + "'";
      return false;
    }
    u.port = uint16_t(v);
  } else {
    u.host = hostport;
  }
  if (u.host.size() > 2 && u.host.front() == '[' && u.host.back() == ']') u.host = u.host.substr(1, u.host.size() - 2);
  out = u;
  return true;
}

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string o;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      o += char(c);
    } else if (c == ' ') {
      o += '+';
    } else {
      o += '%';
      o += hex[c >> 4];
      o += hex[c & 15];
    }
  }
  return o;
}

const std::string* Response::header(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return &v;
  return nullptr;
}

void HttpConn::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  rbuf_.clear();
  rpos_ = 0;
}

static int remaining_ms(int64_t deadline) {
  int64_t left = deadline - now_ns();
  if (left <= 0) return 0;
  return int(left / 1000000) + 1;
}

bool HttpConn::connect_(int64_t deadline, ErrKind& kind, std::string& err) {
  close();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(url_.port);
  int rc = getaddrinfo(url_.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    kind = ErrKind::Connect;
    err = "resolve " + url_.host + ": " + gai_strerror(rc);
    return false;
  }
  std::string last = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      last = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    int r = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int pr;
      do {
        pr = ::poll(&p, 1, remaining_ms(deadline));
      } while (pr < 0 && errno == EINTR);
      if (pr == 0) {
        ::close(fd);
        freeaddrinfo(res);
        kind = ErrKind::Timeout;
        err = "connect to " + url_.host + ":" + port + " timed out";
        return false;
      }
      int soerr = 0;
      socklen_t len = sizeof soerr;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
      if (soerr != 0) {
        errno = soerr;
        r = -1;
      } else {
        r = 0;
      }
    }
    if (r != 0) {
      last = "connect to " + url_.host + ":" + port + ": " + std::strerror(errno);
      ::close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fd_ = fd;
    ++connects_;
    freeaddrinfo(res);
    return true;
  }
  freeaddrinfo(res);
  kind = ErrKind::Connect;
  err = last;
  return false;
}

bool HttpConn::send_all_(const std::string& data, int64_t deadline, ErrKind& kind, std::string& err) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      int pr = ::poll(&p, 1, remaining_ms(deadline));
      if (pr == 0) {
        kind = ErrKind::Timeout;
        err = "timed out sending the request";
        return false;
      }
      continue;
    }
    kind = ErrKind::Io;
    err = std::string("send: ") + std::strerror(errno);
    return false;
  }
  return true;
}

int HttpConn::fill_(int64_t deadline, ErrKind& kind, std::string& err) {
  if (rpos_ > 0 && rpos_ == rbuf_.size()) {
    rbuf_.clear();
    rpos_ = 0;
  } else if (rpos_ > 65536) {
    rbuf_.erase(0, rpos_);
    rpos_ = 0;
  }
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n > 0) {
      rbuf_.append(buf, size_t(n));
      return 1;
    }
    if (n == 0) return 0;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int ms = remaining_ms(deadline);
      if (ms == 0) {
        kind = ErrKind::Timeout;
        err = "timed out waiting for the response";
        return -1;
      }
      pollfd p{fd_, POLLIN, 0};
      int pr = ::poll(&p, 1, ms);
      if (pr == 0) {
        kind = ErrKind::Timeout;
        err = "timed out waiting for the response";
        return -1;
      }
      continue;
    }
    kind = ErrKind::Io;
    err = std::string("recv: ") + std::strerror(errno);
    return -1;
  }
}

bool HttpConn::read_line_(std::string& line, int64_t deadline, ErrKind& kind, std::string& err) {
  for (;;) {
    size_t nl = rbuf_.find('\n', rpos_);
    if (nl != std::string::npos) {
      line.assign(rbuf_, rpos_, nl - rpos_);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      rpos_ = nl + 1;
      return true;
    }
    if (rbuf_.size() - rpos_ > 65536) {
      kind = ErrKind::Protocol;
      err = "header line longer than 64 KiB";
      return false;
    }
    int r = fill_(deadline, kind, err);
    if (r < 0) return false;
    if (r == 0) {
      kind = ErrKind::Io;
      err = "connection closed by the server mid-response";
      return false;
    }
  }
}

bool HttpConn::read_exact_(size_t n, std::string& out, int64_t deadline, ErrKind& kind, std::string& err) {
  while (rbuf_.size() - rpos_ < n) {
    int r = fill_(deadline, kind, err);
    if (r < 0) return false;
    if (r == 0) {
      kind = ErrKind::Io;
      err = "connection closed by the server mid-body";
      return false;
    }
  }
  out.append(rbuf_, rpos_, n);
  rpos_ += n;
  return true;
}

bool HttpConn::attempt_(const std::string& req, bool head, Response& resp, bool& got_bytes, bool& keep,
                        int64_t deadline, ErrKind& kind, std::string& err) {
  got_bytes = false;
  keep = true;
  if (!send_all_(req, deadline, kind, err)) return false;
  std::string line;
  for (;;) {  // skip interim 1xx responses
    // Wait for the first byte separately so that "closed before any byte" is recognisable.
    if (rbuf_.size() == rpos_) {
      int r = fill_(deadline, kind, err);
      if (r < 0) return false;
      if (r == 0) {
        kind = ErrKind::Io;
        err = "connection closed by the server before any response byte";
        return false;
      }
    }
    got_bytes = true;
    if (!read_line_(line, deadline, kind, err)) return false;
    // HTTP/1.x SSS reason
    if (line.size() < 12 || line.compare(0, 7, "HTTP/1.") != 0 || line[8] != ' ') {
      kind = ErrKind::Protocol;
      err = "bad status line: '" + line.substr(0, 80) + "'";
      return false;
    }
    bool http10 = line[7] == '0';
    int status = std::atoi(line.c_str() + 9);
    if (status < 100 || status > 999) {
      kind = ErrKind::Protocol;
      err = "bad status code in '" + line.substr(0, 80) + "'";
      return false;
    }
    resp = Response{};
    resp.status = status;
    for (;;) {
      if (!read_line_(line, deadline, kind, err)) return false;
      if (line.empty()) break;
      size_t c = line.find(':');
      if (c == std::string::npos) {
        kind = ErrKind::Protocol;
        err = "bad header line: '" + line.substr(0, 80) + "'";
        return false;
      }
      resp.headers.emplace_back(lower(trim(line.substr(0, c))), trim(line.substr(c + 1)));
    }
    if (status >= 100 && status < 200) continue;
    const std::string* conn = resp.header("connection");
    std::string connv = conn ? lower(*conn) : "";
    if (connv.find("close") != std::string::npos) keep = false;
    if (http10 && connv.find("keep-alive") == std::string::npos) keep = false;
    if (head || status == 204 || status == 304) return true;
    const std::string* te = resp.header("transfer-encoding");
    const std::string* cl = resp.header("content-length");
    if (te && lower(*te).find("chunked") != std::string::npos) {
      for (;;) {
        if (!read_line_(line, deadline, kind, err)) return false;
        char* end = nullptr;
        unsigned long n = std::strtoul(line.c_str(), &end, 16);
        if (end == line.c_str()) {
          kind = ErrKind::Protocol;
          err = "bad chunk size line: '" + line.substr(0, 40) + "'";
          return false;
        }
        if (n == 0) {
          do {  // trailers up to the empty line
            if (!read_line_(line, deadline, kind, err)) return false;
          } while (!line.empty());
          return true;
        }
        if (!read_exact_(n, resp.body, deadline, kind, err)) return false;
        if (!read_line_(line, deadline, kind, err)) return false;
        if (!line.empty()) {
          kind = ErrKind::Protocol;
          err = "chunk not followed by CRLF";
          return false;
        }
      }
    }
    if (cl) {
      char* end = nullptr;
      unsigned long long n = std::strtoull(cl->c_str(), &end, 10);
      if (cl->empty() || *end || n > (1ull << 31)) {
        kind = ErrKind::Protocol;
        err = "bad Content-Length '" + *cl + "'";
        return false;
      }
      return read_exact_(size_t(n), resp.body, deadline, kind, err);
    }
    // Delimited by the end of the connection.
    keep = false;
    for (;;) {
      int r = fill_(deadline, kind, err);
      if (r < 0) return false;
      if (r == 0) break;
    }
    resp.body.append(rbuf_, rpos_, std::string::npos);
    rpos_ = rbuf_.size();
    return true;
  }
}

bool HttpConn::request(const std::string& method, const std::string& path, const std::string& body,
                       const std::string& content_type, Response& resp, ErrKind& kind, std::string& err) {
  kind = ErrKind::None;
  err.clear();
  int64_t deadline = now_ns() + int64_t(timeout_s_ * 1e9);
  std::string host = url_.host_header.empty() ? url_.host + ":" + std::to_string(url_.port)
                                              : url_.host_header;
  std::string req = method + " " + url_.base + path + " HTTP/1.1\r\nHost: " + host +
                    "\r\nUser-Agent: tierce-check\r\nAccept: */*\r\n";
  if (!body.empty() || method == "POST") {
    req += "Content-Type: " + (content_type.empty() ? std::string("application/x-www-form-urlencoded") : content_type) +
           "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n";
  req += body;
  bool head = method == "HEAD";
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool reused = fd_ >= 0;
    if (!reused && !connect_(deadline, kind, err)) return false;
    bool got = false, keep = true;
    if (attempt_(req, head, resp, got, keep, deadline, kind, err)) {
      if (!keep) close();
      return true;
    }
    close();
    // A reused keep-alive connection the server had already closed: retry once on a new one.
    if (reused && !got && kind == ErrKind::Io && now_ns() < deadline) continue;
    return false;
  }
  return false;
}

}  // namespace tcheck
