// fabric/reg_cache.h — a memory-registration cache in the spirit of Wu's FMRD (seed 001): pinning
// and registering a buffer with the HCA costs tens of microseconds, so a registration is kept
// after use and reused by any later request whose range and access it covers; unused ones wait
// in an LRU up to a byte and count budget and are deregistered lazily, in batches, when the
// budget overflows, on flush() or when a registration fails for lack of lockable memory.
//
// Registering and deregistering are callbacks (the verbs backend passes ibv_reg_mr/ibv_dereg_mr;
// tests pass counters), so the cache itself needs no device. Thread-safe; the callbacks are
// called without the cache's lock held.
//
// Invalidation rule (the price of any registration cache, FMRD's too). A registration pins the
// physical pages that backed its virtual range when it was made. If the caller frees the buffer
// and the allocator unmaps the pages, or trims them (madvise), and the same addresses are later
// handed out again, a cached registration would move bytes to and from the OLD pages: silent
// corruption. FMRD avoids it with ptmalloc hooks; the fabric has no hooks into the allocator, so:
//   Prereq for callers of a cache: call invalidate(range) — or, for the verbs backend's caches,
//   fabric::invalidate_registrations(addr, len) — BEFORE freeing, unmapping or re-purposing memory
//   that was passed to a cached operation. The verbs backend only uses a cache when the caller
//   opts in (ClientOptions::registration_cache_bytes > 0), so existing callers keep per-batch
//   registration, which is always safe.
// A registration still in use when it is invalidated is unlinked at once (no new user gets it)
// and deregistered when its last Lease goes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace tierce::fabric {

struct RegCacheLimits {
  // Unused registrations kept, in bytes (page-rounded) and in number; past either, the least
  // recently used are deregistered in one batch down to 3/4 of the budget (hysteresis: no
  // deregistration per release once at the limit).
  size_t max_unused_bytes = size_t(64) << 20;
  size_t max_unused_count = 256;
  // Ranges are registered whole pages at a time (an MR pins whole pages anyway), so neighbouring
  // buffers in one page share a registration.
  size_t page_size = 4096;
};

struct RegCacheStats {
  uint64_t registrations = 0;      // register callback calls that succeeded
  uint64_t register_failures = 0;  // ... that failed (after one flush-and-retry)
  uint64_t deregistrations = 0;    // deregister callback calls
  uint64_t hits = 0;               // acquire() served by an existing registration
  uint64_t misses = 0;             // acquire() that had to register
  uint64_t invalidated = 0;        // registrations dropped by invalidate()
  uint64_t dereg_batches = 0;      // budget overflows and flushes that deregistered something
  uint64_t in_use = 0;             // registrations with leases now
  uint64_t unused = 0;             // cached registrations without leases now
  uint64_t unused_bytes = 0;
};

class RegCache {
 public:
  using Handle = void*;  // what the register callback returns (an ibv_mr*); nullptr = failed
  using RegisterFn = std::function<Handle(void* addr, size_t len, uint32_t access)>;
  using DeregisterFn = std::function<void(Handle)>;

  // A registration held for the duration of an operation. Movable; releasing (destruction or
  // reset()) makes it unused (cached) or, if invalidated meanwhile, deregisters it.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept : cache_(o.cache_), entry_(o.entry_) { o.cache_ = nullptr; }
    Lease& operator=(Lease&& o) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { reset(); }
    void reset() noexcept;
    explicit operator bool() const { return cache_ != nullptr; }
    Handle handle() const;
    // The registered range (page-rounded) and access, for tests and logs.
    uintptr_t begin() const;
    uintptr_t end() const;

   private:
    friend class RegCache;
    Lease(RegCache* c, void* e) : cache_(c), entry_(e) {}
    RegCache* cache_ = nullptr;
    void* entry_ = nullptr;
  };

  // `process_wide`: fabric::invalidate_registrations() reaches this cache too (the verbs
  // backend's caches are).
  RegCache(RegisterFn reg, DeregisterFn dereg, RegCacheLimits limits, bool process_wide = false);
  // Deregisters every registration. Prereq: no Lease outstanding (asserted: it aborts).
  ~RegCache();
  RegCache(const RegCache&) = delete;
  RegCache& operator=(const RegCache&) = delete;

  // A registration covering [addr, addr + len) with at least `access` (a bit set: a registration
  // whose bits include the requested ones serves it). Registers when none is cached; when that
  // fails, deregisters every unused registration (they may hold the locked-memory budget) and
  // tries once more. An empty Lease when it still fails (errno as the callback left it).
  // Prereq: len > 0.
  Lease acquire(const void* addr, size_t len, uint32_t access);

  // Drops every registration overlapping [addr, addr + len): see the invalidation rule above.
  void invalidate(const void* addr, size_t len);
  // Deregisters every unused registration now (one batch).
  void flush();

  RegCacheStats stats() const;

 private:
  struct Entry;
  void release(Entry* e) noexcept;
  // Under mu_: moves LRU victims into `out` until within the budget's 3/4 (or all when `all`).
  void collect_unused(std::vector<Handle>& out, bool all);
  void unlink(Entry* e);  // from the index; under mu_
  void deregister(std::vector<Handle>& batch) noexcept;

  RegisterFn reg_;
  DeregisterFn dereg_;
  RegCacheLimits limits_;
  bool process_wide_;
  mutable std::mutex mu_;
  // Valid registrations by start address (several may start at one address: another access or
  // length). max_len_ bounds the backward search for one covering a range.
  std::multimap<uintptr_t, std::unique_ptr<Entry>> index_;
  size_t max_len_ = 0;
  std::list<Entry*> lru_;                        // unused registrations, most recently used first
  std::vector<std::unique_ptr<Entry>> orphans_;  // invalidated while in use
  RegCacheStats stats_;
};

// Invalidates [addr, addr + len) in every process-wide RegCache (all verbs connections' caches).
// Call before freeing or unmapping memory that was passed to one-sided operations on a connection
// with ClientOptions::registration_cache_bytes > 0.
void invalidate_registrations(const void* addr, size_t len);

}  // namespace tierce::fabric
