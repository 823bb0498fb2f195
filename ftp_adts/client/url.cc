// ftp_adts/client/url.cc — ftp:// URL parsing (see url.h for the rules).
#include "ftp_adts/client/url.h"

#include <cctype>

#include "ftp_adts/client/errors.h"

namespace tierce::ftpc {
namespace {

[[noreturn]] void bad(std::string_view url, const std::string& why) {
  throw ClientError(Exit::Usage, "invalid URL '" + std::string(url) + "': " + why);
}

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string decode(std::string_view url, std::string_view part, const char* what) {
  std::string out;
  out.reserve(part.size());
  for (size_t i = 0; i < part.size(); ++i) {
    char c = part[i];
    if (c == '%') {
      if (i + 2 >= part.size()) bad(url, std::string("truncated %-escape in the ") + what);
      int hi = hexval(part[i + 1]), lo = hexval(part[i + 2]);
      if (hi < 0 || lo < 0) bad(url, std::string("bad %-escape in the ") + what);
      int h = hi * 16 + lo;
      c = char(h);
      i += 2;
    }
    if (c == '\r' || c == '\n' || c == '\0')
      bad(url, std::string("the ") + what + " contains CR, LF or NUL");
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string FtpUrl::endpoint() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}

std::string FtpUrl::basename() const {
  size_t s = path.rfind('/');
  return s == std::string::npos ? path : path.substr(s + 1);
}

FtpUrl parse_url(std::string_view text) {
  constexpr std::string_view kScheme = "ftp://";
  if (text.size() < kScheme.size()) bad(text, "must start with ftp://");
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(text[i])) != kScheme[i])
      bad(text, "must start with ftp:// (ftps:// is not supported: use ftp:// with --tls)");
  std::string_view rest = text.substr(kScheme.size());
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  for (char c : authority)
    if (c == '?' || c == '#' || static_cast<unsigned char>(c) <= ' ')
      bad(text, "unexpected character in the host part");

  FtpUrl u;
  size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    size_t colon = userinfo.find(':');
    u.user = decode(text, userinfo.substr(0, colon), "user name");
    if (u.user->empty()) bad(text, "empty user name");
    if (colon != std::string_view::npos)
      u.password = decode(text, userinfo.substr(colon + 1), "password");
  }
  std::string_view hostpart = authority, portpart;
  bool has_port = false;
  if (!authority.empty() && authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) bad(text, "unterminated [IPv6 address]");
    hostpart = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') bad(text, "garbage after ]");
      portpart = after.substr(1);
      has_port = true;
    }
  } else {
    size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      hostpart = authority.substr(0, colon);
      portpart = authority.substr(colon + 1);
      has_port = true;
    }
  }
  if (hostpart.empty()) bad(text, "no host");
  u.host = std::string(hostpart);
  if (has_port) {
    if (portpart.empty() || portpart.size() > 5) bad(text, "bad port");
    unsigned p = 0;
    for (char c : portpart) {
      if (c < '0' || c > '9') bad(text, "bad port '" + std::string(portpart) + "'");
      p = p * 10 + unsigned(c - '0');
    }
    if (p == 0 || p > 65535) bad(text, "port out of range 1..65535");
    u.port = uint16_t(p);
  }
  u.dir_hint = !path.empty() && path.back() == '/';
  u.path = decode(text, path, "path");
  // "dir/" and "dir" name the same directory; keep a single "/" (the root via %2F).
  while (u.path.size() > 1 && u.path.back() == '/') u.path.pop_back();
  return u;
}

std::string join_remote(std::string_view dir, std::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return std::string(dir) + std::string(name);
  return std::string(dir) + "/" + std::string(name);
}

}  // namespace tierce::ftpc
