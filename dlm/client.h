// dlm/client.h — the C++ API of the lock manager: a process's connection to its node's lockd
// (local IPC: a unix socket). Thread-safe: any thread may lock or unlock while others wait; each
// call blocks only its caller. Never share a LockClient across fork(): connect in the child.
//
//   tierce::dlm::LockClient c("/run/tierce/lockd.sock");
//   auto held = c.lock("orders", Mode::Exclusive, 5s);   // throws LockError on failure
//   write_with_fence(held.token());                       // strictly increasing per lock
//   // held.unlock(), or its destructor, releases
//
// A hold ends when it is unlocked, when the client (its process) goes away, or when lockd
// revokes it (LeaseLost: this node lost contact with the lock's home for a lease): revocations
// are reported through revoked()/next_revoked() and event_fd(); docs/dlm.md has the semantics.
//
// No thread of its own (cheap in Apache prefork children): a waiting caller reads the socket
// for everyone (dlm/client.cc). It polls for a reply for 50 us before sleeping, as waking a
// sleeping thread costs more than a round trip on a VM; $TIERCE_LOCK_SPIN_US changes that
// (0: never spin, for hosts with one CPU).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dlm/types.h"

namespace tierce::dlm {

class LockError : public std::runtime_error {
 public:
  LockError(Status s, const std::string& what) : std::runtime_error(what), status_(s) {}
  Status status() const { return status_; }

 private:
  Status status_;
};

class LockClient;

// A granted lock. Movable; releases on destruction (errors there are swallowed: call unlock()
// to see them).
class HeldLock {
 public:
  HeldLock() = default;
  HeldLock(HeldLock&& o) noexcept;
  HeldLock& operator=(HeldLock&& o) noexcept;
  HeldLock(const HeldLock&) = delete;
  HeldLock& operator=(const HeldLock&) = delete;
  ~HeldLock();

  explicit operator bool() const { return client_ != nullptr; }
  uint64_t id() const { return hold_; }
  Token token() const { return token_; }
  const std::string& name() const { return name_; }
  Mode mode() const { return mode_; }
  void unlock();  // throws LockError (NotHeld when lockd revoked it meanwhile); see LockClient::unlock
  // Gives up ownership without releasing (the C API keeps the id itself).
  uint64_t release_ownership();

 private:
  friend class LockClient;
  HeldLock(LockClient* c, uint64_t hold, Token token, std::string name, Mode mode)
      : client_(c), hold_(hold), token_(token), name_(std::move(name)), mode_(mode) {}
  LockClient* client_ = nullptr;
  uint64_t hold_ = 0;
  Token token_ = 0;
  std::string name_;
  Mode mode_ = Mode::Exclusive;
};

struct Revocation {
  uint64_t hold = 0;
  std::string why;
};

class LockClient {
 public:
  // The default socket: $TIERCE_LOCKD_SOCKET, else /run/tierce/lockd.sock.
  static std::string default_socket();
  // Connects; throws LockError{Internal} naming the path and what to check (is lockd running?).
  explicit LockClient(const std::string& socket_path = default_socket(),
                      std::chrono::milliseconds connect_timeout = std::chrono::milliseconds(2000));
  ~LockClient();  // closes: lockd releases whatever is still held
  LockClient(const LockClient&) = delete;
  LockClient& operator=(const LockClient&) = delete;

  // Waits up to `timeout` (negative: forever). Throws LockError (Timeout, HomeDown, ...).
  HeldLock lock(const std::string& name, Mode mode,
                std::chrono::milliseconds timeout = std::chrono::milliseconds(-1));
  // Granted at once or nullopt (the lock is held or has waiters). Throws on other errors.
  std::optional<HeldLock> try_lock(const std::string& name, Mode mode);
  // Release by id (what HeldLock::unlock and the C API use). Throws LockError: NotHeld when this
  // client does not hold it (unlocked already, or a revocation has reached it). One-way: returns
  // once the release is sent, without waiting for lockd (as docs/dlm.md's shared release); this
  // client's next request is handled after it, and a revocation crossing it in flight is
  // reported by revoked().
  void unlock(uint64_t hold);

  // Revocations received so far and not yet taken. Reads the frames already waiting on the
  // socket first, without blocking. When the connection to lockd is lost, every hold still
  // live is reported here once (why: "the connection to lockd is lost: ...").
  // Taking a revocation acknowledges it to lockd (as unlock() of a revoked hold does): the
  // caller promises to stop using the hold. Until then (or lease_ms) lockd keeps the lock held
  // at its home, so nobody else is granted it while this process may still use it. Call it
  // promptly when event_fd() polls readable.
  std::vector<Revocation> revoked();
  // The same, one at a time (what the C API uses); nullopt when none waits.
  std::optional<Revocation> next_revoked();
  // Readable when a revocation is waiting (for poll/epoll loops); owned by the client.
  // It is also readable while any frame from lockd waits unread (the client has no thread of
  // its own): call revoked() when it polls readable; it never blocks.
  int event_fd() const;
  // False once the connection to lockd is lost (lockd stopped or crashed); then every call
  // throws LockError. Reads the frames already waiting first, without blocking.
  bool connected();
  // lockd's status report (the same text as `tierce-lock --status`).
  std::string status();
  // lockd's metrics in Prometheus text format (STATUS with flag METRICS; docs/dlm.md "Metrics").
  // A lockd older than that flag answers BadRequest (LockError).
  std::string metrics();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tierce::dlm
