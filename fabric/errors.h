// fabric/errors.h — the one error type the fabric throws at its boundary, with a status a caller
// can act on (fail closed, retry, re-lookup, give up).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tierce::fabric {

// Wire-visible statuses are <= 0xff and travel in reply frames (wire.h); the rest are local.
enum class Errc : uint16_t {
  Ok = 0,
  BadKey = 1,         // the remote key does not match the region: stale or forged descriptor
  OutOfBounds = 2,    // offset + length past the end of the region
  Misaligned = 3,     // atomics need an 8-byte-aligned offset
  NoSuchRegion = 4,   // no region of that name/id is exported (now)
  Revoked = 5,        // the region's owner went away or re-created it: look it up again
  TooLarge = 6,       // a transfer or message larger than the configured bound
  BadRequest = 7,     // a well-framed request the server cannot honour
  NoSuchService = 8,  // no message/stream handler of that name on the server
  HandlerFailed = 9,  // the service handler threw; the message says why
  NotPermitted = 10,  // operation not allowed on this transport (e.g. MAP over tcp)
  AuthFailed = 11,    // challenge-response failed or the peer refused us
  Fenced = 12,        // the region's owner no longer vouches for it (its lease cap passed, e.g.
                      // a coherence home that has not proven it has every invalidation): fail
                      // closed and try again later
  Busy = 13,          // the server refused the connection at a limit (connections per address,
                      // max_connections): try again later or from elsewhere
  // Local-only statuses.
  Timeout = 0x100,  // the peer did not answer within the deadline
  PeerClosed,       // the connection went away (peer died or closed it)
  PeerDead,         // shm: the exporter's lease ran out
  Protocol,         // malformed frame from the peer
  NoDevice,         // verbs: no active RDMA device on this host
  Unsupported,      // the backend lacks this operation
  Config,           // bad configuration or address
  System,           // an OS call failed; the message has errno's text
};

std::string_view to_string(Errc e);

class FabricError : public std::runtime_error {
 public:
  FabricError(Errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
  Errc code() const { return code_; }

 private:
  Errc code_;
};

// Throws FabricError{System} with "<what>: <strerror(errno)>".
[[noreturn]] void throw_errno(const std::string& what);

}  // namespace tierce::fabric
