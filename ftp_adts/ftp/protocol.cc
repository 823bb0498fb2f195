// ftp_adts/ftp/protocol.cc — the pure FTP text codecs of protocol.h: command lines, replies,
// PORT/PASV/EPRT/EPSV, TPRT, MLST facts and time-vals. Everything here reads untrusted peer text
// (and is fuzzed), so every parser bounds its input and returns "no" instead of guessing.
#include "ftp_adts/ftp/protocol.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace tierce::ftp {

namespace {

constexpr unsigned char kIac = 255;
constexpr unsigned char kSb = 250;    // subnegotiation begin
constexpr unsigned char kSe = 240;    // subnegotiation end
constexpr unsigned char kWill = 251;  // WILL, WONT, DO, DONT (251..254) carry one option byte

// A reply line longer than this, or a reply with more text than kMaxReplyBytes, is garbage: a
// real server's control-channel replies are short (listings go over the data channel).
constexpr size_t kMaxReplyLine = 64 * 1024;
constexpr size_t kMaxReplyBytes = 8 * 1024 * 1024;

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_control_or_space(char c) {
  unsigned char u = static_cast<unsigned char>(c);
  return u <= 0x20 || u == 0x7f;
}
char to_upper(char c) {
  return (c >= 'a' && c <= 'z') ? char(c - 'a' + 'A') : c;
}
char to_lower(char c) {
  return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (to_lower(a[i]) != to_lower(b[i])) return false;
  return true;
}

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = to_lower(c);
  return o;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A decimal number of 1..max_digits digits, nothing else, at most `limit`.
std::optional<uint64_t> parse_decimal(std::string_view s, size_t max_digits, uint64_t limit) {
  if (s.empty() || s.size() > max_digits) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (!is_digit(c)) return std::nullopt;
    uint64_t digit = uint64_t(c - '0');
    if (digit > limit || v > (limit - digit) / 10)
      return std::nullopt;  // also guards the multiplication
    v = v * 10 + digit;
  }
  return v;
}

// Splits "a,b,c" into exactly n fields; nullopt if the count differs.
std::optional<std::vector<std::string_view>> split_exact(std::string_view s, char sep, size_t n) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t p = s.find(sep, start);
    out.push_back(
        s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (out.size() > n) return std::nullopt;
    if (p == std::string_view::npos) break;
    start = p + 1;
  }
  if (out.size() != n) return std::nullopt;
  return out;
}

// Six comma-separated bytes "h1,h2,h3,h4,p1,p2" (PORT argument, 227 text).
std::optional<HostPort> parse_six(std::string_view s) {
  auto f = split_exact(s, ',', 6);
  if (!f) return std::nullopt;
  uint64_t b[6];
  for (size_t i = 0; i < 6; ++i) {
    auto v = parse_decimal(trim((*f)[i]), 3, 255);
    if (!v) return std::nullopt;
    b[i] = *v;
  }
  HostPort hp;
  hp.host = std::to_string(b[0]) + "." + std::to_string(b[1]) + "." + std::to_string(b[2]) + "." +
            std::to_string(b[3]);
  hp.port = uint16_t(b[4] * 256 + b[5]);
  if (hp.port == 0) return std::nullopt;
  // 0.0.0.0 is no place to connect to.
  if (b[0] == 0 && b[1] == 0 && b[2] == 0 && b[3] == 0) return std::nullopt;
  return hp;
}

// Text and canonical form of an IPv4 (af 1) or IPv6 (af 2) address; nullopt when invalid or
// unspecified (0.0.0.0, ::), which no data connection can go to.
std::optional<std::string> canonical_address(int af, std::string_view text) {
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  char buf[INET6_ADDRSTRLEN];
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = 0;
  unsigned char bin[sizeof(in6_addr)];
  int family = af == 1 ? AF_INET : AF_INET6;
  if (inet_pton(family, buf, bin) != 1) return std::nullopt;
  size_t len = af == 1 ? 4 : 16;
  if (std::all_of(bin, bin + len, [](unsigned char c) { return c == 0; })) return std::nullopt;
  char out[INET6_ADDRSTRLEN];
  if (!inet_ntop(family, bin, out, sizeof out)) return std::nullopt;
  return std::string(out);
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = unsigned(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + int64_t(doe) - 719468;
}

void civil_from_days(int64_t z, int64_t* y, unsigned* m, unsigned* d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = unsigned(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = int64_t(yoe) + era * 400 + (*m <= 2);
}

unsigned days_in_month(int64_t y, unsigned m) {
  static const unsigned kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) return 29;
  return kDays[m - 1];
}

// Reply text must not carry line breaks of its own: a file name with CR LF in a reply would let
// a peer inject reply lines. They become spaces.
std::string sanitize_line(std::string_view s) {
  std::string o(s);
  for (char& c : o)
    if (c == '\r' || c == '\n' || c == '\0') c = ' ';
  return o;
}

std::string code_str(int code) {
  if (code < 100 || code > 599) code = 500;  // a caller bug; keep the wire well-formed
  return std::to_string(code);
}

}  // namespace

// ---- command lines ----------------------------------------------------------------------------

ParseError parse_command(std::string_view line, Command* out) {
  out->verb.clear();
  out->arg.clear();
  if (line.size() > kMaxCommandLine) return ParseError::TooLong;
  // Telnet (RFC 854): IAC IAC is a data 0xFF; IAC WILL/WONT/DO/DONT take an option byte; IAC SB
  // runs to IAC SE; every other IAC x (IP, DM, AO, ...) is a two-byte command. All are dropped.
  std::string clean;
  clean.reserve(line.size());
  for (size_t i = 0; i < line.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(line[i]);
    if (c != kIac) {
      clean.push_back(char(c));
      continue;
    }
    if (i + 1 >= line.size()) break;  // a lone IAC at the end
    unsigned char cmd = static_cast<unsigned char>(line[i + 1]);
    if (cmd == kIac) {
      clean.push_back(char(kIac));
      ++i;
    } else if (cmd >= kWill && cmd <= 254) {
      i += 2;  // option byte (or the end of the line)
    } else if (cmd == kSb) {
      size_t j = i + 2;
      while (j + 1 < line.size() && !(static_cast<unsigned char>(line[j]) == kIac &&
                                      static_cast<unsigned char>(line[j + 1]) == kSe))
        ++j;
      i = j + 1;  // past IAC SE, or the end
    } else {
      ++i;
    }
  }
  std::string_view s = clean;
  if (!s.empty() && s.back() == '\r') s.remove_suffix(1);  // servers that split on LF alone
  if (s.find('\0') != std::string_view::npos) return ParseError::NulByte;
  if (trim(s).empty()) return ParseError::Empty;
  size_t sp = s.find(' ');
  std::string_view verb = s.substr(0, sp);
  if (verb.empty() || verb.size() > 8 || !is_alpha(verb[0])) return ParseError::BadVerb;
  for (char c : verb)
    if (!is_alpha(c) && !is_digit(c)) return ParseError::BadVerb;
  out->verb.reserve(verb.size());
  for (char c : verb) out->verb.push_back(to_upper(c));
  if (sp != std::string_view::npos) out->arg.assign(s.substr(sp + 1));
  return ParseError::None;
}

std::string_view to_string(ParseError e) {
  switch (e) {
    case ParseError::None:
      return "ok";
    case ParseError::Empty:
      return "empty command line";
    case ParseError::TooLong:
      return "command line too long";
    case ParseError::BadVerb:
      return "syntax error, command unrecognized";
    case ParseError::NulByte:
      return "NUL byte in command line";
  }
  return "unknown parse error";
}

// ---- replies ----------------------------------------------------------------------------------

std::string Reply::text() const {
  std::string s;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) s += '\n';
    s += lines[i];
  }
  return s;
}

std::string format_reply(int code, std::string_view text) {
  if (text.find('\n') != std::string_view::npos) {
    std::vector<std::string> lines;
    size_t start = 0;
    for (;;) {
      size_t p = text.find('\n', start);
      std::string_view l = text.substr(start, p == std::string_view::npos ? p : p - start);
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      lines.emplace_back(l);
      if (p == std::string_view::npos) break;
      start = p + 1;
    }
    return format_multiline(code, lines);
  }
  return code_str(code) + " " + sanitize_line(text) + "\r\n";
}

std::string format_multiline(int code, const std::vector<std::string>& lines) {
  std::string c = code_str(code);
  if (lines.size() <= 1) return c + " " + (lines.empty() ? "" : sanitize_line(lines[0])) + "\r\n";
  std::string out = c + "-" + sanitize_line(lines.front()) + "\r\n";
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    std::string l = sanitize_line(lines[i]);
    // A middle line that starts with a digit could read as the end line ("226 ..."): RFC 959
    // §4.2 asks the sender to pad it.
    if (!l.empty() && is_digit(l[0])) out += ' ';
    out += l + "\r\n";
  }
  return out + c + " " + sanitize_line(lines.back()) + "\r\n";
}

void ReplyParser::feed(std::string_view bytes) {
  if (error_) return;
  buf_.append(bytes);
}

std::optional<Reply> ReplyParser::take() {
  auto fail = [this](std::string why) -> std::optional<Reply> {
    error_ = true;
    error_text_ = std::move(why);
    buf_.clear();
    return std::nullopt;
  };
  if (error_) return std::nullopt;
  size_t pos = 0;
  std::optional<Reply> done;
  while (!done) {
    size_t nl = buf_.find('\n', pos);
    if (nl == std::string::npos) {
      if (buf_.size() - pos > kMaxReplyLine) return fail("reply line longer than 64 KiB");
      break;
    }
    std::string_view line(buf_.data() + pos, nl - pos);
    pos = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > kMaxReplyLine) return fail("reply line longer than 64 KiB");
    bool has_code = line.size() >= 3 && is_digit(line[0]) && is_digit(line[1]) &&
                    is_digit(line[2]) && (line.size() == 3 || line[3] == ' ' || line[3] == '-');
    if (!in_multi_) {
      if (!has_code)
        return fail("reply without a 3-digit code: \"" + sanitize_line(line.substr(0, 80)) + "\"");
      int code = (line[0] - '0') * 100 + (line[1] - '0') * 10 + (line[2] - '0');
      if (code < 100 || code > 599) return fail("reply code out of range: " + std::to_string(code));
      pending_ = Reply{};
      pending_.code = code;
      pending_.lines.emplace_back(line.size() > 4 ? line.substr(4) : std::string_view());
      if (line.size() > 3 && line[3] == '-') {
        in_multi_ = true;
      } else {
        done = std::move(pending_);
      }
      continue;
    }
    // Inside a multi-line reply: the end is the same code followed by a space (or nothing).
    bool same_code = has_code && line.substr(0, 3) == std::to_string(pending_.code);
    if (same_code && (line.size() == 3 || line[3] == ' ')) {
      pending_.lines.emplace_back(line.size() > 4 ? line.substr(4) : std::string_view());
      in_multi_ = false;
      done = std::move(pending_);
      continue;
    }
    // Some servers repeat "230-" on every line; the prefix is framing, not text.
    if (same_code) line.remove_prefix(4);
    pending_.lines.emplace_back(line);
    size_t total = 0;
    for (auto& l : pending_.lines) total += l.size();
    if (total > kMaxReplyBytes || pending_.lines.size() > kMaxReplyBytes / 16)
      return fail("multi-line reply too long");
  }
  buf_.erase(0, pos);
  return done;
}

// ---- data-port encodings ----------------------------------------------------------------------

std::optional<HostPort> parse_port_arg(std::string_view arg) {
  return parse_six(trim(arg));
}

std::string format_port_arg(const HostPort& hp) {
  auto a = canonical_address(1, hp.host);
  if (!a) return {};
  std::string s = *a;
  std::replace(s.begin(), s.end(), '.', ',');
  return s + "," + std::to_string(hp.port >> 8) + "," + std::to_string(hp.port & 0xff);
}

std::optional<HostPort> parse_pasv_reply(std::string_view text) {
  // RFC 959 gives "(h1,h2,h3,h4,p1,p2)", but RFC 1123 §4.1.2.6 warns that some servers omit the
  // parentheses: take the first run of digits and commas that parses as six numbers.
  size_t open = text.find('(');
  if (open != std::string_view::npos) {
    size_t close = text.find(')', open);
    if (close != std::string_view::npos) {
      if (auto hp = parse_six(text.substr(open + 1, close - open - 1))) return hp;
    }
  }
  size_t i = 0;
  while (i < text.size()) {
    if (!is_digit(text[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && (is_digit(text[j]) || text[j] == ',')) ++j;
    if (auto hp = parse_six(text.substr(i, j - i))) return hp;
    i = j;
  }
  return std::nullopt;
}

std::optional<HostPort> parse_eprt_arg(std::string_view arg) {
  arg = trim(arg);
  // "<d>af<d>addr<d>port<d>", d any printable ASCII 33..126 not in the fields (RFC 2428 §2).
  if (arg.size() < 7) return std::nullopt;
  char d = arg[0];
  if (d < 33 || d > 126 || is_digit(d) || arg.back() != d) return std::nullopt;
  auto f = split_exact(arg.substr(1, arg.size() - 2), d, 3);
  if (!f) return std::nullopt;
  auto af = parse_decimal((*f)[0], 1, 9);
  if (!af || (*af != 1 && *af != 2)) return std::nullopt;
  auto host = canonical_address(int(*af), (*f)[1]);
  if (!host) return std::nullopt;
  auto port = parse_decimal((*f)[2], 5, 65535);
  if (!port || *port == 0) return std::nullopt;
  return HostPort{*host, uint16_t(*port)};
}

std::string format_eprt_arg(const HostPort& hp) {
  bool v6 = hp.host.find(':') != std::string::npos;
  return std::string("|") + (v6 ? "2" : "1") + "|" + hp.host + "|" + std::to_string(hp.port) + "|";
}

std::optional<uint16_t> parse_epsv_reply(std::string_view text) {
  // "229 Entering Extended Passive Mode (|||6446|)": "(" d d d port d ")".
  size_t open = text.find('(');
  while (open != std::string_view::npos) {
    std::string_view rest = text.substr(open + 1);
    size_t close = rest.find(')');
    if (close == std::string_view::npos) return std::nullopt;
    std::string_view in = rest.substr(0, close);
    if (in.size() >= 5) {
      char d = in[0];
      if (d >= 33 && d <= 126 && !is_digit(d) && in[1] == d && in[2] == d && in.back() == d) {
        auto port = parse_decimal(in.substr(3, in.size() - 4), 5, 65535);
        if (port && *port != 0) return uint16_t(*port);
      }
    }
    open = text.find('(', open + 1);
  }
  return std::nullopt;
}

// ---- TPRT -------------------------------------------------------------------------------------

std::optional<TprtRequest> parse_tprt_arg(std::string_view arg) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < arg.size()) {
    while (i < arg.size() && (arg[i] == ' ' || arg[i] == '\t')) ++i;
    size_t j = i;
    while (j < arg.size() && arg[j] != ' ' && arg[j] != '\t') ++j;
    if (j > i) words.push_back(arg.substr(i, j - i));
    if (words.size() > 2) return std::nullopt;
    i = j;
  }
  if (words.empty()) return std::nullopt;
  TprtRequest r;
  if (iequals(words[0], "PTCP")) {
    if (words.size() != 2) return std::nullopt;
    auto n = parse_decimal(words[1], 9, 999999999);
    if (!n) return std::nullopt;
    r.kind = TprtRequest::Kind::ParallelTcp;
    r.streams = unsigned(*n);
    return r;
  }
  if (words.size() != 1) return std::nullopt;
  if (iequals(words[0], "TCP")) {
    r.kind = TprtRequest::Kind::Tcp;
  } else if (iequals(words[0], "VERBS")) {
    r.kind = TprtRequest::Kind::Verbs;
  } else if (iequals(words[0], "STREAM")) {
    r.kind = TprtRequest::Kind::Stream;
  } else {
    return std::nullopt;
  }
  return r;
}

std::optional<uint64_t> parse_tprt_cookie(std::string_view reply_text) {
  size_t p = reply_text.find("cookie=");
  if (p == std::string_view::npos) return std::nullopt;
  std::string_view h = reply_text.substr(p + 7);
  uint64_t v = 0;
  size_t n = 0;
  while (n < h.size() && std::isxdigit(static_cast<unsigned char>(h[n]))) {
    if (n == 16) return std::nullopt;
    char c = to_lower(h[n]);
    v = v * 16 + uint64_t(is_digit(c) ? c - '0' : c - 'a' + 10);
    ++n;
  }
  if (n == 0) return std::nullopt;
  return v;
}

// ---- MLST facts and time-vals -----------------------------------------------------------------

std::string format_time_val(std::time_t t) {
  // Clamp to what four digits of year can say.
  const int64_t lo = days_from_civil(0, 1, 1) * 86400;
  const int64_t hi = days_from_civil(9999, 12, 31) * 86400 + 86399;
  int64_t s = std::clamp<int64_t>(int64_t(t), lo, hi);
  int64_t days = s >= 0 ? s / 86400 : -((-s + 86399) / 86400);
  int64_t secs = s - days * 86400;
  int64_t y;
  unsigned m, d;
  civil_from_days(days, &y, &m, &d);
  unsigned sod = unsigned(secs);  // 0..86399
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04u%02u%02u%02u%02u%02u", unsigned(y), m, d, sod / 3600,
                sod / 60 % 60, sod % 60);
  return buf;
}

std::optional<std::time_t> parse_time_val(std::string_view s) {
  if (s.size() < 14) return std::nullopt;
  std::string_view frac = s.substr(14);
  if (!frac.empty()) {
    if (frac[0] != '.' || frac.size() < 2 || frac.size() > 10) return std::nullopt;
    for (char c : frac.substr(1))
      if (!is_digit(c)) return std::nullopt;
  }
  auto y = parse_decimal(s.substr(0, 4), 4, 9999);
  auto mo = parse_decimal(s.substr(4, 2), 2, 12);
  auto d = parse_decimal(s.substr(6, 2), 2, 31);
  auto h = parse_decimal(s.substr(8, 2), 2, 23);
  auto mi = parse_decimal(s.substr(10, 2), 2, 59);
  auto se = parse_decimal(s.substr(12, 2), 2, 60);  // 60: a leap second
  if (!y || !mo || !d || !h || !mi || !se) return std::nullopt;
  if (*mo < 1 || *d < 1 || *d > days_in_month(int64_t(*y), unsigned(*mo))) return std::nullopt;
  int64_t days = days_from_civil(int64_t(*y), unsigned(*mo), unsigned(*d));
  return std::time_t(days * 86400 + int64_t(*h * 3600 + *mi * 60 + *se));
}

std::string format_facts(const Facts& f) {
  // Values may not hold ';', spaces or control characters (RFC 3659 §7.2): drop them rather
  // than break the line.
  auto value = [](std::string_view v) {
    std::string o;
    for (char c : v)
      if (c != ';' && !is_control_or_space(c)) o.push_back(c);
    return o;
  };
  std::string s;
  if (!f.type.empty()) s += "type=" + value(f.type) + ";";
  if (f.size) s += "size=" + std::to_string(*f.size) + ";";
  if (f.modify) s += "modify=" + format_time_val(*f.modify) + ";";
  if (!f.perm.empty()) s += "perm=" + value(f.perm) + ";";
  if (f.unix_mode) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%04o", *f.unix_mode & 07777u);
    s += std::string("UNIX.mode=") + buf + ";";
  }
  return s + " " + f.name;
}

namespace {

// Parses the facts part (up to, without, the separating space) into *f.
bool parse_fact_list(std::string_view facts, Facts* f) {
  while (!facts.empty()) {
    size_t semi = facts.find(';');
    if (semi == std::string_view::npos) return false;  // facts end with ';'
    std::string_view fact = facts.substr(0, semi);
    facts.remove_prefix(semi + 1);
    if (std::any_of(fact.begin(), fact.end(), is_control_or_space)) return false;
    size_t eq = fact.find('=');
    if (eq == std::string_view::npos || eq == 0) return false;
    std::string_view name = fact.substr(0, eq);
    std::string_view val = fact.substr(eq + 1);
    if (iequals(name, "type")) {
      static const char* kKnown[] = {"file", "dir", "cdir", "pdir"};
      f->type = std::string(val);
      for (const char* k : kKnown)
        if (iequals(val, k)) f->type = k;
    } else if (iequals(name, "size")) {
      auto v = parse_decimal(val, 20, UINT64_MAX);
      if (!v) return false;
      f->size = *v;
    } else if (iequals(name, "modify")) {
      auto t = parse_time_val(val);
      if (!t) return false;
      f->modify = *t;
    } else if (iequals(name, "perm")) {
      f->perm = lower(val);
    } else if (iequals(name, "unix.mode")) {
      if (val.empty() || val.size() > 6) return false;
      unsigned m = 0;
      for (char c : val) {
        if (c < '0' || c > '7') return false;
        m = m * 8 + unsigned(c - '0');
      }
      if (m > 07777) return false;
      f->unix_mode = m;
    }
    // Other facts (unique, lang, media-type, UNIX.owner ...) are legal and ignored.
  }
  return true;
}

}  // namespace

std::optional<Facts> parse_facts(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  // An MLST reply line is indented by one space (RFC 3659 §7.2) and a facts-less MLSD entry also
  // starts with one: read the indentation as such when the rest parses as facts + name.
  if (line.size() > 1 && line[0] == ' ' && line[1] != ' ') {
    std::string_view rest = line.substr(1);
    size_t sp = rest.find(' ');
    if (sp != std::string_view::npos && sp > 0 && sp + 1 < rest.size()) {
      Facts f;
      if (parse_fact_list(rest.substr(0, sp), &f)) {
        f.name = std::string(rest.substr(sp + 1));
        return f;
      }
    }
  }
  size_t sp = line.find(' ');
  if (sp == std::string_view::npos || sp + 1 >= line.size()) return std::nullopt;
  Facts f;
  if (!parse_fact_list(line.substr(0, sp), &f)) return std::nullopt;
  f.name = std::string(line.substr(sp + 1));
  return f;
}

}  // namespace tierce::ftp
