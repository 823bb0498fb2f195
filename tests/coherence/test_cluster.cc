// coherence over real processes: two app nodes' tierce-memd with [coherence] (the home role),
// reached through coherence::ClusterClient over the transport given by --transport=tcp|shm.
// Registration, the registration race through the real services, invalidations acknowledged by
// remote fetch-and-add, invalidate-all, garbage messages, a killed home (fail closed, a missing
// ack reported), and a restarted home (a new incarnation: old tags never match again; an
// invalidation reaches it even from a client that still holds connections to the old one).
#define BOOST_TEST_MODULE coherence_cluster
#include <boost/test/unit_test.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "coherence/client.h"
#include "coherence/key.h"
#include "coherence/layout.h"
#include "coherence/protocol.h"
#include "tests/agents/memd_test_util.h"

using namespace tierce;
using namespace tierce::coherence;
using namespace memd_test;
using namespace std::chrono_literals;

namespace {

std::string transport_arg() {
  auto& mts = boost::unit_test::framework::master_test_suite();
  for (int i = 1; i < mts.argc; ++i) {
    std::string a = mts.argv[i];
    if (a.rfind("--transport=", 0) == 0) return a.substr(12);
  }
  return "tcp";
}


struct Cluster {
  TempDir dir;
  std::string secret = make_secret(dir);
  std::string topo_path = dir / "cluster.toml";
  std::string prefix = "/tierce.t" + std::to_string(::getpid()) + random_suffix().substr(0, 6);
  std::vector<std::string> names{"app1", "app2"};
  std::vector<Child> memd{2};

  Cluster() {
    std::string t = "[cluster]\nname = \"t\"\nsecret_file = \"" + secret + "\"\ntransport = \"" +
                    transport_arg() + "\"\nversion_slots = 4096\n";
    for (auto& n : names) {
      t += "[[node]]\nname = \"" + n + "\"\nrole = \"app\"\nmemd = [\"tcp://127.0.0.1:" +
           std::to_string(free_port()) + "\", \"shm://" + dir.path() + "/" + n +
           ".sock\"]\nsegment_prefix = \"" + prefix + "." + n + "\"\n";
    }
    write_file(topo_path, t);
    auto topo = Topology::load(topo_path);
    for (size_t i = 0; i < names.size(); ++i) {
      const auto& n = topo.node(names[i]);
      std::string cfg = "[memd]\nnode = \"" + n.name + "\"\nlisten = [\"" + n.memd[0] + "\", \"" +
                        n.memd[1] + "\"]\nsecret_file = \"" + secret + "\"\nready_file = \"" +
                        dir.path() + "/" + n.name + ".ready\"\nlog_level = \"warn\"\n" +
                        "[coherence]\ntopology = \"" + topo_path + "\"\nlog_entries = 1024\n";
      write_file(dir / (n.name + ".toml"), cfg);
      start(i);
    }
  }
  ~Cluster() {
    for (auto& c : memd) c.kill_now();
    for (auto& n : names)
      for (const char* r : {".versions", ".acks"}) fabric::SharedSegment::unlink(prefix + "." + n + r);
  }
  void start(size_t i) {
    std::string ready = dir.path() + "/" + names[i] + ".ready";
    ::unlink(ready.c_str());
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid == 0) {
      tierce_test::die_with_parent(parent);
      std::string cfg = dir / (names[i] + ".toml");
      ::execl(TIERCE_MEMD_BINARY, "tierce-memd", "--foreground", "-c", cfg.c_str(), nullptr);
      ::_exit(127);
    }
    memd[i] = Child(pid);
    BOOST_REQUIRE_MESSAGE(eventually([&] { return ::access(ready.c_str(), F_OK) == 0; }, 10s),
                          "memd " << names[i] << " did not become ready");
  }
  ClusterClient client(std::chrono::milliseconds op = 500ms,
                       std::chrono::milliseconds retry_after = 50ms) {
    ClientTuning t;
    t.op_timeout = op;
    t.connect_timeout = 500ms;
    t.retry_after = retry_after;
    return ClusterClient(Topology::load(topo_path), fabric::Secret::from_file(secret), t, nullptr);
  }
};

// A key whose home is `home`.
uint64_t key_homed_at(const Topology& t, const std::string& home, int salt = 0) {
  for (int i = 0;; ++i) {
    uint64_t k = hash64("/page?" + std::to_string(salt) + "-" + std::to_string(i));
    if (t.home_of(k).name == home) return k;
  }
}

std::vector<uint64_t> deps(std::initializer_list<const char*> names) {
  std::vector<uint64_t> v;
  for (auto n : names) v.push_back(dependency_hash(n));
  return v;
}

}  // namespace

BOOST_AUTO_TEST_CASE(register_invalidate_ack_and_race) {
  Cluster c;
  auto cl = c.client();
  const auto& topo = cl.topology();
  for (const std::string home : {"app1", "app2"}) {
    uint64_t k = key_homed_at(topo, home);
    uint64_t slot = slot_of(k, topo.version_slots);
    auto seq = cl.read_seq(home);
    BOOST_REQUIRE(seq);
    auto reg = cl.register_page(home, k, slot, *seq, deps({"item:1", "category:1"}));
    BOOST_REQUIRE_MESSAGE(reg.cacheable, reg.reason);
    BOOST_TEST(*cl.read_version(home, slot) == reg.version);
    // An update from either node: every home applies it and acks on the origin's counter.
    auto out = cl.invalidate(home == "app1" ? "app2" : "app1", deps({"item:1"}),
                             Scheme::DependencyLists, 2000ms);
    BOOST_TEST(out.complete());
    BOOST_TEST(out.acked == 2u);
    BOOST_TEST(*cl.read_version(home, slot) == reg.version + 1);
    BOOST_TEST(*cl.read_seq(home) == *seq + 1);

    // The registration race through the real services: render reads seq, then an update's
    // invalidation passes, then the render registers -> refused.
    uint64_t k2 = key_homed_at(topo, home, 1);
    auto s2 = cl.read_seq(home);
    BOOST_REQUIRE(cl.invalidate("app1", deps({"item:9"}), Scheme::DependencyLists, 2000ms).complete());
    auto late = cl.register_page(home, k2, slot_of(k2, topo.version_slots), *s2, deps({"item:9"}));
    BOOST_TEST(!late.cacheable);
    BOOST_TEST(late.reason.find("invalidation") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(invalidate_all_and_concurrent_updates) {
  Cluster c;
  auto topo = Topology::load(c.topo_path);
  std::vector<std::tuple<std::string, uint64_t, uint64_t>> tags;  // home, slot, version
  {
    auto cl = c.client();
    for (int i = 0; i < 20; ++i) {
      uint64_t k = hash64("p" + std::to_string(i));
      std::string home = topo.home_of(k).name;
      uint64_t slot = slot_of(k, topo.version_slots);
      auto r = cl.register_page(home, k, slot, *cl.read_seq(home), deps({"x"}));
      BOOST_REQUIRE(r.cacheable);
      tags.emplace_back(home, slot, r.version);
    }
    BOOST_TEST(cl.invalidate("app2", {}, Scheme::InvalidateAll, 2000ms).complete());
    for (auto& [home, slot, v] : tags) BOOST_TEST(*cl.read_version(home, slot) > v);
  }
  // 4 threads x 100 updates from both origins at once: every one completes.
  std::atomic<int> complete{0};
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&, t] {
      auto cl = c.client();
      for (int i = 0; i < 100; ++i)
        if (cl.invalidate(t % 2 ? "app1" : "app2", deps({"item:1"}), Scheme::DependencyLists, 2000ms)
                .complete())
          ++complete;
    });
  for (auto& x : th) x.join();
  BOOST_TEST(complete.load() == 400);
}

BOOST_AUTO_TEST_CASE(garbage_messages_are_refused_and_memd_serves_on) {
  Cluster c;
  auto topo = Topology::load(c.topo_path);
  fabric::ClientOptions o;
  o.secret = fabric::Secret::from_file(c.secret);
  auto conn = fabric::connect(topo.uri_of(topo.node("app1")), o);
  std::vector<uint8_t> junk{1, 2, 3};
  auto reply = decode_register_reply(conn->call(kRegisterService, junk));
  BOOST_TEST(!reply.cacheable);
  BOOST_TEST(reply.reason.find("too short") != std::string::npos);
  conn->send(kInvalidateService, junk);
  auto st = conn->call(kStatusService, {});
  std::string status(st.begin(), st.end());
  BOOST_TEST(status.find("bad_messages 2") != std::string::npos, status);
  BOOST_TEST(c.client().read_seq("app1").has_value());
}

BOOST_AUTO_TEST_CASE(dead_home_fails_closed_and_restart_is_a_new_incarnation) {
  Cluster c;
  auto cl = c.client(200ms);
  const auto& topo = cl.topology();
  uint64_t k = key_homed_at(topo, "app2");
  uint64_t slot = slot_of(k, topo.version_slots);
  auto reg = cl.register_page("app2", k, slot, *cl.read_seq("app2"), deps({"item:5"}));
  BOOST_REQUIRE(reg.cacheable);
  BOOST_REQUIRE(*cl.read_version("app2", slot) == reg.version);
  // app1 now keeps a connection to app2 for its acks...
  BOOST_REQUIRE(cl.invalidate("app2", deps({"item:6"}), Scheme::DependencyLists, 2000ms).complete());

  c.memd[1].kill_now();  // SIGKILL: no clean unexport
  // Reads of the dead home fail (tcp at once; shm once the lease lapses) — never a hang.
  BOOST_TEST(eventually([&] { return !cl.read_version("app2", slot).has_value(); }, 3s));
  auto out = cl.invalidate("app1", deps({"item:5"}), Scheme::DependencyLists, 1000ms);
  BOOST_TEST(!out.complete());
  BOOST_TEST(out.acked == 1u);  // app1 acked
  BOOST_REQUIRE(!out.missing.empty());
  BOOST_TEST(out.missing[0].find("app2") != std::string::npos, out.missing[0]);

  c.start(1);
  std::optional<uint64_t> v;
  BOOST_TEST(eventually([&] { return (v = cl.read_version("app2", slot)).has_value(); }, 5s));
  BOOST_TEST(*v != reg.version);  // a fresh random base: the old tag never matches again
  auto again = cl.register_page("app2", k, slot, *cl.read_seq("app2"), deps({"item:5"}));
  BOOST_TEST(again.cacheable);
  BOOST_TEST(cl.invalidate("app1", deps({"item:5"}), Scheme::DependencyLists, 2000ms).complete());
  // ...which died with the old app2: the first ack to the new app2 replaces it at once.
  BOOST_TEST(cl.invalidate("app2", deps({"item:6"}), Scheme::DependencyLists, 2000ms).complete());
}

// The stale read CI once found: a writer's client still pooled connections to a home's previous
// incarnation, or still had it marked down, while a proxy had already registered a page at the
// restarted home. The invalidation must reach the new incarnation (resent over a fresh
// connection), not time out as "unreachable" and leave that page valid.
BOOST_AUTO_TEST_CASE(invalidation_reaches_a_restarted_home_the_writer_thought_gone) {
  Cluster c;
  auto writer = c.client(200ms, 10s);  // marks a failed node down for 10 s
  auto proxy = c.client(200ms);
  const auto& topo = writer.topology();
  uint64_t k = key_homed_at(topo, "app2");
  uint64_t slot = slot_of(k, topo.version_slots);

  for (bool marked_down : {false, true}) {
    BOOST_TEST_CONTEXT("writer " << (marked_down ? "marked app2 down" : "pools old connections")) {
      // The writer holds idle connections to this incarnation of app2 (and app1).
      BOOST_REQUIRE(writer.invalidate("app1", deps({"warm"}), Scheme::DependencyLists, 2000ms)
                        .complete());
      BOOST_REQUIRE(writer.read_version("app2", slot).has_value());
      c.memd[1].kill_now();
      if (marked_down)  // a failed read: app2 is skipped for retry_after (10 s)
        BOOST_REQUIRE(eventually([&] { return !writer.read_version("app2", slot).has_value(); }, 3s));
      c.start(1);
      // A proxy caches a page against the new incarnation.
      std::optional<uint64_t> seq;
      BOOST_REQUIRE(eventually([&] { return (seq = proxy.read_seq("app2")).has_value(); }, 5s));
      auto reg = proxy.register_page("app2", k, slot, *seq, deps({"item:9"}));
      BOOST_REQUIRE(reg.cacheable);
      BOOST_REQUIRE(proxy.read_version("app2", slot) == std::optional<uint64_t>(reg.version));

      auto out = writer.invalidate("app1", deps({"item:9"}), Scheme::DependencyLists, 2000ms);
      BOOST_TEST(out.complete());
      BOOST_TEST(out.acked == 2u);
      for (const auto& m : out.missing) BOOST_TEST_MESSAGE("missing: " << m);
      auto v = proxy.read_version("app2", slot);
      BOOST_REQUIRE(v.has_value());
      BOOST_TEST(*v != reg.version);  // the page is invalid: no stale read
    }
  }
}

// The race behind a stale read after a crash over shm: proxies that mapped the dead home's
// version table may read it until the lease its memd last renewed runs out. A new incarnation
// started at once must not acknowledge an invalidation before then (it waits the lease out,
// COH0205), or the writer would complete while a proxy still validates the old page.
BOOST_AUTO_TEST_CASE(a_crashed_homes_table_is_never_trusted_after_its_successor_acks) {
  Cluster c;
  auto writer = c.client(200ms);
  auto proxy = c.client(200ms);
  const auto& topo = writer.topology();
  uint64_t k = key_homed_at(topo, "app2");
  uint64_t slot = slot_of(k, topo.version_slots);
  auto reg = proxy.register_page("app2", k, slot, *proxy.read_seq("app2"), deps({"item:3"}));
  BOOST_REQUIRE(reg.cacheable);
  BOOST_REQUIRE(proxy.read_version("app2", slot) == std::optional<uint64_t>(reg.version));

  c.memd[1].kill_now();  // SIGKILL: the old segments stay, with their last lease
  auto t0 = std::chrono::steady_clock::now();
  c.start(1);            // at once
  BOOST_TEST_MESSAGE("restart took " << std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::steady_clock::now() - t0)
                                            .count()
                                     << " ms");
  std::optional<uint64_t> seq;
  BOOST_REQUIRE(eventually([&] { return (seq = writer.read_seq("app2")).has_value(); }, 5s));
  auto out = writer.invalidate("app1", deps({"item:3"}), Scheme::DependencyLists, 2000ms);
  BOOST_REQUIRE(out.complete());
  // The proxy's connection still maps the old table: it must not vouch for the old page now.
  auto v = proxy.read_version("app2", slot);
  BOOST_TEST((!v || *v != reg.version), "the dead incarnation's table still validated the page");
}
