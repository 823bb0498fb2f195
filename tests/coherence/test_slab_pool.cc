// tests/coherence/test_slab_pool.cc — coherence::SlabPool (alloc/free/refusals, leases, zeroing,
// incarnations, accounting), the pool wire format's strict decoders, and the placement policies.
#define BOOST_TEST_MODULE slab_pool
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "coherence/slab_pool.h"
#include "coherence/slab_pool_wire.h"

using namespace tierce::coherence;

namespace tierce::coherence {
std::ostream& operator<<(std::ostream& o, PoolStatus s) {
  return o << to_string(s);
}
std::ostream& operator<<(std::ostream& o, Placement p) {
  return o << to_string(p);
}
std::ostream& operator<<(std::ostream& o, Reclaimed::Why w) {
  return o << (w == Reclaimed::Why::LeaseExpired ? "lease-expired" : "new-incarnation");
}
}  // namespace tierce::coherence

namespace {

constexpr size_t kSlab = 64 * 1024;

struct Area {
  explicit Area(size_t slabs, SlabPoolOptions o = {})
      : bytes(slabs * kSlab, 0), pool(bytes.data(), bytes.size(), with_slab(o)) {}
  static SlabPoolOptions with_slab(SlabPoolOptions o) {
    o.slab_bytes = kSlab;
    if (o.lease_ms == 2000) o.lease_ms = 100;
    return o;
  }
  uint8_t* slab(uint32_t i) { return bytes.data() + size_t(i) * kSlab; }
  bool all_zero(uint32_t i) {
    return std::all_of(slab(i), slab(i) + kSlab, [](uint8_t b) { return b == 0; });
  }
  std::vector<uint8_t> bytes;
  SlabPool pool;
};

// "o17": built by appending (GCC 12 warns falsely, -Wrestrict, on "o" + std::to_string(i)).
std::string numbered(char prefix, size_t i) {
  std::string s(1, prefix);
  s += std::to_string(i);
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(construction_refuses_bad_slab_sizes_and_empty_areas) {
  std::vector<uint8_t> mem(1 << 20);
  auto make = [&](size_t slab, size_t len, uint64_t lease = 100) {
    SlabPoolOptions o;
    o.slab_bytes = slab;
    o.lease_ms = lease;
    SlabPool p(mem.data(), len, o);
    return p.slab_count();
  };
  BOOST_TEST(make(64 * 1024, 1 << 20) == 16u);
  BOOST_TEST(make(1 << 20, 1 << 20) == 1u);
  BOOST_CHECK_THROW(make(32 * 1024, 1 << 20), std::invalid_argument);      // < 64 KiB
  BOOST_CHECK_THROW(make(96 * 1024, 1 << 20), std::invalid_argument);      // not a power of two
  BOOST_CHECK_THROW(make(1 << 20, (1 << 20) - 1), std::invalid_argument);  // holds no slab
  BOOST_CHECK_THROW(make(64 * 1024, 1 << 20, 0), std::invalid_argument);   // no lease
  // A tail shorter than a slab is not used.
  BOOST_TEST(make(64 * 1024, (1 << 20) + 1000) == 16u);
}

BOOST_AUTO_TEST_CASE(alloc_is_all_or_nothing_and_descriptors_address_the_slab) {
  Area a(8);
  auto r = a.pool.alloc("proxy1", 7, 3, 0);
  BOOST_TEST_REQUIRE(r.ok());
  BOOST_TEST(r.slabs == std::vector<uint32_t>({0, 1, 2}));
  BOOST_TEST(r.held == 3u);
  BOOST_TEST(a.pool.free_slabs() == 5u);
  auto d = a.pool.descriptor(2);
  BOOST_TEST(d.offset == 2 * kSlab);
  BOOST_TEST(d.length == kSlab);
  BOOST_TEST(a.pool.holder(1) == "proxy1");

  auto no = a.pool.alloc("proxy2", 9, 6, 0);
  BOOST_TEST(no.status == PoolStatus::NotEnoughFree);
  BOOST_TEST(no.message.find("only 5 of 8") != std::string::npos);
  BOOST_TEST(no.slabs.empty());
  BOOST_TEST(a.pool.free_slabs() == 5u);  // nothing taken

  BOOST_TEST(a.pool.alloc("proxy2", 9, 5, 0).ok());
  BOOST_TEST(a.pool.free_slabs() == 0u);
  BOOST_TEST(a.pool.alloc("proxy1", 7, 1, 0).status == PoolStatus::NotEnoughFree);
}

BOOST_AUTO_TEST_CASE(bad_requests_are_refused) {
  Area a(4);
  BOOST_TEST(a.pool.alloc("proxy1", 7, 0, 0).status == PoolStatus::BadRequest);
  BOOST_TEST(a.pool.alloc("proxy1", 7, SlabPoolLimits::kMaxSlabsPerCall + 1, 0).status ==
             PoolStatus::BadRequest);
  BOOST_TEST(a.pool.alloc("", 7, 1, 0).status == PoolStatus::BadRequest);
  BOOST_TEST(a.pool.alloc("has space", 7, 1, 0).status == PoolStatus::BadRequest);
  BOOST_TEST(a.pool.alloc(std::string(65, 'x'), 7, 1, 0).status == PoolStatus::BadRequest);
  BOOST_TEST(a.pool.alloc("proxy1", 0, 1, 0).status == PoolStatus::BadRequest);
  BOOST_TEST(a.pool.free_slabs() == 4u);
  BOOST_TEST(a.pool.snapshot(0).counters.alloc_refusals == 6u);
  BOOST_TEST(a.pool.snapshot(0).owners.empty());
}

BOOST_AUTO_TEST_CASE(quota_per_owner) {
  SlabPoolOptions o;
  o.max_slabs_per_owner = 3;
  Area a(8, o);
  BOOST_TEST(a.pool.alloc("proxy1", 7, 2, 0).ok());
  auto r = a.pool.alloc("proxy1", 7, 2, 0);
  BOOST_TEST(r.status == PoolStatus::OverQuota);
  BOOST_TEST(r.message.find("max_slabs_per_owner (3)") != std::string::npos);
  BOOST_TEST(r.held == 2u);
  BOOST_TEST(a.pool.alloc("proxy1", 7, 1, 0).ok());
  BOOST_TEST(a.pool.alloc("proxy2", 8, 3, 0).ok());  // the quota is per owner
}

BOOST_AUTO_TEST_CASE(free_zeroes_the_slabs_and_makes_them_allocatable_again) {
  Area a(4);
  auto r = a.pool.alloc("proxy1", 7, 2, 0);
  BOOST_TEST_REQUIRE(r.ok());
  std::memset(a.slab(r.slabs[0]), 0xab, kSlab);
  std::memset(a.slab(r.slabs[1]), 0xcd, kSlab);
  std::vector<uint32_t> both = r.slabs;
  auto f = a.pool.free("proxy1", 7, both, 1);
  BOOST_TEST_REQUIRE(f.ok());
  BOOST_TEST(f.held == 0u);
  BOOST_TEST(a.all_zero(r.slabs[0]));  // zeroed before free() returns
  BOOST_TEST(a.all_zero(r.slabs[1]));
  BOOST_TEST(a.pool.free_slabs() == 4u);
  auto s = a.pool.snapshot(1);
  BOOST_TEST(s.counters.slabs_freed == 2u);
  BOOST_TEST(s.counters.bytes_zeroed == 2 * kSlab);
  BOOST_TEST(s.zeroing_slabs == 0u);
  BOOST_TEST(a.pool.alloc("proxy2", 8, 4, 1).ok());
}

BOOST_AUTO_TEST_CASE(foreign_or_bad_free_is_refused_and_changes_nothing) {
  Area a(6);
  auto p1 = a.pool.alloc("proxy1", 7, 2, 0);  // slabs 0, 1
  auto p2 = a.pool.alloc("proxy2", 8, 2, 0);  // slabs 2, 3
  BOOST_TEST_REQUIRE((p1.ok() && p2.ok()));
  std::memset(a.slab(2), 0x77, kSlab);
  auto before = a.pool.snapshot(0);

  // One foreign slab in the list: nothing is freed, not even proxy1's own slab 0.
  std::vector<uint32_t> mixed{0, 2};
  auto r = a.pool.free("proxy1", 7, mixed, 0);
  BOOST_TEST(r.status == PoolStatus::NotHeld);
  BOOST_TEST(r.message.find("slab 2 is not held by owner proxy1") != std::string::npos);
  BOOST_TEST(a.pool.holder(0) == "proxy1");
  BOOST_TEST(a.pool.holder(2) == "proxy2");
  BOOST_TEST(a.slab(2)[100] == 0x77);  // proxy2's bytes untouched

  std::vector<uint32_t> free_one{5};  // a free slab is not held either
  BOOST_TEST(a.pool.free("proxy1", 7, free_one, 0).status == PoolStatus::NotHeld);
  std::vector<uint32_t> beyond{0, 6};
  BOOST_TEST(a.pool.free("proxy1", 7, beyond, 0).status == PoolStatus::BadSlab);
  std::vector<uint32_t> twice{1, 1};
  BOOST_TEST(a.pool.free("proxy1", 7, twice, 0).status == PoolStatus::BadRequest);
  BOOST_TEST(a.pool.free("proxy1", 7, {}, 0).status == PoolStatus::BadRequest);
  std::vector<uint32_t> own{0};
  BOOST_TEST(a.pool.free("nobody", 3, own, 0).status == PoolStatus::UnknownOwner);

  auto after = a.pool.snapshot(0);
  BOOST_TEST(after.free_slabs == before.free_slabs);
  BOOST_TEST(after.counters.slabs_freed == 0u);
  BOOST_TEST(after.counters.free_refusals == 6u);
  for (auto& u : after.owners) BOOST_TEST(u.slabs == 2u);
}

BOOST_AUTO_TEST_CASE(lease_expiry_reclaims_and_zeroes_and_the_old_incarnation_is_refused) {
  Area a(4);  // lease 100 ms
  auto r = a.pool.alloc("proxy1", 7, 2, 1000);
  auto keep = a.pool.alloc("proxy2", 8, 1, 1000);
  BOOST_TEST_REQUIRE((r.ok() && keep.ok()));
  std::memset(a.slab(0), 0x11, kSlab);
  std::memset(a.slab(2), 0x22, kSlab);

  BOOST_TEST(a.pool.renew("proxy2", 8, 1090).ok());
  BOOST_TEST(a.pool.reclaim_expired(1099).empty());  // not yet
  auto rec = a.pool.reclaim_expired(1100);
  BOOST_TEST_REQUIRE(rec.size() == 1u);
  BOOST_TEST(rec[0].owner == "proxy1");
  BOOST_TEST(rec[0].incarnation == 7u);
  BOOST_TEST(rec[0].why == Reclaimed::Why::LeaseExpired);
  BOOST_TEST(rec[0].slabs == std::vector<uint32_t>({0, 1}));
  BOOST_TEST(a.all_zero(0));
  BOOST_TEST(a.slab(2)[5] == 0x22);  // the renewing owner keeps its bytes
  BOOST_TEST(a.pool.free_slabs() == 3u);

  // The incarnation that lost its slabs learns it at its next request, whatever it is.
  BOOST_TEST(a.pool.renew("proxy1", 7, 1200).status == PoolStatus::LeaseLost);
  BOOST_TEST(a.pool.alloc("proxy1", 7, 1, 1200).status == PoolStatus::LeaseLost);
  std::vector<uint32_t> old{0};
  BOOST_TEST(a.pool.free("proxy1", 7, old, 1200).status == PoolStatus::LeaseLost);
  // A new incarnation starts over.
  BOOST_TEST(a.pool.alloc("proxy1", 70, 1, 1200).ok());

  auto s = a.pool.snapshot(1200);
  BOOST_TEST(s.counters.leases_expired == 1u);
  BOOST_TEST(s.counters.slabs_reclaimed == 2u);
  for (auto& u : s.owners)
    if (u.owner == "proxy1") {
      BOOST_TEST(u.reclaimed == 2u);
      BOOST_TEST(u.allocs == 3u);
      BOOST_TEST(u.slabs == 1u);
      BOOST_TEST(u.incarnation == 70u);
      BOOST_TEST(u.lease_ms_left == 100u);
    }
}

BOOST_AUTO_TEST_CASE(a_new_incarnation_first_drops_the_old_ones_slabs) {
  Area a(4);
  BOOST_TEST_REQUIRE(a.pool.alloc("proxy1", 7, 3, 0).ok());
  std::memset(a.slab(1), 0x99, kSlab);
  // The restarted owner asks for 3 slabs: only 1 is free unless the old incarnation's go back.
  auto r = a.pool.alloc("proxy1", 8, 3, 10);
  BOOST_TEST_REQUIRE(r.ok());
  BOOST_TEST_REQUIRE(r.replaced.has_value());
  BOOST_TEST(r.replaced->incarnation == 7u);
  BOOST_TEST(r.replaced->slabs.size() == 3u);
  BOOST_TEST(r.replaced->why == Reclaimed::Why::NewIncarnation);
  BOOST_TEST(r.held == 3u);
  // Slab 1 was the old incarnation's: handed out again only after zeroing.
  BOOST_TEST(a.all_zero(1));
  BOOST_TEST(a.pool.renew("proxy1", 7, 20).status == PoolStatus::LeaseLost);
  BOOST_TEST(a.pool.renew("proxy1", 8, 20).ok());
  // A renew by yet another incarnation drops this one too, and holds nothing itself.
  auto n = a.pool.renew("proxy1", 9, 30);
  BOOST_TEST(n.status == PoolStatus::UnknownOwner);
  BOOST_TEST_REQUIRE(n.replaced.has_value());
  BOOST_TEST(n.replaced->incarnation == 8u);
  BOOST_TEST(a.pool.free_slabs() == 4u);
  BOOST_TEST(a.pool.snapshot(30).counters.incarnations_replaced == 2u);
}

BOOST_AUTO_TEST_CASE(renew_keeps_the_lease_and_unknown_owners_are_told) {
  Area a(2);
  BOOST_TEST(a.pool.renew("ghost", 1, 0).status == PoolStatus::UnknownOwner);
  BOOST_TEST_REQUIRE(a.pool.alloc("proxy1", 7, 1, 0).ok());
  for (uint64_t t = 50; t <= 1000; t += 50) {
    BOOST_TEST(a.pool.renew("proxy1", 7, t).ok());
    BOOST_TEST(a.pool.reclaim_expired(t + 99).empty());
  }
  BOOST_TEST(a.pool.renew("proxy1", 7, 1000).held == 1u);
  BOOST_TEST(a.pool.reclaim_expired(1100).size() == 1u);
  auto s = a.pool.snapshot(1100);
  BOOST_TEST(s.counters.renewals == 21u);
  BOOST_TEST(s.counters.renew_refusals == 1u);
}

BOOST_AUTO_TEST_CASE(forgotten_owner_names_are_bounded) {
  SlabPoolOptions o;
  o.lease_ms = 1;
  Area a(2, o);
  for (size_t i = 0; i < SlabPoolLimits::kMaxRetiredOwners + 50; ++i) {
    BOOST_TEST_REQUIRE(a.pool.alloc(numbered('o', i), 1, 1, i * 10).ok());
    a.pool.reclaim_expired(i * 10 + 5);
  }
  BOOST_TEST(a.pool.snapshot(0).owners.size() == SlabPoolLimits::kMaxRetiredOwners);
  BOOST_TEST(a.pool.free_slabs() == 2u);
}

// ---- wire -----------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(wire_round_trips_and_strict_decoders) {
  namespace w = poolwire;
  auto a = w::decode_alloc(w::encode(w::AllocRequest{"proxy1", 42, 3}));
  BOOST_TEST(a.owner == "proxy1");
  BOOST_TEST(a.incarnation == 42u);
  BOOST_TEST(a.count == 3u);
  auto f = w::decode_free(w::encode(w::FreeRequest{"p", 5, {1, 9, 4}}));
  BOOST_TEST(f.slabs == std::vector<uint32_t>({1, 9, 4}));
  auto rn = w::decode_renew(w::encode(w::RenewRequest{"p", 5}));
  BOOST_TEST(rn.incarnation == 5u);

  w::Reply rep;
  rep.status = PoolStatus::NotHeld;
  rep.message = "why";
  rep.held = 2;
  rep.free_slabs = 77;
  rep.slab_bytes = kSlab;
  rep.pool_incarnation = 0x1234;
  rep.lease_ms = 2000;
  rep.slabs = {{3, 3 * kSlab, kSlab}};
  auto back = w::decode_reply(w::encode(rep));
  BOOST_TEST(back.status == PoolStatus::NotHeld);
  BOOST_TEST(back.message == "why");
  BOOST_TEST(back.held == 2u);
  BOOST_TEST(back.free_slabs == 77u);
  BOOST_TEST(back.pool_incarnation == 0x1234u);
  BOOST_TEST_REQUIRE(back.slabs.size() == 1u);
  BOOST_TEST(back.slabs[0].offset == 3 * kSlab);

  auto good = w::encode(w::AllocRequest{"proxy1", 42, 3});
  auto bad = [&](auto mutate) {
    auto b = good;
    mutate(b);
    BOOST_CHECK_THROW(w::decode_alloc(b), w::PoolWireError);
  };
  bad([](auto& b) { b.clear(); });
  bad([](auto& b) { b.resize(10); });
  bad([](auto& b) { b[0] = 2; });                                     // unknown version
  bad([](auto& b) { b[1] = 1; });                                     // reserved
  bad([](auto& b) { b.push_back(0); });                               // trailing byte
  bad([](auto& b) { b.pop_back(); });                                 // short owner
  bad([](auto& b) { b[2] = 0; });                                     // owner_len 0
  bad([](auto& b) { b[2] = 65; });                                    // owner_len too long
  bad([](auto& b) { b[4] = b[5] = b[6] = b[7] = 0; });                // count 0
  bad([](auto& b) { b[7] = 0x7f; });                                  // count too large
  bad([](auto& b) { std::fill(b.begin() + 8, b.begin() + 16, 0); });  // incarnation 0
  bad([](auto& b) { b[16] = ' '; });                                  // owner with a space
  // Free: the count must match the body.
  auto fb = w::encode(w::FreeRequest{"p", 5, {1, 2}});
  fb.pop_back();
  BOOST_CHECK_THROW(w::decode_free(fb), w::PoolWireError);
  auto rb = w::encode(w::RenewRequest{"p", 5});
  rb[4] = 1;
  BOOST_CHECK_THROW(w::decode_renew(rb), w::PoolWireError);
  // The decoders do not know the pool's size: out-of-range slabs are the pool's BadSlab.
  BOOST_TEST(w::decode_free(w::encode(w::FreeRequest{"p", 5, {0xffffffffu}})).slabs[0] ==
             0xffffffffu);
}

// ---- placement ------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(placement_local_first_and_most_free) {
  std::mt19937_64 rng(1);
  std::vector<DonorCandidate> c = {
      {"app1", 10, false}, {"proxy1", 4, true}, {"app2", 30, false}, {"proxy2", 0, false}};
  BOOST_TEST(*choose_donor(c, 2, Placement::LocalFirst, rng) == 1u);
  BOOST_TEST(*choose_donor(c, 5, Placement::LocalFirst, rng) == 2u);  // local too small
  BOOST_TEST(*choose_donor(c, 2, Placement::MostFree, rng) == 2u);
  BOOST_TEST(!choose_donor(c, 31, Placement::MostFree, rng).has_value());
  BOOST_TEST(!choose_donor(c, 31, Placement::LocalFirst, rng).has_value());
  BOOST_TEST(!choose_donor(c, 31, Placement::PowerOfTwo, rng).has_value());
  BOOST_TEST(!choose_donor({}, 1, Placement::PowerOfTwo, rng).has_value());
  // Ties: a local donor wins, then the earlier one.
  std::vector<DonorCandidate> tie = {{"a", 5, false}, {"b", 5, true}, {"c", 5, false}};
  BOOST_TEST(*choose_donor(tie, 1, Placement::MostFree, rng) == 1u);
  tie[1].is_local = false;
  BOOST_TEST(*choose_donor(tie, 1, Placement::MostFree, rng) == 0u);
  BOOST_TEST(*parse_placement("power_of_two") == Placement::PowerOfTwo);
  BOOST_TEST(to_string(Placement::LocalFirst) == "local_first");
  BOOST_TEST(!parse_placement("random").has_value());
}

BOOST_AUTO_TEST_CASE(placement_power_of_two_is_seeded_and_favours_the_emptier) {
  // Donor i has i+1 free slabs (1..8); one has none. Two random choices, the emptier wins:
  // donor k (rank k+1 of 8) is chosen with probability (2k) / (8*7) — the fullest never, the
  // emptiest 2/8 of the time. 56000 draws with a fixed seed.
  std::vector<DonorCandidate> c;
  for (uint32_t i = 0; i < 8; ++i) c.push_back({numbered('n', i), i + 1, false});
  c.push_back({"full", 0, false});
  auto run = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int> hits(c.size());
    for (int i = 0; i < 56000; ++i) ++hits[*choose_donor(c, 1, Placement::PowerOfTwo, rng)];
    return hits;
  };
  auto h = run(42);
  BOOST_TEST(h == run(42));  // the same seed gives the same choices
  BOOST_TEST(h[8] == 0);     // no room: never chosen
  BOOST_TEST(h[0] == 0);     // the least free loses every pair it is in
  for (uint32_t k = 1; k < 8; ++k) {
    double expect = 56000.0 * 2 * k / 56;
    BOOST_TEST_CONTEXT("donor " << k) {
      BOOST_TEST(std::abs(h[k] - expect) < 0.1 * expect);
    }
  }
  // With need > 1, only donors with room are drawn.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 1000; ++i) BOOST_TEST(*choose_donor(c, 7, Placement::PowerOfTwo, rng) >= 6u);
}
