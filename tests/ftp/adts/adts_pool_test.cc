// tests/ftp/adts/adts_pool_test.cc — BufferPool and RegistrationCache: aligned buffers, blocking
// acquire with a timeout, on-demand overflow buffers, registrations made once and then hit.
#define BOOST_TEST_MODULE adts_pool
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <atomic>
#include <set>
#include <thread>

#include "ftp_adts/adts/buffer_pool.h"
#include "ftp_adts/adts/pipeline.h"

using namespace tierce::adts;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_CASE(buffers_are_page_aligned_and_reused) {
  BufferPool pool(4, 10000, 0);
  long page = ::sysconf(_SC_PAGESIZE);
  BOOST_CHECK_EQUAL(pool.buffer_size() % size_t(page), 0u);
  BOOST_CHECK_GE(pool.buffer_size(), 10000u);
  std::set<uint8_t*> seen;
  {
    std::vector<BufferPool::Lease> all;
    for (int i = 0; i < 4; ++i) {
      all.push_back(pool.acquire(1s));
      BOOST_CHECK(all.back().pooled());
      BOOST_CHECK_EQUAL(reinterpret_cast<uintptr_t>(all.back().data()) % uintptr_t(page), 0u);
      seen.insert(all.back().data());
    }
    BOOST_CHECK_EQUAL(pool.available(), 0u);
    // exhausted, no overflow budget: acquire times out
    try {
      pool.acquire(50ms);
      BOOST_FAIL("acquire on an exhausted pool returned");
    } catch (const AdtsError& e) {
      BOOST_CHECK(e.code() == AdtsError::Code::Timeout);
    }
    BOOST_CHECK(!pool.try_acquire_pooled());
  }
  BOOST_CHECK_EQUAL(pool.available(), 4u);
  for (int i = 0; i < 20; ++i) {
    auto l = pool.acquire(1s);
    BOOST_CHECK(seen.count(l.data()));  // the same memory, every time
  }
}

BOOST_AUTO_TEST_CASE(acquire_waits_for_a_release) {
  BufferPool pool(1, 4096, 0);
  auto held = pool.acquire(1s);
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    held.reset();
  });
  auto l = pool.acquire(10s);  // would throw Timeout if the release did not wake us
  BOOST_CHECK(l);
  t.join();
}

BOOST_AUTO_TEST_CASE(overflow_buffers_are_on_demand) {
  BufferPool pool(1, 4096, 2);
  std::atomic<int> freed{0};  // outlives the leases below, whose release calls the hook
  pool.on_free([&](void*, size_t) { ++freed; });
  auto a = pool.acquire(1s);
  auto b = pool.acquire(1s);
  auto c = pool.acquire(1s);
  BOOST_CHECK(a.pooled());
  BOOST_CHECK(!b.pooled());
  BOOST_CHECK(!c.pooled());
  BOOST_CHECK_EQUAL(pool.on_demand_allocations(), 2u);
  BOOST_CHECK_THROW(pool.acquire(30ms), AdtsError);
  b.reset();
  BOOST_CHECK_EQUAL(freed.load(), 1);
  auto d = pool.acquire(1s);  // the overflow budget is back
  BOOST_CHECK(d);
}

BOOST_AUTO_TEST_CASE(registration_cache_registers_once) {
  BufferPool pool(3, 8192, 0);
  std::atomic<int> registered{0}, deregistered{0};
  {
    RegistrationCache cache([&](void* addr, size_t) -> std::shared_ptr<void> {
      ++registered;
      return std::shared_ptr<void>(addr, [&](void*) { ++deregistered; });
    });
    // ten "transfers", each using every buffer
    for (int transfer = 0; transfer < 10; ++transfer) {
      std::vector<BufferPool::Lease> ls;
      for (int i = 0; i < 3; ++i) {
        ls.push_back(pool.acquire(1s));
        void* h = cache.get(ls.back().data(), ls.back().size());
        BOOST_CHECK_EQUAL(h, static_cast<void*>(ls.back().data()));
      }
    }
    BOOST_CHECK_EQUAL(registered.load(), 3);
    BOOST_CHECK_EQUAL(cache.misses(), 3u);
    BOOST_CHECK_EQUAL(cache.hits(), 27u);
    BOOST_CHECK_EQUAL(cache.size(), 3u);
    auto l = pool.acquire(1s);
    cache.forget(l.data(), l.size());
    BOOST_CHECK_EQUAL(deregistered.load(), 1);
    cache.get(l.data(), l.size());
    BOOST_CHECK_EQUAL(registered.load(), 4);
  }
  BOOST_CHECK_EQUAL(deregistered.load(), 4);  // the cache deregisters what it holds
}

BOOST_AUTO_TEST_CASE(registrar_failure_is_not_cached) {
  int calls = 0;
  RegistrationCache cache([&](void*, size_t) -> std::shared_ptr<void> {
    if (++calls == 1) throw AdtsError(AdtsError::Code::LocalIo, "ibv_reg_mr: no memory");
    return std::make_shared<int>(1);
  });
  int x;
  BOOST_CHECK_THROW(cache.get(&x, 4), AdtsError);
  BOOST_CHECK(cache.get(&x, 4) != nullptr);
  BOOST_CHECK_EQUAL(cache.misses(), 1u);
}

BOOST_AUTO_TEST_CASE(shared_pool_is_process_wide) {
  auto a = BufferPool::shared(1 << 20);
  auto b = BufferPool::shared(1 << 20);
  BOOST_CHECK_EQUAL(a.get(), b.get());
  BOOST_CHECK_EQUAL(a->count(), BufferPool::kSharedCount);
  BOOST_CHECK_NE(BufferPool::shared(64 << 10).get(), a.get());
}

BOOST_AUTO_TEST_CASE(bounded_queue_close_cancel_timeout) {
  BoundedQueue<int> q(2);
  BOOST_CHECK(q.push(1, 1s));
  BOOST_CHECK(q.push(2, 1s));
  BOOST_CHECK_THROW(q.push(3, 30ms), AdtsError);  // full, nobody pops
  BOOST_CHECK_EQUAL(*q.pop(1s), 1);
  q.close();
  BOOST_CHECK_EQUAL(*q.pop(1s), 2);  // close drains
  BOOST_CHECK(!q.pop(1s));
  BoundedQueue<int> q2(1);
  BOOST_CHECK_THROW(q2.pop(30ms), AdtsError);  // empty, nobody pushes
  std::thread t([&] { q2.cancel(); });
  BOOST_CHECK(!q2.pop(10s));  // cancel wakes the waiter
  t.join();
  BOOST_CHECK(!q2.push(1, 1s));
}
