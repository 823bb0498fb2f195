// http.h — a minimal blocking HTTP/1.1 client over TCP for tierce-check: one keep-alive
// connection per HttpConn (one per thread and target), Content-Length / chunked / close-delimited
// bodies, a per-request deadline, one transparent retry when a reused connection turns out closed.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tcheck {

struct Url {
  std::string text;  // as given
  std::string host;
  uint16_t port = 80;
  std::string base;  // path prefix, always ends with '/'
  std::string host_header;  // the Host header to send; empty: host:port
};
// Parses http://host[:port][/prefix]; false (and err) when malformed (https is not supported).
bool parse_url(const std::string& s, Url& out, std::string& err);

enum class ErrKind { None, Connect, Timeout, Io, Protocol };
const char* err_kind_name(ErrKind k);

struct Response {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  const std::string* header(const std::string& lower_name) const;
};

class HttpConn {
 public:
  HttpConn(Url url, double timeout_s) : url_(std::move(url)), timeout_s_(timeout_s) {}
  ~HttpConn() { close(); }
  HttpConn(const HttpConn&) = delete;
  HttpConn& operator=(const HttpConn&) = delete;

  // method + path (relative to the URL's base, e.g. "item.php?id=3"); body sent with
  // Content-Type when non-empty (or when method is POST). Returns false with kind/err on failure.
  bool request(const std::string& method, const std::string& path, const std::string& body,
               const std::string& content_type, Response& resp, ErrKind& kind, std::string& err);
  const Url& url() const { return url_; }
  void close();
  uint64_t connects() const { return connects_; }

 private:
  bool connect_(int64_t deadline, ErrKind& kind, std::string& err);
  bool send_all_(const std::string& data, int64_t deadline, ErrKind& kind, std::string& err);
  // Reads more bytes into rbuf_; 0 on EOF, -1 on error (kind/err set).
  int fill_(int64_t deadline, ErrKind& kind, std::string& err);
  bool read_line_(std::string& line, int64_t deadline, ErrKind& kind, std::string& err);
  bool read_exact_(size_t n, std::string& out, int64_t deadline, ErrKind& kind, std::string& err);
  bool attempt_(const std::string& req, bool head, Response& resp, bool& got_bytes, bool& keep,
                int64_t deadline, ErrKind& kind, std::string& err);

  Url url_;
  double timeout_s_;
  int fd_ = -1;
  std::string rbuf_;
  size_t rpos_ = 0;
  uint64_t connects_ = 0;
};

int64_t now_ns();  // CLOCK_MONOTONIC
std::string url_encode(const std::string& s);

}  // namespace tcheck
