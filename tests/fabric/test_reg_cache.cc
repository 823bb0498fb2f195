// tests/fabric/test_reg_cache.cc — the registration cache (fabric/reg_cache.h) with counting
// callbacks in place of ibv_reg_mr/ibv_dereg_mr: reuse, containment, LRU budget with batched
// deregistration, invalidation (free + malloc at the same address), failure and retry, threads.
#define BOOST_TEST_MODULE reg_cache
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "fabric/reg_cache.h"

using namespace tierce::fabric;

namespace {

constexpr uint32_t kLocalWrite = 1, kRemoteRead = 2;

// A fake HCA: hands out distinct handles, remembers which are registered, counts calls.
struct FakeHca {
  std::mutex mu;
  std::set<uintptr_t> live;
  uintptr_t next = 1;
  int registrations = 0, deregistrations = 0, dereg_calls_at_last_batch = 0;
  int fail_next = 0;                                 // registrations to refuse (ENOMEM)
  std::vector<std::pair<uintptr_t, size_t>> ranges;  // what was registered, in order

  RegCache::RegisterFn reg() {
    return [this](void* addr, size_t len, uint32_t) -> RegCache::Handle {
      std::lock_guard g(mu);
      if (fail_next > 0) {
        --fail_next;
        errno = ENOMEM;
        return nullptr;
      }
      ++registrations;
      ranges.emplace_back(reinterpret_cast<uintptr_t>(addr), len);
      uintptr_t h = next++;
      live.insert(h);
      return reinterpret_cast<RegCache::Handle>(h);
    };
  }
  RegCache::DeregisterFn dereg() {
    return [this](RegCache::Handle h) {
      std::lock_guard g(mu);
      BOOST_REQUIRE(live.erase(reinterpret_cast<uintptr_t>(h)) ==
                    1u);  // never twice, never unknown
      ++deregistrations;
    };
  }
};

RegCacheLimits limits(size_t bytes, size_t count) {
  RegCacheLimits l;
  l.max_unused_bytes = bytes;
  l.max_unused_count = count;
  return l;
}

// Page-aligned fake addresses (never dereferenced).
const void* at(uintptr_t page, size_t off = 0) {
  return reinterpret_cast<const void*>((uintptr_t(0x7f0000000000) + page * 4096 + off));
}

}  // namespace

BOOST_AUTO_TEST_CASE(same_buffer_registers_once) {
  FakeHca hca;
  {
    RegCache c(hca.reg(), hca.dereg(), limits(1 << 20, 16));
    for (int i = 0; i < 100; ++i) {
      auto l = c.acquire(at(10, 100), 200000, kLocalWrite);
      BOOST_REQUIRE(l);
      BOOST_TEST(l.begin() == reinterpret_cast<uintptr_t>(at(10)));  // page-rounded
      BOOST_TEST(l.end() >= reinterpret_cast<uintptr_t>(at(10, 100)) + 200000);
    }
    BOOST_TEST(hca.registrations == 1);
    BOOST_TEST(hca.deregistrations == 0);  // cached, not deregistered per use
    auto s = c.stats();
    BOOST_TEST(s.hits == 99u);
    BOOST_TEST(s.misses == 1u);
    BOOST_TEST(s.unused == 1u);
  }
  BOOST_TEST(hca.deregistrations == 1);  // the destructor deregisters what is cached
  BOOST_TEST(hca.live.empty());
}

BOOST_AUTO_TEST_CASE(contained_and_overlapping_ranges) {
  FakeHca hca;
  RegCache c(hca.reg(), hca.dereg(), limits(64 << 20, 64));
  auto big = c.acquire(at(0), 64 * 4096, kLocalWrite);
  // Contained ranges, also while the big one is in use, and a weaker access: reuse.
  auto a = c.acquire(at(3, 17), 5000, kLocalWrite);
  auto b = c.acquire(at(60), 4 * 4096, 0);
  BOOST_TEST(a.handle() == big.handle());
  BOOST_TEST(b.handle() == big.handle());
  BOOST_TEST(hca.registrations == 1);
  // A range that sticks out of it, or an access it lacks: a new registration.
  auto out = c.acquire(at(62), 4 * 4096, kLocalWrite);
  BOOST_TEST(out.handle() != big.handle());
  auto rr = c.acquire(at(1), 4096, kRemoteRead);
  BOOST_TEST(rr.handle() != big.handle());
  BOOST_TEST(hca.registrations == 3);
  // Now the overlapping one is cached as well and serves its own sub-ranges.
  out.reset();
  auto again = c.acquire(at(65), 4096, kLocalWrite);
  BOOST_TEST(hca.registrations == 3);
  BOOST_TEST(c.stats().in_use == 3u);  // registrations with leases: big, rr, out's (via again)
}

BOOST_AUTO_TEST_CASE(budget_overflow_deregisters_the_lru_in_a_batch) {
  FakeHca hca;
  RegCache c(hca.reg(), hca.dereg(), limits(1 << 30, 8));  // 8 unused registrations at most
  for (uintptr_t p = 0; p < 8; ++p) c.acquire(at(p * 10), 4096, kLocalWrite);  // released at once
  BOOST_TEST(hca.registrations == 8);
  BOOST_TEST(hca.deregistrations == 0);
  c.acquire(at(0), 4096, kLocalWrite);  // touch page 0: now the most recently used
  BOOST_TEST(hca.registrations == 8);
  c.acquire(at(200), 4096, kLocalWrite);  // the 9th: over budget
  // One batch down to 3/4 of the budget (6): three deregistered at once, the least recent first.
  BOOST_TEST(hca.deregistrations == 3);
  BOOST_TEST(c.stats().dereg_batches == 1u);
  BOOST_TEST(c.stats().unused == 6u);
  c.acquire(at(0), 4096, kLocalWrite);  // page 0 was touched: still cached
  BOOST_TEST(hca.registrations == 9);
  c.acquire(at(10), 4096, kLocalWrite);  // page 10 was the LRU: gone, registers again
  BOOST_TEST(hca.registrations == 10);
  // Lazy: the next releases below the budget deregister nothing.
  BOOST_TEST(hca.deregistrations == 3);
  // A byte budget works the same way.
  FakeHca h2;
  RegCache c2(h2.reg(), h2.dereg(), limits(16 * 4096, 1000));
  for (uintptr_t p = 0; p < 5; ++p) c2.acquire(at(p * 100), 4 * 4096, kLocalWrite);
  BOOST_TEST(h2.deregistrations == 2);  // 20 pages > 16: down to <= 12 pages in one batch
  BOOST_TEST(c2.stats().unused_bytes <= 12u * 4096);
  c2.flush();
  BOOST_TEST(h2.live.empty());
  BOOST_TEST(c2.stats().unused == 0u);
}

BOOST_AUTO_TEST_CASE(free_and_realloc_at_the_same_address) {
  FakeHca hca;
  RegCache c(hca.reg(), hca.dereg(), limits(64 << 20, 64));
  c.acquire(at(5), 8 * 4096, kLocalWrite);  // buffer 1: 8 pages, used and released
  // The caller frees buffer 1: the rule says invalidate first.
  c.invalidate(at(5), 8 * 4096);
  BOOST_TEST(hca.deregistrations == 1);
  BOOST_TEST(c.stats().invalidated == 1u);
  // Buffer 2 at the same address, shorter: must NOT reuse the old registration (its pages may be
  // other physical pages now).
  auto l = c.acquire(at(5), 2 * 4096, kLocalWrite);
  BOOST_TEST(hca.registrations == 2);
  BOOST_TEST(hca.ranges.back().second == 2u * 4096);
  l.reset();
  // Longer at the same address: the shorter one does not cover it, a new one is made; after
  // invalidating a sub-range, every overlapping registration goes.
  auto longer = c.acquire(at(5), 16 * 4096, kLocalWrite);
  BOOST_TEST(hca.registrations == 3);
  c.invalidate(at(6, 10), 1);  // one byte inside both
  BOOST_TEST(c.stats().invalidated == 3u);
  BOOST_TEST(hca.deregistrations == 2);  // the unused short one now; `longer` is in use
  auto fresh = c.acquire(at(5), 16 * 4096, kLocalWrite);
  BOOST_TEST(fresh.handle() != longer.handle());  // the invalidated one is never handed out
  BOOST_TEST(hca.registrations == 4);
  longer.reset();  // its last lease: deregistered now
  BOOST_TEST(hca.deregistrations == 3);
  // Ranges next to an invalidated one are untouched.
  auto other = c.acquire(at(40), 4096, kLocalWrite);
  other.reset();
  c.invalidate(at(41), 4096);
  BOOST_TEST(c.acquire(at(40), 4096, kLocalWrite).handle() != nullptr);
  BOOST_TEST(hca.registrations == 5);
  // Process-wide invalidation reaches caches that opted in.
  FakeHca h2;
  {
    RegCache pw(h2.reg(), h2.dereg(), limits(64 << 20, 64), /*process_wide=*/true);
    pw.acquire(at(300), 4096, kLocalWrite);
    invalidate_registrations(at(300, 8), 8);
    BOOST_TEST(h2.deregistrations == 1);
  }
}

BOOST_AUTO_TEST_CASE(failed_registration_flushes_and_retries) {
  FakeHca hca;
  RegCache c(hca.reg(), hca.dereg(), limits(64 << 20, 64));
  for (uintptr_t p = 0; p < 4; ++p) c.acquire(at(p * 10), 4096, kLocalWrite);
  hca.fail_next = 1;  // e.g. the locked-memory limit: the cached ones are dropped, then it works
  auto l = c.acquire(at(100), 4096, kLocalWrite);
  BOOST_TEST(bool(l));
  BOOST_TEST(hca.deregistrations == 4);
  hca.fail_next = 2;
  auto none = c.acquire(at(200), 4096, kLocalWrite);
  BOOST_TEST(!none);
  BOOST_TEST(c.stats().register_failures == 1u);
}

BOOST_AUTO_TEST_CASE(threads_share_one_cache) {
  FakeHca hca;
  std::atomic<int> bad{0};
  {
    RegCache c(hca.reg(), hca.dereg(), limits(128 * 4096, 32));  // room for most of 40
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t) {
      ts.emplace_back([&, t] {
        std::mt19937 r(t);
        for (int i = 0; i < 20000; ++i) {
          // 40 buffers of 1 to 3 pages, used again and again (what a cache is for).
          uintptr_t buf = r() % 40;
          auto l = c.acquire(at(buf * 4, r() % 64), (buf % 3 + 1) * 4096 - 64, kLocalWrite);
          std::lock_guard g(hca.mu);
          if (!l || !hca.live.count(reinterpret_cast<uintptr_t>(l.handle()))) ++bad;
          if (r() % 200 == 0) {
            hca.mu.unlock();
            c.invalidate(at(r() % 160), 4096);
            hca.mu.lock();
          }
        }
      });
    }
    for (auto& t : ts) t.join();
    auto s = c.stats();
    BOOST_TEST_MESSAGE("threads: " << s.registrations << " registrations, " << s.hits << " hits, "
                                   << s.deregistrations << " deregistrations");
    BOOST_TEST(s.in_use == 0u);
    BOOST_TEST(s.unused <= 32u);
    BOOST_TEST(s.hits > s.registrations);
  }
  BOOST_TEST(bad.load() == 0);  // a lease never held a deregistered handle
  BOOST_TEST(hca.live.empty());
  BOOST_TEST(hca.registrations == hca.deregistrations);
}
