// ftp_adts/adts/pipeline.h — the disk/network pipeline of seed 000 §9.2.2 ("Pipelined Data
// Transfers"): a bounded queue of pool buffers between a disk thread and the network thread(s),
// so reading (or writing) the file overlaps with sending (or receiving). Used by tcp/ptcp when
// zero_copy is off and by the verbs channel.
//
// Invariant: every wait is bounded — push/pop take the session timeout — and cancel() wakes every
// waiter at once, so a failure on one side never leaves the other side blocked.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "ftp_adts/adts/adts.h"
#include "ftp_adts/adts/buffer_pool.h"

namespace tierce::adts {

// One block in flight: `length` bytes of `buf` that belong at transfer offset `offset`.
struct Chunk {
  uint64_t offset = 0;
  uint64_t length = 0;
  BufferPool::Lease buf;
};

template <class T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : cap_(capacity ? capacity : 1) {}

  // Waits while full. false: the queue was cancelled (the item is dropped). Timeout past `t`.
  bool push(T&& v, Millis t) {
    std::unique_lock g(mu_);
    if (!cv_.wait_for(g, t, [&] { return cancelled_ || q_.size() < cap_; }))
      throw AdtsError(AdtsError::Code::Timeout,
                      "pipeline stalled: no buffer consumed within " + std::to_string(t.count()) +
                          " ms");
    if (cancelled_ || closed_) return false;
    q_.push_back(std::move(v));
    cv_.notify_all();
    return true;
  }

  // Waits while empty. nullopt: closed and drained, or cancelled. Timeout past `t`.
  std::optional<T> pop(Millis t) {
    std::unique_lock g(mu_);
    if (!cv_.wait_for(g, t, [&] { return cancelled_ || closed_ || !q_.empty(); }))
      throw AdtsError(AdtsError::Code::Timeout,
                      "pipeline stalled: no buffer produced within " + std::to_string(t.count()) +
                          " ms");
    if (cancelled_ || q_.empty()) return std::nullopt;
    T v = std::move(q_.front());
    q_.pop_front();
    cv_.notify_all();
    return v;
  }

  // No more pushes; pops drain what is queued.
  void close() {
    std::lock_guard g(mu_);
    closed_ = true;
    cv_.notify_all();
  }
  // Drops everything queued and wakes every waiter.
  void cancel() {
    std::deque<T> dropped;
    {
      std::lock_guard g(mu_);
      cancelled_ = true;
      dropped.swap(q_);
      cv_.notify_all();
    }
  }

 private:
  size_t cap_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> q_;
  bool closed_ = false;
  bool cancelled_ = false;
};

}  // namespace tierce::adts
