// Unit tests of coherence/: keys, topology, messages, and the home's dependency index with the
// registration race forced step by step.
#define BOOST_TEST_MODULE coherence_units
#include <boost/test/unit_test.hpp>

#include <map>
#include <ostream>
#include <vector>

#include "coherence/home.h"
#include "coherence/key.h"
#include "coherence/layout.h"
#include "coherence/protocol.h"
#include "coherence/topology.h"

using namespace tierce::coherence;

namespace tierce::coherence {
std::ostream& operator<<(std::ostream& o, Scheme s) { return o << to_string(s); }
}  // namespace tierce::coherence

namespace {

const char* kTopo = R"(
[cluster]
name = "t"
secret_file = "/nonexistent/secret"
transport = "shm"
version_slots = 1024
[[node]]
name = "app1"
role = "app"
memd = ["tcp://127.0.0.1:7101", "shm:///tmp/app1.sock"]
[[node]]
name = "app2"
role = "app"
memd = ["tcp://127.0.0.1:7102", "shm:///tmp/app2.sock"]
[[node]]
name = "proxy1"
role = "proxy"
memd = ["tcp://127.0.0.1:7201"]
)";

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

}  // namespace

BOOST_AUTO_TEST_SUITE(keys)

BOOST_AUTO_TEST_CASE(base_key_normalises_host_and_keeps_uri) {
  BOOST_TEST(base_key("http", "Shop.Example:80", "/item.php?id=1") ==
             "http://shop.example\n/item.php?id=1");
  BOOST_TEST(base_key("HTTPS", "Shop.Example:443", "/item.php?id=1") ==
             "https://shop.example\n/item.php?id=1");
  BOOST_TEST(base_key("http", "shop.example:8080", "/a") == "http://shop.example:8080\n/a");
  BOOST_TEST(base_key("http", "h", "/a?x=1") != base_key("http", "h", "/a?x=2"));
  // http and https never share a key; only the scheme's own default port is dropped.
  BOOST_TEST(base_key("http", "h", "/a") != base_key("https", "h", "/a"));
  BOOST_TEST(hash64(base_key("http", "h", "/a")) != hash64(base_key("https", "h", "/a")));
  BOOST_TEST(base_key("http", "h:443", "/a") == "http://h:443\n/a");
  BOOST_TEST(base_key("https", "h:80", "/a") == "https://h:80\n/a");
  BOOST_TEST(base_key("https", "h:443", "/a") == base_key("https", "h", "/a"));
  BOOST_TEST(variant_key("b", "fr") != variant_key("b", "en"));
}

BOOST_AUTO_TEST_CASE(hash_is_stable_and_hex_round_trips) {
  BOOST_TEST(hash64("item:42") == hash64("item:42"));
  BOOST_TEST(hash64("item:42") != hash64("item:43"));
  BOOST_TEST(hash64("") == 0xf52a15e9a9b5e89bull);  // fixed: every tier must agree, forever
  for (uint64_t v : {0ull, 1ull, 0xdeadbeefcafef00dull, ~0ull}) BOOST_TEST(*parse_hex(to_hex(v)) == v);
  BOOST_TEST(!parse_hex(""));
  BOOST_TEST(!parse_hex("12345678901234567"));
  BOOST_TEST(!parse_hex("12g4"));
  BOOST_TEST(*parse_hex("ABCdef") == 0xabcdefull);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(topology)

BOOST_AUTO_TEST_CASE(parses_nodes_and_picks_addresses) {
  auto t = Topology::parse(kTopo, "cluster.toml");
  BOOST_TEST(t.nodes.size() == 3u);
  BOOST_TEST(t.app_nodes().size() == 2u);
  BOOST_TEST(t.version_slots == 1024u);
  BOOST_TEST(t.node("app1").segment_prefix == "/tierce.t.app1");
  BOOST_TEST(t.uri_of(t.node("app2")) == "shm:///tmp/app2.sock");
  BOOST_CHECK_THROW(t.uri_of(t.node("proxy1")), TopologyError);  // shm wanted, tcp only
  t.transport = tierce::fabric::Transport::Tcp;
  BOOST_TEST(t.uri_of(t.node("app2")) == "tcp://127.0.0.1:7102");
}

BOOST_AUTO_TEST_CASE(homes_are_stable_and_spread) {
  auto t = Topology::parse(kTopo, "cluster.toml");
  std::map<std::string, int> count;
  for (uint64_t i = 0; i < 10000; ++i) {
    const auto& h = t.home_of(hash64("k" + std::to_string(i)));
    BOOST_REQUIRE(h.role == Role::App);
    BOOST_REQUIRE(&h == &t.home_of(hash64("k" + std::to_string(i))));
    ++count[h.name];
  }
  BOOST_TEST(count["app1"] > 4000);
  BOOST_TEST(count["app2"] > 4000);
}

BOOST_AUTO_TEST_CASE(errors_name_the_line) {
  auto err = [](const std::string& text) {
    try {
      Topology::parse(text, "c.toml");
    } catch (const TopologyError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string bad = kTopo;
  bad.replace(bad.find("version_slots"), 13, "version_slot");
  BOOST_TEST(err(bad).find("c.toml:6: [cluster] version_slot: unknown key") != std::string::npos);
  BOOST_TEST(err("[cluster]\nsecret_file=\"/s\"\n").find("no [[node]]") != std::string::npos);
  {
    auto proxies_only = Topology::parse(
        "[cluster]\nsecret_file=\"/s\"\n[[node]]\nname=\"p\"\nrole=\"proxy\"\nmemd=[\"tcp://h:1\"]\n", "c.toml");
    try {
      proxies_only.require_app_nodes();
      BOOST_FAIL("a topology without app nodes must be refused by the page caches");
    } catch (const TopologyError& e) {
      BOOST_TEST(std::string(e.what()).find("no node has role") != std::string::npos);
    }
  }
  BOOST_TEST(err("[cluster]\nsecret_file=\"/s\"\n[[node]]\nname=\"a\"\n").find("memd = ") !=
             std::string::npos);
  BOOST_TEST(err("[cluster]\nsecret_file=\"/s\"\n[dlm]\nalgorithm=\"paxos\"\n[[node]]\nname=\"a\"\n"
                 "lockd=[\"tcp://h:1\"]\n").find("c.toml:4: [dlm] algorithm") != std::string::npos);
  BOOST_TEST(err("[cluster]\nsecret_file=\"/s\"\n[dlm]\nheartbeat_ms=100\nlease_ms=200\n[[node]]\n"
                 "name=\"a\"\nlockd=[\"tcp://h:1\"]\n").find("3 x heartbeat_ms") != std::string::npos);
  BOOST_TEST(err("[cluster]\nsecret_file=\"/s\"\n[[node]]\nname=\"a\"\nmemd=[\"udp://h:1\"]\n")
                 .find("c.toml:5") != std::string::npos);
  BOOST_TEST(err("[cluster]\nsecret_file=\"/s\"\n[[node]]\nname=\"a\"\nmemd=[\"tcp://h:1\"]\n"
                 "[[node]]\nname=\"a\"\nmemd=[\"tcp://h:2\"]\n")
                 .find("repeated") != std::string::npos);
  BOOST_TEST(err("[cluster\n").find("c.toml:1") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(protocol)

BOOST_AUTO_TEST_CASE(messages_round_trip) {
  RegisterRequest r{1, 2, 3, {4, 5}};
  auto r2 = decode_register(encode(r));
  BOOST_TEST(r2.key == 1u);
  BOOST_TEST(r2.slot == 2u);
  BOOST_TEST(r2.seq_start == 3u);
  BOOST_TEST(r2.deps == r.deps);
  RegisterResult res{true, 99, "why"};
  auto res2 = decode_register_reply(encode(res));
  BOOST_TEST(res2.cacheable);
  BOOST_TEST(res2.version == 99u);
  BOOST_TEST(res2.reason == "why");
  InvalidateRequest inv{Scheme::InvalidateAll, 7, 8, "app1", {9}};
  auto inv2 = decode_invalidate(encode(inv));
  BOOST_TEST(inv2.scheme == Scheme::InvalidateAll);
  BOOST_TEST(inv2.ack_slot == 7u);
  BOOST_TEST(inv2.ack_token == 8u);
  BOOST_TEST(inv2.origin == "app1");
  BOOST_TEST(inv2.deps == inv.deps);
}

BOOST_AUTO_TEST_CASE(every_truncation_and_extension_is_rejected) {
  InvalidateRequest inv{Scheme::DependencyLists, 7, 8, "app1", {9, 10}};
  auto b = encode(inv);
  for (size_t n = 0; n < b.size(); ++n)
    BOOST_CHECK_THROW(decode_invalidate(std::span(b.data(), n)), ProtocolError);
  b.push_back(0);
  BOOST_CHECK_THROW(decode_invalidate(b), ProtocolError);
  auto r = encode(RegisterRequest{1, 2, 3, {4}});
  r[24] = 0xff;  // dependency count far beyond the body
  BOOST_CHECK_THROW(decode_register(r), ProtocolError);
  auto s = encode(inv);
  s[0] = 9;  // unknown scheme
  BOOST_CHECK_THROW(decode_invalidate(s), ProtocolError);
}

BOOST_AUTO_TEST_CASE(dependency_headers) {
  auto d = parse_dependencies(" item:42 category:7,user:3\t,, ");
  BOOST_TEST(d == deps({"item:42", "category:7", "user:3"}));
  BOOST_TEST(parse_dependencies("").empty());
  BOOST_CHECK_THROW(parse_dependencies(std::string(300, 'x')), ProtocolError);
  BOOST_CHECK_THROW(parse_dependencies("a\x01" "b"), ProtocolError);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(home)

BOOST_AUTO_TEST_CASE(fresh_tables_start_at_random_bases) {
  Table a(64), b(64);
  HomeState ha(a.data(), 64, {}, true), hb(b.data(), 64, {}, true);
  BOOST_TEST(ha.version(0) == ha.version(63));
  BOOST_TEST(ha.version(0) != hb.version(0));  // 2^-63 chance of a false failure
  BOOST_TEST(ha.seq() != hb.seq());
  BOOST_TEST(word_at(a.data(), 0).load() == kVersionsMagic);
}

BOOST_AUTO_TEST_CASE(invalidation_bumps_each_dependent_slot_once) {
  Table t(64);
  HomeState h(t.data(), 64, {}, true);
  uint64_t s0 = h.seq();
  auto r1 = h.register_page(100, 5, s0, deps({"item:1", "category:1"}));
  auto r2 = h.register_page(200, 6, s0, deps({"item:2", "category:1"}));
  auto r3 = h.register_page(300, 7, s0, deps({"item:3"}));
  BOOST_REQUIRE(r1.cacheable && r2.cacheable && r3.cacheable);
  BOOST_TEST(r1.version == h.version(5));
  auto inv = h.invalidate(deps({"item:1", "category:1"}), Scheme::DependencyLists);
  BOOST_TEST(inv.keys_bumped == 2u);
  BOOST_TEST(inv.slots_bumped == 2u);
  BOOST_TEST(h.version(5) == r1.version + 1);  // two matching dependencies, one bump
  BOOST_TEST(h.version(6) == r2.version + 1);
  BOOST_TEST(h.version(7) == r3.version);  // unrelated
  BOOST_TEST(h.seq() == s0 + 1);
  // Invalidated keys are forgotten: the next invalidation of item:1 bumps nothing.
  auto again = h.invalidate(deps({"item:1"}), Scheme::DependencyLists);
  BOOST_TEST(again.keys_bumped == 0u);
  BOOST_TEST(h.version(5) == r1.version + 1);
}

BOOST_AUTO_TEST_CASE(invalidate_all_bumps_every_registered_key) {
  Table t(64);
  HomeState h(t.data(), 64, {}, true);
  uint64_t s0 = h.seq();
  auto r1 = h.register_page(1, 1, s0, {});
  auto r2 = h.register_page(2, 2, s0, deps({"x"}));
  uint64_t idle = h.version(3);
  auto inv = h.invalidate({}, Scheme::InvalidateAll);
  BOOST_TEST(inv.keys_bumped == 2u);
  BOOST_TEST(h.version(1) == r1.version + 1);
  BOOST_TEST(h.version(2) == r2.version + 1);
  BOOST_TEST(h.version(3) == idle);
  // A render that started before an invalidate-all cannot register, whatever it depends on.
  auto late = h.register_page(4, 4, s0, deps({"y"}));
  BOOST_TEST(!late.cacheable);
}

// The registration race (docs/ARCHITECTURE.md §4), forced in the order that breaks naive designs:
//   render: read seq -> read the OLD row
//   update: commit the NEW row -> invalidate item:1 (nothing registered yet: bumps nothing)
//   render: register the page built from the OLD row
// Without the sequence check the old page would be registered (and then served) as valid until
// the next update of item:1 — possibly for ever.
BOOST_AUTO_TEST_CASE(registration_race_is_refused) {
  Table t(64);
  HomeState h(t.data(), 64, {}, true);
  int db_row = 1;                // "the database"
  uint64_t seq_start = h.seq();  // render: before it reads the database
  int rendered_from = db_row;    // render: reads the old row
  db_row = 2;                    // update: commits
  auto inv = h.invalidate(deps({"item:1"}), Scheme::DependencyLists);  // update: invalidates
  BOOST_TEST(inv.keys_bumped == 0u);  // the page was not registered yet: nothing to bump
  auto reg = h.register_page(42, 9, seq_start, deps({"item:1", "user:1"}));
  BOOST_TEST(rendered_from == 1);
  BOOST_TEST(!reg.cacheable);
  BOOST_TEST(reg.reason.find("invalidation") != std::string::npos);
  BOOST_TEST(h.stats().refused_race == 1u);

  // The same render order with an unrelated update passes...
  uint64_t s2 = h.seq();
  h.invalidate(deps({"item:2"}), Scheme::DependencyLists);
  BOOST_TEST(h.register_page(43, 10, s2, deps({"item:1"})).cacheable);
  // ...and a render that read the sequence after the update's invalidation saw the new row.
  uint64_t s3 = h.seq();
  auto ok = h.register_page(42, 9, s3, deps({"item:1"}));
  BOOST_TEST(ok.cacheable);
  // Once registered, the next update of item:1 moves the slot past the page's tag.
  h.invalidate(deps({"item:1"}), Scheme::DependencyLists);
  BOOST_TEST(h.version(9) == ok.version + 1);
}

BOOST_AUTO_TEST_CASE(a_log_that_no_longer_reaches_back_refuses) {
  Table t(64);
  HomeState h(t.data(), 64, HomeLimits{1000, 4}, true);
  uint64_t s0 = h.seq();
  for (int i = 0; i < 5; ++i) h.invalidate(deps({"other"}), Scheme::DependencyLists);
  auto r = h.register_page(1, 1, s0, deps({"item:1"}));
  BOOST_TEST(!r.cacheable);  // "other" never touched item:1, but the log cannot prove it
  BOOST_TEST(h.stats().refused_log == 1u);
  BOOST_TEST(h.register_page(1, 1, h.seq(), deps({"item:1"})).cacheable);
  BOOST_TEST(!h.register_page(2, 2, h.seq() + 5, {}).cacheable);  // from another incarnation
  BOOST_TEST(!h.register_page(3, 64, h.seq(), {}).cacheable);     // slot out of range
}

BOOST_AUTO_TEST_CASE(evicting_a_key_bumps_it) {
  Table t(64);
  HomeState h(t.data(), 64, HomeLimits{2, 64}, true);
  uint64_t s = h.seq();
  auto r1 = h.register_page(1, 1, s, deps({"a"}));
  h.register_page(2, 2, s, deps({"b"}));
  h.register_page(3, 3, s, deps({"c"}));  // evicts key 1 (oldest)
  BOOST_TEST(h.version(1) == r1.version + 1);
  BOOST_TEST(h.stats().keys == 2u);
  BOOST_TEST(h.stats().evictions == 1u);
  BOOST_TEST(h.invalidate(deps({"a"}), Scheme::DependencyLists).keys_bumped == 0u);
}

BOOST_AUTO_TEST_CASE(schemes_parse) {
  BOOST_TEST(parse_scheme("invalidate-all") == Scheme::InvalidateAll);
  BOOST_TEST(parse_scheme("dependency-lists") == Scheme::DependencyLists);
  BOOST_CHECK_THROW(parse_scheme("all"), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
