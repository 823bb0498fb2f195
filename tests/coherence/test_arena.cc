// tests/coherence/test_arena.cc — the proxy's cache arena: round trips, replacement, collisions,
// erase, FIFO eviction, wrap-around with varied sizes, multi-process stress with lock-free
// readers (no torn entry may ever be returned), a writer killed while holding the mutex, header
// validation on open, the latency histogram, and a writer frozen (SIGSTOP) while holding the
// mutex: other writers give up after a short bound instead of waiting for ever.
#define BOOST_TEST_MODULE coherence_arena
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "coherence/arena.h"
#include "fabric/segment.h"

namespace tierce::coherence {
// The arena's test hook (a private friend): runs inside store() with the writers' mutex held.
struct ArenaTestHooks {
  static void set_store_hook(void (*f)(int stage)) { CacheArena::test_store_hook_ = f; }
  // Takes the writers' mutex as store() would, and keeps it.
  static void take_lock(const CacheArena& a) { (void)a.lock(); }
};
}  // namespace tierce::coherence

using namespace tierce::coherence;
using tierce::fabric::SharedSegment;

namespace {

constexpr size_t kMiB = size_t(1) << 20;

uint64_t fnv(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Bytes derived from (key hash, seq): a reader can regenerate and compare them.
std::string derived_bytes(uint64_t key_hash, uint64_t seq, size_t n) {
  std::string s(n, '\0');
  uint64_t x = key_hash ^ (seq * 0xd6e8feb86659fd93ull);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = splitmix(x);
    std::memcpy(&s[i], &v, std::min<size_t>(8, n - i));
  }
  return s;
}

// Stress payload: a header {key hash, seq, writer, length, checksum} then derived bytes.
struct PayloadHead {
  uint64_t key_hash;
  uint64_t seq;
  uint32_t writer;
  uint32_t len;
  uint64_t sum;
};

std::string make_payload(uint64_t key_hash, uint64_t seq, uint32_t writer, size_t body) {
  PayloadHead ph{key_hash, seq, writer, uint32_t(sizeof(PayloadHead) + body), 0};
  std::string b = derived_bytes(key_hash, seq, body);
  ph.sum = fnv(b) ^ key_hash ^ seq;
  std::string out(reinterpret_cast<const char*>(&ph), sizeof ph);
  return out + b;
}

// True when `e` (found under `key`) is exactly what some writer stored under that key.
bool consistent(const CachedEntry& e, const std::string& key) {
  if (e.key != key || e.payload.size() < sizeof(PayloadHead)) return false;
  PayloadHead ph;
  std::memcpy(&ph, e.payload.data(), sizeof ph);
  uint64_t h = fnv(key);
  if (ph.key_hash != h || ph.len != e.payload.size()) return false;
  std::string_view body(e.payload.data() + sizeof ph, e.payload.size() - sizeof ph);
  if ((fnv(body) ^ h ^ ph.seq) != ph.sum) return false;
  if (body != derived_bytes(h, ph.seq, body.size())) return false;
  return e.tag.version == ph.seq && e.tag.slot == h && e.tag.home == ph.writer;
}

Tag tag_of(uint64_t v) { return Tag{uint32_t(v % 7), v * 3, v}; }

std::string seg_name(const char* what) {
  return "/tierce-test-" + std::string(what) + "-" + std::to_string(getpid());
}

}  // namespace

BOOST_AUTO_TEST_CASE(store_lookup_round_trip) {
  auto a = CacheArena::create_anonymous(kMiB);
  BOOST_TEST(!a->lookup(fnv("k"), "k").has_value());
  Tag t{3, 77, 123456789};
  int64_t before = std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  BOOST_REQUIRE(a->store(fnv("k"), "k", t, "hello payload"));
  auto e = a->lookup(fnv("k"), "k");
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST(e->key == "k");
  BOOST_TEST(e->payload == "hello payload");
  BOOST_TEST(e->tag.home == 3u);
  BOOST_TEST(e->tag.slot == 77u);
  BOOST_TEST(e->tag.version == 123456789u);
  BOOST_TEST(e->stored_at_us >= before);
  BOOST_TEST(e->stored_at_us <= before + 60'000'000);
  // Empty key and empty payload, binary bytes.
  BOOST_REQUIRE(a->store(fnv(""), "", t, ""));
  auto z = a->lookup(fnv(""), "");
  BOOST_REQUIRE(z.has_value());
  BOOST_TEST(z->payload.empty());
  std::string bin("a\0b\xff", 4);
  BOOST_REQUIRE(a->store(fnv(bin), bin, t, bin));
  BOOST_TEST(a->lookup(fnv(bin), bin)->payload == bin);
  // The hash values the index reserves (empty, tombstone) still work as keys' hashes.
  BOOST_REQUIRE(a->store(0, "zero", t, "z"));
  BOOST_REQUIRE(a->store(~0ull, "ones", t, "o"));
  BOOST_TEST(a->lookup(0, "zero")->payload == "z");
  BOOST_TEST(a->lookup(~0ull, "ones")->payload == "o");
  auto s = a->stats();
  BOOST_TEST(s.entries == 5u);
  BOOST_TEST(s.capacity_bytes == kMiB);
  BOOST_TEST(s.index_buckets == 4096u);  // next power of two >= ring / 256
  BOOST_TEST(s.used_bytes == 5u * 128u);  // 72-byte header + key + payload, padded to 64
  BOOST_TEST(a->counters().stores.load() == 5u);
}

BOOST_AUTO_TEST_CASE(replace_same_key) {
  auto a = CacheArena::create_anonymous(kMiB);
  BOOST_REQUIRE(a->store(fnv("k"), "k", tag_of(1), "first"));
  BOOST_REQUIRE(a->store(fnv("k"), "k", tag_of(2), "second, longer than the first"));
  auto e = a->lookup(fnv("k"), "k");
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST(e->payload == "second, longer than the first");
  BOOST_TEST(e->tag.version == 2u);
  BOOST_TEST(a->stats().entries == 1u);
  a->erase(fnv("k"), "k");  // one erase drops it: there was only one bucket
  BOOST_TEST(!a->lookup(fnv("k"), "k").has_value());
}

BOOST_AUTO_TEST_CASE(hash_collision_is_a_miss) {
  auto a = CacheArena::create_anonymous(kMiB);
  BOOST_REQUIRE(a->store(42, "alpha", tag_of(1), "A"));
  BOOST_TEST(!a->lookup(42, "beta").has_value());
  BOOST_TEST(!a->lookup(43, "alpha").has_value());  // right key, wrong hash
  // Both keys can live under one hash; each finds its own.
  BOOST_REQUIRE(a->store(42, "beta", tag_of(2), "B"));
  BOOST_TEST(a->lookup(42, "alpha")->payload == "A");
  BOOST_TEST(a->lookup(42, "beta")->payload == "B");
  a->erase(42, "alpha");
  BOOST_TEST(!a->lookup(42, "alpha").has_value());
  BOOST_TEST(a->lookup(42, "beta")->payload == "B");
}

BOOST_AUTO_TEST_CASE(erase_drops_the_entry) {
  auto a = CacheArena::create_anonymous(kMiB);
  BOOST_REQUIRE(a->store(fnv("x"), "x", tag_of(1), "X"));
  BOOST_REQUIRE(a->store(fnv("y"), "y", tag_of(1), "Y"));
  a->erase(fnv("x"), "x");
  BOOST_TEST(!a->lookup(fnv("x"), "x").has_value());
  BOOST_TEST(a->lookup(fnv("y"), "y")->payload == "Y");
  BOOST_TEST(a->counters().erased.load() == 1u);
  a->erase(fnv("x"), "x");     // absent: nothing happens
  a->erase(fnv("x"), "other");  // same hash, other key: nothing happens
  BOOST_TEST(a->counters().erased.load() == 1u);
  BOOST_TEST(a->stats().entries == 1u);
  BOOST_REQUIRE(a->store(fnv("x"), "x", tag_of(2), "X2"));
  BOOST_TEST(a->lookup(fnv("x"), "x")->payload == "X2");
  // Many keys sharing one probe chain, erased in a scattered order: the survivors stay
  // reachable across the tombstones.
  for (int i = 0; i < 20; ++i)
    BOOST_REQUIRE(a->store(1000, "c" + std::to_string(i), tag_of(i), std::to_string(i)));
  for (int i = 0; i < 20; i += 3) a->erase(1000, "c" + std::to_string(i));
  for (int i = 0; i < 20; ++i) {
    auto e = a->lookup(1000, "c" + std::to_string(i));
    if (i % 3 == 0) {
      BOOST_TEST(!e.has_value());
    } else {
      BOOST_REQUIRE(e.has_value());
      BOOST_TEST(e->payload == std::to_string(i));
    }
  }
}

BOOST_AUTO_TEST_CASE(too_large_is_refused) {
  auto a = CacheArena::create_anonymous(kMiB);
  BOOST_TEST(a->max_entry_bytes() == kMiB / 4);
  std::string big(a->max_entry_bytes(), 'x');
  BOOST_TEST(!a->store(fnv("big"), "big", tag_of(1), big));
  BOOST_TEST(a->counters().store_refused.load() == 1u);
  BOOST_TEST(a->counters().stores.load() == 0u);
  BOOST_TEST(a->stats().used_bytes == 0u);
  BOOST_TEST(!a->lookup(fnv("big"), "big").has_value());
  std::string fits(a->max_entry_bytes() - 200, 'y');
  BOOST_TEST(a->store(fnv("fits"), "fits", tag_of(1), fits));
  BOOST_TEST(a->lookup(fnv("fits"), "fits")->payload == fits);
}

BOOST_AUTO_TEST_CASE(eviction_is_fifo) {
  auto a = CacheArena::create_anonymous(kMiB);
  const int n = 3000;  // ~1088 bytes each: about 960 fit
  auto key = [](int i) { return "e" + std::to_string(100000 + i); };
  for (int i = 0; i < n; ++i)
    BOOST_REQUIRE(a->store(fnv(key(i)), key(i), tag_of(i), derived_bytes(i, 0, 1000)));
  int first = -1;
  for (int i = 0; i < n && first < 0; ++i)
    if (a->lookup(fnv(key(i)), key(i))) first = i;
  BOOST_REQUIRE(first > 0);
  BOOST_TEST(n - first > 900);
  for (int i = 0; i < n; ++i) {
    auto e = a->lookup(fnv(key(i)), key(i));
    if (i < first) {
      BOOST_TEST(!e.has_value(), "key " << i << " should have been evicted");
    } else {
      BOOST_REQUIRE_MESSAGE(e.has_value(), "key " << i << " (newer than " << first << ") lost");
      BOOST_TEST(e->payload == derived_bytes(i, 0, 1000));
    }
  }
  BOOST_TEST(a->counters().evictions.load() == uint64_t(first));
  auto s = a->stats();
  BOOST_TEST(s.entries == uint64_t(n - first));
  BOOST_TEST(s.used_bytes <= s.capacity_bytes);
  BOOST_TEST(s.used_bytes > s.capacity_bytes - 2 * 1088);
}

BOOST_AUTO_TEST_CASE(wrap_around_with_varied_sizes) {
  auto a = CacheArena::create_anonymous(kMiB);
  std::mt19937_64 rng(12345);
  const int keys = 300;
  std::map<int, uint64_t> latest;  // key -> seq of its last store
  auto key = [](int i) { return "w/" + std::to_string(i); };
  auto size_of = [&](uint64_t seq) {
    uint64_t x = seq;
    uint64_t r = splitmix(x);
    if (r % 50 == 0) return size_t(r % (a->max_entry_bytes() - 300));  // a few near the maximum
    return size_t(r % 20000);
  };
  auto check = [&](int k) {
    auto e = a->lookup(fnv(key(k)), key(k));
    if (!e) return true;
    auto it = latest.find(k);
    if (it == latest.end()) return false;
    return e->key == key(k) && e->tag.version == it->second &&
           e->payload == derived_bytes(fnv(key(k)), it->second, size_of(it->second));
  };
  uint64_t bytes = 0;
  int bad = 0;
  for (uint64_t seq = 1; seq <= 20000; ++seq) {
    int k = int(rng() % keys);
    std::string p = derived_bytes(fnv(key(k)), seq, size_of(seq));
    bytes += p.size();
    BOOST_REQUIRE(a->store(fnv(key(k)), key(k), tag_of(seq), p));
    latest[k] = seq;
    auto e = a->lookup(fnv(key(k)), key(k));  // the newest entry is always there
    if (!e || e->payload != p) ++bad;
    if (seq % 16 == 0)
      for (int j = 0; j < 20; ++j) bad += !check(int(rng() % keys));
    auto s = a->stats();
    if (s.used_bytes > s.capacity_bytes) ++bad;
  }
  for (int k = 0; k < keys; ++k) bad += !check(k);
  BOOST_TEST(bad == 0);
  BOOST_TEST(bytes > 100 * kMiB);  // many laps of the ring
  BOOST_TEST(a->counters().evictions.load() > 0u);
}

namespace {

struct StressShared {
  std::atomic<uint64_t> stores, lookups, hits, bad;
  std::atomic<int> go;
};

void stress_writer(CacheArena& a, StressShared& sh, uint32_t id, uint64_t deadline_ns) {
  std::mt19937_64 rng(id * 7919 + uint64_t(getpid()));
  uint64_t seq = uint64_t(id) << 40;
  while (!sh.go.load()) std::this_thread::yield();
  while (tierce::fabric::monotonic_ns() < deadline_ns) {
    std::string key = "s/" + std::to_string(rng() % 2000);
    size_t body = rng() % 16 == 0 ? rng() % 100000 : rng() % 4000;
    uint64_t h = fnv(key);
    ++seq;
    if (a.store(h, key, Tag{id, h, seq}, make_payload(h, seq, id, body)))
      sh.stores.fetch_add(1);
  }
}

void stress_reader(CacheArena& a, StressShared& sh, uint64_t seed, uint64_t deadline_ns) {
  std::mt19937_64 rng(seed);
  while (!sh.go.load()) std::this_thread::yield();
  uint64_t lookups = 0, hits = 0, bad = 0;
  while (tierce::fabric::monotonic_ns() < deadline_ns) {
    std::string key = "s/" + std::to_string(rng() % 2000);
    ++lookups;
    if (auto e = a.lookup(fnv(key), key)) {
      ++hits;
      if (!consistent(*e, key)) ++bad;
    }
  }
  sh.lookups.fetch_add(lookups);
  sh.hits.fetch_add(hits);
  sh.bad.fetch_add(bad);
}

int wait_child(pid_t pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return st;
}

}  // namespace

BOOST_AUTO_TEST_CASE(concurrent_processes_never_see_torn_entries) {
  auto a = CacheArena::create_anonymous(4 * kMiB);
  void* m = mmap(nullptr, sizeof(StressShared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                 -1, 0);
  BOOST_REQUIRE(m != MAP_FAILED);
  auto* sh = new (m) StressShared{};
  uint64_t deadline = tierce::fabric::monotonic_ns() + 2'000'000'000ull + 300'000'000ull;
  std::vector<pid_t> kids;
  for (uint32_t w = 1; w <= 3; ++w) {
    pid_t pid = fork();
    BOOST_REQUIRE(pid >= 0);
    if (pid == 0) {
      stress_writer(*a, *sh, w, deadline);
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (int r = 0; r < 2; ++r) {
    pid_t pid = fork();
    BOOST_REQUIRE(pid >= 0);
    if (pid == 0) {
      std::thread t1(stress_reader, std::ref(*a), std::ref(*sh), 100 + r * 2, deadline);
      std::thread t2(stress_reader, std::ref(*a), std::ref(*sh), 101 + r * 2, deadline);
      t1.join();
      t2.join();
      _exit(0);
    }
    kids.push_back(pid);
  }
  usleep(300'000);  // let every child start before the clock runs
  sh->go.store(1);
  for (pid_t pid : kids) {
    int st = wait_child(pid);
    BOOST_TEST((WIFEXITED(st) && WEXITSTATUS(st) == 0), "child " << pid << " status " << st);
  }
  BOOST_TEST_MESSAGE("stress: " << sh->stores.load() << " stores, " << sh->lookups.load()
                                << " lookups, " << sh->hits.load() << " hits, "
                                << a->counters().evictions.load() << " evictions");
  BOOST_TEST(sh->bad.load() == 0u);
  BOOST_TEST(sh->stores.load() > 1000u);
  BOOST_TEST(sh->hits.load() > 1000u);
  BOOST_TEST(a->counters().evictions.load() > 0u);  // the ring wrapped while readers read
  // Quiescent: every key is either a miss or a whole entry.
  int bad = 0;
  for (int k = 0; k < 2000; ++k) {
    std::string key = "s/" + std::to_string(k);
    if (auto e = a->lookup(fnv(key), key)) bad += !consistent(*e, key);
  }
  BOOST_TEST(bad == 0);
  munmap(m, sizeof(StressShared));
}

BOOST_AUTO_TEST_CASE(writer_killed_holding_the_mutex) {
  auto a = CacheArena::create_anonymous(kMiB);
  auto key = [](int i) { return "r/" + std::to_string(i); };
  // Fill the ring so that the doomed store has to evict first.
  int n = 0;
  while (a->counters().evictions.load() == 0) {
    uint64_t h = fnv(key(n));
    BOOST_REQUIRE(a->store(h, key(n), Tag{0, h, uint64_t(n)}, make_payload(h, n, 0, 3000)));
    ++n;
  }
  for (int stage : {1, 2}) {
    pid_t pid = fork();
    BOOST_REQUIRE(pid >= 0);
    if (pid == 0) {
      ArenaTestHooks::set_store_hook(stage == 1 ? +[](int s) {
        if (s == 1) kill(getpid(), SIGKILL);
      }
                                                : +[](int s) {
                                                    if (s == 2) kill(getpid(), SIGKILL);
                                                  });
      std::string victim = "victim";
      a->store(fnv(victim), victim, tag_of(1), std::string(100000, 'v'));
      _exit(3);  // not reached
    }
    int st = wait_child(pid);
    BOOST_REQUIRE_MESSAGE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
                          "stage " << stage << ": child status " << st);
    // The half-done store is invisible; everything else is a miss or whole.
    BOOST_TEST(!a->lookup(fnv("victim"), "victim").has_value());
    int bad = 0, hits = 0;
    for (int i = 0; i < n; ++i)
      if (auto e = a->lookup(fnv(key(i)), key(i))) {
        ++hits;
        bad += !consistent(*e, key(i));
      }
    BOOST_TEST(bad == 0);
    BOOST_TEST(hits > 0);
    // Another process (this one) takes the mutex over and stores; so does a new child.
    std::string after = "after" + std::to_string(stage);
    BOOST_REQUIRE(a->store(fnv(after), after, tag_of(9), "fine"));
    BOOST_TEST(a->lookup(fnv(after), after)->payload == "fine");
    pid = fork();
    BOOST_REQUIRE(pid >= 0);
    if (pid == 0) {
      std::string k = "child" + std::to_string(stage);
      _exit(a->store(fnv(k), k, tag_of(5), "from child") ? 0 : 1);
    }
    st = wait_child(pid);
    BOOST_TEST((WIFEXITED(st) && WEXITSTATUS(st) == 0));
    std::string ck = "child" + std::to_string(stage);
    auto e = a->lookup(fnv(ck), ck);
    BOOST_REQUIRE(e.has_value());
    BOOST_TEST(e->payload == "from child");
    auto s = a->stats();
    BOOST_TEST(s.used_bytes <= s.capacity_bytes);
  }
}

BOOST_AUTO_TEST_CASE(writer_frozen_holding_the_mutex_does_not_stall_the_others) {
  using namespace std::chrono_literals;
  auto a = CacheArena::create_anonymous(kMiB);
  BOOST_REQUIRE(a->store(fnv("before"), "before", tag_of(1), "B"));
  pid_t pid = fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    ArenaTestHooks::take_lock(*a);
    raise(SIGSTOP);  // a proxy child frozen (SIGSTOP, debugger, swapped out) inside store()
    _exit(0);        // resumed: exits still holding the mutex (its owner is then dead)
  }
  int st = 0;
  while (waitpid(pid, &st, WUNTRACED) < 0 && errno == EINTR) {
  }
  BOOST_REQUIRE_MESSAGE(WIFSTOPPED(st), "child status " << st);
  // A call that never returns would hang the test: run each in a thread and give it 10 s (the
  // bound is milliseconds; no exact timing is asserted). On failure the frozen child is killed,
  // which frees the mutex (owner dead), so the blocked call returns and the thread ends.
  auto within = [&](auto f, const char* what) {
    auto fut = std::async(std::launch::async, f);
    bool returned = fut.wait_for(10s) == std::future_status::ready;
    if (!returned) {
      kill(pid, SIGKILL);
      wait_child(pid);
    }
    BOOST_REQUIRE_MESSAGE(returned, what << " still blocked 10 s after another process froze "
                                            "holding the arena mutex");
    return fut.get();
  };
  // Readers take no lock.
  BOOST_TEST(a->lookup(fnv("before"), "before")->payload == "B");
  bool stored = within([&] { return a->store(fnv("k"), "k", tag_of(2), "K"); }, "store()");
  BOOST_TEST(!stored);
  BOOST_TEST(!a->lookup(fnv("k"), "k").has_value());
  BOOST_TEST(a->counters().lock_timeouts.load() == 1u);
  BOOST_TEST(a->counters().store_refused.load() == 1u);
  within([&] { a->erase(fnv("before"), "before"); return 0; }, "erase()");
  BOOST_TEST(a->lookup(fnv("before"), "before")->payload == "B");  // the erase was skipped
  BOOST_TEST(a->counters().erased.load() == 0u);
  BOOST_TEST(a->counters().lock_timeouts.load() == 2u);

  // The child resumes and exits holding the mutex: the next writer recovers it (EOWNERDEAD).
  kill(pid, SIGCONT);
  st = wait_child(pid);
  BOOST_TEST((WIFEXITED(st) && WEXITSTATUS(st) == 0), "child status " << st);
  BOOST_REQUIRE(a->store(fnv("k"), "k", tag_of(3), "K3"));
  BOOST_TEST(a->lookup(fnv("k"), "k")->payload == "K3");
  a->erase(fnv("before"), "before");
  BOOST_TEST(!a->lookup(fnv("before"), "before").has_value());
  BOOST_TEST(a->counters().erased.load() == 1u);
  BOOST_TEST(a->counters().lock_timeouts.load() == 2u);
}

BOOST_AUTO_TEST_CASE(named_create_and_open) {
  std::string name = seg_name("arena");
  auto a = CacheArena::create(name, 2 * kMiB);
  BOOST_TEST(a->segment().name() == name);
  BOOST_REQUIRE(a->store(fnv("k"), "k", tag_of(4), "shared"));
  auto b = CacheArena::open(name);
  BOOST_TEST(b->segment().incarnation() == a->segment().incarnation());
  BOOST_TEST(b->lookup(fnv("k"), "k")->payload == "shared");
  BOOST_REQUIRE(b->store(fnv("j"), "j", tag_of(5), "back"));
  BOOST_TEST(a->lookup(fnv("j"), "j")->payload == "back");
  BOOST_TEST(b->stats().capacity_bytes == 2 * kMiB);
  BOOST_TEST(b->counters().stores.load() == 2u);
  // Re-creating replaces it: a fresh arena under the name, the old mappings keep the old one.
  auto c = CacheArena::create(name, kMiB);
  BOOST_TEST(!CacheArena::open(name)->lookup(fnv("k"), "k").has_value());
  BOOST_TEST(a->lookup(fnv("k"), "k").has_value());
  // Published under its name, and no temporary names left behind in /dev/shm.
  BOOST_TEST(std::filesystem::exists("/dev/shm" + name));
  for (const auto& d : std::filesystem::directory_iterator("/dev/shm"))
    BOOST_TEST(d.path().filename().string().rfind(name.substr(1) + ".", 0) != 0, d.path());
  SharedSegment::unlink(name);
  BOOST_CHECK_THROW(CacheArena::create(name, 1000), std::runtime_error);  // < 1 MiB
}

namespace {
// The message of what `f` throws (as runtime_error), or "" if it does not throw.
template <class F>
std::string thrown(F f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

BOOST_AUTO_TEST_CASE(open_rejects_what_is_not_an_arena) {
  std::string name = seg_name("garbage");
  // Missing.
  SharedSegment::unlink(name);
  BOOST_TEST(!thrown([&] { CacheArena::open(name); }).empty());
  {  // A Tierce segment full of garbage.
    auto s = SharedSegment::create(name, 2 * kMiB);
    std::memset(s.data(), 0xab, s.size());
    std::string m = thrown([&] { CacheArena::open(name); });
    BOOST_TEST_MESSAGE(m);
    BOOST_TEST(m.find("not a usable cache arena") != std::string::npos);
    BOOST_TEST(m.find("bad magic") != std::string::npos);
    BOOST_TEST(m.find(name) != std::string::npos);
  }
  {  // Too small to hold the header.
    auto s = SharedSegment::create(name, 100);
    std::string m = thrown([&] { CacheArena::open(name); });
    BOOST_TEST(m.find("smaller than the arena header") != std::string::npos, m);
  }
  {  // A real arena whose header was tampered with: layout version, then ring size.
    auto a = CacheArena::create(name, kMiB);
    auto s = SharedSegment::open(name);
    uint32_t layout = 0;
    std::memcpy(&layout, s.data() + 8, 4);
    uint32_t tampered = 99;
    std::memcpy(s.data() + 8, &tampered, 4);
    std::string m = thrown([&] { CacheArena::open(name); });
    BOOST_TEST(m.find("layout version 99") != std::string::npos, m);
    std::memcpy(s.data() + 8, &layout, 4);
    BOOST_CHECK_NO_THROW(CacheArena::open(name));
    uint64_t ring = 3 * kMiB;  // geometry no longer matches, and past the segment's end
    std::memcpy(s.data() + 16, &ring, 8);
    m = thrown([&] { CacheArena::open(name); });
    BOOST_TEST(m.find("not a usable cache arena") != std::string::npos, m);
  }
  SharedSegment::unlink(name);
}

BOOST_AUTO_TEST_CASE(latency_histogram) {
  BOOST_TEST(CacheArena::latency_bucket_lo(0) == 0u);
  for (size_t i = 0; i < 16; ++i) BOOST_TEST(CacheArena::latency_bucket_lo(i) == i);
  for (size_t i = 1; i < ArenaCounters::kLatencyBuckets; ++i) {
    uint64_t lo = CacheArena::latency_bucket_lo(i), prev = CacheArena::latency_bucket_lo(i - 1);
    BOOST_REQUIRE(lo > prev);
    BOOST_REQUIRE(lo - prev <= std::max<uint64_t>(1, prev / 8));  // 8 per power of two
  }
  BOOST_TEST(CacheArena::latency_bucket_lo(ArenaCounters::kLatencyBuckets) == UINT64_MAX);
  auto lo_of = [](uint64_t v) {  // the lower bound of the bucket holding v
    size_t i = 0;
    while (i + 1 < ArenaCounters::kLatencyBuckets && CacheArena::latency_bucket_lo(i + 1) <= v) ++i;
    return CacheArena::latency_bucket_lo(i);
  };

  auto a = CacheArena::create_anonymous(kMiB);
  BOOST_TEST(a->latency_percentile(0.5) == 0u);  // nothing recorded
  for (uint64_t v = 1; v <= 100000; ++v) a->record_latency(v);
  BOOST_TEST(a->latency_percentile(0.5) == lo_of(50000));
  BOOST_TEST(a->latency_percentile(0.99) == lo_of(99000));
  BOOST_TEST(a->latency_percentile(1.0) == lo_of(100000));
  BOOST_TEST(a->latency_percentile(0.0) == 1u);
  BOOST_TEST(a->latency_percentile(0.5) <= 50000u);
  BOOST_TEST(a->latency_percentile(0.5) >= 50000u * 7 / 8);

  auto b = CacheArena::create_anonymous(kMiB);
  for (int i = 0; i < 900; ++i) b->record_latency(100);
  for (int i = 0; i < 100; ++i) b->record_latency(1'000'000);
  BOOST_TEST(b->latency_percentile(0.5) == 96u);  // 100 lies in [96, 104)
  BOOST_TEST(b->latency_percentile(0.90) == 96u);
  BOOST_TEST(b->latency_percentile(0.901) == lo_of(1'000'000));
  BOOST_TEST(b->latency_percentile(0.99) == lo_of(1'000'000));
  b->record_latency(uint64_t(1) << 62);  // beyond the last bucket: counted in it
  BOOST_TEST(b->latency_percentile(1.0) ==
             CacheArena::latency_bucket_lo(ArenaCounters::kLatencyBuckets - 1));
}

// ---- a peer's read of an entry (the cooperative cache: ArenaCopy + verify_copy) ----------------

namespace {
std::vector<uint8_t> copy_bytes_of(const CacheArena& a, const ArenaCopy& c) {
  const uint8_t* p = a.segment().data() + c.offset;
  return std::vector<uint8_t>(p, p + c.bytes);
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_located_entry_verifies_from_its_bytes_alone) {
  auto a = CacheArena::create_anonymous(1 << 20);
  Tag tag{1, 17, 99};
  auto c = a->store_located(1234, "k1", tag, "payload one");
  BOOST_TEST_REQUIRE(c.has_value());
  BOOST_TEST(c->offset % 64 == 0u);
  BOOST_TEST(c->bytes % 64 == 0u);
  auto v = CacheArena::verify_copy(copy_bytes_of(*a, *c), c->pos, 1234, "k1");
  BOOST_TEST_REQUIRE(std::holds_alternative<CachedEntry>(v));
  auto& e = std::get<CachedEntry>(v);
  BOOST_TEST(e.payload == "payload one");
  BOOST_TEST(e.key == "k1");
  BOOST_TEST(e.tag.home == 1u);
  BOOST_TEST(e.tag.slot == 17u);
  BOOST_TEST(e.tag.version == 99u);
  auto why = [&](std::vector<uint8_t> b, uint64_t pos, uint64_t h, std::string_view k) {
    auto r = CacheArena::verify_copy(b, pos, h, k);
    BOOST_TEST_REQUIRE(std::holds_alternative<MissReason>(r));
    return std::get<MissReason>(r);
  };
  auto bytes = copy_bytes_of(*a, *c);
  BOOST_TEST(why(bytes, c->pos + 64, 1234, "k1") == MissReason::GenerationChanged);
  BOOST_TEST(why(bytes, c->pos, 1235, "k1") == MissReason::KeyMismatch);
  BOOST_TEST(why(bytes, c->pos, 1234, "k2") == MissReason::KeyMismatch);  // same length, other key
  BOOST_TEST(why(bytes, c->pos, 1234, "k10") == MissReason::KeyMismatch);
  BOOST_TEST(why({bytes.begin(), bytes.begin() + 40}, c->pos, 1234, "k1") ==
             MissReason::LengthOutOfBounds);
  BOOST_TEST(why({bytes.begin(), bytes.end() - 64}, c->pos, 1234, "k1") ==
             MissReason::LengthOutOfBounds);
  auto flipped = bytes;
  flipped[80 + 2 + 3] ^= 1;  // a payload byte
  BOOST_TEST(why(flipped, c->pos, 1234, "k1") == MissReason::Checksum);

  // The ring wraps: the place now holds other entries; the old descriptor never verifies.
  for (int i = 0; i < 100; ++i) a->store(uint64_t(i) + 5000, "filler" + std::to_string(i), tag, std::string(20000, 'x'));
  auto r = CacheArena::verify_copy(copy_bytes_of(*a, *c), c->pos, 1234, "k1");
  BOOST_TEST(std::holds_alternative<MissReason>(r));
  BOOST_TEST(!a->fits_without_eviction(2, 100));  // a full ring evicts for every store
  auto fresh = CacheArena::create_anonymous(1 << 20);
  BOOST_TEST(fresh->fits_without_eviction(2, 100));
}

BOOST_AUTO_TEST_CASE(random_corruptions_of_a_copy_never_verify_to_other_bytes) {
  auto a = CacheArena::create_anonymous(1 << 20);
  std::mt19937_64 rng(7);
  std::string payload(3000, '\0');
  for (auto& ch : payload) ch = char(rng());
  auto c = a->store_located(42, "the-key", Tag{0, 1, 2}, payload);
  BOOST_TEST_REQUIRE(c.has_value());
  const auto good = copy_bytes_of(*a, *c);
  size_t hits = 0, refused = 0;
  for (int i = 0; i < 100000; ++i) {
    auto b = good;
    int flips = 1 + int(rng() % 4);
    for (int f = 0; f < flips; ++f) b[rng() % b.size()] ^= uint8_t(1 + rng() % 255);
    if (rng() % 8 == 0) b.resize(rng() % b.size());
    auto v = CacheArena::verify_copy(b, c->pos, 42, "the-key");
    if (auto* e = std::get_if<CachedEntry>(&v)) {
      ++hits;  // only when the flips landed outside what the entry vouches for (its padding)
      BOOST_TEST_REQUIRE(e->payload == payload);
    } else {
      ++refused;
    }
  }
  BOOST_TEST(refused > 90000u);
  // Garbage of any length: never a crash, never a hit.
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> b(rng() % 512);
    for (auto& x : b) x = uint8_t(rng());
    BOOST_TEST_REQUIRE(
        std::holds_alternative<MissReason>(CacheArena::verify_copy(b, rng() % 4096, 42, "the-key")));
  }
  BOOST_TEST_MESSAGE(hits << " corrupted copies verified (flips in the padding), " << refused
                          << " refused");
}

// Issue 29, path 6: the time an entry carries is the page's FIRST store (a copy passed between
// proxies keeps it, so its max age does not restart), never later than the store itself.
BOOST_AUTO_TEST_CASE(an_entry_keeps_its_first_store_time_and_never_a_future_one) {
  auto a = CacheArena::create_anonymous(1 << 20);
  auto now_us = [] {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return int64_t(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
  };
  const Tag tag{1, 17, 99};
  int64_t before = now_us();
  BOOST_TEST_REQUIRE(a->store(1, "fresh", tag, "p"));  // 0: stored for the first time, now
  int64_t t = a->lookup(1, "fresh")->stored_at_us;
  BOOST_TEST(t >= before);
  BOOST_TEST(t <= now_us());

  const int64_t first = before - 3600'000'000;  // rendered an hour ago at another proxy
  auto c = a->store_located(2, "copy", tag, "p", first);
  BOOST_TEST_REQUIRE(c.has_value());
  BOOST_TEST(a->lookup(2, "copy")->stored_at_us == first);
  // A peer reading this copy gets the same time (it is in the checksummed header).
  auto v = CacheArena::verify_copy(copy_bytes_of(*a, *c), c->pos, 2, "copy");
  BOOST_TEST_REQUIRE(std::holds_alternative<CachedEntry>(v));
  BOOST_TEST(std::get<CachedEntry>(v).stored_at_us == first);

  // A time ahead of this host's clock (the peer's clock is ahead, or the copy is forged): stored
  // as now, so the time of a copy only goes down from hop to hop.
  before = now_us();
  BOOST_TEST_REQUIRE(a->store(3, "future", tag, "p", before + 3600'000'000));
  t = a->lookup(3, "future")->stored_at_us;
  BOOST_TEST(t >= before);
  BOOST_TEST(t <= now_us());
}
