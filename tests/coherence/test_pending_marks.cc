// Unit tests of the pending marks (the linearizable mode's home side, docs/coherence.md "Pending
// marks"): HomeState driven step by step with an injected clock, and the mark's wire trailer.
#define BOOST_TEST_MODULE coherence_pending_marks
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <random>
#include <set>
#include <vector>

#include "coherence/home.h"
#include "coherence/key.h"
#include "coherence/layout.h"
#include "coherence/protocol.h"

using namespace tierce::coherence;

namespace {

constexpr uint64_t kMs = 1'000'000;  // ns

struct Table {
  explicit Table(uint64_t slots) : mem(versions_bytes(slots) / 8) {}
  std::vector<uint64_t> mem;
  void* data() { return mem.data(); }
};

std::vector<uint64_t> deps(std::initializer_list<const char*> names) {
  std::vector<uint64_t> v;
  for (auto n : names) v.push_back(dependency_hash(n));
  return v;
}

std::vector<uint64_t> keys_apart(size_t n, uint64_t slots) {
  std::vector<uint64_t> keys;
  std::set<uint64_t> used;
  for (uint64_t k = 1; keys.size() < n; ++k)
    if (used.insert(slot_of(k, slots)).second) keys.push_back(k);
  return keys;
}

PendingMark pend(uint64_t token, uint32_t ttl_ms = 0) { return {MarkOp::Pend, token, ttl_ms}; }
PendingMark release(uint64_t token) { return {MarkOp::Release, token, 0}; }

// A home whose mark clock the test steps.
struct Home {
  explicit Home(HomeLimits limits = {}, Scheme scheme = Scheme::DependencyLists)
      : t(64), h(t.data(), 64, limits, true, 0, scheme) {
    h.set_clock([this] { return now; });
  }
  Table t;
  HomeState h;
  uint64_t now = 1'000'000 * kMs;
  RegisterResult reg(uint64_t key, std::initializer_list<const char*> d) {
    return h.register_page(key, h.seq(), deps(d));
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(home_marks)

// Pend = the invalidation as today (bump, forget, log, publish) + a mark on each dependency; a
// registration that names a marked dependency is refused (Pending), others register.
BOOST_AUTO_TEST_CASE(pend_refuses_registrations_of_the_marked_dependencies_only) {
  Home x;
  auto k = keys_apart(4, 64);
  auto before = x.reg(k[0], {"item:1"});
  BOOST_REQUIRE(before.cacheable());
  uint64_t s0 = x.h.seq();
  auto inv = x.h.invalidate(deps({"item:1"}), Scheme::DependencyLists, pend(7, 1000));
  BOOST_TEST(inv.keys_bumped == 1u);  // applied exactly as a plain invalidation
  BOOST_TEST(x.h.version(before.slot) == before.version + 1);
  BOOST_TEST(x.h.seq() == s0 + 1);

  auto r = x.reg(k[0], {"item:1"});
  BOOST_TEST(!r.cacheable());
  BOOST_TEST(r.refusal == Refusal::Pending);
  BOOST_TEST(r.reason.find("pending") != std::string::npos, r.reason);
  BOOST_TEST(x.reg(k[1], {"item:2", "user:1"}).cacheable());  // not marked
  BOOST_TEST(x.reg(k[2], {"item:2", "item:1"}).refusal == Refusal::Pending);
  auto st = x.h.stats();
  BOOST_TEST(st.pending_marks == 1u);
  BOOST_TEST(st.pend_applied == 1u);
  BOOST_TEST(st.refused_pending == 2u);
  BOOST_TEST(st.refused_race == 0u);
}

// Release = the invalidation as today (logged: a render that started before it is refused as a
// race), then the token's marks are gone: a render that starts after it registers.
BOOST_AUTO_TEST_CASE(release_lifts_the_mark_and_is_logged) {
  Home x;
  auto k = keys_apart(2, 64);
  x.h.invalidate(deps({"item:1", "category:1"}), Scheme::DependencyLists, pend(7, 1000));
  BOOST_TEST(x.h.stats().pending_marks == 2u);
  uint64_t during = x.h.seq();  // a render between the Pend and the Release (may read old rows)
  x.h.invalidate(deps({"item:1", "category:1"}), Scheme::DependencyLists, release(7));
  BOOST_TEST(x.h.stats().pending_marks == 0u);
  BOOST_TEST(x.h.stats().released == 1u);
  auto late = x.h.register_page(k[0], during, deps({"item:1"}));
  BOOST_TEST(late.refusal == Refusal::Race);
  BOOST_TEST(x.h.register_page(k[0], x.h.seq(), deps({"item:1"})).cacheable());
  BOOST_TEST(x.reg(k[1], {"category:1"}).cacheable());
  // A release of a token this home never marked (or released already) is only an invalidation.
  uint64_t s = x.h.seq();
  auto again = x.h.invalidate(deps({"item:1"}), Scheme::DependencyLists, release(7));
  BOOST_TEST(again.keys_bumped == 1u);
  BOOST_TEST(x.h.seq() == s + 1);
  BOOST_TEST(x.h.invalidate(deps({"x"}), Scheme::DependencyLists, release(12345)).seq == s + 2);
  BOOST_TEST(x.h.stats().pending_marks == 0u);
}

BOOST_AUTO_TEST_CASE(two_tokens_on_one_dependency) {
  Home x;
  auto k = keys_apart(1, 64);
  x.h.invalidate(deps({"item:1"}), Scheme::DependencyLists, pend(1, 1000));
  x.h.invalidate(deps({"item:1", "item:2"}), Scheme::DependencyLists, pend(2, 1000));
  BOOST_TEST(x.h.stats().pending_marks == 3u);
  x.h.invalidate(deps({"item:1"}), Scheme::DependencyLists, release(1));
  BOOST_TEST(x.reg(k[0], {"item:1"}).refusal == Refusal::Pending);  // token 2 still marks it
  x.h.invalidate(deps({"item:1", "item:2"}), Scheme::DependencyLists, release(2));
  BOOST_TEST(x.reg(k[0], {"item:1", "item:2"}).cacheable());
  BOOST_TEST(x.h.stats().pending_marks == 0u);
}

// A mark whose Release never comes expires at its deadline: that counts as an invalidation of
// its dependencies (a new sequence in the log), so a render that started before the expiry is
// refused (it may have read rows from before the commit) and one that starts after registers.
BOOST_AUTO_TEST_CASE(a_mark_expires_at_its_deadline_and_the_expiry_is_logged) {
  Home x;
  auto k = keys_apart(2, 64);
  x.h.invalidate(deps({"item:1"}), Scheme::DependencyLists, pend(5, 100));
  uint64_t during = x.h.seq();
  x.now += 99 * kMs;
  BOOST_TEST(x.reg(k[0], {"item:1"}).refusal == Refusal::Pending);
  BOOST_TEST(x.h.seq() == during);  // nothing expired yet
  x.now += 1 * kMs;                 // the deadline: expired
  auto r = x.h.register_page(k[0], during, deps({"item:1"}));
  BOOST_TEST(r.refusal == Refusal::Race);
  BOOST_TEST(x.h.seq() == during + 1);  // the expiry's own invalidation
  auto st = x.h.stats();
  BOOST_TEST(st.expired == 1u);
  BOOST_TEST(st.pending_marks == 0u);
  BOOST_TEST(x.reg(k[0], {"item:1"}).cacheable());

  // Expired by the periodic task as well (expire_marks), each batch one invalidation.
  x.h.invalidate(deps({"a"}), Scheme::DependencyLists, pend(6, 10));
  x.h.invalidate(deps({"b"}), Scheme::DependencyLists, pend(7, 20));
  x.h.invalidate(deps({"c"}), Scheme::DependencyLists, pend(8, 30));
  uint64_t s = x.h.seq();
  x.now += 20 * kMs;
  BOOST_TEST(x.h.expire_marks() == 2u);
  BOOST_TEST(x.h.seq() == s + 1);
  BOOST_TEST(x.h.expire_marks() == 0u);
  BOOST_TEST(x.h.seq() == s + 1);
  BOOST_TEST(x.h.stats().pending_marks == 1u);
  BOOST_TEST(x.reg(k[1], {"b"}).cacheable());
  BOOST_TEST(x.reg(k[1], {"c"}).refusal == Refusal::Pending);
  // An invalidation expires what is due before it is applied.
  x.now += 10 * kMs;
  x.h.invalidate(deps({"z"}), Scheme::DependencyLists);
  BOOST_TEST(x.h.stats().pending_marks == 0u);
  BOOST_TEST(x.h.stats().expired == 4u);
}

BOOST_AUTO_TEST_CASE(ttl_defaults_and_clamps) {
  BOOST_TEST(effective_ttl_ms(0) == kDefaultMarkTtlMs);
  BOOST_TEST(effective_ttl_ms(1) == 1u);
  BOOST_TEST(effective_ttl_ms(1234) == 1234u);
  BOOST_TEST(effective_ttl_ms(kMaxMarkTtlMs + 1) == kMaxMarkTtlMs);
  BOOST_TEST(effective_ttl_ms(~0u) == kMaxMarkTtlMs);
  Home x;
  auto k = keys_apart(1, 64);
  x.h.invalidate(deps({"item:1"}), Scheme::DependencyLists, pend(1, 0));  // 30 s
  x.now += (kDefaultMarkTtlMs - 1) * kMs;
  BOOST_TEST(x.reg(k[0], {"item:1"}).refusal == Refusal::Pending);
  x.now += 1 * kMs;
  BOOST_TEST(x.h.expire_marks() == 1u);
  BOOST_TEST(x.reg(k[0], {"item:1"}).cacheable());
  x.h.invalidate(deps({"item:1"}), Scheme::DependencyLists, pend(2, ~0u));  // 600 s at most
  x.now += (kMaxMarkTtlMs - 1) * kMs;
  BOOST_TEST(x.h.expire_marks() == 0u);
  x.now += 1 * kMs;
  BOOST_TEST(x.h.expire_marks() == 1u);
  BOOST_TEST(x.reg(k[0], {"item:1"}).cacheable());
}

// Under invalidate-all (or a Pend with no dependency) the mark is global: every page is refused.
BOOST_AUTO_TEST_CASE(a_global_mark_under_invalidate_all) {
  Home x({}, Scheme::InvalidateAll);
  auto k = keys_apart(3, 64);
  auto before = x.reg(k[0], {});
  BOOST_REQUIRE(before.cacheable());
  x.h.invalidate({}, Scheme::InvalidateAll, pend(3, 1000));
  BOOST_TEST(x.h.version(before.slot) == before.version + 1);
  BOOST_TEST(x.h.stats().pending_marks == 1u);
  BOOST_TEST(x.reg(k[0], {}).refusal == Refusal::Pending);
  BOOST_TEST(x.reg(k[1], {"anything"}).refusal == Refusal::Pending);
  uint64_t during = x.h.seq();
  x.h.invalidate({}, Scheme::InvalidateAll, release(3));
  BOOST_TEST(x.h.register_page(k[1], during, {}).refusal == Refusal::Race);
  BOOST_TEST(x.reg(k[1], {}).cacheable());

  Home y;  // dependency-lists, a Pend that names nothing
  y.h.invalidate({}, Scheme::DependencyLists, pend(4, 1000));
  BOOST_TEST(y.reg(k[2], {"item:9"}).refusal == Refusal::Pending);
  y.h.invalidate({}, Scheme::DependencyLists, release(4));
  BOOST_TEST(y.reg(k[2], {"item:9"}).cacheable());
}

// A catch-up (an invalidate-all without a mark) leaves the marks in place: the writers' Releases
// (or the expiry) lift them.
BOOST_AUTO_TEST_CASE(a_catch_up_does_not_clear_marks) {
  Home x;
  auto k = keys_apart(1, 64);
  x.h.invalidate(deps({"item:1"}), Scheme::DependencyLists, pend(9, 1000));
  x.h.invalidate({}, Scheme::InvalidateAll);
  BOOST_TEST(x.h.stats().pending_marks == 1u);
  BOOST_TEST(x.reg(k[0], {"item:1"}).refusal == Refusal::Pending);
  x.h.invalidate(deps({"item:1"}), Scheme::DependencyLists, release(9));
  BOOST_TEST(x.reg(k[0], {"item:1"}).cacheable());
}

// Beyond max_pending_marks a Pend is applied as an invalidate-all with a global mark of its
// token; when not even that fits, with a global mark that names no token and only expires.
BOOST_AUTO_TEST_CASE(beyond_the_mark_limit_a_pend_invalidates_all_with_a_global_mark) {
  HomeLimits lim;
  lim.max_pending_marks = 3;
  Home x(lim);
  auto k = keys_apart(2, 64);
  x.h.invalidate(deps({"a", "b"}), Scheme::DependencyLists, pend(1, 1000));
  auto z = x.reg(k[0], {"z"});
  BOOST_REQUIRE(z.cacheable());
  // 2 held + 2 new > 3: every page bumped, every registration refused until token 2 is released.
  auto inv = x.h.invalidate(deps({"c", "d"}), Scheme::DependencyLists, pend(2, 1000));
  BOOST_TEST(inv.keys_bumped == 1u);
  BOOST_TEST(x.h.version(z.slot) == z.version + 1);
  auto st = x.h.stats();
  BOOST_TEST(st.pend_overflows == 1u);
  BOOST_TEST(st.pending_marks == 3u);
  BOOST_TEST(x.reg(k[0], {"z"}).refusal == Refusal::Pending);
  x.h.invalidate(deps({"c", "d"}), Scheme::DependencyLists, release(2));
  BOOST_TEST(x.reg(k[0], {"z"}).cacheable());
  BOOST_TEST(x.reg(k[1], {"a"}).refusal == Refusal::Pending);  // token 1 is still pending

  x.h.invalidate(deps({"e"}), Scheme::DependencyLists, pend(3, 1000));  // 3 held: the limit
  BOOST_TEST(x.h.stats().pending_marks == 3u);
  x.h.invalidate(deps({"f"}), Scheme::DependencyLists, pend(4, 2000));  // no room at all
  st = x.h.stats();
  BOOST_TEST(st.pend_overflows == 2u);
  BOOST_TEST(st.pending_marks == 4u);  // the tokenless global mark counts one
  x.h.invalidate(deps({"f"}), Scheme::DependencyLists, release(4));
  BOOST_TEST(x.reg(k[0], {"z"}).refusal == Refusal::Pending);  // only its expiry lifts it
  x.h.invalidate(deps({"a", "b"}), Scheme::DependencyLists, release(1));
  x.h.invalidate(deps({"e"}), Scheme::DependencyLists, release(3));
  uint64_t during = x.h.seq();
  x.now += 2000 * kMs;
  BOOST_TEST(x.h.register_page(k[0], during, deps({"z"})).refusal == Refusal::Race);
  BOOST_TEST(x.reg(k[0], {"z"}).cacheable());
  BOOST_TEST(x.h.stats().pending_marks == 0u);
}

// The same token pending again on a dependency (another write under that token) keeps one mark,
// with the later deadline.
BOOST_AUTO_TEST_CASE(the_same_token_again_keeps_one_mark_with_the_later_deadline) {
  Home x;
  auto k = keys_apart(1, 64);
  x.h.invalidate(deps({"item:1"}), Scheme::DependencyLists, pend(1, 100));
  x.now += 50 * kMs;
  x.h.invalidate(deps({"item:1"}), Scheme::DependencyLists, pend(1, 100));
  BOOST_TEST(x.h.stats().pending_marks == 1u);
  x.now += 60 * kMs;  // past the first deadline, before the second
  BOOST_TEST(x.reg(k[0], {"item:1"}).refusal == Refusal::Pending);
  x.now += 40 * kMs;
  // The seq is read before register_page expires the mark: a render that started before the
  // expiry, refused; the next one registers.
  BOOST_TEST(x.reg(k[0], {"item:1"}).refusal == Refusal::Race);
  BOOST_TEST(x.reg(k[0], {"item:1"}).cacheable());
  BOOST_TEST(x.h.stats().expired == 1u);
}

// A full home (max_pending_marks) releases and expires its marks in one pass each: no scan per
// mark (this would take minutes if expiry or release were quadratic).
BOOST_AUTO_TEST_CASE(many_marks_release_and_expire_at_once) {
  HomeLimits lim;
  lim.log_entries = 1u << 20;
  Home x(lim);
  const size_t per = kMaxDependencies, msgs = lim.max_pending_marks / per;
  std::vector<uint64_t> d(per);
  for (size_t m = 0; m < msgs; ++m) {
    for (size_t i = 0; i < per; ++i) d[i] = 1000 + m * per + i;
    x.h.invalidate(d, Scheme::DependencyLists, pend(m % 2 ? 1 : 2, 1000));
  }
  BOOST_TEST(x.h.stats().pending_marks == lim.max_pending_marks);
  BOOST_TEST(x.h.stats().pend_overflows == 0u);
  x.h.invalidate({}, Scheme::DependencyLists, release(1));  // half of them, one token
  BOOST_TEST(x.h.stats().pending_marks == lim.max_pending_marks / 2);
  x.now += 1000 * kMs;
  BOOST_TEST(x.h.expire_marks() == lim.max_pending_marks / 2);
  BOOST_TEST(x.h.stats().pending_marks == 0u);
  BOOST_TEST(x.reg(1, {"item:1"}).cacheable());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(mark_wire)

BOOST_AUTO_TEST_CASE(refusal_pending_is_wire_value_11) {
  BOOST_TEST(uint8_t(Refusal::Pending) == 11u);
  BOOST_TEST(kMaxRefusal == 11u);
  auto b = encode(RegisterResult{Refusal::Pending, 3, 0, "pending"});
  auto r = decode_register_reply(b);
  BOOST_TEST(r.refusal == Refusal::Pending);
  BOOST_TEST(!r.cacheable());
  b[0] = 12;
  BOOST_CHECK_THROW(decode_register_reply(b), ProtocolError);
  BOOST_TEST(to_string(Refusal::Pending).find("pending") != std::string_view::npos);
}

BOOST_AUTO_TEST_CASE(marks_round_trip_and_a_body_without_one_is_none) {
  InvalidateRequest plain{12, Scheme::DependencyLists, "app1", 5, 6, 7, 8, {9, 10}, {}};
  auto pb = encode(plain);
  BOOST_TEST(decode_invalidate(pb).mark.op == MarkOp::None);
  for (auto m : {pend(0xfeedfacecafebeefull, 300), release(42), pend(1, 0)}) {
    InvalidateRequest inv = plain;
    inv.mark = m;
    auto b = encode(inv);
    BOOST_TEST(b.size() == pb.size() + kMarkTrailerBytes);
    BOOST_TEST(std::equal(pb.begin(), pb.end(), b.begin()));  // a trailer, nothing else moves
    auto d = decode_invalidate(b);
    BOOST_TEST((d.mark.op == m.op));
    BOOST_TEST(d.mark.token == m.token);
    BOOST_TEST(d.mark.ttl_ms == m.ttl_ms);
    BOOST_TEST(d.deps == plain.deps);
    BOOST_TEST(d.number == 6u);
  }
}

BOOST_AUTO_TEST_CASE(malformed_trailers_are_rejected) {
  InvalidateRequest inv{12, Scheme::DependencyLists, "app1", 5, 6, 7, 8, {9, 10}, pend(77, 500)};
  auto b = encode(inv);
  const size_t plain = b.size() - kMarkTrailerBytes;
  for (size_t n = 0; n < b.size(); ++n) {
    if (n == plain) {
      BOOST_TEST(decode_invalidate(std::span(b.data(), n)).mark.op == MarkOp::None);
      continue;
    }
    BOOST_CHECK_THROW(decode_invalidate(std::span(b.data(), n)), ProtocolError);  // partial
  }
  auto longer = b;
  longer.push_back(0);
  BOOST_CHECK_THROW(decode_invalidate(longer), ProtocolError);
  for (int op = 3; op < 256; ++op) {
    auto bad = b;
    bad[plain] = uint8_t(op);
    BOOST_CHECK_THROW(decode_invalidate(bad), ProtocolError);
  }
  auto zero = b;
  zero[plain] = 0;  // op 0 in a trailer reads as no mark
  BOOST_TEST(decode_invalidate(zero).mark.op == MarkOp::None);
}

// Whatever follows the dependencies, decode_invalidate returns or throws ProtocolError: random
// trailers of every length up to 64 bytes, and random bytes over a whole marked body.
BOOST_AUTO_TEST_CASE(random_trailers_never_crash) {
  InvalidateRequest inv{12, Scheme::DependencyLists, "app1", 5, 6, 7, 8, {9, 10, 11}, {}};
  const auto base = encode(inv);
  std::mt19937_64 rng(1234);
  size_t accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    auto b = base;
    size_t n = rng() % 65;
    for (size_t j = 0; j < n; ++j) b.push_back(uint8_t(rng()));
    if (i % 2) {  // and a few bytes anywhere
      for (int f = 0; f < 3; ++f) b[rng() % b.size()] = uint8_t(rng());
    }
    try {
      auto d = decode_invalidate(b);
      ++accepted;
      BOOST_REQUIRE(uint8_t(d.mark.op) <= kMaxMarkOp);
      // What decodes encodes back to a body that decodes to the same message.
      auto again = decode_invalidate(encode(d));
      BOOST_REQUIRE(again.deps == d.deps);
      BOOST_REQUIRE((again.mark.op == d.mark.op));
    } catch (const ProtocolError&) {
    }
  }
  BOOST_TEST(accepted > 0u);
}

BOOST_AUTO_TEST_SUITE_END()
