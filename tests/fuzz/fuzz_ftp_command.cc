// tests/fuzz/fuzz_ftp_command.cc — fuzz target for the FTP text codecs (ftp_adts/ftp/protocol.h)
// and virtual path joining (root.h): what a hostile client (commands) or server (replies, PASV,
// EPSV, MLSD lines) can feed them. The input is split at CR LF; every line goes to every parser,
// the whole input to the reply parser. Besides "no crash, no hang, no out-of-bounds access", each
// result is checked against what its consumers rely on (verbs are upper-case letters/digits,
// joined paths have no "." or ".." component, formatted output parses back to the same value),
// and a violation aborts.
//
// Built twice (tests/fuzz/CMakeLists.txt): with -DTIERCE_LIBFUZZER under libFuzzer, and without
// it with the deterministic replay driver at the bottom of this file:
//   fuzz_ftp_command_replay [--iterations N] [--write-seeds DIR] [FILE...]
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ftp_adts/ftp/protocol.h"
#include "ftp_adts/ftp/root.h"

using namespace tierce::ftp;

namespace {

std::string_view g_line;  // the line under test, shown when an invariant fails

[[noreturn]] void violated(const char* what, int line) {
  std::fprintf(stderr, "fuzz_ftp_command: invariant violated: %s (line %d) on input line \"", what,
               line);
  for (unsigned char c : g_line) {
    if (c >= 32 && c < 127 && c != '\\' && c != '"')
      std::fputc(c, stderr);
    else
      std::fprintf(stderr, "\\x%02x", c);
  }
  std::fprintf(stderr, "\"\n");
  std::abort();
}

}  // namespace

#define FUZZ_CHECK(cond)                    \
  do {                                      \
    if (!(cond)) violated(#cond, __LINE__); \
  } while (0)

namespace {

uint64_t g_commands = 0, g_replies = 0, g_addresses = 0, g_facts = 0;

bool is_upper_or_digit(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

void check_command(std::string_view line) {
  Command c;
  ParseError e = parse_command(line, &c);
  FUZZ_CHECK(!to_string(e).empty());
  if (e != ParseError::None) {
    FUZZ_CHECK(c.verb.empty());
    return;
  }
  ++g_commands;
  FUZZ_CHECK(line.size() <= kMaxCommandLine);
  FUZZ_CHECK(!c.verb.empty() && c.verb.size() <= 8);
  FUZZ_CHECK(c.verb[0] >= 'A' && c.verb[0] <= 'Z');
  for (char ch : c.verb) FUZZ_CHECK(is_upper_or_digit(ch));
  FUZZ_CHECK(c.arg.find('\0') == std::string::npos);
  FUZZ_CHECK(c.arg.size() < line.size());

  // Whatever a client sent, echoing it in a reply gives exactly one well-formed reply.
  std::string wire = format_reply(550, c.arg);
  size_t lines = 1;
  for (char ch : c.arg) lines += ch == '\n';
  ReplyParser rp;
  rp.feed(wire);
  auto r = rp.take();
  FUZZ_CHECK(r && !rp.error());
  FUZZ_CHECK(r->code == 550);
  FUZZ_CHECK(r->lines.size() == lines);
  FUZZ_CHECK(!rp.take());
}

void check_addresses(std::string_view line) {
  if (auto hp = parse_port_arg(line)) {
    ++g_addresses;
    FUZZ_CHECK(hp->port != 0);
    auto again = parse_port_arg(format_port_arg(*hp));
    FUZZ_CHECK(again && again->host == hp->host && again->port == hp->port);
  }
  if (auto hp = parse_pasv_reply(line)) {
    ++g_addresses;
    FUZZ_CHECK(hp->port != 0);
    FUZZ_CHECK(!format_port_arg(*hp).empty());
  }
  if (auto hp = parse_eprt_arg(line)) {
    ++g_addresses;
    FUZZ_CHECK(hp->port != 0 && !hp->host.empty());
    auto again = parse_eprt_arg(format_eprt_arg(*hp));
    FUZZ_CHECK(again && again->host == hp->host && again->port == hp->port);
  }
  if (auto port = parse_epsv_reply(line)) {
    ++g_addresses;
    FUZZ_CHECK(*port != 0);
  }
  if (auto t = parse_tprt_arg(line)) {
    if (t->kind != TprtRequest::Kind::ParallelTcp) FUZZ_CHECK(t->streams == 1);
  }
  (void)parse_tprt_cookie(line);
}

void check_facts(std::string_view line) {
  if (auto t = parse_time_val(line)) {
    auto again = parse_time_val(format_time_val(*t));
    FUZZ_CHECK(again && *again == *t);
  }
  auto f = parse_facts(line);
  if (!f) return;
  ++g_facts;
  FUZZ_CHECK(!f->name.empty());
  if (f->unix_mode) FUZZ_CHECK(*f->unix_mode <= 07777u);
  std::string out = format_facts(*f);
  // A facts-less line (" name") is ambiguous with MLST's indentation, and a name ending in CR
  // with a line read up to LF alone, by design; skip those.
  if (out.empty() || out[0] == ' ' || f->name.back() == '\r') return;
  auto g = parse_facts(out);
  FUZZ_CHECK(g);
  FUZZ_CHECK(g->name == f->name && g->type == f->type && g->size == f->size &&
             g->modify == f->modify && g->perm == f->perm && g->unix_mode == f->unix_mode);
}

// Returns the joined path (the next cwd of the chain).
std::string check_path(std::string_view cwd, std::string_view arg) {
  std::string p = join_virtual(cwd, arg);
  FUZZ_CHECK(!p.empty() && p[0] == '/');
  FUZZ_CHECK(p == "/" || p.back() != '/');
  FUZZ_CHECK(p.find("//") == std::string::npos);
  FUZZ_CHECK(p.find("/./") == std::string::npos && p.find("/../") == std::string::npos);
  FUZZ_CHECK(!(p.size() >= 2 && p.compare(p.size() - 2, 2, "/.") == 0));
  FUZZ_CHECK(!(p.size() >= 3 && p.compare(p.size() - 3, 3, "/..") == 0));
  // Idempotent: a joined path is its own normal form, from any cwd.
  FUZZ_CHECK(join_virtual("/elsewhere", p) == p);
  return p;
}

}  // namespace

// For the replay driver's report: how deep the inputs got.
extern "C" void fuzz_ftp_command_stats(uint64_t* commands, uint64_t* replies, uint64_t* addresses,
                                       uint64_t* facts) {
  *commands = g_commands;
  *replies = g_replies;
  *addresses = g_addresses;
  *facts = g_facts;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string cwd = "/";
  size_t start = 0;
  for (;;) {
    size_t p = in.find("\r\n", start);
    std::string_view line = in.substr(start, p == std::string_view::npos ? p : p - start);
    g_line = line;
    check_command(line);
    check_addresses(line);
    check_facts(line);
    // A CWD chain, reset when it gets long: every line joins against it, so an unbounded chain
    // made the harness quadratic in the input (460 exec/s on a 3 KB corpus, the time all in the
    // harness's own joins), and a server's cwd is bounded anyway (it must exist: PATH_MAX). 256
    // bytes keep every case the joins have (deep, "..", "." and "//" runs).
    cwd = check_path(cwd, line);
    if (cwd.size() > 256) cwd = "/";
    if (p == std::string_view::npos) break;
    start = p + 2;
  }

  g_line = in;
  // The whole input as a server's reply stream, fed in two pieces split where the first byte says.
  ReplyParser rp;
  size_t cut = size ? data[0] % (size + 1) : 0;
  rp.feed(in.substr(0, cut));
  while (auto r = rp.take()) {
    ++g_replies;
    FUZZ_CHECK(r->code >= 100 && r->code <= 599 && !r->lines.empty());
  }
  rp.feed(in.substr(cut));
  while (auto r = rp.take()) {
    ++g_replies;
    FUZZ_CHECK(r->code >= 100 && r->code <= 599 && !r->lines.empty());
  }
  if (rp.error()) FUZZ_CHECK(!rp.error_text().empty() && !rp.take());
  return 0;
}

#ifndef TIERCE_LIBFUZZER
// ---- deterministic replay driver (any compiler; in ctest) ---------------------------------------
#include <random>
#include <vector>

#include "replay_args.h"

static std::vector<std::string> seeds() {
  return {
      "USER anonymous\r\nPASS guest@\r\nSYST\r\nFEAT\r\nPWD\r\nCWD /pub/../pub/./x\r\n",
      "\xff\xf4\xff\xf2"
      "ABOR\r\n",
      "STOR name with spaces \xff\xff.txt\r\n",
      "PORT 127,0,0,1,117,48\r\nEPRT |1|132.235.1.2|6275|\r\nEPRT "
      "|2|1080::8:800:200C:417A|5282|\r\n",
      "TPRT PTCP 8\r\nTPRT TCP\r\nTPRT VERBS\r\nTPRT STREAM\r\nEPSV\r\nPASV\r\n",
      "227 Entering Passive Mode (127,0,0,1,117,48).\r\n229 Entering Extended Passive Mode "
      "(|||6446|)\r\n",
      "211-Features:\r\n TPRT TCP;PTCP;VERBS\r\n MLST type*;size*;modify*;perm*;\r\n UTF8\r\n211 "
      "End\r\n",
      "230-Welcome\r\n230-second\r\n plain\r\n230 Logged in\r\n200 TPRT PTCP 8 "
      "cookie=5f0c2a99d3e1b7a4\r\n",
      "type=file;size=123;modify=20261121093000;perm=adfrw;UNIX.mode=0644; my file; x=y\r\n"
      " Type=dir;Modify=20200101000000.123;UNIQUE=801g4;perm=elcmp; /pub\r\n"
      "type=OS.unix=symlink;size=7; link\r\n",
      "MDTM 20261121093000\r\nMFMT 20000229235960 f\r\n",
      "a/../../..\r\n//x/./y/../z\r\n../../etc/passwd\r\n/\r\n.\r\n...\r\n",
  };
}

int main(int argc, char** argv) {
  tierce_fuzz::Driver<decltype(seeds())::value_type> d;
  d.name = "fuzz_ftp_command";
  d.iterations = 200000;
  d.seeds = seeds();
  d.rng_seed = 20261121;
  // This format's own mutations (what is worth changing in it).
  {
    tierce_fuzz::TextMutations m;
    m.tokens = {"\r\n", "\xff", "\xff\xff", "\xff\xfa", "\xff\xf0", "\xff\xfd", "..", "/", ".", "|",
                ",", "(", ")", ";", " ", "=", "-", "999", "0", "65535", "256", std::string(1, '\0'),
                "\r", "\n", "::", "cookie=", "size=", "modify=", "UNIX.mode="};
    m.finish = [](std::string& v, std::mt19937_64& rng) {
      if (rng() % 64 == 0) v.append(kMaxCommandLine + rng() % 16 - 8, 'A');  // near the line limit
    };
    d.mutate = m;
  }
  return tierce_fuzz::replay_main(argc, argv, d);
}
#endif  // TIERCE_LIBFUZZER
