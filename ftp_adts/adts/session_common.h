// ftp_adts/adts/session_common.h — what the tcp and verbs channels share inside a transfer: the
// first-error slot, the receiver's coverage check (offsets in range, no overlap, exact cover),
// the receiver's write-order gate for file sinks,
// running per-stream workers with progress reported from the calling thread, parameter checks
// and the sender's source-region check. Internal to tierce::adts.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ftp_adts/adts/adts.h"

namespace tierce::adts {

class Listener;

// The sender's check of a file source before BEGIN: `total` bytes from src.offset must lie inside
// a regular file (the channels then send BEGIN + ABORT, keeping the receiver in step); nullopt =
// fine, or not a regular file (a pipe ends when it ends).
std::optional<AdtsError> source_region_error(const Source& src, uint64_t total);

// Memory sinks refuse a BEGIN above this (a garbage length must not make us allocate the moon).
constexpr uint64_t kMaxMemoryTransfer = uint64_t(1) << 30;

// The first error of a transfer wins; later ones are consequences (e.g. the shutdown we did).
class ErrorSlot {
 public:
  void set(const AdtsError& e) {
    std::lock_guard g(mu_);
    if (!err_) err_.emplace(e);
  }
  bool has() const {
    std::lock_guard g(mu_);
    return err_.has_value();
  }
  std::optional<AdtsError> get() const {
    std::lock_guard g(mu_);
    return err_;
  }

 private:
  mutable std::mutex mu_;
  std::optional<AdtsError> err_;
};

// The receiver's record of which bytes of [0, total) arrived. Thread-safe.
class Coverage {
 public:
  explicit Coverage(uint64_t total) : total_(total) {}
  // Claims [off, off+len); throws AdtsError{Protocol} when out of range, empty or overlapping.
  void claim(uint64_t off, uint64_t len);
  uint64_t covered() const {
    std::lock_guard g(mu_);
    return covered_;
  }

 private:
  uint64_t total_;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> spans_;  // start -> end, disjoint, adjacent ones merged
  uint64_t covered_ = 0;
};

// The receiver's write order for file sinks (docs/ftp.md: DATA blocks on one stream go in
// increasing offset order; the receiver writes in offset order, so the file always holds exactly
// a prefix of the transfer — after a failure or a kill, REST resumes from its size).
//
// A stream worker that has read the header of the block at offset `off` calls wait_turn(): it
// returns once every byte below `off` is written (the worker then writes the block and calls
// advance()). Meanwhile the other streams' bytes wait in their socket buffers. While every stream
// is increasing this cannot deadlock: the lowest missing block is at the head of some stream.
// When every live worker waits and none holds the next offset (a stream sent a lower offset after
// a higher one, or a block is missing), the transfer cannot go on: AdtsError{Protocol} at once,
// not a wait for the timeout. Thread-safe.
class OrderGate {
 public:
  OrderGate(unsigned streams, Millis timeout) : waiting_(streams), live_(streams), timeout_(timeout) {}
  // true: the caller's turn — bytes below `off` are written; it must call advance() (or fail).
  // false: the gate was released (a local write failed): write nothing, drop the payload.
  // Throws Protocol (order violation), Timeout (no write progress within the timeout while no
  // stream held the turn) or PeerClosed (cancel(): another stream failed).
  bool wait_turn(unsigned stream, uint64_t off);
  // The turn holder wrote its block: bytes below `end` are written.
  void advance(uint64_t end);
  // The stream's worker is done with this transfer (END or ABORT read).
  void leave(unsigned stream);
  // A local write failed: every waiter returns false from now on.
  void release();
  // A stream failed: every waiter throws.
  void cancel();
  uint64_t written() const {
    std::lock_guard g(mu_);
    return next_;
  }

 private:
  // With mu_ held: the violation message when no live worker can make progress, else empty.
  std::string stuck_locked() const;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::optional<uint64_t>> waiting_;  // per stream: the offset it waits to write
  unsigned live_;
  Millis timeout_;
  uint64_t next_ = 0;      // bytes below this are written
  bool holder_ = false;    // a worker holds the turn (is writing the block at next_)
  bool released_ = false;
  bool cancelled_ = false;
  std::string violation_;  // set once the transfer is stuck
  std::chrono::steady_clock::time_point activity_ = std::chrono::steady_clock::now();
};

// Runs fn(i, tick) for i in [0, n): inline on the calling thread when n == 1 (tick reports
// progress), else one thread per stream while the calling thread reports progress. fn must not
// throw. `done` is the transfer's byte counter.
void run_workers(unsigned n, const std::function<void(unsigned, const std::function<void()>&)>& fn,
                 const Progress& progress, const std::atomic<uint64_t>& done, uint64_t total);

// Throws AdtsError{Config} for bad session parameters.
void check_params(const SessionParams& p);

// Listener::cancel() for a channel's accept(): an eventfd that turns readable on cancel(), to be
// polled along with what accept() waits on, and who closes the listening port: cancel() itself
// when no accept() runs, else that accept() as it leaves (the port is never closed under a poll
// that still uses it, and its number cannot be reused by another socket meanwhile). Thread-safe.
class AcceptCanceller {
 public:
  // close_port is called once, with the canceller's lock held, after cancel().
  explicit AcceptCanceller(std::function<void()> close_port);
  ~AcceptCanceller();
  AcceptCanceller(const AcceptCanceller&) = delete;
  AcceptCanceller& operator=(const AcceptCanceller&) = delete;
  int fd() const { return efd_; }  // readable once cancelled
  void cancel();

  // Held by accept() while it runs (one accept() at a time).
  class Running {
   public:
    // Throws AdtsError{Aborted} when already cancelled.
    explicit Running(AcceptCanceller& c);
    ~Running();  // if not finished: leaves, closing the port if cancel() came meanwhile
    Running(const Running&) = delete;
    Running& operator=(const Running&) = delete;
    // Throws AdtsError{Aborted} when cancel() was called.
    void check() const;
    // accept() is about to return its session: leaves; throws AdtsError{Aborted} (the port then
    // closed) when cancel() came first, so a cancel() that returned is never followed by a session.
    void finish();

   private:
    AcceptCanceller& c_;
    bool left_ = false;
  };

 private:
  bool leave_locked();  // running_ = false; closes the port when cancelled; returns cancelled_
  [[noreturn]] static void throw_cancelled();

  std::mutex mu_;
  std::function<void()> close_port_;
  int efd_ = -1;
  std::atomic<bool> cancelled_{false};
  bool running_ = false;
  bool closed_ = false;
};

// Factories of the channels (tcp_session.cc, verbs_session.cc).
struct ListenerImplBase {
  virtual ~ListenerImplBase() = default;
  virtual uint16_t port() const = 0;
  virtual std::unique_ptr<Session> accept(const std::function<void(const std::string&)>& log) = 0;
  virtual void cancel() = 0;
};
std::unique_ptr<ListenerImplBase> make_tcp_listener(const std::string& host, uint16_t lo,
                                                    uint16_t hi, const SessionParams& p);
std::unique_ptr<Session> connect_tcp_session(const std::string& host, uint16_t port,
                                             const SessionParams& p);
std::unique_ptr<ListenerImplBase> make_verbs_listener(const std::string& host, uint16_t lo,
                                                      uint16_t hi, const SessionParams& p);
std::unique_ptr<Session> connect_verbs_session(const std::string& host, uint16_t port,
                                               const SessionParams& p);

}  // namespace tierce::adts
