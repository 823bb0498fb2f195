// tests/agents/coop_cache_test.cc — the cooperative cache (coherence/coop_cache.h) between two
// proxies, each a real tierce-memd with [coop] (its part of the directory) exporting the proxy's
// cache arena as region "arena", over tcp and shm:
//  - a page stored and published at one proxy is fetched by the other (1 directory read + 1 copy
//    read), judged by decide_hit_coop (one version read), kept by BCC, not by CCWR when it would
//    evict; a stale copy is invalidated at the directory;
//  - evict-while-reading: one proxy rewrites its small arena as fast as it can while the other
//    fetches; every copy served is byte-for-byte the page of its version (never wrong bytes) and
//    the forced read failures are counted;
//  - a proxy's memd killed or frozen: fetches are misses within the deadline, never a hang;
//  - forged directory locations and corrupted entries are misses, never bytes;
//  - MTACC moves what the arena evicts into an app node's donated memory (memd [pool]) and keeps
//    one copy per page; HYBCC pools large pages and keeps small ones local; a donor killed is a
//    miss for its copies, and its memory is written no more.
#define BOOST_TEST_MODULE coop_cache
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <time.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <variant>

#include "agents/memd/config.h"
#include "coherence/arena.h"
#include "coherence/client.h"
#include "coherence/coop_cache.h"
#include "coherence/coop_directory.h"
#include "coherence/coop_pool_store.h"
#include "coherence/hit.h"
#include "coherence/pool_owner.h"
#include "coherence/key.h"
#include "memd_test_util.h"

#ifndef TIERCE_MEMD_BINARY
#error "TIERCE_MEMD_BINARY must name the tierce-memd executable"
#endif

using namespace tierce;
using namespace memd_test;
using coherence::CacheArena;
using coherence::CoopCache;
using coherence::CoopScheme;
using coherence::MissReason;
using coherence::Tag;
using coherence::Verdict;

namespace {

// One proxy: its arena (created by this process, as the httpd parent would) and its memd with
// [coop] exporting the arena.
struct Proxy : MemdFixture {
  std::string arena_segment;
  std::unique_ptr<CacheArena> arena;

  Proxy(const std::string& prefix, size_t arena_bytes)
      : MemdFixture(TIERCE_MEMD_BINARY, prefix), arena_segment(unique_segment("arena")) {
    arena = CacheArena::create(arena_segment, arena_bytes);
    start();
  }
  ~Proxy() override {
    memd.kill_now();
    fabric::SharedSegment::unlink(memd::coop_segment_name(node));
    arena.reset();
    fabric::SharedSegment::unlink(arena_segment);
  }
  std::string role_section() override {
    return "[coop]\nbuckets = 1024\n\n[[region]]\nname = \"arena\"\nsegment = \"" + arena_segment +
           "\"\n";
  }
};

// An app node donating memory: memd with [pool] (8 slabs of 1 MiB).
struct Donor : MemdFixture {
  Donor() : MemdFixture(TIERCE_MEMD_BINARY, "cd-") {}
  ~Donor() override {
    memd.kill_now();
    fabric::SharedSegment::unlink(memd::pool_segment_name(node));
  }
  std::string role_section() override {
    return "[pool]\nbytes = 8388608\nslab_bytes = 1048576\nlease_ms = 1000\n";
  }
};

// A version reader that answers what the test says (the app home's version table is tested
// elsewhere; here the verdict logic around the fetched copy is).
struct Versions final : coherence::VersionReader {
  std::optional<uint64_t> current = 7;
  int reads = 0;
  std::optional<uint64_t> read_version(const std::string&, uint64_t) override {
    ++reads;
    return current;
  }
};

// Both proxies' memd read the same secret file: p2 is started with p1's secret copied in.
void share_secret(MemdFixture& from, MemdFixture& to) {
  write_file(to.secret_path, read_file(from.secret_path), 0600);
  to.secret = fabric::Secret::from_file(to.secret_path);
  to.memd.kill_now();
  to.start();
}

std::string page(const std::string& key, uint64_t version, size_t len) {
  std::string s;
  s.reserve(len);
  uint64_t x = coherence::hash64(key) ^ (version * 0x9e3779b97f4a7c15ull);
  while (s.size() < len) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s.push_back(char('a' + x % 26));
  }
  return s;
}

// Stores `key` at `proxy` and publishes it, as mod_rcache's output filter does.
void store_and_publish(Proxy& p, CoopCache& coop, const std::string& key, const Tag& tag,
                       const std::string& payload) {
  uint64_t h = coherence::hash64(key);
  auto where = p.arena->store_located(h, key, tag, payload);
  BOOST_TEST_REQUIRE(where.has_value());
  BOOST_TEST(coop.publish(h, key, tag, *where, payload.size()));
}

coherence::HitQuery query(const std::string& key) {
  return coherence::HitQuery{key, coherence::hash64(key), 0, 0};
}

// The tag a page of `key` gets from its home: the key's home and slot (coherence::tag_binding),
// at `version`. The hit decision serves nothing else.
Tag tag_of(const coherence::Topology& t, const std::string& key, uint64_t version) {
  uint64_t h = coherence::hash64(key);
  return Tag{coherence::node_index(t, t.home_of(h).name), coherence::slot_of(h, t.version_slots),
             version};
}

// Two proxies (p2 runs with p1's secret), a topology naming them and one app node (the pages'
// home), and each proxy's cluster client + CoopCache.
struct Pair {
  Proxy p1{"cp1-", 1 << 20};
  Proxy p2{"cp2-", 1 << 20};
  Donor a1;  // the app node: its memd donates pool memory (MTACC, HYBCC)
  TempDir dir;
  coherence::Topology topo;
  std::unique_ptr<coherence::ClusterClient> c1, c2;
  std::unique_ptr<coherence::ClusterCoopPeers> peers1, peers2;
  std::unique_ptr<CoopCache> coop1, coop2;

  // Declared store first: the owner (whose renewal thread calls on_lost into the store) is
  // destroyed first.
  std::unique_ptr<coherence::PoolStore> store1;
  std::unique_ptr<coherence::PoolOwner> owner1;

  Pair(const std::string& transport, CoopScheme scheme,
       std::chrono::milliseconds op_timeout = 500ms, size_t threshold = 16384,
       size_t pool_slabs = 4) {
    a1.start();
    share_secret(p1, p2);
    share_secret(p1, a1);
    std::string path = dir / "cluster.toml";
    auto node = [&](const std::string& name, const std::string& role, MemdFixture* p) {
      std::string memd = "[\"" + p->uri("tcp") + "\", \"shm://" + p->sock_path + "\"]";
      return "[[node]]\nname = \"" + name + "\"\nrole = \"" + role + "\"\nmemd = " + memd +
             "\nsegment_prefix = \"/tierce.ct." + name + "\"\n\n";
    };
    write_file(path, "[cluster]\nname = \"coop\"\nsecret_file = \"" + p1.secret_path +
                         "\"\ntransport = \"" + transport + "\"\nversion_slots = 1024\n\n" +
                         node("app1", "app", &a1) + node("p1", "proxy", &p1) +
                         node("p2", "proxy", &p2));
    topo = coherence::Topology::load(path);
    coherence::ClientTuning t;
    t.op_timeout = op_timeout;
    t.connect_timeout = op_timeout;
    t.retry_after = 20ms;
    c1 = std::make_unique<coherence::ClusterClient>(topo, p1.secret, t, nullptr);
    c2 = std::make_unique<coherence::ClusterClient>(topo, p1.secret, t, nullptr);
    peers1 = std::make_unique<coherence::ClusterCoopPeers>(*c1);
    peers2 = std::make_unique<coherence::ClusterCoopPeers>(*c2);
    if (coherence::uses_pool(scheme)) {
      // p1 holds slabs of app1's donated memory, as an httpd child does (RCacheCoopPool).
      coherence::PoolOwnerOptions po;
      po.owner = "p1.test";
      po.client.secret = p1.secret;
      po.client.op_timeout = op_timeout;
      po.client.connect_timeout = op_timeout;
      owner1 = std::make_unique<coherence::PoolOwner>(
          std::vector<coherence::PoolDonor>{{"app1", topo.uri_of(topo.node("app1")), false, {}}}, po);
      store1 = std::make_unique<coherence::PoolStore>(
          *owner1, *c1, topo, std::vector<uint16_t>{coherence::node_index(topo, "app1")},
          pool_slabs);
      coherence::PoolStore* st = store1.get();
      owner1->on_lost([st](const std::vector<coherence::OwnedSlab>& l, const std::string&) {
        st->lost(l);
      });
      owner1->start();
    }
    coop1 = std::make_unique<CoopCache>(scheme, topo, "p1", *p1.arena, *peers1, store1.get(),
                                        threshold);
    coop2 = std::make_unique<CoopCache>(scheme, topo, "p2", *p2.arena, *peers2);
  }

  std::string key_homed_at(const std::string& home, int from = 0) {
    for (int i = from;; ++i) {
      std::string k = "http://shop.test/item.php?id=" + std::to_string(i);
      if (coherence::directory_home_of(topo, coherence::hash64(k)).name == home) return k;
    }
  }
  uint64_t copies(const std::string& key) {
    auto home = coherence::directory_home_of(topo, coherence::hash64(key)).name;
    auto r = c1->read_coop_entry(home, coherence::hash64(key), coherence::coop_key_check(key));
    BOOST_TEST_REQUIRE(r.has_value());
    if (auto* e = std::get_if<coherence::DirEntry>(&*r)) return e->count;
    return 0;
  }
};

uint64_t ld(const std::atomic<uint64_t>& a) { return a.load(); }

// SIGSTOP takes effect asynchronously: wait until /proc says every thread of `pid` is stopped.
bool stopped(pid_t pid) {
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator(
           "/proc/" + std::to_string(pid) + "/task", ec)) {
    std::string stat = read_file(t.path() / "stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'T')
      return false;
  }
  return !ec;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_page_stored_at_one_proxy_is_served_at_the_other) {
  for (std::string transport : {"tcp", "shm"}) {
    BOOST_TEST_CONTEXT("transport " << transport) {
      Pair c(transport, CoopScheme::BCC);
      // One key homed at each proxy: the directory read goes to a peer, or to ourselves.
      for (std::string home : {"p1", "p2"}) {
        BOOST_TEST_CONTEXT("directory home " << home) {
          std::string key = c.key_homed_at(home);
          Tag tag = tag_of(c.topo, key, 7);
          std::string body = page(key, 7, 20000);
          store_and_publish(c.p1, *c.coop1, key, tag, body);
          BOOST_TEST(c.copies(key) == 1u);

          // p2 misses locally; the cooperative cache finds p1's copy.
          Versions v;
          auto r = coherence::decide_hit_coop(*c.p2.arena, c.coop2.get(), c.topo, query(key), {},
                                              v);
          BOOST_TEST(r.verdict == Verdict::Hit);
          BOOST_TEST(r.peer == "p1");
          BOOST_TEST(v.reads == 1);  // the one version read, as for a local entry
          BOOST_TEST_REQUIRE(r.entry.has_value());
          BOOST_TEST(r.entry->payload == body);
          BOOST_TEST(r.entry->tag.version == 7u);
          BOOST_TEST_REQUIRE(r.fetched.size() == 1u);

          // BCC keeps it: a local hit next time, and the directory lists both copies.
          BOOST_TEST(c.coop2->keep_fetched(r.fetched[0]));
          BOOST_TEST(c.copies(key) == 2u);
          auto again = coherence::decide_hit_coop(*c.p2.arena, c.coop2.get(), c.topo, query(key),
                                                  {}, v);
          BOOST_TEST(again.verdict == Verdict::Hit);
          BOOST_TEST(again.peer == "");  // local
        }
      }
      auto& n = c.p2.arena->counters().coop;
      BOOST_TEST(ld(n.lookups) == 2u);
      BOOST_TEST(ld(n.dir_hits) == 2u);
      BOOST_TEST(ld(n.copy_hits) == 2u);
      BOOST_TEST(ld(n.kept_local) == 2u);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_stale_copy_is_invalidated_at_its_directory_home_and_never_served) {
  Pair c("tcp", CoopScheme::BCC);
  std::string key = c.key_homed_at("p2");
  store_and_publish(c.p1, *c.coop1, key, tag_of(c.topo, key, 7), page(key, 7, 9000));
  Versions v;
  v.current = 8;  // the page changed at its app home
  auto r = coherence::decide_hit_coop(*c.p2.arena, c.coop2.get(), c.topo, query(key), {}, v);
  BOOST_TEST(r.verdict == Verdict::Stale);
  BOOST_TEST(r.peer == "p1");
  BOOST_TEST(r.fetched.empty());  // nothing to keep
  // The entry is dropped at the home (a one-way message: wait for it).
  BOOST_TEST(eventually([&] { return c.copies(key) == 0u; }, 2000ms));
  BOOST_TEST(ld(c.p2.arena->counters().coop.invalidations) == 1u);
  BOOST_TEST(!c.p2.arena->lookup(coherence::hash64(key), key).has_value());

  // Unverifiable (the app home does not answer): forwarded, the directory entry kept.
  store_and_publish(c.p1, *c.coop1, key, tag_of(c.topo, key, 8), page(key, 8, 9000));
  v.current.reset();
  r = coherence::decide_hit_coop(*c.p2.arena, c.coop2.get(), c.topo, query(key), {}, v);
  BOOST_TEST(r.verdict == Verdict::Unverifiable);
  BOOST_TEST(c.copies(key) == 1u);
  // A newer render published elsewhere supersedes the older copy.
  store_and_publish(c.p2, *c.coop2, key, tag_of(c.topo, key, 9), page(key, 9, 9000));
  BOOST_TEST(c.copies(key) == 1u);
}

namespace {
int64_t realtime_us() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}
}  // namespace

// Issue 29, path 6: keep_fetched used to store a fetched copy with a new stored_at, so a page
// passed from proxy to proxy never reached RCacheMaxAge. The copy keeps its first store time.
BOOST_AUTO_TEST_CASE(a_copy_passed_between_proxies_keeps_its_first_store_time) {
  Pair c("tcp", CoopScheme::BCC);
  std::string key = c.key_homed_at("p2");
  const uint64_t h = coherence::hash64(key);
  store_and_publish(c.p1, *c.coop1, key, tag_of(c.topo, key, 7), page(key, 7, 9000));
  const int64_t first = c.p1.arena->lookup(h, key)->stored_at_us;
  std::this_thread::sleep_for(1100ms);  // the page is now more than 1 s old

  Versions v;
  v.current = 7;
  // p1 -> p2: fetched, served, kept by BCC with the original time.
  auto r = coherence::decide_hit_coop(*c.p2.arena, c.coop2.get(), c.topo, query(key), {}, v);
  BOOST_TEST_REQUIRE(r.verdict == Verdict::Hit);
  BOOST_TEST(r.entry->stored_at_us == first);
  BOOST_TEST_REQUIRE(c.coop2->keep_fetched(r.fetched[0]));
  BOOST_TEST(c.p2.arena->lookup(h, key)->stored_at_us == first);
  // p2 -> p1: p1's own copy is gone (evicted, say); it fetches p2's and keeps it: still the
  // first store's time, however many hops.
  c.p1.arena->erase(h, key);
  r = coherence::decide_hit_coop(*c.p1.arena, c.coop1.get(), c.topo, query(key), {}, v);
  BOOST_TEST_REQUIRE(r.verdict == Verdict::Hit);
  BOOST_TEST(r.peer == "p2");
  BOOST_TEST_REQUIRE(c.coop1->keep_fetched(r.fetched[0]));
  BOOST_TEST(c.p1.arena->lookup(h, key)->stored_at_us == first);

  // With a max age of 1 s both proxies' copies are expired now (> 1.1 s after the render),
  // without a version read, although each was stored locally a moment ago.
  const int reads = v.reads;
  for (auto* p : {&c.p1, &c.p2}) {
    auto e = coherence::decide_hit(*p->arena, c.topo, coherence::HitQuery{key, h, realtime_us(), 1},
                                   {}, v);
    BOOST_TEST(e.verdict == Verdict::Stale, p->node);
    BOOST_TEST(e.stale_cause == coherence::StaleCause::Expired, p->node);
  }
  BOOST_TEST(v.reads == reads);
}

// Issue 29, path 7: a copy whose tag is not its key's home and slot (a forged peer copy, or one
// stored by a build that did not check) proves nothing: never served, dropped at the directory.
BOOST_AUTO_TEST_CASE(a_peer_copy_tagged_for_another_slot_is_never_served) {
  Pair c("tcp", CoopScheme::BCC);
  std::string key = c.key_homed_at("p2");
  Tag forged = tag_of(c.topo, key, 7);
  forged.slot = (forged.slot + 1) % c.topo.version_slots;  // a slot no update of the key bumps
  store_and_publish(c.p1, *c.coop1, key, forged, page(key, 7, 9000));
  BOOST_TEST(c.copies(key) == 1u);
  Versions v;
  v.current = 7;  // the forged slot's version matches: only the binding can refuse it
  auto r = coherence::decide_hit_coop(*c.p2.arena, c.coop2.get(), c.topo, query(key), {}, v);
  BOOST_TEST(r.verdict == Verdict::Stale);
  BOOST_TEST(r.stale_cause == coherence::StaleCause::TagMismatch);
  BOOST_TEST(r.peer == "p1");
  BOOST_TEST(v.reads == 0);
  BOOST_TEST(r.fetched.empty());  // nothing to keep
  BOOST_TEST(eventually([&] { return c.copies(key) == 0u; }, 2000ms));
  BOOST_TEST(!c.p2.arena->lookup(coherence::hash64(key), key).has_value());
}

BOOST_AUTO_TEST_CASE(ccwr_keeps_a_fetched_copy_only_in_free_room) {
  Pair c("shm", CoopScheme::CCWR);
  std::string key = c.key_homed_at("p1");
  store_and_publish(c.p1, *c.coop1, key, tag_of(c.topo, key, 3), page(key, 3, 30000));
  Versions v;
  v.current = 3;
  // p2's arena is empty: room without evicting, so the copy is kept.
  auto r = coherence::decide_hit_coop(*c.p2.arena, c.coop2.get(), c.topo, query(key), {}, v);
  BOOST_TEST_REQUIRE(r.verdict == Verdict::Hit);
  BOOST_TEST(c.coop2->keep_fetched(r.fetched[0]));
  // Fill p2's ring: from now on every store evicts, and CCWR keeps no duplicate.
  for (int i = 0; c.p2.arena->fits_without_eviction(40, 30000); ++i)
    c.p2.arena->store(uint64_t(i) + 1, "filler" + std::to_string(i), Tag{0, 1, 1},
                      std::string(30000, 'f'));
  std::string key2 = c.key_homed_at("p1", 1000);
  store_and_publish(c.p1, *c.coop1, key2, tag_of(c.topo, key2, 3), page(key2, 3, 30000));
  r = coherence::decide_hit_coop(*c.p2.arena, c.coop2.get(), c.topo, query(key2), {}, v);
  BOOST_TEST_REQUIRE(r.verdict == Verdict::Hit);
  BOOST_TEST(!c.coop2->keep_fetched(r.fetched[0]));
  BOOST_TEST(c.copies(key2) == 1u);  // one copy in the cluster: no redundancy
}

BOOST_AUTO_TEST_CASE(evict_while_reading_never_serves_wrong_bytes) {
  for (std::string transport : {"tcp", "shm"}) {
    BOOST_TEST_CONTEXT("transport " << transport) {
      Pair c(transport, CoopScheme::CCWR);
      constexpr int kKeys = 40;
      std::vector<std::string> keys;
      for (int i = 0; i < kKeys; ++i) keys.push_back("http://shop.test/page?id=" + std::to_string(i));
      std::atomic<bool> stop{false};
      std::atomic<uint64_t> stores{0};
      // The writer: p1 rewrites keys with growing versions into its 1 MiB ring (it wraps every
      // ~40 pages), publishing each, as fast as it can.
      std::thread writer([&] {
        std::mt19937_64 rng(1);
        uint64_t version = 1;
        while (!stop) {
          const std::string& k = keys[rng() % kKeys];
          ++version;
          auto payload = page(k, version, 8192 + rng() % 24576);
          uint64_t h = coherence::hash64(k);
          Tag tag{0, h % 1024, version};
          if (auto w = c.p1.arena->store_located(h, k, tag, payload))
            c.coop1->publish(h, k, tag, *w, payload.size());
          ++stores;
        }
      });
      uint64_t hits = 0, wrong = 0, fetches = 0;
      auto deadline = std::chrono::steady_clock::now() + 40s;
      auto& n = c.p2.arena->counters().coop;
      auto forced = [&] {
        return ld(n.copy_misses[size_t(MissReason::GenerationChanged)]) +
               ld(n.copy_misses[size_t(MissReason::Checksum)]) +
               ld(n.copy_misses[size_t(MissReason::KeyMismatch)]) +
               ld(n.copy_misses[size_t(MissReason::LengthOutOfBounds)]);
      };
      std::mt19937_64 rng(2);
      while (std::chrono::steady_clock::now() < deadline && (forced() < 20 || hits < 50)) {
        const std::string& k = keys[rng() % kKeys];
        ++fetches;
        auto f = c.coop2->fetch(coherence::hash64(k), k);
        if (!f) continue;
        ++hits;
        // Pages are a pure function of (key, version): every byte served can be checked.
        if (f->entry.payload != page(k, f->entry.tag.version, f->entry.payload.size())) ++wrong;
      }
      stop = true;
      writer.join();
      BOOST_TEST_MESSAGE(transport << ": " << fetches << " fetches, " << hits << " verified, "
                                   << stores << " stores at the holder; not used: generation "
                                   << ld(n.copy_misses[size_t(MissReason::GenerationChanged)])
                                   << ", checksum " << ld(n.copy_misses[size_t(MissReason::Checksum)])
                                   << ", key " << ld(n.copy_misses[size_t(MissReason::KeyMismatch)])
                                   << ", length "
                                   << ld(n.copy_misses[size_t(MissReason::LengthOutOfBounds)])
                                   << "; withdrawals " << ld(n.withdrawals));
      BOOST_TEST(wrong == 0u);
      BOOST_TEST(hits >= 50u);
      BOOST_TEST(forced() >= 20u);  // the race was really run
      BOOST_TEST(ld(n.withdrawals) >= forced());  // each failed copy repaired its hint
    }
  }
}

BOOST_AUTO_TEST_CASE(a_killed_or_frozen_proxy_is_a_miss_within_the_deadline) {
  Pair c("tcp", CoopScheme::BCC, 300ms);
  std::string at_p1 = c.key_homed_at("p1");      // directory at p1
  std::string at_p2 = c.key_homed_at("p2");      // directory at p2, copy at p1
  store_and_publish(c.p1, *c.coop1, at_p1, Tag{0, 1, 1}, page(at_p1, 1, 10000));
  store_and_publish(c.p1, *c.coop1, at_p2, Tag{0, 2, 1}, page(at_p2, 1, 10000));
  BOOST_TEST(c.coop2->fetch(coherence::hash64(at_p1), at_p1).has_value());
  BOOST_TEST(c.coop2->fetch(coherence::hash64(at_p2), at_p2).has_value());
  auto& n = c.p2.arena->counters().coop;

  auto timed_fetch = [&](const std::string& k) {
    auto t0 = std::chrono::steady_clock::now();
    auto f = c.coop2->fetch(coherence::hash64(k), k);
    auto took = std::chrono::steady_clock::now() - t0;
    BOOST_TEST(!f.has_value());
    // A dead or frozen peer costs at most a connect or an op timeout per read (2 reads).
    BOOST_TEST(took < 2s, "fetch took " << std::chrono::duration<double>(took).count() << " s");
  };
  // Frozen: p1's memd stops answering (SIGSTOP).
  c.p1.memd.signal(SIGSTOP);
  BOOST_TEST_REQUIRE(eventually([&] { return stopped(c.p1.memd.pid()); }, 2000ms));
  timed_fetch(at_p1);  // the directory cannot be read
  std::this_thread::sleep_for(30ms);  // past retry_after
  timed_fetch(at_p2);  // the directory (p2) names a copy at p1 that cannot be read
  BOOST_TEST(ld(n.dir_unreachable) >= 1u);
  BOOST_TEST(ld(n.copy_unreachable) >= 1u);
  c.p1.memd.signal(SIGCONT);
  c.p1.tcp_listen = c.p1.uri("tcp");  // the restart below keeps the address the topology names
  // Killed: the same, and the copies stay unreachable (not wrong) until p1 is back.
  c.p1.memd.kill_now();
  std::this_thread::sleep_for(30ms);
  timed_fetch(at_p1);
  std::this_thread::sleep_for(30ms);
  timed_fetch(at_p2);
  // p1's memd restarts (new directory, empty): keys homed there are ordinary misses; the copy
  // at p1 is readable again through the directory at p2.
  c.p1.start();
  c.c2 = std::make_unique<coherence::ClusterClient>(c.topo, c.p1.secret,
                                                    coherence::ClientTuning{}, nullptr);
  c.peers2 = std::make_unique<coherence::ClusterCoopPeers>(*c.c2);
  c.coop2 = std::make_unique<CoopCache>(CoopScheme::BCC, c.topo, "p2", *c.p2.arena, *c.peers2);
  BOOST_TEST(eventually([&] { return c.coop2->fetch(coherence::hash64(at_p2), at_p2).has_value(); },
                        5000ms));
}

BOOST_AUTO_TEST_CASE(forged_locations_and_corrupted_entries_are_misses) {
  Pair c("shm", CoopScheme::BCC);
  std::string key = c.key_homed_at("p2");
  uint64_t h = coherence::hash64(key);
  uint64_t check = coherence::coop_key_check(key);
  Tag tag{0, 5, 9};
  std::string body = page(key, 9, 5000);
  auto where = c.p1.arena->store_located(h, key, tag, body);
  BOOST_TEST_REQUIRE(where.has_value());
  auto& n = c.p2.arena->counters().coop;
  auto publish = [&](uint64_t offset, uint64_t generation, uint64_t size,
                     uint64_t length = 0) {
    coherence::dirwire::Publish p;
    p.key_hash = h;
    p.key_check = check;
    p.length = length ? length : body.size();
    p.tag = tag;
    p.where.node = coherence::node_index(c.topo, "p1");
    p.where.kind = coherence::CopyRegion::Arena;
    p.where.offset = offset;
    p.where.generation = generation;
    p.where.slot_size = uint32_t(size);
    auto reply = c.c1->coop_update("p2", p);
    BOOST_TEST_REQUIRE(reply.has_value());
  };
  auto fetch_misses = [&] { return !c.coop2->fetch(h, key).has_value(); };

  // A descriptor past the region's end: the read is refused, not made.
  publish(uint64_t(1) << 40, where->pos, where->bytes);
  BOOST_TEST(fetch_misses());
  BOOST_TEST(ld(n.copy_unreachable) == 1u);
  c.c1->coop_update("p2", coherence::dirwire::Invalidate{h, check});
  // Another generation at the right place: the ring moved on (as far as the reader knows).
  publish(where->offset, where->pos + 64, where->bytes);
  BOOST_TEST(fetch_misses());
  BOOST_TEST(ld(n.copy_misses[size_t(MissReason::GenerationChanged)]) == 1u);
  BOOST_TEST(eventually([&] { return c.copies(key) == 0u; }, 2000ms));  // withdrawn by the reader
  // The middle of the entry.
  publish(where->offset + 64, where->pos, where->bytes - 64);
  BOOST_TEST(fetch_misses());
  BOOST_TEST(ld(n.copy_misses[size_t(MissReason::GenerationChanged)]) == 2u);
  BOOST_TEST(eventually([&] { return c.copies(key) == 0u; }, 2000ms));
  // Too short a read for the entry (a location that claims a small object).
  c.c1->coop_update("p2", coherence::dirwire::Invalidate{h, check});
  publish(where->offset, where->pos, 128, 100);
  BOOST_TEST(fetch_misses());
  BOOST_TEST(ld(n.copy_misses[size_t(MissReason::LengthOutOfBounds)]) == 1u);
  BOOST_TEST(eventually([&] { return c.copies(key) == 0u; }, 2000ms));
  // The right place, but a payload byte flipped in p1's memory (corruption): checksum.
  c.c1->coop_update("p2", coherence::dirwire::Invalidate{h, check});
  publish(where->offset, where->pos, where->bytes);
  uint8_t* entry = const_cast<uint8_t*>(c.p1.arena->segment().data()) + where->offset;
  entry[where->bytes - 100] ^= 0x20;
  BOOST_TEST(fetch_misses());
  BOOST_TEST(ld(n.copy_misses[size_t(MissReason::Checksum)]) == 1u);
  BOOST_TEST(eventually([&] { return c.copies(key) == 0u; }, 2000ms));
  entry[where->bytes - 100] ^= 0x20;
  // Restored: the same location verifies again.
  publish(where->offset, where->pos, where->bytes);
  auto f = c.coop2->fetch(h, key);
  BOOST_TEST_REQUIRE(f.has_value());
  BOOST_TEST(f->entry.payload == body);
  // A copy of the key at another version than the directory's tag: never used.
  coherence::dirwire::Publish newer;
  newer.key_hash = h;
  newer.key_check = check;
  newer.length = body.size();
  newer.tag = Tag{0, 5, 10};
  newer.where = coherence::Location{coherence::node_index(c.topo, "p1"), coherence::CopyRegion::Arena,
                                    where->offset, where->pos, uint32_t(where->bytes)};
  c.c1->coop_update("p2", newer);
  BOOST_TEST(fetch_misses());
  // No byte of any of these was ever returned; the counters say why each was refused.
  BOOST_TEST(ld(n.copy_hits) == 1u);
}

namespace {
// Copies of `key` in the cluster, from its directory entry (kind, node).
std::vector<coherence::Location> where_is(Pair& c, const std::string& key) {
  auto home = coherence::directory_home_of(c.topo, coherence::hash64(key)).name;
  auto r = c.c1->read_coop_entry(home, coherence::hash64(key), coherence::coop_key_check(key));
  BOOST_TEST_REQUIRE(r.has_value());
  std::vector<coherence::Location> out;
  if (auto* e = std::get_if<coherence::DirEntry>(&*r))
    out.assign(e->copies().begin(), e->copies().end());
  return out;
}
}  // namespace

BOOST_AUTO_TEST_CASE(mtacc_moves_what_the_arena_evicts_to_pool_memory_one_copy_per_page) {
  for (std::string transport : {"tcp", "shm"}) {
    BOOST_TEST_CONTEXT("transport " << transport) {
      Pair c(transport, CoopScheme::MTACC);
      // 200 pages of 30 KB: 6 MB through p1's 1 MiB arena and its 4 slabs of 1 MiB of pool
      // memory; the oldest pages are evicted for good when the pool's oldest slab is reused.
      std::vector<std::string> keys;
      for (int i = 0; i < 200; ++i) {
        keys.push_back("http://shop.test/big?id=" + std::to_string(i));
        BOOST_TEST_REQUIRE(c.coop1->store(coherence::hash64(keys.back()), keys.back(),
                                          tag_of(c.topo, keys.back(), 5),
                                          page(keys.back(), 5, 30000)));
      }
      auto& n = c.p1.arena->counters().coop;
      BOOST_TEST(ld(n.demoted) > 150u);
      BOOST_TEST(ld(n.stored_pool) == 0u);  // MTACC pools only what the arena evicts
      size_t pooled = 0, local = 0, gone = 0;
      Versions v;
      v.current = 5;
      for (size_t i = 0; i < keys.size(); ++i) {
        const std::string& k = keys[i];
        auto copies = where_is(c, k);
        BOOST_TEST(copies.size() <= 1u, k << ": one copy per page, no redundancy");
        auto r = coherence::decide_hit_coop(*c.p2.arena, c.coop2.get(), c.topo, query(k), {}, v);
        if (r.verdict != Verdict::Hit) {
          // Evicted for good: its slab was reused (the directory's hint then fails verification
          // and is withdrawn by the reader). Only the oldest pages can be.
          BOOST_TEST(r.verdict == Verdict::Miss, k);
          BOOST_TEST(i < 100u, k << " is among the newest pages and should still be cached");
          BOOST_TEST(eventually([&] { return where_is(c, k).empty(); }, 2000ms), k);
          ++gone;
          continue;
        }
        BOOST_TEST_REQUIRE(copies.size() == 1u);
        (copies[0].kind == coherence::CopyRegion::Pool ? pooled : local)++;
        BOOST_TEST(r.entry->payload == page(k, 5, 30000));
        BOOST_TEST(r.peer == (copies[0].kind == coherence::CopyRegion::Pool ? "app1" : "p1"));
      }
      BOOST_TEST_MESSAGE(transport << ": " << local << " in p1's arena, " << pooled
                                   << " in app1's pool, " << gone << " evicted");
      BOOST_TEST(pooled >= 100u);
      BOOST_TEST(local >= 20u);
      BOOST_TEST(gone >= 1u);
      BOOST_TEST(c.store1->stats().slabs_held == 4u);
      BOOST_TEST(c.store1->stats().slabs_reused >= 1u);
    }
  }
}

BOOST_AUTO_TEST_CASE(hybcc_pools_large_pages_and_keeps_small_ones_local) {
  Pair c("tcp", CoopScheme::HYBCC, 500ms, 10000);
  std::string small = "http://shop.test/small", large = "http://shop.test/large";
  BOOST_TEST_REQUIRE(c.coop1->store(coherence::hash64(small), small, tag_of(c.topo, small, 1),
                                    page(small, 1, 4000)));
  BOOST_TEST_REQUIRE(c.coop1->store(coherence::hash64(large), large, tag_of(c.topo, large, 1),
                                    page(large, 1, 20000)));
  auto ws = where_is(c, small), wl = where_is(c, large);
  BOOST_TEST_REQUIRE(ws.size() == 1u);
  BOOST_TEST_REQUIRE(wl.size() == 1u);
  BOOST_TEST((ws[0].kind == coherence::CopyRegion::Arena));
  BOOST_TEST((wl[0].kind == coherence::CopyRegion::Pool));
  BOOST_TEST(!c.p1.arena->lookup(coherence::hash64(large), large).has_value());
  // At p2: the small page is fetched and kept (BCC), the large one fetched and not duplicated.
  Versions v;
  v.current = 1;
  for (const auto& [k, kept] : {std::pair{small, true}, std::pair{large, false}}) {
    auto r = coherence::decide_hit_coop(*c.p2.arena, c.coop2.get(), c.topo, query(k), {}, v);
    BOOST_TEST_REQUIRE(r.verdict == Verdict::Hit);
    BOOST_TEST(c.coop2->keep_fetched(r.fetched[0]) == kept);
  }
  BOOST_TEST(where_is(c, small).size() == 2u);
  BOOST_TEST(where_is(c, large).size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_killed_donor_is_a_miss_for_its_copies_and_is_written_no_more) {
  Pair c("tcp", CoopScheme::HYBCC, 300ms, 10000);
  std::string large = "http://shop.test/large";
  BOOST_TEST_REQUIRE(c.coop1->store(coherence::hash64(large), large, Tag{0, 2, 1}, page(large, 1, 20000)));
  BOOST_TEST(c.coop2->fetch(coherence::hash64(large), large).has_value());
  c.a1.tcp_listen = c.a1.uri("tcp");
  c.a1.memd.kill_now();
  auto t0 = std::chrono::steady_clock::now();
  BOOST_TEST(!c.coop2->fetch(coherence::hash64(large), large).has_value());
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < 2s));
  // The donor restarts with a new pool: p1's owner learns its slabs are lost, stops writing into
  // them, and the next large page goes to new slabs (or stays local while there are none).
  c.a1.start();
  BOOST_TEST(eventually([&] { return c.store1->stats().slabs_lost >= 1u; }, 5000ms));
  std::string large2 = "http://shop.test/large2";
  BOOST_TEST(eventually(
      [&] {
        return c.coop1->store(coherence::hash64(large2), large2, Tag{0, 3, 1},
                              page(large2, 1, 20000)) &&
               c.coop2->fetch(coherence::hash64(large2), large2).has_value();
      },
      5000ms));
  // The old location (zeroed by the new pool, or never re-given) never verifies.
  auto f = c.coop2->fetch(coherence::hash64(large), large);
  BOOST_TEST(!f.has_value());
}
