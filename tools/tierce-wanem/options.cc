// tools/tierce-wanem/options.cc — parsing and checking tierce-wanem's command line.
#include "tools/tierce-wanem/options.h"

#include <netdb.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace tierce::wanem {

const char* const kUsage = R"(Usage:
  tierce-wanem --forward LISTEN=TARGET [--forward ...] --delay-us D [--rate BYTES/s]
               [--window BYTES] [--ready-file F] [--control PATH]
  tierce-wanem --control PATH --send COMMAND

A user-space WAN emulator: every TCP connection accepted on LISTEN is relayed to TARGET, and
every byte is held for D microseconds in each direction (one-way delay D, round trip 2D).

  --forward LISTEN=TARGET   host:port=host:port, or host:p1-p2=host:q1-q2 (ranges of equal
                            length, mapped in order: p1->q1, p1+1->q1+1, ...). Repeatable.
                            Either side may start with NETNS/ (a name `ip netns add` made,
                            /run/netns/NETNS; needs root): that side's socket lives in that
                            network namespace, so one relay links hosts emulated by
                            namespaces without a process in each, e.g.
                            h1/10.0.0.1:7500=h2/10.0.0.2:7400.
  --delay-us D              one-way delay in microseconds (0..60000000)
  --rate BYTES/s            pace each direction of each connection to this rate (default:
                            unlimited)
  --window BYTES            bytes in flight per direction of a connection, counted from the
                            moment the relay reads them until their "ack" would be back at the
                            sender (D after they are written): one stream gets at most
                            window / (2D). Default 3Mi.
  --ready-file F            written (atomically) once every listener is bound
  --control PATH            listen on this unix stream socket for runtime commands, one per
                            line, each answered "ok ...\n" or "error: ...\n":
                              cut to-target|to-client|both   stop forwarding that direction of
                                  every connection, existing and new (bytes are held, nothing
                                  is dropped or reset; a new connection is accepted, and its
                                  connection to TARGET is made only once to-target flows)
                              heal [to-target|to-client|both]   forward again, held bytes
                                  first (default both)
                              delay US    one-way delay of the bytes read from now on
                              redirect [NETNS/]HOST:PORT|off   new connections go there
                                  instead of TARGET (an on-path redirect); the existing
                                  ones are reset, so their clients dial again
                              status      "ok cut=... delay_us=... connections=... held..."
  --send COMMAND            with --control: send COMMAND to a running relay, print its
                            answer, exit 0 if it was "ok", 1 if not
  --help                    this text
  --version                 print the version and exit

Quantities take k/M/G (10^3, 10^6, 10^9) or Ki/Mi/Gi (2^10, 2^20, 2^30) suffixes.
Prints "tierce-wanem: ready" when every listener is bound. SIGTERM/SIGINT stop it (exit 0).
Exit codes: 0 stopped by a signal; 1 runtime failure (cannot bind); 2 bad command line.
)";

uint64_t parse_quantity(const std::string& text, const std::string& what) {
  if (text.empty() || text[0] < '0' || text[0] > '9')
    throw UsageError(what + ": '" + text + "' is not a non-negative number");
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE) throw UsageError(what + ": '" + text + "' is too large");
  std::string_view suffix(end);
  uint64_t mult = 1;
  if (suffix.empty()) {
    mult = 1;
  } else if (suffix == "k" || suffix == "K") {
    mult = 1000;
  } else if (suffix == "M") {
    mult = 1000'000;
  } else if (suffix == "G") {
    mult = 1000'000'000;
  } else if (suffix == "Ki") {
    mult = 1ull << 10;
  } else if (suffix == "Mi") {
    mult = 1ull << 20;
  } else if (suffix == "Gi") {
    mult = 1ull << 30;
  } else {
    throw UsageError(what + ": '" + text + "': unknown suffix '" + std::string(suffix) +
                     "' (use k, M, G, Ki, Mi or Gi)");
  }
  if (v > UINT64_MAX / mult) throw UsageError(what + ": '" + text + "' is too large");
  return uint64_t(v) * mult;
}

namespace {

uint16_t parse_port(std::string_view s, const std::string& what, const std::string& whole) {
  if (s.empty() || s.size() > 5)
    throw UsageError(what + ": '" + whole + "': bad port '" + std::string(s) + "'");
  unsigned v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      throw UsageError(what + ": '" + whole + "': bad port '" + std::string(s) + "'");
    v = v * 10 + unsigned(c - '0');
  }
  if (v == 0 || v > 65535)
    throw UsageError(what + ": '" + whole + "': port " + std::string(s) + " is not in 1..65535");
  return uint16_t(v);
}

}  // namespace

Endpoint parse_endpoint(const std::string& text, const std::string& what) {
  Endpoint e;
  e.text = text;
  // NETNS/ first: a host never holds a '/'.
  std::string_view rest = text;
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    e.netns = std::string(rest.substr(0, slash));
    rest = rest.substr(slash + 1);
    if (e.netns.empty() || e.netns.size() > kMaxNetnsName || e.netns == "." || e.netns == ".." ||
        e.netns.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                  "0123456789._-") != std::string::npos)
      throw UsageError(what + ": '" + text + "': '" + e.netns +
                       "' is not a network namespace name (1-64 letters, digits, '.', '_', '-')");
  }
  std::string host;
  std::string_view ports;
  if (!rest.empty() && rest[0] == '[') {
    auto close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':')
      throw UsageError(what + ": '" + text + "' is not [host]:port");
    host = std::string(rest.substr(1, close - 1));
    ports = rest.substr(close + 2);
  } else {
    auto colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0)
      throw UsageError(what + ": '" + text + "' is not host:port or host:port1-port2");
    host = std::string(rest.substr(0, colon));
    ports = rest.substr(colon + 1);
    if (host.find(':') != std::string::npos)
      throw UsageError(what + ": '" + text + "': write IPv6 addresses as [addr]:port");
  }
  if (host.empty()) throw UsageError(what + ": '" + text + "': empty host");
  auto dash = ports.find('-');
  if (dash == std::string_view::npos) {
    e.port_lo = e.port_hi = parse_port(ports, what, text);
  } else {
    e.port_lo = parse_port(ports.substr(0, dash), what, text);
    e.port_hi = parse_port(ports.substr(dash + 1), what, text);
    if (e.port_hi < e.port_lo)
      throw UsageError(what + ": '" + text + "': the port range ends before it starts");
  }

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), "1", &hints, &res);
  if (rc != 0 || !res)
    throw UsageError(what + ": '" + text + "': cannot resolve '" + host + "': " +
                     ::gai_strerror(rc));
  std::memcpy(&e.addr, res->ai_addr, res->ai_addrlen);
  e.addr_len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return e;
}

Options parse_options(int argc, char** argv) {
  Options o;
  bool have_delay = false;
  unsigned listen_ports = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool inline_value = false;
    if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    auto need_value = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) throw UsageError(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      o.help = true;
      return o;
    } else if (arg == "--version" || arg == "-V") {
      o.version = true;
      return o;
    } else if (arg == "--forward") {
      std::string v = need_value();
      auto eq = v.find('=');
      if (eq == std::string::npos)
        throw UsageError("--forward '" + v + "' is not LISTEN=TARGET");
      Forward f;
      f.listen = parse_endpoint(v.substr(0, eq), "--forward LISTEN");
      f.target = parse_endpoint(v.substr(eq + 1), "--forward TARGET");
      if (f.listen.count() != f.target.count())
        throw UsageError("--forward '" + v + "': LISTEN has " + std::to_string(f.listen.count()) +
                         " ports and TARGET " + std::to_string(f.target.count()) +
                         "; the ranges must be of equal length");
      listen_ports += f.listen.count();
      if (listen_ports > kMaxListenPorts)
        throw UsageError("--forward: more than " + std::to_string(kMaxListenPorts) +
                         " listening ports in all");
      o.forwards.push_back(std::move(f));
    } else if (arg == "--delay-us") {
      o.delay_us = parse_quantity(need_value(), "--delay-us");
      if (o.delay_us > kMaxDelayUs)
        throw UsageError("--delay-us " + std::to_string(o.delay_us) + " is more than " +
                         std::to_string(kMaxDelayUs) + " (60 s)");
      have_delay = true;
    } else if (arg == "--rate") {
      o.rate = parse_quantity(need_value(), "--rate");
      if (o.rate == 0 || o.rate > kMaxRate)
        throw UsageError("--rate must be 1.." + std::to_string(kMaxRate) + " bytes/s");
    } else if (arg == "--window") {
      o.window = parse_quantity(need_value(), "--window");
      if (o.window == 0 || o.window > kMaxWindow)
        throw UsageError("--window must be 1.." + std::to_string(kMaxWindow) + " bytes");
    } else if (arg == "--ready-file") {
      o.ready_file = need_value();
      if (o.ready_file.empty()) throw UsageError("--ready-file needs a path");
    } else if (arg == "--control") {
      o.control = need_value();
      if (o.control.empty()) throw UsageError("--control needs a path");
      if (o.control.size() > kMaxControlPath)
        throw UsageError("--control '" + o.control + "' is longer than " +
                         std::to_string(kMaxControlPath) + " bytes (a unix socket path)");
    } else if (arg == "--send") {
      o.send = need_value();
      if (o.send.empty() || o.send.find('\n') != std::string::npos)
        throw UsageError("--send needs one command (no newline)");
    } else {
      throw UsageError("unknown argument '" + std::string(argv[i]) + "'");
    }
  }
  if (!o.send.empty()) {
    if (o.control.empty()) throw UsageError("--send needs --control PATH (the relay's socket)");
    if (!o.forwards.empty()) throw UsageError("--send talks to a running relay: no --forward");
    return o;
  }
  if (o.forwards.empty()) throw UsageError("at least one --forward LISTEN=TARGET is needed");
  if (!have_delay) throw UsageError("--delay-us is required (0 for no delay)");
  return o;
}

}  // namespace tierce::wanem
