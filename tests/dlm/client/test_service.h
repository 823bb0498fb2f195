// tests/dlm/client/test_service.h — a single-process, in-memory LocalLockService for testing the
// IPC layer (IpcServer, LockClient, the C API, tierce-lock): shared/exclusive locks with a FIFO
// queue, timeouts, owner_gone, and revocations on demand. Not the protocol: that is dlm/engine.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dlm/service.h"

namespace dlm_test {

using namespace tierce::dlm;

class TestLockService final : public LocalLockService {
 public:
  // async: run every `done` on the service's own thread (as an engine does), not the caller's.
  explicit TestLockService(bool async = false) : async_(async) {
    timer_ = std::thread([this] { timer_loop(); });
  }
  ~TestLockService() override {
    {
      std::lock_guard g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    timer_.join();
  }

  void acquire(OwnerId owner, const std::string& name, Mode mode, std::chrono::milliseconds timeout,
               std::function<void(const Grant&)> done) override {
    std::vector<std::pair<std::function<void(const Grant&)>, Grant>> out;
    {
      std::lock_guard g(mu_);
      ++acquires_;
      Lock& l = locks_[name];
      if (l.waiters.empty() && can_grant(name, mode)) {
        out.emplace_back(std::move(done), grant_locked(l, name, owner, mode));
      } else if (timeout.count() == 0) {
        Grant gr;
        gr.status = Status::WouldBlock;
        out.emplace_back(std::move(done), gr);
      } else {
        Waiter w{owner, mode, std::move(done), {}};
        w.deadline = timeout.count() < 0 || ignore_timeouts_ ? Clock::time_point::max()
                                                             : Clock::now() + timeout;
        l.waiters.push_back(std::move(w));
        cv_.notify_all();
      }
    }
    deliver(std::move(out));
  }

  Status release(OwnerId owner, HoldId hold) override {
    std::vector<std::pair<std::function<void(const Grant&)>, Grant>> out;
    {
      std::lock_guard g(mu_);
      ++releases_;
      release_calls_.push_back(hold);
      auto it = holds_.find(hold);
      if (it == holds_.end() || it->second.owner != owner) return Status::NotHeld;
      std::string name = it->second.name;
      holds_.erase(it);
      pass_on_locked(name, &out);
    }
    deliver(std::move(out));
    return Status::Ok;
  }

  void owner_gone(OwnerId owner) override {
    std::vector<std::pair<std::function<void(const Grant&)>, Grant>> out;
    {
      std::lock_guard g(mu_);
      gone_.push_back(owner);
      for (auto& [name, l] : locks_)
        std::erase_if(l.waiters, [&](const Waiter& w) { return w.owner == owner; });
      std::vector<std::string> names;
      for (auto it = holds_.begin(); it != holds_.end();) {
        if (it->second.owner == owner) {
          names.push_back(it->second.name);
          it = holds_.erase(it);
        } else {
          ++it;
        }
      }
      for (auto& n : names) pass_on_locked(n, &out);
    }
    cv_.notify_all();
    deliver(std::move(out));
  }

  void set_revoked_callback(RevokedFn fn) override {
    std::lock_guard g(mu_);
    revoked_ = std::move(fn);
  }

  std::string status_text() override {
    std::lock_guard g(mu_);
    return status_;
  }

  // --- test controls -------------------------------------------------------------------------
  // A broken engine that never times waiters out (the client's own deadline must save it).
  void set_ignore_timeouts(bool v) {
    std::lock_guard g(mu_);
    ignore_timeouts_ = v;
  }
  // Grants carry valid_until_ns = now + offset (a lockd's lease on a remote home); a negative
  // offset gives a grant that is read after its lease ended. Unset: no deadline.
  void set_grant_lease(std::optional<std::chrono::nanoseconds> offset) {
    std::lock_guard g(mu_);
    grant_lease_ = offset;
  }
  void set_status_text(std::string s) {
    std::lock_guard g(mu_);
    status_ = std::move(s);
  }
  // How many release() calls named `hold` (answered NotHeld included: the client library
  // acknowledges a revocation with an UNLOCK of the revoked hold).
  size_t release_calls(HoldId hold) {
    std::lock_guard g(mu_);
    return size_t(std::count(release_calls_.begin(), release_calls_.end(), hold));
  }
  // Revokes a hold as a lost lease would: the hold ends, the owner is told.
  bool revoke(HoldId hold, const std::string& why = "test revocation") {
    std::vector<std::pair<std::function<void(const Grant&)>, Grant>> out;
    RevokedFn fn;
    OwnerId owner;
    {
      std::lock_guard g(mu_);
      auto it = holds_.find(hold);
      if (it == holds_.end()) return false;
      owner = it->second.owner;
      std::string name = it->second.name;
      holds_.erase(it);
      pass_on_locked(name, &out);
      fn = revoked_;
    }
    if (fn) fn(owner, hold, why);
    deliver(std::move(out));
    return true;
  }
  struct HoldInfo {
    HoldId hold;
    OwnerId owner;
    Mode mode;
    Token token;
  };
  std::vector<HoldInfo> holders(const std::string& name) {
    std::lock_guard g(mu_);
    std::vector<HoldInfo> v;
    for (auto& [id, h] : holds_)
      if (h.name == name) v.push_back({id, h.owner, h.mode, h.token});
    return v;
  }
  size_t waiters(const std::string& name) {
    std::lock_guard g(mu_);
    auto it = locks_.find(name);
    return it == locks_.end() ? 0 : it->second.waiters.size();
  }
  std::vector<OwnerId> gone() {
    std::lock_guard g(mu_);
    return gone_;
  }
  size_t total_holds() {
    std::lock_guard g(mu_);
    return holds_.size();
  }
  uint64_t acquires() {
    std::lock_guard g(mu_);
    return acquires_;
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Waiter {
    OwnerId owner;
    Mode mode;
    std::function<void(const Grant&)> done;
    Clock::time_point deadline;
  };
  struct Lock {
    std::deque<Waiter> waiters;
    Token last_token = 1000;  // tokens start high: a test can tell a token from a hold id
  };
  struct Hold {
    std::string name;
    OwnerId owner;
    Mode mode;
    Token token;
  };

  Grant grant_locked(Lock& l, const std::string& name, OwnerId owner, Mode mode) {
    Grant g;
    g.status = Status::Ok;
    g.hold = next_hold_++;
    g.token = ++l.last_token;
    if (grant_lease_)
      g.valid_until_ns = uint64_t((Clock::now().time_since_epoch() + *grant_lease_).count());
    holds_[g.hold] = Hold{name, owner, mode, g.token};
    return g;
  }

  // Shared with shared only; a linear scan of the holds is fine for tests.
  bool can_grant(const std::string& name, Mode mode) const {
    for (auto& [id, h] : holds_)
      if (h.name == name && (mode == Mode::Exclusive || h.mode == Mode::Exclusive)) return false;
    return true;
  }

  void pass_on_locked(const std::string& name,
                      std::vector<std::pair<std::function<void(const Grant&)>, Grant>>* out) {
    Lock& l = locks_[name];
    while (!l.waiters.empty() && can_grant(name, l.waiters.front().mode)) {
      Waiter w = std::move(l.waiters.front());
      l.waiters.pop_front();
      out->emplace_back(std::move(w.done), grant_locked(l, name, w.owner, w.mode));
    }
  }

  void deliver(std::vector<std::pair<std::function<void(const Grant&)>, Grant>> out) {
    if (out.empty()) return;
    if (!async_) {
      for (auto& [fn, g] : out) fn(g);
      return;
    }
    {
      std::lock_guard g(mu_);
      for (auto& o : out) async_q_.push_back(std::move(o));
    }
    cv_.notify_all();
  }

  void timer_loop() {
    std::unique_lock lk(mu_);
    while (!stop_) {
      auto next = Clock::time_point::max();
      std::vector<std::pair<std::function<void(const Grant&)>, Grant>> out;
      auto now = Clock::now();
      for (auto& [name, l] : locks_) {
        for (auto it = l.waiters.begin(); it != l.waiters.end();) {
          if (it->deadline <= now) {
            Grant g;
            g.status = Status::Timeout;
            out.emplace_back(std::move(it->done), g);
            it = l.waiters.erase(it);
          } else {
            next = std::min(next, it->deadline);
            ++it;
          }
        }
      }
      for (auto& o : async_q_) out.push_back(std::move(o));
      async_q_.clear();
      if (!out.empty()) {
        lk.unlock();
        for (auto& [fn, g] : out) fn(g);
        lk.lock();
        continue;
      }
      if (next == Clock::time_point::max())
        cv_.wait(lk);
      else
        cv_.wait_until(lk, next);
    }
  }

  bool async_;
  bool ignore_timeouts_ = false;
  std::optional<std::chrono::nanoseconds> grant_lease_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::map<std::string, Lock> locks_;
  std::map<HoldId, Hold> holds_;
  HoldId next_hold_ = 1;
  RevokedFn revoked_;
  std::string status_ = "test lock service: ok\n";
  std::vector<OwnerId> gone_;
  std::deque<std::pair<std::function<void(const Grant&)>, Grant>> async_q_;
  uint64_t acquires_ = 0, releases_ = 0;
  std::vector<HoldId> release_calls_;
  std::thread timer_;
};

}  // namespace dlm_test
