// tests/coherence/test_hit.cc — the proxy's hit decision (coherence/hit.h) with a fake
// VersionReader: one verdict per case, exactly one version read for an entry that could be
// served (none otherwise), erasure of stale and unservable entries only, Vary records, the
// max-age backstop with an injected "now" (also a stored_at in the future), and the binding of a
// tag to its key (home and slot).
#define BOOST_TEST_MODULE coherence_hit
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "coherence/client.h"
#include "coherence/coop_directory.h"
#include "coherence/hit.h"
#include "coherence/key.h"

using namespace tierce::coherence;

namespace {

constexpr size_t kMiB = size_t(1) << 20;
constexpr int64_t kSecond = 1'000'000;  // µs

// Node 0 is a proxy, 1 and 2 are app nodes (homes).
Topology topo() {
  return Topology::parse(R"(
[cluster]
name = "t"
secret_file = "/nonexistent/secret"
transport = "tcp"
version_slots = 1024
[[node]]
name = "proxy1"
role = "proxy"
memd = ["tcp://127.0.0.1:1"]
[[node]]
name = "app1"
role = "app"
memd = ["tcp://127.0.0.1:1"]
[[node]]
name = "app2"
role = "app"
memd = ["tcp://127.0.0.1:1"]
)",
                         "test_hit");
}

// Counts reads; answers a fixed value, nullopt, or throws.
struct FakeReader : VersionReader {
  std::optional<uint64_t> value;
  bool throws = false;
  int reads = 0;
  std::string last_home;
  uint64_t last_slot = ~0ull;
  std::optional<uint64_t> read_version(const std::string& home, uint64_t slot) override {
    ++reads;
    last_home = home;
    last_slot = slot;
    if (throws) throw std::runtime_error("connection reset by peer");
    return value;
  }
};

// A toy payload format: "R:" + body is a response, "V:" + selector a Vary record whose variant
// key is variant_key(base, selector); anything else is unservable.
EntryFormat toy_format(std::string base) {
  EntryFormat f;
  f.variant_key = [base](std::string_view p) -> std::optional<std::string> {
    if (p.substr(0, 2) != "V:") return std::nullopt;
    return variant_key(base, p.substr(2));
  };
  f.servable = [](std::string_view p) { return p.substr(0, 2) == "R:"; };
  return f;
}

struct Fixture {
  std::unique_ptr<CacheArena> arena = CacheArena::create_anonymous(kMiB);
  Topology t = topo();
  std::string base = base_key("http", "shop.example", "/item.php?id=1");
  uint64_t hash = hash64(base);
  EntryFormat format = toy_format(base);
  FakeReader reader;
  // The key's own home and slot (what its home derives at registration), version 5.
  std::string home = t.home_of(hash).name;
  Tag tag{node_index(t, home), slot_of(hash, t.version_slots), 5};

  HitQuery query(int64_t now_us = 0, int64_t max_age_s = 0) const {
    return HitQuery{base, hash, now_us, max_age_s};
  }
  HitResult decide(const HitQuery& q) { return decide_hit(*arena, t, q, format, reader); }
  HitResult decide() { return decide(query()); }
  bool present(const std::string& key) const { return arena->lookup(hash64(key), key).has_value(); }
  int64_t stored_at(const std::string& key) const {
    return arena->lookup(hash64(key), key)->stored_at_us;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(verdicts_print_by_name) {
  std::ostringstream o;
  o << Verdict::Hit << ' ' << Verdict::Miss << ' ' << Verdict::Stale << ' ' << Verdict::Unverifiable
    << ' ' << StaleCause::Expired << ' ' << StaleCause::VersionChanged;
  BOOST_TEST(o.str() == "hit miss stale unverifiable expired version changed");
  BOOST_TEST(to_string(Verdict::Unverifiable) == "unverifiable");
  std::ostringstream b;
  b << StaleCause::TagMismatch << '/' << TagBinding::OtherHome << '/' << TagBinding::OtherSlot;
  BOOST_TEST(b.str() == "tag not of the key/home of another key/slot of another key");
}

BOOST_FIXTURE_TEST_CASE(nothing_stored_is_a_miss_without_a_read, Fixture) {
  auto r = decide();
  BOOST_TEST(r.verdict == Verdict::Miss);
  BOOST_TEST(reader.reads == 0);
  BOOST_TEST(!r.version_read);
  BOOST_TEST(!r.entry.has_value());
}

BOOST_FIXTURE_TEST_CASE(current_version_is_a_hit_after_one_read, Fixture) {
  BOOST_REQUIRE(arena->store(hash, base, tag, "R:page"));
  reader.value = 5;
  auto r = decide();
  BOOST_TEST(r.verdict == Verdict::Hit);
  BOOST_TEST(reader.reads == 1);
  BOOST_TEST(reader.last_home == home);
  BOOST_TEST(reader.last_slot == tag.slot);
  BOOST_REQUIRE(r.entry.has_value());
  BOOST_TEST(r.entry->payload == "R:page");
  BOOST_TEST(r.key == base);
  BOOST_TEST(r.key_hash == hash);
  BOOST_TEST(r.home == home);
  BOOST_TEST(r.version_read);
  BOOST_TEST(r.home_version.value() == 5u);
  BOOST_TEST(present(base));
  // Every lookup reads once more: a hit is never decided from an earlier read.
  BOOST_TEST(decide().verdict == Verdict::Hit);
  BOOST_TEST(reader.reads == 2);
}

BOOST_FIXTURE_TEST_CASE(other_version_is_stale_and_erased, Fixture) {
  BOOST_REQUIRE(arena->store(hash, base, tag, "R:page"));
  reader.value = 6;
  auto r = decide();
  BOOST_TEST(r.verdict == Verdict::Stale);
  BOOST_TEST(r.stale_cause == StaleCause::VersionChanged);
  BOOST_TEST(reader.reads == 1);
  BOOST_TEST(r.home_version.value() == 6u);
  BOOST_REQUIRE(r.entry.has_value());
  BOOST_TEST(r.entry->tag.version == 5u);
  BOOST_TEST(!present(base));
  BOOST_TEST(arena->counters().erased.load() == 1u);
  BOOST_TEST(decide().verdict == Verdict::Miss);  // gone: no second read
  BOOST_TEST(reader.reads == 1);
}

BOOST_FIXTURE_TEST_CASE(unreadable_version_is_unverifiable_and_kept, Fixture) {
  BOOST_REQUIRE(arena->store(hash, base, tag, "R:page"));
  reader.value.reset();  // timed out / home down
  auto r = decide();
  BOOST_TEST(r.verdict == Verdict::Unverifiable);
  BOOST_TEST(reader.reads == 1);
  BOOST_TEST(r.version_read);
  BOOST_TEST(!r.home_version.has_value());
  BOOST_TEST(r.reader_error.empty());
  BOOST_TEST(present(base));  // fail closed, but the home may answer next time
  BOOST_TEST(arena->counters().erased.load() == 0u);

  reader.throws = true;  // a reader that throws is a failed read too
  r = decide();
  BOOST_TEST(r.verdict == Verdict::Unverifiable);
  BOOST_TEST(reader.reads == 2);
  BOOST_TEST(r.reader_error == "connection reset by peer");
  BOOST_TEST(present(base));

  reader.throws = false;  // the home is back
  reader.value = 5;
  BOOST_TEST(decide().verdict == Verdict::Hit);
  BOOST_TEST(reader.reads == 3);
}

BOOST_FIXTURE_TEST_CASE(vary_record_leads_to_the_variant_with_one_read, Fixture) {
  std::string fr = variant_key(base, "accept-language: fr\n");
  std::string en = variant_key(base, "accept-language: en\n");
  Tag vtag = tag;  // a variant and its Vary record carry the BASE key's tag
  vtag.version = 40;
  BOOST_REQUIRE(arena->store(hash, base, vtag, "V:accept-language: fr\n"));
  BOOST_REQUIRE(arena->store(hash64(fr), fr, vtag, "R:bonjour"));
  reader.value = 40;
  auto r = decide();
  BOOST_TEST(r.verdict == Verdict::Hit);
  BOOST_TEST(reader.reads == 1);  // the Vary record itself is not version-checked
  BOOST_TEST(reader.last_home == home);
  BOOST_TEST(reader.last_slot == tag.slot);
  BOOST_TEST(r.key == fr);
  BOOST_TEST(r.key_hash == hash64(fr));
  BOOST_TEST(r.entry->payload == "R:bonjour");

  // The selector now names a variant that is not stored: a miss, no read.
  BOOST_REQUIRE(arena->store(hash, base, vtag, "V:accept-language: en\n"));
  r = decide();
  BOOST_TEST(r.verdict == Verdict::Miss);
  BOOST_TEST(reader.reads == 1);
  BOOST_TEST(r.key == en);

  // A stale variant is erased under its own key; the Vary record stays.
  BOOST_REQUIRE(arena->store(hash64(en), en, vtag, "R:hello"));
  reader.value = 41;
  r = decide();
  BOOST_TEST(r.verdict == Verdict::Stale);
  BOOST_TEST(reader.reads == 2);
  BOOST_TEST(!present(en));
  BOOST_TEST(present(base));
}

BOOST_FIXTURE_TEST_CASE(unservable_entries_are_erased_without_a_read, Fixture) {
  BOOST_REQUIRE(arena->store(hash, base, tag, "garbage"));
  reader.value = 5;
  auto r = decide();
  BOOST_TEST(r.verdict == Verdict::Miss);
  BOOST_TEST(r.erased_unservable);
  BOOST_TEST(reader.reads == 0);
  BOOST_TEST(!present(base));

  // A variant that is itself a Vary record (only one level is followed).
  std::string v = variant_key(base, "x");
  BOOST_REQUIRE(arena->store(hash, base, tag, "V:x"));
  BOOST_REQUIRE(arena->store(hash64(v), v, tag, "V:y"));
  r = decide();
  BOOST_TEST(r.verdict == Verdict::Miss);
  BOOST_TEST(r.erased_unservable);
  BOOST_TEST(!present(v));

  // Tags naming no node, or a proxy node: nothing could prove them current.
  for (uint32_t home : {3u, 1000u, 0u}) {
    BOOST_REQUIRE(arena->store(hash, base, Tag{home, 1, 5}, "R:page"));
    r = decide();
    BOOST_TEST(r.verdict == Verdict::Miss, "home " << home);
    BOOST_TEST(r.erased_unservable);
    BOOST_TEST(!present(base));
  }
  BOOST_TEST(reader.reads == 0);
}

BOOST_FIXTURE_TEST_CASE(max_age_backstop_with_injected_now, Fixture) {
  BOOST_REQUIRE(arena->store(hash, base, tag, "R:page"));
  const int64_t t0 = stored_at(base);
  reader.value = 5;
  // At exactly max age: still served (after its read).
  auto r = decide(query(t0 + 600 * kSecond, 600));
  BOOST_TEST(r.verdict == Verdict::Hit);
  BOOST_TEST(reader.reads == 1);
  // A clock a little behind the one that stored it (within the topology's clock_skew_ms): a
  // negative age within the skew is not expired.
  BOOST_TEST(decide(query(t0 - 40'000, 600)).verdict == Verdict::Hit);
  BOOST_TEST(reader.reads == 2);
  // No limit (0): a year later the version check alone decides.
  BOOST_TEST(decide(query(t0 + 365 * 86400 * kSecond, 0)).verdict == Verdict::Hit);
  BOOST_TEST(reader.reads == 3);
  // Older than max age: Stale (Expired), erased, without a read — even though its version is
  // still current (a write that bypassed the invalidation path would not have bumped it).
  r = decide(query(t0 + 600 * kSecond + 1, 600));
  BOOST_TEST(r.verdict == Verdict::Stale);
  BOOST_TEST(r.stale_cause == StaleCause::Expired);
  BOOST_TEST(reader.reads == 3);
  BOOST_TEST(!r.version_read);
  BOOST_REQUIRE(r.entry.has_value());
  BOOST_TEST(r.home == home);
  BOOST_TEST(!present(base));
  BOOST_TEST(arena->counters().erased.load() == 1u);
  // Expired wins over an unreachable home: the entry is dropped, not kept for later.
  BOOST_REQUIRE(arena->store(hash, base, tag, "R:page"));
  reader.value.reset();
  r = decide(query(stored_at(base) + 2 * kSecond, 1));
  BOOST_TEST(r.verdict == Verdict::Stale);
  BOOST_TEST(r.stale_cause == StaleCause::Expired);
  BOOST_TEST(!present(base));
  BOOST_TEST(reader.reads == 3);
}

BOOST_AUTO_TEST_CASE(cluster_client_is_a_version_reader) {
  static_assert(std::is_base_of_v<VersionReader, ClusterVersionReader>);
  // Through the adapter, an unreachable home is Unverifiable (port 1: connection refused).
  auto t = topo();
  ClientTuning tuning;
  tuning.op_timeout = std::chrono::milliseconds(100);
  tuning.connect_timeout = std::chrono::milliseconds(100);
  ClusterClient client(t, tierce::fabric::Secret(std::string(32, 's')), tuning,
                       [](tierce::fabric::LogLevel, std::string_view) {});
  ClusterVersionReader reader(client);
  auto arena = CacheArena::create_anonymous(kMiB);
  std::string base = base_key("https", "h", "/");
  uint64_t h = hash64(base);
  BOOST_REQUIRE(arena->store(
      h, base, Tag{node_index(t, t.home_of(h).name), slot_of(h, t.version_slots), 7}, "R:x"));
  auto r = decide_hit(*arena, t, HitQuery{base, hash64(base), 0, 0}, toy_format(base), reader);
  BOOST_TEST(r.verdict == Verdict::Unverifiable);
  BOOST_TEST(r.version_read);
}

// Issue 29, path 6: a stored_at in the future (this host's clock stepped back, a corrupt or
// forged copy) used to make the age negative and the entry never expire.
BOOST_FIXTURE_TEST_CASE(stored_in_the_future_beyond_the_clock_skew_is_expired, Fixture) {
  BOOST_REQUIRE(arena->store(hash, base, tag, "R:page"));
  const int64_t t0 = stored_at(base);
  const int64_t skew_us = int64_t(t.coherence.clock_skew_ms) * 1000;
  reader.value = 5;
  // Within the skew: served (two hosts' clocks may differ that much).
  BOOST_TEST(decide(query(t0 - skew_us, 600)).verdict == Verdict::Hit);
  BOOST_TEST(reader.reads == 1);
  // Further ahead: no correct clock explains it; Expired without a read, erased.
  for (int64_t ahead : {skew_us + 1, 3600 * kSecond, 365 * 86400 * kSecond}) {
    BOOST_REQUIRE(arena->store(hash, base, tag, "R:page"));
    auto r = decide(query(stored_at(base) - ahead, 600));
    BOOST_TEST(r.verdict == Verdict::Stale, "ahead " << ahead);
    BOOST_TEST(r.stale_cause == StaleCause::Expired);
    BOOST_TEST(!r.version_read);
    BOOST_TEST(!present(base));
  }
  BOOST_TEST(reader.reads == 1);
  // No limit configured (0): the version check alone decides, as for any age.
  BOOST_REQUIRE(arena->store(hash, base, tag, "R:page"));
  BOOST_TEST(decide(query(stored_at(base) - 3600 * kSecond, 0)).verdict == Verdict::Hit);
  // A nonsensical first-store time (corrupt copy): expired, no arithmetic overflow.
  BOOST_REQUIRE(arena->store(hash, base, tag, "R:page", INT64_MIN + 1));
  BOOST_TEST(stored_at(base) == INT64_MIN + 1);
  auto r = decide(query(t0, 600));
  BOOST_TEST(r.verdict == Verdict::Stale);
  BOOST_TEST(r.stale_cause == StaleCause::Expired);
}

// Issue 29, path 7: the hit decision never checked that the tag is the key's; a page stored
// under a tag of another slot (or home) was served as long as THAT slot did not move.
BOOST_FIXTURE_TEST_CASE(a_tag_not_of_its_key_is_stale_without_a_read, Fixture) {
  reader.value = 5;  // every slot reads "5": only the binding can refuse
  const uint32_t other_home = tag.home == 1 ? 2 : 1;  // the other app node
  struct Case {
    const char* what;
    Tag tag;
    TagBinding binding;
  };
  const Case cases[] = {
      {"another slot", Tag{tag.home, (tag.slot + 1) % t.version_slots, 5}, TagBinding::OtherSlot},
      {"another home, the key's slot", Tag{other_home, tag.slot, 5}, TagBinding::OtherHome},
      {"slot 0 of the key's home", Tag{tag.home, tag.slot == 0 ? 1u : 0u, 5},
       TagBinding::OtherSlot},
  };
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.what) {
      BOOST_TEST(tag_binding(c.tag, t, hash) == c.binding);
      BOOST_REQUIRE(arena->store(hash, base, c.tag, "R:page"));
      auto r = decide();
      BOOST_TEST(r.verdict == Verdict::Stale);
      BOOST_TEST(r.stale_cause == StaleCause::TagMismatch);
      BOOST_TEST(!r.version_read);
      BOOST_TEST(!present(base));  // erased
    }
  }
  BOOST_TEST(reader.reads == 0);
  BOOST_TEST(tag_binding(tag, t, hash) == TagBinding::Bound);

  // Through a Vary record: the variant must carry the BASE key's tag (the one Tierce-Key named
  // at registration), not a tag derived from the variant key.
  std::string fr = variant_key(base, "accept-language: fr\n");
  uint64_t vh = hash64(fr);
  Tag of_variant{node_index(t, t.home_of(vh).name), slot_of(vh, t.version_slots), 5};
  BOOST_REQUIRE(of_variant.slot != tag.slot);
  BOOST_REQUIRE(arena->store(hash, base, tag, "V:accept-language: fr\n"));
  BOOST_REQUIRE(arena->store(vh, fr, of_variant, "R:bonjour"));
  auto r = decide();
  BOOST_TEST(r.verdict == Verdict::Stale);
  BOOST_TEST(r.stale_cause == StaleCause::TagMismatch);
  BOOST_TEST(!present(fr));
  BOOST_TEST(present(base));
  BOOST_REQUIRE(arena->store(vh, fr, tag, "R:bonjour"));
  BOOST_TEST(decide().verdict == Verdict::Hit);
  BOOST_TEST(reader.reads == 1);
}
