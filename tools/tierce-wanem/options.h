// tools/tierce-wanem/options.h — the command line of tierce-wanem (docs/ftp.md "tierce-wanem"),
// parsed and checked before anything is bound, so that a bad argument is a usage error (exit 2)
// and never a half-started relay.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace tierce::wanem {

// A bad command line; the message names the argument and what is wrong with it.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// [NETNS/]host:port or [NETNS/]host:port1-port2, resolved once at parse time.
struct Endpoint {
  std::string text;   // as given, for messages
  std::string netns;  // the socket is made in this network namespace (/run/netns/NAME); "" = ours
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  uint16_t port_lo = 0, port_hi = 0;  // inclusive; equal for a single port
  unsigned count() const { return unsigned(port_hi) - port_lo + 1; }
};

// LISTEN=TARGET: port LISTEN.port_lo + i is relayed to TARGET.port_lo + i.
struct Forward {
  Endpoint listen, target;
};

struct Options {
  std::vector<Forward> forwards;
  uint64_t delay_us = 0;            // one-way delay applied to every byte, each direction
  uint64_t rate = 0;                // bytes/s per direction of each connection; 0 = unlimited
  uint64_t window = 3ull << 20;     // bytes in flight per direction of a connection
  std::string ready_file;           // written once every listener is bound
  std::string control;              // --control: unix socket taking runtime commands (control.h)
  std::string send;                 // --send: client mode, one command to --control, then exit
  bool help = false;                // --help: print usage, exit 0
  bool version = false;             // --version: print the version, exit 0
};

// Limits that keep a typo from turning into a relay that holds bytes for a day or allocates
// gigabytes per connection.
constexpr uint64_t kMaxDelayUs = 60'000'000;      // 60 s one-way
constexpr uint64_t kMaxWindow = 1ull << 30;       // 1 GiB per direction
constexpr uint64_t kMaxRate = 1'000'000'000'000;  // 1 TB/s
constexpr unsigned kMaxListenPorts = 16384;       // over all --forward ranges
constexpr size_t kMaxControlPath = 107;           // sun_path holds 108 bytes with the NUL
constexpr size_t kMaxNetnsName = 64;              // a file name under /run/netns

extern const char* const kUsage;

// Throws UsageError.
Options parse_options(int argc, char** argv);

// "1048576", "64Ki", "3Mi", "1G" (k/M/G = 10^3, 10^6, 10^9; Ki/Mi/Gi = powers of 1024).
// Throws UsageError naming `what`.
uint64_t parse_quantity(const std::string& text, const std::string& what);

// "host:port" or "host:lo-hi" ("[::1]:port" for IPv6). Throws UsageError naming `what`.
Endpoint parse_endpoint(const std::string& text, const std::string& what);

}  // namespace tierce::wanem
