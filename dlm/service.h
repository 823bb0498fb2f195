// dlm/service.h — what a lockd offers its local clients, whatever the algorithm underneath
// (N-CoSED, DQNL, SRSL): the seam between the IPC server (agents/lockd/ipc_server.*) and the
// protocol engine (dlm/engine.*).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "dlm/types.h"

namespace tierce::dlm {

using OwnerId = uint64_t;  // one local client connection (its process); never 0
using HoldId = uint64_t;   // one granted lock, unique within the lockd's life; never 0

struct Grant {
  Status status = Status::Internal;
  HoldId hold = 0;  // valid when status == Ok
  Token token = 0;  // valid when status == Ok
  // Ok on a lock homed on another member: the end of this node's lease on that home
  // (CLOCK_MONOTONIC ns). A grant used at or after it may overlap the home's next holder: the
  // client refuses it (dlm/ipc.h, REPLY valid_until). 0: no deadline.
  uint64_t valid_until_ns = 0;
  std::string message;  // for errors: what happened and what to do
};

class LocalLockService {
 public:
  virtual ~LocalLockService() = default;

  // Starts acquiring `name` for `owner`. `done` runs exactly once, possibly before acquire()
  // returns, possibly on another thread, with Ok, Timeout, WouldBlock, HomeDown, BadName,
  // TooMany, ShuttingDown or Internal. timeout < 0: wait forever; 0: try-lock (WouldBlock
  // unless granted at once). Prereq: `done` does not call back into the service.
  virtual void acquire(OwnerId owner, const std::string& name, Mode mode,
                       std::chrono::milliseconds timeout, std::function<void(const Grant&)> done) = 0;

  // Releases a hold of `owner`: Ok or NotHeld. Returns at once; the lock passes on
  // asynchronously (the releasing client never waits for the next holder).
  virtual Status release(OwnerId owner, HoldId hold) = 0;

  // `owner` went away (its connection closed: the process exited or crashed). Pending
  // acquisitions are withdrawn (their `done` runs with ShuttingDown... or not at all once the
  // owner is gone: the IPC server ignores it) and every hold is released.
  virtual void owner_gone(OwnerId owner) = 0;

  // Who to tell when a hold is revoked (LeaseLost): called from the service's threads.
  // Set once, before the first acquire.
  using RevokedFn = std::function<void(OwnerId, HoldId, const std::string& why)>;
  virtual void set_revoked_callback(RevokedFn fn) = 0;

  // A human-readable status report (members, heartbeats, locks, counters).
  virtual std::string status_text() = 0;
};

}  // namespace tierce::dlm
