// ftp_adts/adts/session_common.h — what the tcp and verbs channels share inside a transfer: the
// first-error slot, the receiver's coverage check (offsets in range, no overlap, exact cover),
// running per-stream workers with progress reported from the calling thread, and parameter
// checks. Internal to tierce::adts.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "ftp_adts/adts/adts.h"

namespace tierce::adts {

class Listener;

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

// Runs fn(i, tick) for i in [0, n): inline on the calling thread when n == 1 (tick reports
// progress), else one thread per stream while the calling thread reports progress. fn must not
// throw. `done` is the transfer's byte counter.
void run_workers(unsigned n, const std::function<void(unsigned, const std::function<void()>&)>& fn,
                 const Progress& progress, const std::atomic<uint64_t>& done, uint64_t total);

// Throws AdtsError{Config} for bad session parameters.
void check_params(const SessionParams& p);

// Factories of the channels (tcp_session.cc, verbs_session.cc).
struct ListenerImplBase {
  virtual ~ListenerImplBase() = default;
  virtual uint16_t port() const = 0;
  virtual std::unique_ptr<Session> accept(const std::function<void(const std::string&)>& log) = 0;
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
