// fabric/reg_cache.cc — the registration cache (reg_cache.h).
#include "fabric/reg_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace tierce::fabric {

struct RegCache::Entry {
  uintptr_t begin = 0, end = 0;  // page-rounded
  uint32_t access = 0;
  Handle handle = nullptr;
  uint32_t refs = 0;
  bool valid = true;  // false once invalidated (then in orphans_ until its last lease goes)
  std::list<Entry*>::iterator lru;  // valid when refs == 0 and valid
};

namespace {

// Every process-wide cache, for invalidate_registrations(). Lock order: this, then a cache's mu_.
std::mutex& registry_mu() {
  static std::mutex m;
  return m;
}
std::set<RegCache*>& registry() {
  static std::set<RegCache*> s;
  return s;
}

}  // namespace

RegCache::Lease& RegCache::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    reset();
    cache_ = o.cache_;
    entry_ = o.entry_;
    o.cache_ = nullptr;
  }
  return *this;
}

void RegCache::Lease::reset() noexcept {
  if (cache_) cache_->release(static_cast<Entry*>(entry_));
  cache_ = nullptr;
  entry_ = nullptr;
}

RegCache::Handle RegCache::Lease::handle() const {
  return cache_ ? static_cast<Entry*>(entry_)->handle : nullptr;
}
uintptr_t RegCache::Lease::begin() const {
  return cache_ ? static_cast<Entry*>(entry_)->begin : 0;
}
uintptr_t RegCache::Lease::end() const {
  return cache_ ? static_cast<Entry*>(entry_)->end : 0;
}

RegCache::RegCache(RegisterFn reg, DeregisterFn dereg, RegCacheLimits limits, bool process_wide)
    : reg_(std::move(reg)), dereg_(std::move(dereg)), limits_(limits), process_wide_(process_wide) {
  if (limits_.page_size == 0 || (limits_.page_size & (limits_.page_size - 1)) != 0)
    limits_.page_size = 4096;
  if (process_wide_) {
    std::lock_guard g(registry_mu());
    registry().insert(this);
  }
}

RegCache::~RegCache() {
  if (process_wide_) {
    std::lock_guard g(registry_mu());
    registry().erase(this);
  }
  std::vector<Handle> all;
  {
    std::lock_guard g(mu_);
    if (stats_.in_use != 0 || !orphans_.empty()) {
      std::fprintf(stderr, "FAB0440 RegCache destroyed with %llu registrations in use (a bug)\n",
                   (unsigned long long)stats_.in_use);
      std::abort();
    }
    for (auto& [start, e] : index_) all.push_back(e->handle);
    index_.clear();
    lru_.clear();
  }
  deregister(all);
}

void RegCache::unlink(Entry* e) {
  auto [lo, hi] = index_.equal_range(e->begin);
  for (auto it = lo; it != hi; ++it) {
    if (it->second.get() == e) {
      it->second.release();  // the caller takes ownership
      index_.erase(it);
      return;
    }
  }
}

RegCache::Lease RegCache::acquire(const void* addr, size_t len, uint32_t access) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t mask = limits_.page_size - 1;
  const uintptr_t begin = a & ~mask;
  const uintptr_t end = (a + len + mask) & ~mask;
  {
    std::lock_guard g(mu_);
    // A covering registration starts at or below `begin`, no further below than the longest one.
    auto it = index_.upper_bound(begin);
    while (it != index_.begin()) {
      --it;
      Entry* e = it->second.get();
      if (begin - e->begin > max_len_) break;
      if (e->end >= end && (e->access & access) == access) {
        if (e->refs++ == 0) {
          lru_.erase(e->lru);
          --stats_.unused;
          stats_.unused_bytes -= e->end - e->begin;
          ++stats_.in_use;
        }
        ++stats_.hits;
        return Lease(this, e);
      }
    }
    ++stats_.misses;
  }
  // Register without the lock (it takes tens of microseconds). Two threads missing on the same
  // range both register; both registrations are cached and either serves later requests.
  Handle h = reg_(reinterpret_cast<void*>(begin), end - begin, access);
  if (!h) {
    flush();  // unused registrations may hold the locked-memory budget
    h = reg_(reinterpret_cast<void*>(begin), end - begin, access);
  }
  std::lock_guard g(mu_);
  if (!h) {
    ++stats_.register_failures;
    return Lease();
  }
  auto e = std::make_unique<Entry>();
  e->begin = begin;
  e->end = end;
  e->access = access;
  e->handle = h;
  e->refs = 1;
  Entry* raw = e.get();
  index_.emplace(begin, std::move(e));
  max_len_ = std::max<size_t>(max_len_, end - begin);
  ++stats_.registrations;
  ++stats_.in_use;
  return Lease(this, raw);
}

void RegCache::release(Entry* e) noexcept {
  std::vector<Handle> batch;
  {
    std::lock_guard g(mu_);
    if (--e->refs != 0) return;
    --stats_.in_use;
    if (!e->valid) {
      batch.push_back(e->handle);
      auto it = std::find_if(orphans_.begin(), orphans_.end(),
                             [e](const std::unique_ptr<Entry>& o) { return o.get() == e; });
      if (it != orphans_.end()) orphans_.erase(it);
    } else {
      lru_.push_front(e);
      e->lru = lru_.begin();
      ++stats_.unused;
      stats_.unused_bytes += e->end - e->begin;
      if (stats_.unused > limits_.max_unused_count ||
          stats_.unused_bytes > limits_.max_unused_bytes)
        collect_unused(batch, false);
    }
  }
  deregister(batch);
}

void RegCache::collect_unused(std::vector<Handle>& out, bool all) {
  const size_t count_goal = all ? 0 : limits_.max_unused_count / 4 * 3;
  const size_t bytes_goal = all ? 0 : limits_.max_unused_bytes / 4 * 3;
  bool any = false;
  while (!lru_.empty() && (all || stats_.unused > count_goal || stats_.unused_bytes > bytes_goal)) {
    Entry* e = lru_.back();
    lru_.pop_back();
    --stats_.unused;
    stats_.unused_bytes -= e->end - e->begin;
    out.push_back(e->handle);
    unlink(e);
    delete e;  // unlink() released the index's ownership
    any = true;
  }
  if (any) ++stats_.dereg_batches;
}

void RegCache::invalidate(const void* addr, size_t len) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t b = a + len;
  std::vector<Handle> batch;
  {
    std::lock_guard g(mu_);
    // Overlapping registrations start below b and no further below a than the longest one.
    auto it = index_.lower_bound(a > max_len_ ? a - max_len_ : 0);
    while (it != index_.end() && it->first < b) {
      Entry* e = it->second.get();
      if (e->end <= a) {
        ++it;
        continue;
      }
      std::unique_ptr<Entry> owned = std::move(it->second);
      it = index_.erase(it);
      e->valid = false;
      ++stats_.invalidated;
      if (e->refs == 0) {
        lru_.erase(e->lru);
        --stats_.unused;
        stats_.unused_bytes -= e->end - e->begin;
        batch.push_back(e->handle);
      } else {
        orphans_.push_back(std::move(owned));  // deregistered by its last release
      }
    }
  }
  deregister(batch);
}

void RegCache::flush() {
  std::vector<Handle> batch;
  {
    std::lock_guard g(mu_);
    collect_unused(batch, true);
  }
  deregister(batch);
}

void RegCache::deregister(std::vector<Handle>& batch) noexcept {
  for (Handle h : batch) dereg_(h);
  if (!batch.empty()) {
    std::lock_guard g(mu_);
    stats_.deregistrations += batch.size();
  }
  batch.clear();
}

RegCacheStats RegCache::stats() const {
  std::lock_guard g(mu_);
  return stats_;
}

void invalidate_registrations(const void* addr, size_t len) {
  std::lock_guard g(registry_mu());
  for (RegCache* c : registry()) c->invalidate(addr, len);
}

}  // namespace tierce::fabric
