// tools/tierce-wanem/control.h — the runtime control of tierce-wanem (--control PATH): a unix
// stream socket taking one text command per line, each answered with one line:
//
//   cut to-target|to-client|both     -> "ok cut=<now cut>"       stop forwarding a direction
//   heal [to-target|to-client|both]  -> "ok cut=<still cut>"     forward again (default: both)
//   delay US                         -> "ok delay_us=US"         for bytes read from now on
//   reset                            -> "ok reset=N"             reset every open connection
//                                                                (RST to both peers; new ones
//                                                                are relayed as before)
//   status                           -> "ok cut=... delay_us=... connections=N pending_connects=N
//                                        accepted=N held_to_target=B held_to_client=B
//                                        bytes_to_target=B bytes_to_client=B"
//   anything else                    -> "error: <why>"
//
// A cut direction looks like a silent network to both peers: the relay keeps reading what the
// sender sends (until the window is full, then the sender's TCP backs up), writes nothing of it,
// passes no FIN and no reset; a connection accepted while to-target is cut gets its connection to
// the target only once to-target flows again (its SYN is "held" too). Heal releases what was held,
// oldest first; bytes already older than the delay go at once.
#pragma once

#include <cstdint>
#include <string>

namespace tierce::wanem {

// The directions of every relayed connection, as a bit set.
enum Cut : unsigned {
  kCutNone = 0,
  kCutToTarget = 1,  // client -> target
  kCutToClient = 2,  // target -> client
  kCutBoth = 3,
};
const char* cut_name(unsigned cut);  // "none", "to-target", "to-client", "both"

struct Command {
  enum class Kind { Cut, Heal, Delay, Status, Redirect, Reset };
  Kind kind = Kind::Status;
  unsigned dirs = kCutNone;  // Cut, Heal
  uint64_t delay_us = 0;     // Delay
  std::string target;        // Redirect: "[NETNS/]host:port", or "off"
};

// Parses one line (without its newline; surrounding blanks ignored). False with `error` set when
// the line is not a command.
bool parse_command(const std::string& line, Command& out, std::string& error);

// Client side (--send): connects to `path`, sends `command` + "\n", returns the answer line
// without its newline; throws std::runtime_error when the relay cannot be reached or does not
// answer within `timeout_ms`.
std::string send_command(const std::string& path, const std::string& command,
                         int timeout_ms = 5000);

}  // namespace tierce::wanem
