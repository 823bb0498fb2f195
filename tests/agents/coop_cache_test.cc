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
//  - forged directory locations and corrupted entries are misses, never bytes.
#define BOOST_TEST_MODULE coop_cache
#include <boost/test/unit_test.hpp>

#include <signal.h>

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
#include "coherence/hit.h"
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
    return "[coop]\nbuckets = 64\n\n[[region]]\nname = \"arena\"\nsegment = \"" + arena_segment +
           "\"\n";
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
void share_secret(Proxy& from, Proxy& to) {
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

// Two proxies (p2 runs with p1's secret), a topology naming them and one app node (the pages'
// home), and each proxy's cluster client + CoopCache.
struct Pair {
  Proxy p1{"cp1-", 1 << 20};
  Proxy p2{"cp2-", 1 << 20};
  TempDir dir;
  coherence::Topology topo;
  std::unique_ptr<coherence::ClusterClient> c1, c2;
  std::unique_ptr<coherence::ClusterCoopPeers> peers1, peers2;
  std::unique_ptr<CoopCache> coop1, coop2;

  Pair(const std::string& transport, CoopScheme scheme,
       std::chrono::milliseconds op_timeout = 500ms) {
    share_secret(p1, p2);
    std::string path = dir / "cluster.toml";
    auto node = [&](const std::string& name, const std::string& role, Proxy* p) {
      std::string memd = p ? "[\"" + p->uri("tcp") + "\", \"shm://" + p->sock_path + "\"]"
                           : "[\"tcp://127.0.0.1:1\", \"shm://" + (dir / "no-app.sock") + "\"]";
      return "[[node]]\nname = \"" + name + "\"\nrole = \"" + role + "\"\nmemd = " + memd +
             "\nsegment_prefix = \"/tierce.ct." + name + "\"\n\n";
    };
    write_file(path, "[cluster]\nname = \"coop\"\nsecret_file = \"" + p1.secret_path +
                         "\"\ntransport = \"" + transport + "\"\nversion_slots = 1024\n\n" +
                         node("app1", "app", nullptr) + node("p1", "proxy", &p1) +
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
    coop1 = std::make_unique<CoopCache>(scheme, topo, "p1", *p1.arena, *peers1);
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
          Tag tag{0, 42, 7};
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
  store_and_publish(c.p1, *c.coop1, key, Tag{0, 42, 7}, page(key, 7, 9000));
  Versions v;
  v.current = 8;  // the page changed at its app home
  auto r = coherence::decide_hit_coop(*c.p2.arena, c.coop2.get(), c.topo, query(key), {}, v);
  BOOST_TEST(r.verdict == Verdict::Stale);
  BOOST_TEST(r.peer == "p1");
  BOOST_TEST(r.fetched.empty());  // nothing to keep
  BOOST_TEST(c.copies(key) == 0u);  // the entry was dropped at the home
  BOOST_TEST(ld(c.p2.arena->counters().coop.invalidations) == 1u);
  BOOST_TEST(!c.p2.arena->lookup(coherence::hash64(key), key).has_value());

  // Unverifiable (the app home does not answer): forwarded, the directory entry kept.
  store_and_publish(c.p1, *c.coop1, key, Tag{0, 42, 8}, page(key, 8, 9000));
  v.current.reset();
  r = coherence::decide_hit_coop(*c.p2.arena, c.coop2.get(), c.topo, query(key), {}, v);
  BOOST_TEST(r.verdict == Verdict::Unverifiable);
  BOOST_TEST(c.copies(key) == 1u);
  // A newer render published elsewhere supersedes the older copy.
  store_and_publish(c.p2, *c.coop2, key, Tag{0, 42, 9}, page(key, 9, 9000));
  BOOST_TEST(c.copies(key) == 1u);
}

BOOST_AUTO_TEST_CASE(ccwr_keeps_a_fetched_copy_only_in_free_room) {
  Pair c("shm", CoopScheme::CCWR);
  std::string key = c.key_homed_at("p1");
  store_and_publish(c.p1, *c.coop1, key, Tag{0, 1, 3}, page(key, 3, 30000));
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
  store_and_publish(c.p1, *c.coop1, key2, Tag{0, 2, 3}, page(key2, 3, 30000));
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
  BOOST_TEST(c.copies(key) == 0u);  // withdrawn by the reader
  // The middle of the entry.
  publish(where->offset + 64, where->pos, where->bytes - 64);
  BOOST_TEST(fetch_misses());
  BOOST_TEST(ld(n.copy_misses[size_t(MissReason::GenerationChanged)]) == 2u);
  // Too short a read for the entry (a location that claims a small object).
  c.c1->coop_update("p2", coherence::dirwire::Invalidate{h, check});
  publish(where->offset, where->pos, 128, 100);
  BOOST_TEST(fetch_misses());
  BOOST_TEST(ld(n.copy_misses[size_t(MissReason::LengthOutOfBounds)]) == 1u);
  // The right place, but a payload byte flipped in p1's memory (corruption): checksum.
  c.c1->coop_update("p2", coherence::dirwire::Invalidate{h, check});
  publish(where->offset, where->pos, where->bytes);
  uint8_t* entry = const_cast<uint8_t*>(c.p1.arena->segment().data()) + where->offset;
  entry[where->bytes - 100] ^= 0x20;
  BOOST_TEST(fetch_misses());
  BOOST_TEST(ld(n.copy_misses[size_t(MissReason::Checksum)]) == 1u);
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
