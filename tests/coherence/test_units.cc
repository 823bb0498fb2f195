// Unit tests of coherence/: keys, topology, messages, and the home's dependency index with the
// registration race forced step by step.
#define BOOST_TEST_MODULE coherence_units
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <cstring>
#include <map>
#include <ostream>
#include <set>
#include <vector>

#include "coherence/agent_wire.h"
#include "coherence/home.h"
#include "coherence/key.h"
#include "coherence/layout.h"
#include "coherence/ledger.h"
#include "coherence/protocol.h"
#include "coherence/topology.h"
#include "coherence/writer.h"

using namespace tierce::coherence;

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

// Node keys in the topology: parsed to the bytes, expected by clients (cluster::expect), all or
// none; a malformed key names its line and the command that prints a good one.
BOOST_AUTO_TEST_CASE(public_keys_are_all_or_none_and_clients_expect_them) {
  const auto k1 = tierce::fabric::NodeKey::generate().public_key();
  const auto k2 = tierce::fabric::NodeKey::generate().public_key();
  auto node = [](const char* name, std::optional<tierce::fabric::PublicKey> k, const char* extra) {
    std::string s = std::string("[[node]]\nname=\"") + name + "\"\nmemd=[\"tcp://h:1\"]\n" + extra;
    if (k) s += "public_key=\"" + tierce::fabric::format_public_key(*k) + "\"\n";
    return s;
  };
  const std::string head = "[cluster]\nsecret_file=\"/s\"\n";
  auto t = Topology::parse(head + node("app1", k1, "") + node("app2", k2, ""), "c.toml");
  BOOST_TEST(t.node("app1").public_key.value() == k1);
  auto id = tierce::cluster::expect(t.node("app2"));
  BOOST_TEST(id.expect_node == "app2");
  BOOST_TEST(id.expect_key.value() == k2);
  auto plain = Topology::parse(head + node("app1", {}, "") + node("app2", {}, ""), "c.toml");
  BOOST_TEST(!tierce::cluster::expect(plain.node("app1")).expect_key.has_value());
  BOOST_TEST(tierce::cluster::expect(plain.node("app1")).expect_node.empty());
  auto err = [&](const std::string& text) {
    try {
      Topology::parse(text, "c.toml");
    } catch (const TopologyError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  BOOST_TEST(err(head + node("app1", k1, "") + node("app2", {}, "")).find("\"app2\" has no public_key") !=
             std::string::npos);
  BOOST_TEST(err(head + node("app1", {}, "public_key=\"ed25519:short\"\n"))
                 .find("tierce-fabric keygen") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(writer_agent_addresses) {
  auto t = Topology::parse(kTopo, "cluster.toml");
  BOOST_TEST(t.writer_uri_of(t.node("app1")) == "shm:///tmp/app1.sock");  // none: memd's
  std::string with = kTopo;
  with.replace(with.find("memd = [\"tcp://127.0.0.1:7101\""), 0,
               "writer = [\"tcp://127.0.0.1:7151\", \"shm:///tmp/app1-writer.sock\"]\n");
  auto w = Topology::parse(with, "cluster.toml");
  BOOST_TEST(w.writer_uri_of(w.node("app1")) == "shm:///tmp/app1-writer.sock");
  w.transport = tierce::fabric::Transport::Tcp;
  BOOST_TEST(w.writer_uri_of(w.node("app1")) == "tcp://127.0.0.1:7151");
  BOOST_TEST(w.coherence_digest() == t.coherence_digest());  // addresses are not in it
  std::string proxy = kTopo;
  proxy.replace(proxy.find("memd = [\"tcp://127.0.0.1:7201\"]"), 0, "writer = [\"tcp://h:1\"]\n");
  BOOST_CHECK_THROW(Topology::parse(proxy, "cluster.toml"), TopologyError);
}

BOOST_AUTO_TEST_CASE(coherence_settings_and_digest) {
  auto t = Topology::parse(kTopo, "cluster.toml");
  BOOST_TEST(t.coherence.scheme == Scheme::DependencyLists);  // defaults
  BOOST_TEST(t.coherence.lease_ms == 1000u);
  BOOST_TEST(t.coherence.fence_bound_ms() == 1050u);
  std::string with = std::string(kTopo) +
                     "[coherence]\nscheme = \"invalidate-all\"\nlease_ms = 400\nclock_skew_ms = 10\n";
  auto u = Topology::parse(with, "cluster.toml");
  BOOST_TEST(u.coherence.scheme == Scheme::InvalidateAll);
  BOOST_TEST(u.coherence.fence_bound_ms() == 410u);
  // What nodes must agree on changes the digest; how they reach each other does not.
  BOOST_TEST(t.coherence_digest() != u.coherence_digest());
  std::string moved = kTopo;
  moved.replace(moved.find("7102"), 4, "9999");
  BOOST_TEST(Topology::parse(moved, "x").coherence_digest() == t.coherence_digest());
  std::string slots = kTopo;
  slots.replace(slots.find("1024"), 4, "2048");
  BOOST_TEST(Topology::parse(slots, "x").coherence_digest() != t.coherence_digest());
  auto err = [&](const std::string& extra) {
    try {
      Topology::parse(std::string(kTopo) + extra, "c.toml");
    } catch (const TopologyError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  BOOST_TEST(err("[coherence]\nscheme = \"all\"\n").find("[coherence] scheme") != std::string::npos);
  BOOST_TEST(err("[coherence]\nlease_ms = 5\n").find("out of range") != std::string::npos);
  BOOST_TEST(err("[coherence]\nfence = 1\n").find("unknown key") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(arbiter_settings) {
  auto t = Topology::parse(kTopo, "cluster.toml");
  BOOST_TEST(!t.arbiter.enabled());
  std::string with = std::string(kTopo) +
                     "[arbiter]\ntable = \"tierce.fence\"\nport = 3307\nuser = \"f\"\n";
  auto u = Topology::parse(with, "cluster.toml");
  BOOST_TEST(u.arbiter.enabled());
  BOOST_TEST(u.arbiter.table == "tierce.fence");
  BOOST_TEST(u.arbiter.track_table() == "tierce.fence_track");
  BOOST_TEST(u.arbiter.port == 3307u);
  BOOST_TEST(u.arbiter_drop_after_ms() == 3000u);  // 3 x lease by default
  BOOST_TEST(u.arbiter.password() == "");
  // Homes that drop lost nodes and homes that do not must not share a cluster.
  BOOST_TEST(u.coherence_digest() != t.coherence_digest());
  auto err = [&](const std::string& extra) {
    try {
      Topology::parse(std::string(kTopo) + extra, "c.toml");
    } catch (const TopologyError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  BOOST_TEST(err("[arbiter]\nport = 1\n").find("[arbiter] table") != std::string::npos);
  BOOST_TEST(err("[arbiter]\ntable = \"fence\"\n").find("schema.table") != std::string::npos);
  BOOST_TEST(err("[arbiter]\ntable = \"a.b; DROP\"\n").find("schema.table") != std::string::npos);
  BOOST_TEST(err("[arbiter]\ntable = \"a.b\"\ndrop_after_ms = 1500\n").find("2 x") !=
             std::string::npos);
  BOOST_TEST(err("[arbiter]\ntable = \"a.b\"\npasswd = \"x\"\n").find("unknown key") !=
             std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(protocol)

BOOST_AUTO_TEST_CASE(messages_round_trip) {
  RegisterRequest r{11, 1, 3, {4, 5}};
  auto r2 = decode_register(encode(r));
  BOOST_TEST(r2.digest == 11u);
  BOOST_TEST(r2.key == 1u);
  BOOST_TEST(r2.seq_start == 3u);
  BOOST_TEST(r2.deps == r.deps);
  RegisterResult res{Refusal::None, 7, 99, ""};
  auto res2 = decode_register_reply(encode(res));
  BOOST_TEST(res2.cacheable());
  BOOST_TEST(res2.slot == 7u);
  BOOST_TEST(res2.version == 99u);
  RegisterResult no{Refusal::Fenced, 7, 0, "fenced"};
  auto no2 = decode_register_reply(encode(no));
  BOOST_TEST(no2.refusal == Refusal::Fenced);
  BOOST_TEST(no2.reason == "fenced");
  InvalidateRequest inv{12, Scheme::InvalidateAll, "app1", 5, 6, 7, 8, {9}, {}};
  auto inv2 = decode_invalidate(encode(inv));
  BOOST_TEST(inv2.digest == 12u);
  BOOST_TEST(inv2.scheme == Scheme::InvalidateAll);
  BOOST_TEST(inv2.origin == "app1");
  BOOST_TEST(inv2.writer_incarnation == 5u);
  BOOST_TEST(inv2.number == 6u);
  BOOST_TEST(inv2.ack_cell == 7u);
  BOOST_TEST(inv2.ack_tag == 8u);
  BOOST_TEST(inv2.deps == inv.deps);
}

BOOST_AUTO_TEST_CASE(every_truncation_and_extension_is_rejected) {
  InvalidateRequest inv{12, Scheme::DependencyLists, "app1", 5, 6, 7, 8, {9, 10}, {}};
  auto b = encode(inv);
  for (size_t n = 0; n < b.size(); ++n)
    BOOST_CHECK_THROW(decode_invalidate(std::span(b.data(), n)), ProtocolError);
  b.push_back(0);
  BOOST_CHECK_THROW(decode_invalidate(b), ProtocolError);
  auto r = encode(RegisterRequest{11, 2, 3, {4}});
  r[25] = 0xff;  // dependency count far beyond the body
  BOOST_CHECK_THROW(decode_register(r), ProtocolError);
  auto s = encode(inv);
  s[9] = 9;  // unknown scheme
  BOOST_CHECK_THROW(decode_invalidate(s), ProtocolError);
  auto v = encode(inv);
  v[0] = 1;  // another protocol version: refused with a clear reason
  try {
    decode_invalidate(v);
    BOOST_FAIL("version 1 accepted");
  } catch (const ProtocolError& e) {
    BOOST_TEST(std::string(e.what()).find("protocol version 1") != std::string::npos);
  }
  auto reply = encode(RegisterResult{Refusal::None, 1, 2, ""});
  reply[0] = 200;  // unknown refusal
  BOOST_CHECK_THROW(decode_register_reply(reply), ProtocolError);
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

namespace {
// Keys whose slots (of `slots`) are all different, so the tests can reason about one key each.
std::vector<uint64_t> keys_apart(size_t n, uint64_t slots) {
  std::vector<uint64_t> keys;
  std::set<uint64_t> used;
  for (uint64_t k = 1; keys.size() < n; ++k)
    if (used.insert(slot_of(k, slots)).second) keys.push_back(k);
  return keys;
}
}  // namespace

BOOST_AUTO_TEST_CASE(fresh_tables_start_at_random_bases) {
  Table a(64), b(64);
  HomeState ha(a.data(), 64, {}, true, 0xabc, Scheme::DependencyLists, 0x77),
      hb(b.data(), 64, {}, true);
  BOOST_TEST(ha.version(0) == ha.version(63));
  BOOST_TEST(ha.version(0) != hb.version(0));  // 2^-63 chance of a false failure
  BOOST_TEST(ha.seq() != hb.seq());
  BOOST_TEST(word_at(a.data(), 0).load() == kVersionsMagic);
  BOOST_TEST(word_at(a.data(), kDigestOffset).load() == 0xabcu);
  BOOST_TEST(word_at(a.data(), kHomeNodeOffset).load() == 0x77u);  // the home's identity
  BOOST_TEST(word_at(b.data(), kHomeNodeOffset).load() == 0u);     // none given: not stamped
}

BOOST_AUTO_TEST_CASE(the_home_derives_the_slot_from_the_key) {
  Table t(64);
  HomeState h(t.data(), 64, {}, true);
  for (uint64_t k : {1ull, 77ull, 0xdeadbeefull}) {
    auto r = h.register_page(k, h.seq(), deps({"d"}));
    BOOST_REQUIRE(r.cacheable());
    BOOST_TEST(r.slot == slot_of(k, 64));
    BOOST_TEST(r.version == h.version(r.slot));
  }
}

BOOST_AUTO_TEST_CASE(invalidation_bumps_each_dependent_slot_once) {
  Table t(64);
  HomeState h(t.data(), 64, {}, true);
  auto k = keys_apart(3, 64);
  uint64_t s0 = h.seq();
  auto r1 = h.register_page(k[0], s0, deps({"item:1", "category:1"}));
  auto r2 = h.register_page(k[1], s0, deps({"item:2", "category:1"}));
  auto r3 = h.register_page(k[2], s0, deps({"item:3"}));
  BOOST_REQUIRE(r1.cacheable() && r2.cacheable() && r3.cacheable());
  auto inv = h.invalidate(deps({"item:1", "category:1"}), Scheme::DependencyLists);
  BOOST_TEST(inv.keys_bumped == 2u);
  BOOST_TEST(inv.slots_bumped == 2u);
  BOOST_TEST(h.version(r1.slot) == r1.version + 1);  // two matching dependencies, one bump
  BOOST_TEST(h.version(r2.slot) == r2.version + 1);
  BOOST_TEST(h.version(r3.slot) == r3.version);  // unrelated
  BOOST_TEST(h.seq() == s0 + 1);
  // Invalidated keys are forgotten: the next invalidation of item:1 bumps nothing.
  auto again = h.invalidate(deps({"item:1"}), Scheme::DependencyLists);
  BOOST_TEST(again.keys_bumped == 0u);
  BOOST_TEST(h.version(r1.slot) == r1.version + 1);
}

// Under dependency-lists a page that names no dependency would never be bumped by an update:
// it is refused (an empty Tierce-Depends header registered such pages before).
BOOST_AUTO_TEST_CASE(no_dependency_is_not_cacheable_under_dependency_lists) {
  Table t(64);
  HomeState lists(t.data(), 64, {}, true, 0, Scheme::DependencyLists);
  auto r = lists.register_page(5, lists.seq(), {});
  BOOST_TEST(!r.cacheable());
  BOOST_TEST(r.refusal == Refusal::NoDependencies);
  Table t2(64);
  HomeState all(t2.data(), 64, {}, true, 0, Scheme::InvalidateAll);
  BOOST_TEST(all.register_page(5, all.seq(), {}).cacheable());
}

BOOST_AUTO_TEST_CASE(invalidate_all_bumps_every_registered_key) {
  Table t(64);
  HomeState h(t.data(), 64, {}, true, 0, Scheme::InvalidateAll);
  auto k = keys_apart(4, 64);
  uint64_t s0 = h.seq();
  auto r1 = h.register_page(k[0], s0, {});
  auto r2 = h.register_page(k[1], s0, deps({"x"}));
  uint64_t idle = h.version(slot_of(k[2], 64));
  auto inv = h.invalidate({}, Scheme::InvalidateAll);
  BOOST_TEST(inv.keys_bumped == 2u);
  BOOST_TEST(h.version(r1.slot) == r1.version + 1);
  BOOST_TEST(h.version(r2.slot) == r2.version + 1);
  BOOST_TEST(h.version(slot_of(k[2], 64)) == idle);
  // A render that started before an invalidate-all cannot register, whatever it depends on.
  auto late = h.register_page(k[3], s0, deps({"y"}));
  BOOST_TEST(!late.cacheable());
  BOOST_TEST(late.refusal == Refusal::Race);
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
  auto k = keys_apart(2, 64);
  int db_row = 1;                // "the database"
  uint64_t seq_start = h.seq();  // render: before it reads the database
  int rendered_from = db_row;    // render: reads the old row
  db_row = 2;                    // update: commits
  auto inv = h.invalidate(deps({"item:1"}), Scheme::DependencyLists);  // update: invalidates
  BOOST_TEST(inv.keys_bumped == 0u);  // the page was not registered yet: nothing to bump
  auto reg = h.register_page(k[0], seq_start, deps({"item:1", "user:1"}));
  BOOST_TEST(rendered_from == 1);
  BOOST_TEST(!reg.cacheable());
  BOOST_TEST(reg.refusal == Refusal::Race);
  BOOST_TEST(h.stats().refused_race == 1u);

  // The same render order with an unrelated update passes...
  uint64_t s2 = h.seq();
  h.invalidate(deps({"item:2"}), Scheme::DependencyLists);
  BOOST_TEST(h.register_page(k[1], s2, deps({"item:1"})).cacheable());
  // ...and a render that read the sequence after the update's invalidation saw the new row.
  uint64_t s3 = h.seq();
  auto ok = h.register_page(k[0], s3, deps({"item:1"}));
  BOOST_TEST(ok.cacheable());
  // Once registered, the next update of item:1 moves the slot past the page's tag.
  h.invalidate(deps({"item:1"}), Scheme::DependencyLists);
  BOOST_TEST(h.version(ok.slot) == ok.version + 1);
}

BOOST_AUTO_TEST_CASE(a_log_that_no_longer_reaches_back_refuses) {
  Table t(64);
  HomeState h(t.data(), 64, HomeLimits{1000, 4}, true);
  uint64_t s0 = h.seq();
  for (int i = 0; i < 5; ++i) h.invalidate(deps({"other"}), Scheme::DependencyLists);
  auto r = h.register_page(1, s0, deps({"item:1"}));
  BOOST_TEST(!r.cacheable());  // "other" never touched item:1, but the log cannot prove it
  BOOST_TEST(r.refusal == Refusal::LogTooShort);
  BOOST_TEST(h.stats().refused_log == 1u);
  BOOST_TEST(h.register_page(1, h.seq(), deps({"item:1"})).cacheable());
  auto other = h.register_page(2, h.seq() + 5, deps({"d"}));  // from another incarnation
  BOOST_TEST(other.refusal == Refusal::OtherIncarnation);
}

BOOST_AUTO_TEST_CASE(evicting_a_key_bumps_it) {
  Table t(64);
  HomeState h(t.data(), 64, HomeLimits{2, 64}, true);
  auto k = keys_apart(3, 64);
  uint64_t s = h.seq();
  auto r1 = h.register_page(k[0], s, deps({"a"}));
  h.register_page(k[1], s, deps({"b"}));
  h.register_page(k[2], s, deps({"c"}));  // evicts k[0] (oldest)
  BOOST_TEST(h.version(r1.slot) == r1.version + 1);
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

// What a home has applied of each origin's invalidations: the evidence its fence renews on.
BOOST_AUTO_TEST_SUITE(ledger)

BOOST_AUTO_TEST_CASE(first_sight_is_unknown_until_covered) {
  OriginLedger l(2);
  BOOST_TEST(l.standing(0, {0, 0}) == Standing::Current);  // a counter nobody issued from yet
  BOOST_TEST(l.standing(0, {77, 0}) == Standing::Unknown);
  BOOST_TEST(l.standing(0, {77, 5}) == Standing::Unknown);
  l.cover(0, {77, 5});
  BOOST_TEST(l.standing(0, {77, 5}) == Standing::Current);
  BOOST_TEST(l.view(0).covered == 5u);
  BOOST_TEST(l.standing(1, {88, 1}) == Standing::Unknown);  // origins are apart
}

BOOST_AUTO_TEST_CASE(out_of_order_numbers_fill_the_gap) {
  OriginLedger l(1);
  l.cover(0, {7, 10});
  BOOST_TEST(l.needed(0, {7, 12}));
  l.applied(0, {7, 12});
  BOOST_TEST(l.standing(0, {7, 12}) == Standing::Behind);  // 11 was issued, not applied
  BOOST_TEST(!l.needed(0, {7, 12}));                       // a resent 12: ack only
  BOOST_TEST(!l.needed(0, {7, 9}));                        // covered by the catch-up
  l.applied(0, {7, 11});
  BOOST_TEST(l.standing(0, {7, 12}) == Standing::Current);
  BOOST_TEST(l.view(0).covered == 12u);
  BOOST_TEST(l.view(0).above == 0u);
  BOOST_TEST(l.standing(0, {7, 3}) == Standing::Current);  // an old reading: 1..3 are held
}

// Issue 29, path 3: under write load the invalidations numbered after a renewal read the counter
// arrive before it checks its ledger; `covered` passes the reading. Within one incarnation that is
// Current — answering Unknown made the home catch up (bump every page it holds) spuriously.
BOOST_AUTO_TEST_CASE(numbers_applied_after_the_reading_leave_the_home_current) {
  OriginLedger l(1);
  l.cover(0, {7, 10});
  const IssuedNumber read{7, 11};  // the renewal read 11 ...
  l.applied(0, {7, 11});           // ... then 11, 12 and 13 arrived before it checked
  l.applied(0, {7, 12});
  l.applied(0, {7, 13});
  BOOST_TEST(l.view(0).covered == 13u);
  BOOST_TEST(l.standing(0, read) == Standing::Current);
  // Out of order past the reading: still Current (everything up to 11 is held) ...
  l.applied(0, {7, 15});
  BOOST_TEST(l.standing(0, {7, 12}) == Standing::Current);
  // ... while a gap at or below the reading is not.
  BOOST_TEST(l.standing(0, {7, 15}) == Standing::Behind);
  // Another incarnation is still Unknown, whatever its number.
  BOOST_TEST(l.standing(0, {8, 3}) == Standing::Unknown);
}

BOOST_AUTO_TEST_CASE(a_gap_is_closed_by_a_catch_up_and_late_numbers_only_ack) {
  OriginLedger l(1);
  l.cover(0, {7, 0});
  l.applied(0, {7, 2});  // 1 was numbered by a writer that died before sending it
  BOOST_TEST(l.standing(0, {7, 2}) == Standing::Behind);
  l.cover(0, {7, 2});  // the home invalidated everything after reading 2
  BOOST_TEST(l.standing(0, {7, 2}) == Standing::Current);
  BOOST_TEST(!l.needed(0, {7, 1}));  // arriving late: superseded
}

BOOST_AUTO_TEST_CASE(a_new_incarnation_is_unknown_and_its_early_numbers_carry_over) {
  OriginLedger l(1);
  l.cover(0, {7, 5});
  l.applied(0, {9, 1});  // a new writer segment (httpd restarted with a fresh one)
  l.applied(0, {9, 3});
  BOOST_TEST(!l.needed(0, {9, 3}));
  BOOST_TEST(l.standing(0, {9, 3}) == Standing::Unknown);
  l.cover(0, {9, 2});  // adopted at 2 after a catch-up: 3 (applied) carries over
  BOOST_TEST(l.standing(0, {9, 3}) == Standing::Current);
}

BOOST_AUTO_TEST_CASE(memory_is_bounded_whatever_the_writers_do) {
  OriginLedger l(1);
  l.cover(0, {7, 0});
  for (uint64_t n = 2; n < OriginLedger::kMaxAbove + 10; ++n) l.applied(0, {7, n});
  BOOST_TEST(l.view(0).above <= OriginLedger::kMaxAbove);
  BOOST_TEST(l.standing(0, {7, 5}) == Standing::Unknown);  // overflowed: catch up
  l.cover(0, {7, OriginLedger::kMaxAbove + 10});
  BOOST_TEST(l.standing(0, {7, OriginLedger::kMaxAbove + 10}) == Standing::Current);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(writer)

BOOST_AUTO_TEST_CASE(numbers_are_shared_by_every_mapper_and_survive_a_remap) {
  std::string name = "/tierce-unit-writer-" + std::to_string(::getpid());
  tierce::fabric::SharedSegment::unlink(name);
  {
    WriterLog a(name), b(name);  // an httpd child and memd: the same counter
    auto n1 = a.issue();
    auto n2 = b.issue();
    BOOST_TEST(n1.incarnation != 0u);
    BOOST_TEST(n1.incarnation == n2.incarnation);
    BOOST_TEST(n2.number == n1.number + 1);
    BOOST_TEST(b.last().number == n2.number);
    BOOST_TEST(!a.remap_if_replaced());
    // Removed behind our backs: the next number goes to a segment found by the name again.
    tierce::fabric::SharedSegment::unlink(name);
    auto n3 = a.issue();
    BOOST_TEST(n3.incarnation != n1.incarnation);
    BOOST_TEST(b.remap_if_replaced());
    BOOST_TEST(b.last().incarnation == n3.incarnation);
    BOOST_TEST(b.last().number == n3.number);
  }
  tierce::fabric::SharedSegment::unlink(name);
}

// Issue 29: the digest of the numbering process, and skip marks (docs/coherence.md).
BOOST_AUTO_TEST_CASE(the_digest_goes_before_the_number_and_skip_marks_are_set_dated_cleared) {
  std::string name = "/tierce-unit-skip-" + std::to_string(::getpid());
  tierce::fabric::SharedSegment::unlink(name);
  {
    WriterLog reader(name), writer(name, 0x1234);
    BOOST_TEST(reader.reading(0).digest == 0u);  // nobody numbered yet
    (void)writer.issue();
    BOOST_TEST(reader.reading(0).digest == 0x1234u);
    BOOST_TEST(reader.reading(0).issued.number == 1u);
    // A mark: pending then a time no earlier than the call.
    uint64_t before = tierce::fabric::monotonic_ns();
    uint64_t m = writer.mark_skip(1);
    BOOST_TEST(skip_state(m) == SkipState::Since);
    BOOST_TEST(m >= before);
    BOOST_TEST(reader.reading(1).skip == m);   // the home of index 1 sees it in its reading
    BOOST_TEST(reader.reading(0).skip == 0u);  // another home does not
    BOOST_TEST(writer.mark_skip(1) == m);      // marked already: unchanged
    BOOST_TEST(!writer.clear_skip(1, m + 1));  // another mark than the one seen: kept
    BOOST_TEST(writer.clear_skip(1, m));
    BOOST_TEST(reader.skip_word(1) == 0u);
    BOOST_TEST(writer.mark_skip(kMaxSkipHomes) == 0u);  // beyond the region: never marked
    // A pending mark (its writer died before dating it) is dated by the keeper.
    auto seg = tierce::fabric::SharedSegment::open(name);
    word_at(seg.data(), skip_offset(2)).store(kSkipPending);
    BOOST_TEST(skip_state(reader.skip_word(2)) == SkipState::Pending);
    BOOST_TEST(reader.date_pending_skip(2));
    BOOST_TEST(skip_state(reader.skip_word(2)) == SkipState::Since);
    BOOST_TEST(!reader.date_pending_skip(2));
    // What a home parses from a remote read of the region.
    uint64_t words[kWriterHeaderBytes / 8 + 3] = {};
    std::memcpy(words, seg.data(), sizeof words);
    auto r = parse_writer_reading(words, sizeof words / 8, 2);
    BOOST_TEST(r.digest == 0x1234u);
    BOOST_TEST(r.skip == reader.skip_word(2));
    BOOST_TEST(parse_writer_reading(words, kWriterHeaderBytes / 8, 2).skip == 0u);  // not read
  }
  tierce::fabric::SharedSegment::unlink(name);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- the writer agent's socket (agent_wire.h) ---------------------------------------------------

BOOST_AUTO_TEST_CASE(agent_socket_messages_round_trip) {
  namespace aw = agentwire;
  aw::Request q;
  q.op = aw::Op::Invalidate;
  q.id = 7;
  q.scheme = Scheme::DependencyLists;
  q.mark = {MarkOp::Pend, 0xabcdef, 1500};
  q.give_up_after_ms = 200;
  q.deps = {1, 2, 3};
  auto b = aw::encode(q);
  BOOST_TEST(b.size() == 40u + 24u);
  aw::Request d = aw::decode_request(b);
  BOOST_TEST(d.id == 7u);
  BOOST_TEST(d.deps == q.deps);
  BOOST_TEST(d.mark.token == 0xabcdefu);
  BOOST_TEST(d.mark.ttl_ms == 1500u);
  BOOST_TEST(d.give_up_after_ms == 200u);
  q.op = aw::Op::Register;
  q.key = 99;
  q.seq_start = 12;
  d = aw::decode_request(aw::encode(q));
  BOOST_TEST(d.key == 99u);
  BOOST_TEST(d.seq_start == 12u);
  BOOST_TEST(d.deps == q.deps);

  aw::Reply r;
  r.op = aw::Op::Invalidate;
  r.id = 7;
  r.outcome.number = {5, 6};
  r.outcome.homes = 2;
  r.outcome.acked = {"app1"};
  r.outcome.fenced = {"app2: no answer"};
  r.outcome.elapsed = std::chrono::milliseconds(3);
  aw::Reply e = aw::decode_reply(aw::encode(r));
  BOOST_TEST(e.outcome.number.number == 6u);
  BOOST_TEST(e.outcome.acked == r.outcome.acked);
  BOOST_TEST(e.outcome.fenced == r.outcome.fenced);
  BOOST_TEST(!e.outcome.complete());
  BOOST_TEST(e.outcome.elapsed.count() == 3'000'000);
  r.op = aw::Op::Register;
  r.registered = {Refusal::Race, 4, 0, "raced"};
  e = aw::decode_reply(aw::encode(r));
  BOOST_TEST(int(e.registered.refusal) == int(Refusal::Race));
  BOOST_TEST(e.registered.reason == "raced");
  r.status = aw::Status::Unavailable;
  r.message = "home down";
  e = aw::decode_reply(aw::encode(r));
  BOOST_TEST(int(e.status) == int(aw::Status::Unavailable));
  BOOST_TEST(e.message == "home down");
}

BOOST_AUTO_TEST_CASE(agent_socket_requests_are_decoded_strictly) {
  namespace aw = agentwire;
  aw::Request q;
  q.op = aw::Op::Invalidate;
  q.deps = {1};
  const auto good = aw::encode(q);
  auto refused = [](std::vector<uint8_t> b, const std::string& why) {
    try {
      aw::decode_request(b);
    } catch (const aw::AgentWireError& e) {
      BOOST_TEST_MESSAGE(e.what());
      BOOST_CHECK_MESSAGE(std::string(e.what()).find(why) != std::string::npos, e.what());
      return;
    }
    BOOST_ERROR("accepted: " << why);
  };
  auto b = good;
  b[0] ^= 1;
  refused(b, "wrong magic");
  b = good;
  b[4] = 9;
  refused(b, "unknown op");
  b = good;
  b[5] = 1;
  refused(b, "reserved");
  b = good;
  b[16] = 2;
  refused(b, "unknown scheme");
  b = good;
  b[17] = 3;
  refused(b, "unknown mark");
  b = good;
  b.pop_back();
  refused(b, "dependencies need");
  b = good;
  b[32] = 1;  // give_up_after without a mark
  refused(b, "only for a pending mark");
  q.scheme = Scheme::InvalidateAll;
  b = aw::encode(q);
  refused(b, "invalidate-all names no dependencies");
  q.scheme = Scheme::DependencyLists;
  q.deps.assign(aw::kMaxDeps + 1, 1);
  BOOST_CHECK_THROW(aw::encode(q), aw::AgentWireError);
  refused(std::vector<uint8_t>(aw::kMaxMessage + 1, 0), "bytes (at most");
  refused({1, 2, 3}, "ends inside");
}
