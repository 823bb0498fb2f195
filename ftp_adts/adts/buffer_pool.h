// ftp_adts/adts/buffer_pool.h — pre-allocated, page-aligned transfer buffers and the registration
// cache (seed 000 §9.2.2 "Persistent Sessions and Memory Registration Cache").
//
// A BufferPool owns `count` buffers of `size` bytes allocated once. acquire() hands one out
// (waiting up to a timeout when all are busy); when the pool is exhausted and the overflow budget
// allows, an on-demand buffer is allocated instead and freed again on release (the paper's
// "buffers allocated on-demand are released on completion") — this keeps a sender and a receiver
// in one process from starving each other. Pools are process-wide per buffer size (shared()), so
// a persistent session and the sessions after it keep using — and keep registered — the same
// memory.
//
// A RegistrationCache maps a buffer (address, length) to its registration (verbs: the ibv_mr
// from ibv_reg_mr; tcp: nothing, the registrar is a no-op) and registers each buffer once. It
// counts hits and misses, which is what tests and `stats` show to prove reuse.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "ftp_adts/adts/adts.h"

namespace tierce::adts {

// Registers [addr, addr+len) and returns an owner whose deleter deregisters it (ibv_dereg_mr).
// The raw pointer inside is what the cache hands out (e.g. the ibv_mr*).
using Registrar = std::function<std::shared_ptr<void>(void* addr, size_t len)>;

class RegistrationCache {
 public:
  explicit RegistrationCache(Registrar r);
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // The registration of [addr, addr+len): from the cache (hit) or the registrar (miss). Throws
  // what the registrar throws. Thread-safe.
  void* get(void* addr, size_t len);
  // Drops the registration of a buffer that is about to be freed.
  void forget(void* addr, size_t len);
  void clear();
  uint64_t hits() const;
  uint64_t misses() const;
  size_t size() const;

 private:
  Registrar registrar_;
  mutable std::mutex mu_;
  std::map<std::pair<uintptr_t, size_t>, std::shared_ptr<void>> entries_;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

// A no-op registrar (tcp pipelines): every buffer "registers" to a non-null token, so the cache
// still shows reuse.
Registrar noop_registrar();

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // count buffers of size bytes (size rounded up to the page size); up to max_overflow more may
  // be allocated on demand when all are out.
  BufferPool(size_t count, size_t size, size_t max_overflow = 64);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // The process-wide pool for buffers of `size` bytes (created on first use with kSharedCount).
  static std::shared_ptr<BufferPool> shared(size_t size);
  static constexpr size_t kSharedCount = 16;

  // One buffer handed out; gives it back when destroyed.
  class Lease {
   public:
    Lease() = default;
    ~Lease() { reset(); }
    Lease(Lease&& o) noexcept { *this = std::move(o); }
    Lease& operator=(Lease&& o) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    bool pooled() const { return pooled_; }  // false: an on-demand buffer, freed on release
    explicit operator bool() const { return data_ != nullptr; }
    void reset();

   private:
    friend class BufferPool;
    BufferPool* pool_ = nullptr;
    uint8_t* data_ = nullptr;
    size_t size_ = 0;
    bool pooled_ = false;
  };

  // A free buffer; waits up to `timeout` (AdtsError{Timeout}) when none is free and the overflow
  // budget is spent.
  Lease acquire(Millis timeout);
  // A free pre-allocated buffer, or an empty Lease at once (never allocates on demand).
  Lease try_acquire_pooled();

  size_t count() const { return buffers_.size(); }
  size_t buffer_size() const { return size_; }
  size_t available() const;
  uint64_t on_demand_allocations() const;
  // The pool's cache for tcp pipelines (no-op registrar); verbs keeps one per protection domain.
  RegistrationCache& tcp_registrations() { return tcp_cache_; }

  // Called when an on-demand buffer is about to be freed (registration caches forget it).
  void on_free(std::function<void(void*, size_t)> f);

 private:
  void give_back(uint8_t* data, bool pooled);

  size_t size_;
  size_t max_overflow_;
  std::vector<uint8_t*> buffers_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint8_t*> free_;
  size_t overflow_out_ = 0;
  uint64_t on_demand_ = 0;
  std::vector<std::function<void(void*, size_t)>> on_free_;
  RegistrationCache tcp_cache_;
};

}  // namespace tierce::adts
