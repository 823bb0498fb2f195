// tests/agents/memd_pool_test.cc — memd's [pool] role: the configuration checks (in-process), and
// the real tierce-memd binary with [pool] over tcp and shm: allocate, write and read slabs
// one-sided, free (zeroed), an owner that stops renewing loses its slabs (a stale read sees
// zeros), malformed bodies get error replies and memd keeps serving, a restart is a new pool
// incarnation, and the --status / --metrics flags. Then the requester side (coherence::PoolOwner)
// against two real memds: placement, renewals past the lease, frees, a donor restarted or frozen.
#define BOOST_TEST_MODULE memd_pool
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <algorithm>

#include "agents/memd/config.h"
#include "coherence/pool_owner.h"
#include "coherence/slab_pool_wire.h"
#include "memd_test_util.h"

#ifndef TIERCE_MEMD_BINARY
#error "TIERCE_MEMD_BINARY must name the tierce-memd executable"
#endif

using namespace tierce;
using namespace memd_test;
using coherence::PoolStatus;
namespace poolwire = coherence::poolwire;

namespace tierce::coherence {
std::ostream& operator<<(std::ostream& o, PoolStatus s) {
  return o << to_string(s);
}
}  // namespace tierce::coherence
namespace tierce::fabric {
std::ostream& operator<<(std::ostream& o, Errc e) {
  return o << to_string(e);
}
}  // namespace tierce::fabric

namespace {

constexpr size_t kSlab = 64 * 1024;
constexpr int kSlabs = 16;
constexpr int kLeaseMs = 300;

// A pool owner as a proxy would be: a name, an incarnation, a connection to the donor's memd.
struct Owner {
  fabric::Connection& c;
  std::string name;
  uint64_t incarnation;

  poolwire::Reply call(const char* service, const std::vector<uint8_t>& body) {
    return poolwire::decode_reply(c.call(service, body));
  }
  poolwire::Reply alloc(uint32_t n) {
    return call(poolwire::kAllocService,
                poolwire::encode(poolwire::AllocRequest{name, incarnation, n}));
  }
  poolwire::Reply free(std::vector<uint32_t> slabs) {
    return call(poolwire::kFreeService,
                poolwire::encode(poolwire::FreeRequest{name, incarnation, std::move(slabs)}));
  }
  poolwire::Reply renew() {
    return call(poolwire::kRenewService,
                poolwire::encode(poolwire::RenewRequest{name, incarnation}));
  }
};

std::string text(const std::vector<uint8_t>& b) {
  return std::string(b.begin(), b.end());
}

// memd with [pool] (16 slabs of 64 KiB by default); the pool segment is unlinked after a SIGKILL.
struct Fixture : MemdFixture {
  Fixture() : MemdFixture(TIERCE_MEMD_BINARY, "pt") {}
  ~Fixture() override {
    memd.kill_now();
    fabric::SharedSegment::unlink(memd::pool_segment_name(node));  // after a SIGKILL
  }
  int slabs = kSlabs;
  std::string role_section() override { return pool_section(); }
  std::string pool_section() {
    return "[pool]\nbytes = " + std::to_string(slabs * kSlab) +
           "\nslab_bytes = " + std::to_string(kSlab) + "\nlease_ms = " + std::to_string(kLeaseMs) +
           "\nmax_slabs_per_owner = 8\n";
  }
};

std::vector<uint8_t> pattern(uint8_t seed, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(seed + i * 7);
  return v;
}

bool all_zero(const std::vector<uint8_t>& v) {
  return std::all_of(v.begin(), v.end(), [](uint8_t b) { return b == 0; });
}

memd::Config parse(const std::string& pool) {
  return memd::parse_config(
      "[memd]\nnode = \"n1\"\nlisten = [\"tcp://127.0.0.1:0\"]\nsecret_file = \"/s\"\n" + pool,
      "/etc/tierce/memd.toml");
}

std::string problems(const std::string& pool) {
  try {
    parse(pool);
  } catch (const memd::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(pool_config_defaults_and_refusals) {
  auto c = parse("[pool]\nbytes = 268_435_456\n");
  BOOST_TEST(c.pool.enabled);
  BOOST_TEST(c.pool.bytes == 256u << 20);
  BOOST_TEST(c.pool.slab_bytes == 1u << 20);
  BOOST_TEST(c.pool.lease.count() == 2000);
  BOOST_TEST(c.pool.max_slabs_per_owner == 0u);
  BOOST_TEST(!parse("").pool.enabled);
  BOOST_TEST(memd::pool_segment_name("n1") == "/tierce.n1.pool");

  auto has = [](const std::string& all, const std::string& what) {
    BOOST_TEST_INFO("problems:\n" << all);
    BOOST_TEST(all.find(what) != std::string::npos);
  };
  has(problems("[pool]\n"), "[pool] bytes is required");
  has(problems("[pool]\nbytes = \"256M\"\n"),
      "memd.toml:6:9: [pool] bytes: expected an integer, got a string");
  has(problems("[pool]\nbytes = 1000\n"), "[pool] bytes: 1000 is out of range");
  has(problems("[pool]\nbytes = 2_000_000_000_000\n"), "is out of range 65536..1099511627776");
  has(problems("[pool]\nbytes = 3_000_000\n"),
      "memd.toml:6:9: [pool] bytes: 3000000 is not a multiple of slab_bytes (1048576); write e.g. "
      "bytes = 2097152");
  has(problems("[pool]\nbytes = 1048576\nslab_bytes = 100000\n"),
      "memd.toml:7:14: [pool] slab_bytes: 100000 is not a power of two; write e.g. slab_bytes = "
      "131072");
  has(problems("[pool]\nbytes = 1048576\nslab_bytes = 4096\n"),
      "[pool] slab_bytes: 4096 is out of range");
  has(problems("[pool]\nbytes = 1048576\nlease_ms = 5\n"),
      "[pool] lease_ms: 5 is out of range 20..");
  has(problems("[pool]\nbytes = 1048576\nmax_slabs_per_owner = -1\n"),
      "[pool] max_slabs_per_owner");
  has(problems("[pool]\nbytes = 1048576\nslab = 65536\n"),
      "[pool] slab: unknown key; did you mean 'slab_bytes'?");
  try {
    memd::parse_config("pool = 3\n[memd]\nlisten = [\"tcp://127.0.0.1:0\"]\nsecret_file = \"/s\"\n",
                       "/etc/tierce/memd.toml");
    BOOST_FAIL("a non-table pool was accepted");
  } catch (const memd::ConfigError& e) {
    has(e.what(), "memd.toml:1:8: pool: expected a [pool] table, got an integer");
  }
  has(problems("[[region]]\nname = \"pool\"\nsegment = \"/x\"\n[pool]\nbytes = 1048576\n"),
      "a [[region]] is already named \"pool\"");
  has(problems(
          "[[region]]\nname = \"p\"\nsegment = \"/tierce.n1.pool\"\n[pool]\nbytes = 1048576\n"),
      "which the pool role creates itself");
}

BOOST_FIXTURE_TEST_SUITE(memd_pool, Fixture)

BOOST_AUTO_TEST_CASE(alloc_write_read_free_over_tcp_and_shm) {
  start();
  BOOST_TEST(log().find("MEMD0130 pool: 16 slabs of 65536 bytes") != std::string::npos);
  uint64_t inc = 100;
  for (const char* scheme : {"tcp", "shm"}) {
    BOOST_TEST_CONTEXT("over " << scheme) {
      auto c = connect(scheme);
      fabric::RemoteRegion region = c->lookup(poolwire::kRegion);
      BOOST_TEST(region.len == uint64_t(kSlabs * kSlab));
      Owner o{*c, std::string("proxy-") + scheme, ++inc};
      auto r = o.alloc(3);
      BOOST_TEST_INFO(r.message);
      BOOST_TEST_REQUIRE(r.status == PoolStatus::Ok);
      BOOST_TEST_REQUIRE(r.slabs.size() == 3u);
      BOOST_TEST(r.held == 3u);
      BOOST_TEST(r.slab_bytes == kSlab);
      BOOST_TEST(r.lease_ms == uint64_t(kLeaseMs));
      for (auto& d : r.slabs) {
        BOOST_TEST(d.length == kSlab);
        BOOST_TEST(d.offset == uint64_t(d.slab) * kSlab);
        auto want = pattern(uint8_t(d.slab), 8192);
        c->write(region, d.offset + kSlab - 8192, want.data(), want.size());  // the slab's end
        std::vector<uint8_t> got(8192);
        c->read(region, d.offset + kSlab - 8192, got.data(), got.size());
        BOOST_TEST(got == want);
      }
      // Quota (8 per owner) and capacity are enforced remotely too.
      BOOST_TEST(o.alloc(6).status == PoolStatus::OverQuota);
      // Someone else's free is refused and changes nothing.
      Owner thief{*c, std::string("thief-") + scheme, 5};
      BOOST_TEST(thief.alloc(1).status == PoolStatus::Ok);
      auto refused = thief.free({r.slabs[0].slab});
      BOOST_TEST(refused.status == PoolStatus::NotHeld);
      BOOST_TEST(refused.message.find("not held by owner thief-") != std::string::npos);
      std::vector<uint8_t> still(16);
      c->read(region, r.slabs[0].offset + kSlab - 8192, still.data(), still.size());
      BOOST_TEST(still[1] == pattern(uint8_t(r.slabs[0].slab), 2)[1]);

      std::string status = text(c->call("memd.status", {}));
      BOOST_TEST(status.find("pool_slabs 16\n") != std::string::npos);
      BOOST_TEST(status.find("pool_owner " + o.name + " active=1 slabs=3 bytes=196608 allocs=3") !=
                 std::string::npos);

      auto f = o.free({r.slabs[0].slab, r.slabs[1].slab, r.slabs[2].slab});
      BOOST_TEST(f.status == PoolStatus::Ok);
      BOOST_TEST(f.held == 0u);
      for (auto& d : r.slabs) {
        std::vector<uint8_t> got(kSlab);
        c->read(region, d.offset, got.data(), got.size());
        BOOST_TEST(all_zero(got));  // freed slabs read as zeros, never the old bytes
      }
      BOOST_TEST(thief.free({}).status == PoolStatus::BadRequest);
      auto tr = thief.renew();
      BOOST_TEST(tr.held == 1u);
    }
  }
  std::string metrics = text(connect("tcp")->call(poolwire::kMetricsService, {}));
  BOOST_TEST(metrics.find("# TYPE tierce_pool_slabs_allocated_total counter\n"
                          "tierce_pool_slabs_allocated_total{node=\"" +
                          node + "\"} 8\n") != std::string::npos);
  BOOST_TEST(metrics.find("tierce_pool_owner_slabs{node=\"" + node + "\",owner=\"thief-shm\"} 1") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(an_owner_that_stops_renewing_loses_its_slabs_and_stale_reads_see_zeros) {
  start();
  auto shm = connect("shm");
  auto tcp = connect("tcp");
  fabric::RemoteRegion rs = shm->lookup(poolwire::kRegion), rt = tcp->lookup(poolwire::kRegion);
  Owner dead{*shm, "proxy-dead", 7}, alive{*tcp, "proxy-alive", 8};
  auto d = dead.alloc(2);
  auto a = alive.alloc(1);
  BOOST_TEST_REQUIRE((d.status == PoolStatus::Ok && a.status == PoolStatus::Ok));
  auto secret_bytes = pattern(0xab, kSlab);
  for (auto& s : d.slabs) shm->write(rs, s.offset, secret_bytes.data(), kSlab);
  auto mine = pattern(0x11, 4096);
  tcp->write(rt, a.slabs[0].offset, mine.data(), mine.size());

  // `alive` renews every lease/4; `dead` says nothing. After the lease and a reclaim period:
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kLeaseMs * 2);
  while (std::chrono::steady_clock::now() < until) {
    BOOST_TEST_REQUIRE(alive.renew().status == PoolStatus::Ok);
    std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseMs / 4));
  }
  BOOST_TEST_INFO("memd log:\n" << log());
  BOOST_TEST_REQUIRE(eventually(
      [&] { return log().find("MEMD0131 pool: owner proxy-dead") != std::string::npos; }));
  for (auto& s : d.slabs)
    for (auto* c : {shm.get(), tcp.get()}) {
      const auto& region = c == shm.get() ? rs : rt;
      std::vector<uint8_t> got(kSlab);
      c->read(region, s.offset, got.data(), got.size());  // the dead owner's stale descriptor
      BOOST_TEST(all_zero(got));
    }
  std::vector<uint8_t> got(4096);
  tcp->read(rt, a.slabs[0].offset, got.data(), got.size());
  BOOST_TEST(got == mine);  // the renewing owner keeps its bytes

  auto late = dead.renew();
  BOOST_TEST(late.status == PoolStatus::LeaseLost);
  BOOST_TEST(late.message.find("drop every descriptor") != std::string::npos);
  std::string status = text(tcp->call(poolwire::kStatusService, {}));
  BOOST_TEST(status.find("leases_expired 1\n") != std::string::npos);
  BOOST_TEST(status.find("slabs_reclaimed 2\n") != std::string::npos);
  BOOST_TEST(
      status.find("owner proxy-dead active=0 slabs=0 bytes=0 allocs=2 frees=0 reclaimed=2") !=
      std::string::npos);
  // The reclaimed slabs are allocatable again (zeroed): 16 - 1 held.
  Owner next{*tcp, "proxy-next", 9};
  auto n = next.alloc(8);
  BOOST_TEST(n.status == PoolStatus::Ok);
  BOOST_TEST(next.alloc(7).status == PoolStatus::OverQuota);
}

BOOST_AUTO_TEST_CASE(malformed_bodies_get_error_replies_and_memd_keeps_serving) {
  start();
  auto c = connect("tcp");
  auto bad = [&](const char* service, std::vector<uint8_t> body, const std::string& why) {
    auto r = poolwire::decode_reply(c->call(service, body));
    BOOST_TEST_CONTEXT(service << " " << why) {
      BOOST_TEST(r.status == PoolStatus::BadRequest);
      BOOST_TEST(r.message.find(why) != std::string::npos, r.message);
    }
  };
  auto good = poolwire::encode(poolwire::AllocRequest{"p1", 3, 1});
  bad(poolwire::kAllocService, {}, "shorter than the 16-byte header");
  bad(poolwire::kAllocService, std::vector<uint8_t>(5000, 0xff), "version 255");
  auto v2 = good;
  v2[0] = 2;
  bad(poolwire::kAllocService, v2, "version 2 is not understood");
  auto longer = good;
  longer.push_back(0);
  bad(poolwire::kAllocService, longer, "expected 18");
  auto huge = good;
  huge[7] = 0x10;
  bad(poolwire::kAllocService, huge, "count 268435457 is out of range");
  // A free body sent to alloc has the wrong size for alloc.
  bad(poolwire::kAllocService, poolwire::encode(poolwire::FreeRequest{"p1", 3, {0}}),
      "expected 18");
  auto renew = poolwire::encode(poolwire::RenewRequest{"p1", 3});
  renew.pop_back();
  bad(poolwire::kRenewService, renew, "shorter than its owner name says");
  bad(poolwire::kFreeService, {1, 0, 2, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 'p', '1'},
      "count 0");
  // Well-formed, but slab indices out of range are refused by the pool.
  Owner o{*c, "p1", 3};
  BOOST_TEST_REQUIRE(o.alloc(1).status == PoolStatus::Ok);
  auto r = o.free({0xffffffffu});
  BOOST_TEST(r.status == PoolStatus::BadSlab);
  BOOST_TEST(r.message.find("beyond the pool (16 slabs)") != std::string::npos);
  BOOST_TEST(o.free({16}).status == PoolStatus::BadSlab);

  // Still serving, on this connection and new ones.
  BOOST_TEST(o.renew().held == 1u);
  auto c2 = connect("shm");
  Owner o2{*c2, "p2", 4};
  BOOST_TEST(o2.alloc(2).status == PoolStatus::Ok);
  memd.wait_exit(0ms);
  BOOST_TEST(memd.running());
  std::string status = text(c->call(poolwire::kStatusService, {}));
  BOOST_TEST(status.find("bad_requests 8\n") != std::string::npos, status);
  BOOST_TEST(log().find("MEMD0134") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_restarted_memd_is_a_new_pool_incarnation_and_old_descriptors_fail) {
  start();
  fabric::RemoteRegion old_region;
  uint64_t old_incarnation = 0;
  poolwire::Reply r;
  {
    auto c = connect("tcp");
    old_region = c->lookup(poolwire::kRegion);
    Owner o{*c, "p1", 3};
    r = o.alloc(1);
    BOOST_TEST_REQUIRE(r.status == PoolStatus::Ok);
    old_incarnation = r.pool_incarnation;
  }
  stop();
  // A clean stop unlinks the pool segment.
  BOOST_TEST(errc_of([&] { fabric::SharedSegment::open(memd::pool_segment_name(node)); }) !=
             fabric::Errc::Ok);
  start();
  auto c = connect("tcp");
  uint8_t b[8];
  BOOST_TEST(errc_of([&] { c->read(old_region, r.slabs[0].offset, b, sizeof b); }) !=
             fabric::Errc::Ok);
  Owner o{*c, "p1", 3};
  auto renewed = o.renew();  // the new pool does not know the owner: it must allocate again
  BOOST_TEST(renewed.status == PoolStatus::UnknownOwner);
  BOOST_TEST(renewed.pool_incarnation != old_incarnation);
}

BOOST_AUTO_TEST_CASE(cli_status_metrics_and_a_bad_pool_config) {
  start();
  std::string out;
  BOOST_TEST(run({"--status", "-c", config_path}, &out) == 0);
  BOOST_TEST(out.find("pool_slabs 16\n") != std::string::npos, out);
  BOOST_TEST(run({"--metrics", "-c", config_path}, &out) == 0);
  BOOST_TEST(out.find("# TYPE tierce_pool_free_slabs gauge\ntierce_pool_free_slabs{node=\"" + node +
                      "\"} 16\n") != std::string::npos,
             out);
  BOOST_TEST(run({"--check", "-c", config_path}, &out) == 0);
  BOOST_TEST(out.find("pool of 16 slabs of 65536 bytes") != std::string::npos, out);

  std::string bad_path = dir / "bad.toml";
  write_file(bad_path, config_text("[pool]\nbytes = 1000000\nslab_bytes = 65536\n"));
  BOOST_TEST(run({"--check", "-c", bad_path}, &out) == 2);
  BOOST_TEST(out.find("bad.toml:13:9: [pool] bytes: 1000000 is not a multiple of slab_bytes "
                      "(65536); write e.g. bytes = 983040") != std::string::npos,
             out);
  BOOST_TEST(run({"--foreground", "-c", bad_path}, &out) == 2);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- the requester side: coherence::PoolOwner against two real donors -------------------------

namespace {

std::string tcp_uri(Fixture& f) {
  return f.uri("tcp");
}

struct TwoDonors {
  Fixture a, b;  // a: this node's own memd (local), b: a remote one
  TwoDonors(int slabs_a, int slabs_b) {
    a.slabs = slabs_a;
    b.slabs = slabs_b;
    b.secret_path = a.secret_path;  // one cluster, one secret
    b.secret = a.secret;
    a.start();
    b.start();
  }
  std::unique_ptr<coherence::PoolOwner> owner(coherence::Placement p, std::string name = "proxy1") {
    coherence::PoolOwnerOptions o;
    o.owner = std::move(name);
    o.client.secret = a.secret;
    o.client.op_timeout = 1000ms;
    o.placement = p;
    o.seed = 7;
    o.renew_period = 50ms;
    // Both fixtures wrote their own secret file: b is told to use a's (same cluster secret).
    return std::make_unique<coherence::PoolOwner>(
        std::vector<coherence::PoolDonor>{{"a", tcp_uri(a), true, {}}, {"b", tcp_uri(b), false, {}}}, o);
  }
};

size_t count_at(const std::vector<coherence::OwnedSlab>& v, size_t donor) {
  return size_t(std::count_if(v.begin(), v.end(), [&](auto& s) { return s.donor == donor; }));
}

// The slabs of a successful alloc; a failed one fails the test with its message.
std::vector<coherence::OwnedSlab> slabs_of(tierce::base::Result<std::vector<coherence::OwnedSlab>> r) {
  BOOST_TEST_REQUIRE(r.ok(), r.message());
  return std::move(r).value();
}

}  // namespace

BOOST_AUTO_TEST_CASE(pool_owner_places_renews_past_the_lease_and_frees) {
  TwoDonors d(4, 12);
  auto lf = d.owner(coherence::Placement::LocalFirst);
  auto s1 = slabs_of(lf->alloc(3));
  BOOST_TEST_REQUIRE(s1.size() == 3u);
  BOOST_TEST(count_at(s1, 0) == 3u);  // local first
  auto s2 = slabs_of(lf->alloc(2));  // the local pool has 1 left: the remote one
  BOOST_TEST_REQUIRE(s2.size() == 2u);
  BOOST_TEST(count_at(s2, 1) == 2u);
  auto none = lf->alloc(20);
  BOOST_TEST_REQUIRE(!none.ok());
  BOOST_TEST((none.status().code() == tierce::base::Code::ResourceExhausted));
  BOOST_TEST(none.message().find("no donor has 20 free slab(s)") != std::string::npos, none.message());
  auto zero = lf->alloc(0);
  BOOST_TEST((zero.status().code() == tierce::base::Code::InvalidArgument));

  // Renewals keep every slab past several leases; the bytes written stay.
  auto c = d.a.connect("tcp");
  auto region = c->lookup(poolwire::kRegion);
  auto p = pattern(9, 4096);
  c->write(region, s1[0].slab.offset, p.data(), p.size());
  lf->start();
  std::this_thread::sleep_for(std::chrono::milliseconds(3 * kLeaseMs));
  BOOST_TEST(lf->held().size() == 5u);
  BOOST_TEST(lf->counters().slabs_lost == 0u);
  BOOST_TEST(lf->counters().renewals >= 6u);
  BOOST_TEST(lf->writable(0));
  BOOST_TEST(lf->writable(1));
  std::vector<uint8_t> back(p.size());
  c->read(region, s1[0].slab.offset, back.data(), back.size());
  BOOST_TEST((back == p), "a renewed slab lost its bytes");

  // Most free: the remote donor (10 free against 1).
  auto mf = d.owner(coherence::Placement::MostFree, "proxy2");
  BOOST_TEST(mf->renew_now() == 2u);
  auto s3 = slabs_of(mf->alloc(1));
  BOOST_TEST_REQUIRE(s3.size() == 1u);
  BOOST_TEST(count_at(s3, 1) == 1u);

  // Frees go back to the donors (zeroed there) and show in the free counts.
  lf->free(s1);
  lf->free(s2);
  BOOST_TEST(lf->held().empty());
  BOOST_TEST(lf->counters().slabs_freed == 5u);
  lf->renew_now();
  auto ds = lf->donors();
  BOOST_TEST(ds[0].free_slabs == 4u);
  BOOST_TEST(ds[1].free_slabs == 11u);  // proxy2 holds one
  c->read(region, s1[0].slab.offset, back.data(), back.size());
  BOOST_TEST(all_zero(back));
}

BOOST_AUTO_TEST_CASE(pool_owner_loses_only_the_slabs_of_a_restarted_or_silent_donor) {
  TwoDonors d(8, 8);
  // Declared before the owner: its renewal thread calls on_lost into them until the owner is
  // destroyed (it joins the thread), so they must outlive it, even when a check fails early.
  std::vector<std::pair<size_t, std::string>> lost;
  std::mutex mu;
  auto lost_count = [&] {
    std::lock_guard lk(mu);
    return lost.size();
  };
  auto o = d.owner(coherence::Placement::LocalFirst);
  o->on_lost([&](const std::vector<coherence::OwnedSlab>& v, const std::string& why) {
    std::lock_guard lk(mu);
    for (auto& s : v) lost.emplace_back(s.donor, why);
  });
  o->start();  // renewals every 50 ms (lease 300 ms)
  auto a2 = o->alloc(2);
  BOOST_TEST_REQUIRE(a2.ok(), a2.message());
  BOOST_TEST_REQUIRE(a2->size() == 2u);  // a
  auto b7 = o->alloc(7);
  BOOST_TEST_REQUIRE(b7.ok(), b7.message());
  BOOST_TEST_REQUIRE(b7->size() == 7u);  // b (a has 6 left)
  BOOST_TEST(count_at(o->held(), 1) == 7u);

  // b restarts: its pool is a new incarnation; only b's slabs are lost, with the reason.
  d.b.tcp_listen = tcp_uri(d.b);  // same address after the restart, as a real donor's
  d.b.memd.kill_now();
  fabric::SharedSegment::unlink(memd::pool_segment_name(d.b.node));
  d.b.start();
  BOOST_TEST(eventually([&] { return o->held().size() == 2u; }, 5s));
  // The owner drops the slabs under its lock and reports them after releasing it (logging and
  // the callback run outside): held() can show the drop a moment before on_lost has run.
  BOOST_TEST(eventually([&] { return lost_count() >= 7u; }, 5s));
  {
    std::lock_guard lk(mu);
    BOOST_TEST_REQUIRE(lost.size() == 7u);
    BOOST_TEST(lost[0].first == 1u);
    // Why: b's new incarnation, when it was back within lease - lease/4; if its restart took
    // longer (an ASan build on a loaded machine: seen in CI), the owner dropped them for its
    // silence first. Either way only b's slabs, all of them, with a reason that says which.
    BOOST_TEST((lost[0].second.find("new incarnation") != std::string::npos ||
                lost[0].second.find("no renewal answered") != std::string::npos),
               lost[0].second);
  }
  BOOST_TEST(o->held().size() == 2u);
  BOOST_TEST(count_at(o->held(), 0) == 2u);
  BOOST_TEST(o->writable(0));
  BOOST_TEST(!o->writable(1));

  // a's memd frozen past the lease: the owner stops writing at lease - lease/4, and drops a's
  // slabs once a renewal fails after that, speaking to a as a new incarnation from then on; when
  // a is back, that first request makes it reclaim the old slabs (no leak) and a new alloc works.
  d.a.memd.signal(SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  BOOST_TEST(eventually([&] { return !o->writable(0); }, 2s));
  BOOST_TEST((std::chrono::steady_clock::now() - t0 <= std::chrono::milliseconds(kLeaseMs)));
  BOOST_TEST(eventually([&] { return o->held().empty(); }, 5s));  // a renewal failed after it
  std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseMs));
  d.a.memd.signal(SIGCONT);
  BOOST_TEST(eventually([&] { return lost_count() >= 9u; }, 5s));
  BOOST_TEST(lost_count() == 9u);
  // The renewal thread's first request as the new incarnation made a take the old slabs back.
  BOOST_TEST(eventually(
      [&] {
        auto ds = o->donors();
        return ds[0].answered && ds[0].free_slabs == 8u;
      },
      5s));
  auto again = o->alloc(8);
  BOOST_TEST_REQUIRE(again.ok(), again.message());
  BOOST_TEST_REQUIRE(again->size() == 8u);
  BOOST_TEST(count_at(*again, 0) == 8u);
  BOOST_TEST(o->counters().slabs_lost == 9u);
}
