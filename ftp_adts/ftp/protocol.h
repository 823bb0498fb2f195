// ftp_adts/ftp/protocol.h — the FTP protocol pieces both tierce-ftpd and tierce-ftp use:
// command lines (RFC 959 §4.1, 5.3), replies (§4.2, multi-line), data-port encodings (PORT/PASV,
// EPRT/EPSV of RFC 2428), MLST facts (RFC 3659 §7) and TPRT (docs/ftp.md). Pure functions, no
// I/O: the command parser is fuzzed (tests/fuzz/fuzz_ftp_command.cc).
#pragma once

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tierce::ftp {

constexpr size_t kMaxCommandLine = 4096;  // longer lines get 500 and are discarded

// One command line without its CRLF. verb upper-cased ("RETR"); arg as sent (may contain spaces),
// empty when none. Telnet IAC sequences (RFC 854 IP/DM/etc. sent before ABOR) are stripped.
struct Command {
  std::string verb;
  std::string arg;
};
enum class ParseError { None, Empty, TooLong, BadVerb, NulByte };
// Parses a line (without CR LF). BadVerb: not 1..8 ASCII letters (digits allowed after the first).
ParseError parse_command(std::string_view line, Command* out);
std::string_view to_string(ParseError e);

// A reply: code 100..599 and its text lines (one for a single-line reply).
struct Reply {
  int code = 0;
  std::vector<std::string> lines;
  bool positive_preliminary() const { return code >= 100 && code < 200; }
  bool ok() const { return code >= 200 && code < 400; }
  std::string text() const;  // lines joined with '\n'
};
// Formats for the wire: "226 Done\r\n" or "211-Features:\r\n UTF8\r\n211 End\r\n".
// format_reply turns a text with '\n' into a multi-line reply; CR and NUL in any text become
// spaces (a peer-chosen file name cannot inject reply lines); middle lines starting with a digit
// get a space in front (RFC 959 §4.2).
std::string format_reply(int code, std::string_view text);
std::string format_multiline(int code, const std::vector<std::string>& lines);

// Incremental reply reader for clients: feed bytes as they arrive; take() returns each complete
// reply (multi-line replies per RFC 959 §4.2). Garbage (no 3-digit code, a code outside
// 100..599, a line over 64 KiB, a reply over 8 MiB) sets error(), which is final. Middle lines
// that repeat "ddd-" (some servers do) lose that prefix.
class ReplyParser {
 public:
  void feed(std::string_view bytes);
  std::optional<Reply> take();
  bool error() const { return error_; }
  const std::string& error_text() const { return error_text_; }

 private:
  std::string buf_;
  Reply pending_;
  bool in_multi_ = false;
  bool error_ = false;
  std::string error_text_;
};

// Host-port pairs. IPv4 text in host for PORT/PASV; EPRT supports 1 (IPv4) and 2 (IPv6).
struct HostPort {
  std::string host;
  uint16_t port = 0;
};
std::optional<HostPort> parse_port_arg(std::string_view arg);     // "h1,h2,h3,h4,p1,p2"
std::string format_port_arg(const HostPort& hp);                  // inverse (IPv4 only)
std::optional<HostPort> parse_pasv_reply(std::string_view text);  // finds "(h1,...,p2)" in 227
std::optional<HostPort> parse_eprt_arg(std::string_view arg);     // "|1|132.235.1.2|6275|"
std::string format_eprt_arg(const HostPort& hp);
std::optional<uint16_t> parse_epsv_reply(std::string_view text);  // "(|||6446|)" in 229

// TPRT (docs/ftp.md): "TCP", "PTCP <n>", "VERBS", "STREAM".
struct TprtRequest {
  enum class Kind { Stream, Tcp, ParallelTcp, Verbs } kind = Kind::Stream;
  unsigned streams = 1;
};
// Case-insensitive. "PTCP n" parses any n up to 9 digits (0 included): the server checks the
// range and answers "501 TPRT PTCP 0: stream count must be 1..16".
std::optional<TprtRequest> parse_tprt_arg(std::string_view arg);
// The cookie from "200 TPRT PTCP 8 cookie=<16 hex>".
std::optional<uint64_t> parse_tprt_cookie(std::string_view reply_text);

// MLST/MLSD facts (RFC 3659 §7): "type=file;size=123;modify=20261121093000;perm=r; name".
struct Facts {
  std::string name;
  std::string type;  // file, dir, cdir, pdir, OS.unix=symlink ...
  std::optional<uint64_t> size;
  std::optional<std::time_t> modify;  // UTC seconds
  std::string perm;                   // e.g. "adfrw", "elcmp"
  std::optional<unsigned> unix_mode;
};
std::string format_facts(const Facts& f);  // one line without CRLF
// nullopt on malformed (a fact without '=', a bad size/modify/UNIX.mode value, control characters
// or no "; name"). Unknown facts are ignored; a trailing CR is dropped; a line starting with one
// space is read as an MLST reply line (indented) when the rest is facts + name.
std::optional<Facts> parse_facts(std::string_view line);
std::string format_time_val(std::time_t t);                     // YYYYMMDDHHMMSS (UTC), MDTM/modify
std::optional<std::time_t> parse_time_val(std::string_view s);  // accepts a .sss fraction

}  // namespace tierce::ftp
