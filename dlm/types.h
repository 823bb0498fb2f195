// dlm/types.h — the vocabulary every part of the lock manager shares: modes, outcomes, tokens.
#pragma once
#include <cstdint>
#include <string_view>

namespace tierce::dlm {

enum class Mode : uint8_t { Shared = 1, Exclusive = 2 };
std::string_view to_string(Mode m);

// The outcome of a lock operation, as the local API, the IPC frames and the C API carry it
// (the numeric values are wire-visible: never renumber).
enum class Status : uint8_t {
  Ok = 0,
  Timeout = 1,       // not granted before the deadline (the request was withdrawn)
  WouldBlock = 2,    // try-lock: the lock is held or has waiters
  NotHeld = 3,       // release of a hold this client does not have
  HomeDown = 4,      // the lock's home node is not heart-beating: no lock can be granted
  BadName = 5,       // empty, longer than kMaxNameBytes, or containing NUL
  LeaseLost = 6,     // the hold was revoked: this node lost contact with the home (fencing!)
  TooMany = 7,       // a limit was reached (holds per client, lock slots at the home)
  ShuttingDown = 8,  // lockd is stopping
  BadRequest = 9,    // malformed request frame
  Internal = 10,     // a bug or an unexpected local failure; the message says what
};
std::string_view to_string(Status s);

// A fencing token: strictly increasing per lock across every grant, across lockd restarts of
// the home (the home's epoch is persisted) and across recoveries. Hand it to the resource you
// protect; the resource refuses a token lower than one it has seen (docs/dlm.md, "Fencing").
using Token = uint64_t;

inline constexpr size_t kMaxNameBytes = 255;

}  // namespace tierce::dlm
