// coherence over real processes: two app nodes' tierce-memd with [coherence] (the home role),
// reached through coherence::ClusterClient over the transport given by --transport=tcp|shm.
// Registration, the registration race through the real services, invalidations acknowledged in
// ack cells, invalidate-all, garbage messages, and the faults of issue 13: a killed, restarted or
// frozen home, a writer whose own memd is down, a writer cut off from a home (the home must be
// fenced before the update returns), ack cells that never run out, a node with another topology.
//
// The test process plays the app nodes' httpd: it numbers its invalidations in app1's writer
// segment (coherence::WriterLog), as mod_appversion does.
#define BOOST_TEST_MODULE coherence_cluster
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include "tests/coherence/cluster_fixture.h"

BOOST_AUTO_TEST_CASE(register_invalidate_ack_and_race) {
  Cluster c;
  auto cl = c.client();
  auto w1 = c.writer("app1"), w2 = c.writer("app2");
  const auto& topo = cl.topology();
  for (const std::string home : {"app1", "app2"}) {
    uint64_t k = key_homed_at(topo, home);
    auto seq = cl.read_seq(home);
    BOOST_REQUIRE(seq);
    auto reg = cl.register_page(home, k, *seq, deps({"item:1", "category:1"}));
    BOOST_REQUIRE_MESSAGE(reg.cacheable(), reg.reason);
    BOOST_TEST(reg.slot == slot_of(k, topo.version_slots));  // derived by the home
    BOOST_TEST(*cl.read_version(home, reg.slot) == reg.version);
    // An update from either node: every home applies it and acknowledges it.
    auto& w = home == "app1" ? w2 : w1;
    auto out = cl.invalidate(w, home == "app1" ? "app2" : "app1", deps({"item:1"}),
                             Scheme::DependencyLists);
    BOOST_TEST(out.complete());
    BOOST_TEST(out.acked.size() == 2u);
    BOOST_TEST(out.rounds == 1u);
    BOOST_TEST(*cl.read_version(home, reg.slot) == reg.version + 1);
    BOOST_TEST(*cl.read_seq(home) == *seq + 1);

    // The registration race through the real services: render reads seq, then an update's
    // invalidation passes, then the render registers -> refused.
    uint64_t k2 = key_homed_at(topo, home, 1);
    auto s2 = cl.read_seq(home);
    BOOST_REQUIRE(cl.invalidate(w1, "app1", deps({"item:9"}), Scheme::DependencyLists).complete());
    auto late = cl.register_page(home, k2, *s2, deps({"item:9"}));
    BOOST_TEST(!late.cacheable());
    BOOST_TEST(late.refusal == Refusal::Race);
  }
  // A key registered at a node that is not its home is refused (topologies would disagree).
  uint64_t k1 = key_homed_at(topo, "app1");
  auto wrong = cl.register_page("app2", k1, *cl.read_seq("app2"), deps({"x"}));
  BOOST_TEST(wrong.refusal == Refusal::NotHome);
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
      auto r = register_at(cl, home, k, {"x"});
      BOOST_REQUIRE(r.cacheable());
      tags.emplace_back(home, r.slot, r.version);
    }
    auto w = c.writer("app2");
    BOOST_TEST(cl.invalidate(w, "app2", {}, Scheme::InvalidateAll).complete());
    for (auto& [home, slot, v] : tags) BOOST_TEST(*cl.read_version(home, slot) > v);
  }
  // 4 threads x 100 updates from both origins at once: every one completes.
  std::atomic<int> complete{0};
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&, t] {
      auto cl = c.client();
      auto w = c.writer(t % 2 ? "app1" : "app2");
      for (int i = 0; i < 100; ++i)
        if (cl.invalidate(w, t % 2 ? "app1" : "app2", deps({"item:1"}), Scheme::DependencyLists)
                .complete())
          ++complete;
    });
  for (auto& x : th) x.join();
  BOOST_TEST(complete.load() == 400);
  // Numbers are in flight for microseconds (connections are taken before numbering): a
  // catch-up (which flushes a home's pages) is rare, not one per update.
  BOOST_TEST(c.stat(0, "fence_catch_ups") <= 10u);
}

BOOST_AUTO_TEST_CASE(garbage_messages_are_refused_and_memd_serves_on) {
  Cluster c;
  auto topo = Topology::load(c.topo_path);
  fabric::ClientOptions o;
  o.secret = fabric::Secret::from_file(c.secret);
  auto conn = fabric::connect(c.tcp[0], o);
  std::vector<uint8_t> junk{1, 2, 3};
  auto reply = decode_register_reply(conn->call(kRegisterService, junk));
  BOOST_TEST(!reply.cacheable());
  BOOST_TEST(reply.refusal == Refusal::BadRequest);
  conn->send(kInvalidateService, junk);
  BOOST_TEST(eventually([&] { return c.stat(0, "bad_messages") == 2u; }));
  BOOST_TEST(c.client().read_seq("app1").has_value());
}

// Acks are tagged with their round and a home applies a number once: a resent invalidation (the
// writer missed the ack, or a second round) is acknowledged again but bumps nothing twice.
BOOST_AUTO_TEST_CASE(a_resent_invalidation_is_applied_once_and_acknowledged_in_its_own_cell) {
  Cluster c;
  auto cl = c.client();
  const auto& topo = cl.topology();
  uint64_t k = key_homed_at(topo, "app1");
  auto reg = register_at(cl, "app1", k, {"item:4"});
  BOOST_REQUIRE(reg.cacheable());
  auto w = c.writer("app2");
  // Connect first: a number issued but not delivered within the home's catch-up window (150 ms;
  // loading the secret alone is a scrypt) is caught up, and the first send is then a duplicate too.
  fabric::ClientOptions o;
  o.secret = fabric::Secret::from_file(c.secret);
  auto conn = fabric::connect(c.tcp[0], o);
  auto acks = conn->lookup(kAcksRegion);
  IssuedNumber n = w.issue();
  InvalidateRequest req;
  req.digest = topo.coherence_digest();
  req.origin = "app2";
  req.writer_incarnation = n.incarnation;
  req.number = n.number;
  req.deps = deps({"item:4"});
  for (uint32_t cell : {3u, 9u}) {
    req.ack_cell = cell;
    req.ack_tag = 0x1000 + cell;
    conn->send(kInvalidateService, encode(req));
    uint64_t v = 0;
    BOOST_TEST(eventually([&] {
      conn->read(acks, ack_cell_offset(cell), &v, 8);
      return v == req.ack_tag;
    }));
  }
  BOOST_TEST(*cl.read_version("app1", reg.slot) == reg.version + 1);  // bumped once
  BOOST_TEST(c.stat(0, "duplicate_invalidations") == 1u);
}

// Issue 13, path 1: an update on a node whose own memd is down still reaches every other home
// (it used to claim an ack slot in its own memd first, and sent nothing without one).
BOOST_AUTO_TEST_CASE(an_invalidation_is_sent_even_when_the_writers_own_memd_is_down) {
  Cluster c;
  auto cl = c.client(200ms);
  const auto& topo = cl.topology();
  uint64_t k = key_homed_at(topo, "app2");
  auto reg = register_at(cl, "app2", k, {"item:11"});
  BOOST_REQUIRE(reg.cacheable());
  auto w = c.writer("app1");
  // As a running httpd has: an update made while its memd was up (which also told this client
  // that its writer segment is the one the homes read: COH0109).
  BOOST_REQUIRE(cl.invalidate(w, "app1", deps({"warm"}), Scheme::DependencyLists).complete());
  c.memd[0].kill_now();  // app1's memd, the writer's own
  auto t0 = std::chrono::steady_clock::now();
  auto out = cl.invalidate(w, "app1", deps({"item:11"}), Scheme::DependencyLists);
  auto took = ms_since(t0);
  BOOST_TEST_MESSAGE("update with its own memd down took " << took.count() << " ms");
  BOOST_TEST((std::find(out.acked.begin(), out.acked.end(), "app2") != out.acked.end()));
  BOOST_REQUIRE(out.fenced.size() == 1u);
  BOOST_TEST(out.fenced[0].find("app1") != std::string::npos, out.fenced[0]);
  BOOST_TEST(took >= kBound);  // app1 was not confirmed: the update waited for its fence
  // app2 applied it (it may have stopped vouching meanwhile: app1's counter is unreadable).
  auto v = cl.read_version("app2", reg.slot);
  BOOST_TEST((!v || *v == reg.version + 1));
}

// Issue 13, path 2: ack cells are never claimed, poisoned or exhausted. The old ack slots lived
// in the writer's memd and a round whose ack came late poisoned its slot for that memd's life;
// ~ack_slots such rounds left a node unable to send invalidations at all. Here, with 16 cells,
// 20 updates that a frozen home never acknowledges leave nothing behind.
BOOST_AUTO_TEST_CASE(ack_cells_are_never_exhausted_by_unacknowledged_rounds) {
  Cluster c(ClusterOptions{16});
  auto cl = c.client(200ms);
  auto w = c.writer("app1");
  c.memd[1].signal(SIGSTOP);  // app2 accepts (kernel) but never acknowledges
  for (int i = 0; i < 20; ++i) {
    auto out = cl.invalidate(w, "app1", deps({"item:2"}), Scheme::DependencyLists);
    // Not acknowledged by app2: waited for until the bound, or skipped once marked long enough.
    BOOST_REQUIRE((!out.complete() || out.skipped == std::vector<std::string>{"app2"}));
    BOOST_TEST(out.acked.size() == 1u);  // app1 acknowledged every one
    for (const auto& f : out.fenced) BOOST_TEST_MESSAGE("round " << i << " (" << out.rounds << " rounds): " << f);
  }
  c.memd[1].signal(SIGCONT);
  BOOST_REQUIRE(c.both_vouch());
  auto out = cl.invalidate(w, "app1", deps({"item:2"}), Scheme::DependencyLists);
  BOOST_TEST(out.complete());
  BOOST_TEST(out.acked.size() == 2u);
}

BOOST_AUTO_TEST_CASE(dead_home_fails_closed_and_restart_is_a_new_incarnation) {
  Cluster c;
  auto cl = c.client(200ms);
  auto w1 = c.writer("app1"), w2 = c.writer("app2");
  const auto& topo = cl.topology();
  uint64_t k = key_homed_at(topo, "app2");
  auto reg = register_at(cl, "app2", k, {"item:5"});
  BOOST_REQUIRE(reg.cacheable());
  BOOST_REQUIRE(*cl.read_version("app2", reg.slot) == reg.version);
  BOOST_REQUIRE(cl.invalidate(w2, "app2", deps({"item:6"}), Scheme::DependencyLists).complete());

  c.memd[1].kill_now();  // SIGKILL: no clean unexport
  // Reads of the dead home fail (tcp at once; shm once the lease lapses) — never a hang.
  BOOST_TEST(eventually([&] { return !cl.read_version("app2", reg.slot).has_value(); }, 3s));
  auto t0 = std::chrono::steady_clock::now();
  auto out = cl.invalidate(w1, "app1", deps({"item:5"}), Scheme::DependencyLists);
  BOOST_TEST(ms_since(t0) >= kBound);
  BOOST_TEST(ms_since(t0) < kBound + 1s);  // bounded: no hang on the dead home
  BOOST_TEST(!out.complete());
  BOOST_TEST(out.acked.size() == 1u);  // app1 acked
  BOOST_REQUIRE(out.fenced.size() == 1u);
  BOOST_TEST(out.fenced[0].find("app2") != std::string::npos, out.fenced[0]);

  c.start(1);
  BOOST_REQUIRE(c.both_vouch());
  std::optional<uint64_t> v;
  BOOST_TEST(eventually([&] { return (v = cl.read_version("app2", reg.slot)).has_value(); }, 5s));
  BOOST_TEST(*v != reg.version);  // a fresh random base: the old tag never matches again
  auto again = register_at(cl, "app2", k, {"item:5"});
  BOOST_TEST(again.cacheable());
  BOOST_TEST(cl.invalidate(w1, "app1", deps({"item:5"}), Scheme::DependencyLists).complete());
  BOOST_TEST(cl.invalidate(w2, "app2", deps({"item:6"}), Scheme::DependencyLists).complete());
}

// The stale read CI once found: a writer's client still pooled connections to a home's previous
// incarnation, or still had it marked down, while a proxy had already registered a page at the
// restarted home. The invalidation must reach the new incarnation (resent over a fresh
// connection), not give up on it while that page stays valid.
BOOST_AUTO_TEST_CASE(invalidation_reaches_a_restarted_home_the_writer_thought_gone) {
  Cluster c;
  auto writer = c.client(200ms, 10s);  // marks a failed node down for 10 s
  auto proxy = c.client(200ms);
  auto w = c.writer("app1");
  const auto& topo = writer.topology();
  uint64_t k = key_homed_at(topo, "app2");
  uint64_t slot = slot_of(k, topo.version_slots);

  for (bool marked_down : {false, true}) {
    BOOST_TEST_CONTEXT("writer " << (marked_down ? "marked app2 down" : "pools old connections")) {
      // The writer holds idle connections to this incarnation of app2 (and app1).
      BOOST_REQUIRE(writer.invalidate(w, "app1", deps({"warm"}), Scheme::DependencyLists).complete());
      BOOST_REQUIRE(writer.read_version("app2", slot).has_value());
      c.memd[1].kill_now();
      if (marked_down)  // a failed read: app2 is skipped for retry_after (10 s)
        BOOST_REQUIRE(eventually([&] { return !writer.read_version("app2", slot).has_value(); }, 3s));
      c.start(1);
      // A proxy caches a page against the new incarnation.
      std::optional<uint64_t> seq;
      BOOST_REQUIRE(eventually([&] { return (seq = proxy.read_seq("app2")).has_value(); }, 5s));
      auto reg = proxy.register_page("app2", k, *seq, deps({"item:9"}));
      BOOST_REQUIRE(reg.cacheable());
      BOOST_REQUIRE(proxy.read_version("app2", slot) == std::optional<uint64_t>(reg.version));

      auto out = writer.invalidate(w, "app1", deps({"item:9"}), Scheme::DependencyLists);
      BOOST_TEST(out.complete());
      BOOST_TEST(out.acked.size() == 2u);
      for (const auto& m : out.fenced) BOOST_TEST_MESSAGE("fenced: " << m);
      auto v = proxy.read_version("app2", slot);
      BOOST_TEST((!v || *v != reg.version));  // the page is invalid: no stale read
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
  auto w = c.writer("app1");
  const auto& topo = writer.topology();
  uint64_t k = key_homed_at(topo, "app2");
  auto reg = register_at(proxy, "app2", k, {"item:3"});
  BOOST_REQUIRE(reg.cacheable());
  BOOST_REQUIRE(proxy.read_version("app2", reg.slot) == std::optional<uint64_t>(reg.version));

  c.memd[1].kill_now();  // SIGKILL: the old segments stay, with their last lease
  c.start(1);            // at once
  BOOST_REQUIRE(c.both_vouch());
  auto out = writer.invalidate(w, "app1", deps({"item:3"}), Scheme::DependencyLists);
  BOOST_REQUIRE(out.complete());
  // The proxy's connection still maps the old table: it must not vouch for the old page now.
  auto v = proxy.read_version("app2", reg.slot);
  BOOST_TEST((!v || *v != reg.version), "the dead incarnation's table still validated the page");
}

// Issue 13, the rule: a writer that cannot reach a home (a partition between app nodes only:
// proxies still read that home) returns only once the home can no longer vouch for a page that
// misses the update. The home reads the writer's counter, sees a number it never got, and
// catches up (invalidates every registered page) before it renews its fence — or stops
// vouching. This used to leave the page valid for ever ("logged, answered anyway").
BOOST_AUTO_TEST_CASE(a_home_the_writer_cannot_reach_is_fenced_before_the_update_returns) {
  Cluster c;
  auto proxy = c.client(200ms);
  // The writer's view: app2 behind a dead address (tcp: nothing listens there).
  std::string cut = c.dir / "cut.toml";
  write_file(cut, c.topology("tcp", {{"app2", "\"tcp://127.0.0.1:" + std::to_string(free_port()) + "\""}}));
  auto writer = c.client(200ms, 50ms, cut);
  auto w = c.writer("app1");
  const auto& topo = proxy.topology();
  uint64_t k = key_homed_at(topo, "app2");
  auto reg = register_at(proxy, "app2", k, {"item:7"});
  BOOST_REQUIRE(reg.cacheable());

  auto t0 = std::chrono::steady_clock::now();
  auto out = writer.invalidate(w, "app1", deps({"item:7"}), Scheme::DependencyLists);
  auto took = ms_since(t0);
  BOOST_TEST_MESSAGE("update cut off from app2 took " << took.count() << " ms");
  BOOST_REQUIRE(out.fenced.size() == 1u);
  BOOST_TEST(out.fenced[0].find("app2") != std::string::npos);
  BOOST_TEST(took >= kBound);
  // Right after the update returned, a proxy must not validate the old page at app2.
  auto v = proxy.read_version("app2", reg.slot);
  BOOST_TEST((!v || *v != reg.version), "a stale page validated after the update returned");
  BOOST_TEST(c.stat(1, "fence_catch_ups") >= 2u);  // the first renewal, and this one
}

// Issue 13, a frozen home: proxies may still reach it after SIGCONT (tcp queues their reads), but
// its fence lapsed while it was stopped, and it renews only once it holds every invalidation
// numbered meanwhile: no read after the thaw validates the old page.
BOOST_AUTO_TEST_CASE(a_frozen_home_is_fenced_and_holds_the_update_when_it_thaws) {
  Cluster c;
  auto writer = c.client(200ms);
  auto w = c.writer("app1");
  const auto& topo = writer.topology();
  uint64_t k = key_homed_at(topo, "app2");
  auto proxy = c.client(200ms, 0ms);
  auto reg = register_at(proxy, "app2", k, {"item:8"});
  BOOST_REQUIRE(reg.cacheable());
  BOOST_REQUIRE(proxy.read_version("app2", reg.slot) == std::optional<uint64_t>(reg.version));

  c.memd[1].signal(SIGSTOP);
  auto out = writer.invalidate(w, "app1", deps({"item:8"}), Scheme::DependencyLists);
  BOOST_TEST(!out.complete());
  c.memd[1].signal(SIGCONT);
  int served = 0;
  auto until = std::chrono::steady_clock::now() + 1s;
  while (std::chrono::steady_clock::now() < until) {
    auto p = c.client(100ms, 0ms);  // fresh connections too (verbs used to trust those once)
    for (auto* cl : {&proxy, &p}) {
      auto v = cl->read_version("app2", reg.slot);
      if (!v) continue;
      ++served;
      BOOST_REQUIRE_MESSAGE(*v != reg.version, "the thawed home validated the old page");
    }
  }
  BOOST_TEST(served > 0);  // it did come back
}

// Issue 13, path 5 and issue 29, path 1: a node started from another topology (here another
// version_slots) is refused by the homes for what needs trust — its reads fail closed, its
// registrations are refused — but its invalidations are APPLIED and acknowledged: bumping is
// always safe, and such a writer (a node being added) relies on the ack, since the homes' fences
// do not read its counter. They used to be dropped: no apply, no ack, no catch-up.
BOOST_AUTO_TEST_CASE(a_node_with_another_topology_is_refused_not_trusted) {
  Cluster c;
  std::string other = c.dir / "other.toml";
  std::string t = c.topology(transport_arg(), {});
  t.replace(t.find("version_slots = 4096"), 20, "version_slots = 8192");
  write_file(other, t);
  auto stranger = c.client(200ms, 0ms, other);
  const auto& topo = stranger.topology();
  uint64_t k = key_homed_at(topo, "app1");
  BOOST_TEST(!stranger.read_seq("app1").has_value());
  BOOST_TEST(!stranger.read_version("app1", slot_of(k, topo.version_slots)).has_value());
  auto good = c.client();
  auto reg = stranger.register_page("app1", k, *good.read_seq("app1"), deps({"d"}));
  BOOST_TEST(reg.refusal == Refusal::OtherTopology);
  // A page of the right topology under "d", at each home.
  uint64_t k1 = key_homed_at(good.topology(), "app1"), k2 = key_homed_at(good.topology(), "app2");
  auto r1 = register_at(good, "app1", k1, {"d"}), r2 = register_at(good, "app2", k2, {"d"});
  BOOST_REQUIRE(r1.cacheable());
  BOOST_REQUIRE(r2.cacheable());
  WriterLog w(c.prefix + ".app1" + kWriterSuffix, stranger.topology().coherence_digest());
  auto out = stranger.invalidate(w, "app1", deps({"d"}), Scheme::DependencyLists);
  BOOST_TEST(out.acked.size() == 2u);
  BOOST_TEST(out.unconfirmed.empty());
  BOOST_TEST(c.stat(0, "foreign_invalidations") >= 1u);
  auto v1 = good.read_version("app1", r1.slot), v2 = good.read_version("app2", r2.slot);
  BOOST_TEST((!v1 || *v1 != r1.version), "app1 did not apply the invalidation");
  BOOST_TEST((!v2 || *v2 != r2.version), "app2 did not apply the invalidation");
}

// A home's version table carries its node (layout.h offset 40): a client whose topology sends it
// to another node's memd for app1 (addresses swapped; the same digest, no node keys) reads
// nothing there as app1's, and registers nothing: it fails closed, as with a dead home.
BOOST_AUTO_TEST_CASE(a_version_table_of_another_node_is_refused_not_trusted) {
  Cluster c;
  std::string swapped = c.dir / "swapped.toml";
  auto at = [&](size_t i) { return "\"" + c.tcp[i] + "\", \"" + c.shm[i] + "\""; };
  write_file(swapped, c.topology(transport_arg(), {{"app1", at(1)}, {"app2", at(0)}}));
  auto confused = c.client(200ms, 0ms, swapped);
  auto good = c.client();
  BOOST_REQUIRE(good.read_seq("app1").has_value());  // the table is there, under its own name
  BOOST_TEST(!confused.read_seq("app1").has_value());
  BOOST_TEST(!confused.read_seq("app2").has_value());
  const auto& topo = confused.topology();
  uint64_t k = key_homed_at(topo, "app1");
  BOOST_TEST(!confused.read_version("app1", slot_of(k, topo.version_slots)).has_value());
}

// Issue 29, path 1: a writer that numbers under another topology (its process loaded another
// file than the node's memd) may not send to the homes this node's home knows: no home renews its
// fence while that writer's counter carries another digest. Vouching resumes once the node's
// writer numbers under the cluster's topology again.
BOOST_AUTO_TEST_CASE(a_writer_numbering_under_another_topology_stops_the_homes_vouching) {
  Cluster c;
  auto cl = c.client(200ms, 0ms);
  std::string other = c.dir / "other.toml";
  std::string t = c.topology(transport_arg(), {});
  t.replace(t.find("version_slots = 4096"), 20, "version_slots = 8192");  // another digest
  write_file(other, t);
  WriterLog stranger(c.prefix + ".app1" + kWriterSuffix, Topology::load(other).coherence_digest());
  BOOST_REQUIRE(Topology::load(other).coherence_digest() != cl.topology().coherence_digest());
  (void)stranger.issue();
  BOOST_TEST(eventually([&] { return !cl.read_seq("app1") && !cl.read_seq("app2"); }, 3s),
             "the homes kept vouching while app1 numbered under another topology");
  BOOST_TEST(c.status(1).at("fence_last_failure").find("another topology") != std::string::npos,
             c.status(1).at("fence_last_failure"));
  auto w = c.writer("app1");
  (void)cl.invalidate(w, "app1", deps({"x"}), Scheme::DependencyLists);
  BOOST_TEST(c.both_vouch());
}

// Issue 29, path 4: a process that numbers in a writer segment the homes do not read (a cloned
// node or a cron host using the node's name, with its own /dev/shm) is not covered by any fence.
// It must not return on the bound for a home that did not acknowledge: the home is reported
// unconfirmed (COH0108), never relied on as fenced, and never skip-marked.
BOOST_AUTO_TEST_CASE(a_writer_segment_the_homes_do_not_read_is_not_covered_by_their_fences) {
  Cluster c;
  auto cl = c.client(200ms);
  std::string clone_name = c.prefix + ".clone" + kWriterSuffix;
  WriterLog clone(clone_name, cl.topology().coherence_digest());
  auto ok = cl.invalidate(clone, "app1", deps({"item:30"}), Scheme::DependencyLists);
  BOOST_TEST(ok.acked.size() == 2u);  // acknowledged: fine
  freeze(c.memd[1]);
  auto out = cl.invalidate(clone, "app1", deps({"item:31"}), Scheme::DependencyLists);
  c.memd[1].signal(SIGCONT);
  fabric::SharedSegment::unlink(clone_name);
  BOOST_TEST(out.fenced.empty());
  BOOST_REQUIRE(out.unconfirmed.size() == 1u);
  BOOST_TEST(out.unconfirmed[0].find("app2") != std::string::npos, out.unconfirmed[0]);
  BOOST_TEST(out.marked.empty());
  BOOST_TEST(!out.complete());
}

// Issue 29, Part 1: with a writer agent per app node (a second memd with [writer]), one memd's
// death costs only the pages homed there. The other home keeps reading both writer counters, at
// the writer agents, and keeps vouching; without writer agents it stops within its lease (the test
// below this one).
BOOST_AUTO_TEST_CASE(with_writer_agents_a_dead_memd_costs_only_its_own_pages) {
  Cluster c(ClusterOptions{4096, true});
  auto cl = c.client(200ms, 0ms);
  c.memd[1].kill_now();  // app2's home
  BOOST_TEST(eventually([&] { return !cl.read_seq("app2").has_value(); }, 3s));
  auto until = std::chrono::steady_clock::now() + 4 * kBound;
  int ok = 0, failed = 0;
  while (std::chrono::steady_clock::now() < until) {
    (cl.read_seq("app1") ? ok : failed)++;
    std::this_thread::sleep_for(10ms);
  }
  BOOST_TEST_MESSAGE("app1 readable " << ok << " times, not " << failed << " times");
  BOOST_TEST(failed == 0, "app1 stopped vouching while only app2's memd was down");
  BOOST_TEST(c.status(0).at("fence_vouching") == "1");
  c.start(1);
  BOOST_TEST(c.both_vouch());
}

// Issue 29, the operator's fallback for a host lost for good: with app2's memd and writer agent
// gone, app1 cannot read app2's counter and stops vouching; "out app2" (coherence.membership)
// makes it vouch without it; "in app2" reads it again (a first reading: app1 catches up).
BOOST_AUTO_TEST_CASE(an_operator_takes_a_lost_node_out_of_the_fence_and_back_in) {
  Cluster c(ClusterOptions{4096, true});
  auto cl = c.client(200ms, 0ms);
  auto call = [&](const std::string& body) {
    fabric::ClientOptions o;
    o.secret = fabric::Secret::from_file(c.secret);
    auto conn = fabric::connect(c.tcp[0], o);
    auto b = conn->call(kMembershipService, std::vector<uint8_t>(body.begin(), body.end()));
    return std::string(b.begin(), b.end());
  };
  BOOST_TEST(call("") == "out:\n");
  BOOST_TEST(call("out app1").find("error: a home cannot take its own node out") == 0u);
  BOOST_TEST(call("out nosuch").find("error: no app node named") == 0u);
  BOOST_TEST(call("sideways app2").find("error: unknown request") == 0u);

  // A page registered at app1 before app2 is lost: an invalidation app2 numbered for it may
  // never have arrived (its update returned at the bound), so taking app2 out catches up first.
  uint64_t k = key_homed_at(cl.topology(), "app1");
  auto before = register_at(cl, "app1", k, {"item:40"});
  BOOST_REQUIRE(before.cacheable());
  BOOST_REQUIRE(*cl.read_version("app1", before.slot) == before.version);
  c.memd[1].kill_now();  // the whole node: its home and its writer agent
  c.writer_agent[1].kill_now();
  BOOST_TEST(eventually([&] { return !cl.read_seq("app1").has_value(); }, 3s),
             "app1 kept vouching without reading app2's counter");
  uint64_t catch_ups_before_out = c.stat(0, "fence_catch_ups");
  BOOST_TEST(call("out app2") == "out: app2\n");
  BOOST_TEST(c.stat(0, "fence_catch_ups") == catch_ups_before_out + 1);
  BOOST_TEST(eventually([&] { return cl.read_seq("app1").has_value(); }, 3s),
             "app1 did not vouch again once app2 was taken out");
  BOOST_TEST(*cl.read_version("app1", before.slot) != before.version,
             "app1 vouches without app2 for a page it did not invalidate when app2 was taken out");
  BOOST_TEST(c.status(0).at("nodes_out") == "app2");
  BOOST_TEST(register_at(cl, "app1", k, {"item:40"}).cacheable());

  c.start_writer_agent(1);
  c.start(1);
  uint64_t catch_ups = c.stat(0, "fence_catch_ups");
  BOOST_TEST(call("in app2") == "out:\n");
  // app1's next renewal reads app2's counter as a first reading: it catches up.
  BOOST_TEST(eventually([&] { return c.stat(0, "fence_catch_ups") > catch_ups; }, 3s));
  BOOST_TEST(c.both_vouch());
}

// Issue 29, skip marks: a writer that cannot get a home's ack marks it in its writer region;
// from the mark's time + the bound on, its updates stop waiting for that home (fast), and the home
// vouches for nothing until it answers again and the node's writer agent clears the mark; it then
// holds (applies or catches up on) every invalidation skipped meanwhile before it vouches: a page
// whose invalidation was skipped is never validated again.
BOOST_AUTO_TEST_CASE(updates_stop_waiting_for_a_marked_home_which_catches_up_before_it_vouches) {
  Cluster c(ClusterOptions{4096, true});
  auto writer = c.client(200ms);
  auto proxy = c.client(200ms, 0ms);
  auto w = c.writer("app1");
  const auto& topo = proxy.topology();
  uint64_t k = key_homed_at(topo, "app2");
  auto reg = register_at(proxy, "app2", k, {"item:21"});
  BOOST_REQUIRE(reg.cacheable());
  BOOST_REQUIRE(writer.invalidate(w, "app1", deps({"warm"}), Scheme::DependencyLists).complete());

  freeze(c.memd[1]);
  auto t0 = std::chrono::steady_clock::now();
  auto first = writer.invalidate(w, "app1", deps({"item:20"}), Scheme::DependencyLists);
  BOOST_TEST(ms_since(t0) >= kBound);
  BOOST_TEST(first.marked == std::vector<std::string>{"app2"});
  BOOST_TEST(first.fenced.size() == 1u);
  // The mark was set at half the bound (or when the ack read that was under way then gave up):
  // one bound after its time, updates skip app2.
  uint64_t m = w.skip_word(1);
  BOOST_REQUIRE(skip_state(m) == SkipState::Since);
  uint64_t skip_from = m + uint64_t(std::chrono::nanoseconds(kBound).count());
  uint64_t now = fabric::monotonic_ns();
  if (skip_from > now) std::this_thread::sleep_for(std::chrono::nanoseconds(skip_from - now) + 5ms);
  t0 = std::chrono::steady_clock::now();
  auto fast = writer.invalidate(w, "app1", deps({"item:21"}), Scheme::DependencyLists);
  auto took = ms_since(t0);
  BOOST_TEST_MESSAGE("update with app2 marked took " << took.count() << " ms");
  BOOST_TEST(fast.skipped == std::vector<std::string>{"app2"});
  BOOST_TEST(fast.acked == std::vector<std::string>{"app1"});
  BOOST_TEST(took < kBound / 2);

  c.memd[1].signal(SIGCONT);
  // From the thaw on, no read may validate the page whose invalidation app2 never received.
  int served = 0;
  auto until = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < until) {
    auto v = proxy.read_version("app2", reg.slot);
    if (!v) continue;
    ++served;
    BOOST_REQUIRE_MESSAGE(*v != reg.version,
                          "app2 validated a page whose invalidation was skipped");
  }
  BOOST_TEST(served > 0);  // the mark was cleared and app2 vouches again
  BOOST_TEST(c.stat(1, "fence_catch_ups") >= 2u);
  // The writer waits for app2 again.
  auto back = writer.invalidate(w, "app1", deps({"item:22"}), Scheme::DependencyLists);
  BOOST_TEST(back.complete());
  BOOST_TEST(back.acked.size() == 2u);
}

// A home that cannot read some app node's writer counter (that node's memd is down) stops
// vouching within its lease: reads fail closed and registrations are refused (Fenced); once the
// node is back it vouches again.
BOOST_AUTO_TEST_CASE(a_home_that_cannot_read_a_writer_counter_stops_vouching) {
  Cluster c;
  auto cl = c.client(200ms, 0ms);
  const auto& topo = cl.topology();
  uint64_t k = key_homed_at(topo, "app2");
  auto seq = cl.read_seq("app2");
  BOOST_REQUIRE(seq);
  c.memd[0].kill_now();  // app1's memd: app2 cannot read app1's counter any more
  BOOST_TEST(eventually([&] { return !cl.read_seq("app2").has_value(); }, 3s));
  auto reg = cl.register_page("app2", k, *seq, deps({"x"}));
  BOOST_TEST(!reg.cacheable());
  BOOST_TEST((reg.refusal == Refusal::Fenced || reg.refusal == Refusal::Unreachable));
  BOOST_TEST(c.status(1).at("fence_vouching") == "0");
  c.start(0);
  BOOST_TEST(c.both_vouch());
  BOOST_TEST(register_at(cl, "app2", k, {"x"}).cacheable());
}

// Pending marks (docs/coherence.md "Pending marks"): an invalidation that carries a Pend makes
// every home refuse registrations of those dependencies (Refusal::Pending) until the writer's
// Release; a render that started before the Release is refused by its log entry.
BOOST_AUTO_TEST_CASE(a_pend_refuses_registrations_until_its_release) {
  Cluster c;
  auto cl = c.client();
  auto w = c.writer("app1");
  const auto& topo = cl.topology();
  uint64_t token = 0x5eed0001;
  for (const std::string home : {"app1", "app2"}) {
    BOOST_TEST_CONTEXT("home " << home) {
      ++token;
      uint64_t k = key_homed_at(topo, home, 7), other = key_homed_at(topo, home, 8);
      auto reg = register_at(cl, home, k, {"item:20"});
      BOOST_REQUIRE_MESSAGE(reg.cacheable(), reg.reason);
      // Before the commit: Pend.
      auto out = cl.invalidate(w, "app1", deps({"item:20"}), Scheme::DependencyLists,
                               PendingMark{MarkOp::Pend, token, 5000});
      BOOST_REQUIRE(out.complete());
      BOOST_TEST(*cl.read_version(home, reg.slot) == reg.version + 1);  // applied as today
      auto refused = register_at(cl, home, k, {"item:20"});
      BOOST_TEST(refused.refusal == Refusal::Pending);
      BOOST_TEST_MESSAGE("refused: " << refused.reason);
      BOOST_TEST(register_at(cl, home, other, {"item:21"}).cacheable());  // not marked
      auto during = cl.read_seq(home);  // a render between the Pend and the Release
      BOOST_REQUIRE(during);
      // After the commit: Release.
      BOOST_REQUIRE(cl.invalidate(w, "app1", deps({"item:20"}), Scheme::DependencyLists,
                                  PendingMark{MarkOp::Release, token, 0})
                        .complete());
      BOOST_TEST(cl.register_page(home, k, *during, deps({"item:20"})).refusal == Refusal::Race);
      auto after = register_at(cl, home, k, {"item:20"});
      BOOST_TEST(after.cacheable(), after.reason);
    }
  }
  for (size_t i = 0; i < 2; ++i) {
    auto s = c.status(i);
    BOOST_TEST(s.at("pend_applied") == "2");  // every home got both Pends
    BOOST_TEST(s.at("released") == "2");
    BOOST_TEST(s.at("pending_marks") == "0");
    BOOST_TEST(s.at("expired") == "0");
    BOOST_TEST(s.count("pend_overflows") == 1u);
  }
  BOOST_TEST(c.stat(0, "refused_pending") == 1u);
  BOOST_TEST(c.stat(1, "refused_pending") == 1u);
}

// A Pend whose Release never comes (the writer died between them) expires after its ttl: the
// expiry is an invalidation of its dependencies, and then the page registers again.
BOOST_AUTO_TEST_CASE(a_pend_whose_release_never_comes_expires) {
  Cluster c;
  auto cl = c.client();
  auto w = c.writer("app2");
  const auto& topo = cl.topology();
  uint64_t k = key_homed_at(topo, "app1", 9);
  auto t0 = std::chrono::steady_clock::now();
  BOOST_REQUIRE(cl.invalidate(w, "app2", deps({"item:30"}), Scheme::DependencyLists,
                              PendingMark{MarkOp::Pend, 0xdead, 600})
                    .complete());
  // Within the ttl the mark holds. Each check is made only if it ended before the ttl could have
  // run out: on a starved machine (ctest -j2 beside other work) 600 ms may pass before it, and
  // then the mark has expired, as it should (with a 300 ms ttl this failed twice in a dozen runs
  // beside four nemesis runs).
  const auto refusal = register_at(cl, "app1", k, {"item:30"}).refusal;
  if (ms_since(t0) < 600ms) BOOST_TEST(refusal == Refusal::Pending);
  const auto marks = c.stat(0, "pending_marks");
  if (ms_since(t0) < 600ms) BOOST_TEST(marks == 1u);
  RegisterResult r;
  BOOST_TEST(eventually([&] { return (r = register_at(cl, "app1", k, {"item:30"})).cacheable(); },
                        3s));
  auto took = ms_since(t0);
  BOOST_TEST_MESSAGE("the mark expired and the page registered after " << took.count() << " ms");
  BOOST_TEST(took >= 600ms);
  // Expired by the home's periodic task, whether or not a registration passed meanwhile.
  BOOST_TEST(c.stat(0, "expired") == 1u);
  BOOST_TEST(c.stat(0, "pending_marks") == 0u);
  BOOST_TEST(eventually([&] { return c.stat(1, "expired") == 1u; }, 2s));
  BOOST_TEST(c.stat(1, "pending_marks") == 0u);
}

// A resent round of a Pend (same number) that arrives after its Release is only acknowledged: the
// mark was applied the first time, and must not come back.
BOOST_AUTO_TEST_CASE(a_resent_pend_is_not_applied_again) {
  Cluster c;
  auto cl = c.client();
  const auto& topo = cl.topology();
  uint64_t k = key_homed_at(topo, "app1", 10);
  auto w = c.writer("app2");
  fabric::ClientOptions o;
  o.secret = fabric::Secret::from_file(c.secret);
  auto conn = fabric::connect(c.tcp[0], o);
  auto acks = conn->lookup(kAcksRegion);
  auto send = [&](const IssuedNumber& n, PendingMark m, uint32_t cell) {
    InvalidateRequest req;
    req.digest = topo.coherence_digest();
    req.origin = "app2";
    req.writer_incarnation = n.incarnation;
    req.number = n.number;
    req.deps = deps({"item:40"});
    req.mark = m;
    req.ack_cell = cell;
    req.ack_tag = 0x2000 + cell;
    conn->send(kInvalidateService, encode(req));
    uint64_t v = 0;
    BOOST_REQUIRE(eventually([&] {
      conn->read(acks, ack_cell_offset(cell), &v, 8);
      return v == req.ack_tag;
    }));
  };
  IssuedNumber pend_n = w.issue();
  send(pend_n, {MarkOp::Pend, 77, 10000}, 1);
  BOOST_TEST(register_at(cl, "app1", k, {"item:40"}).refusal == Refusal::Pending);
  send(w.issue(), {MarkOp::Release, 77, 0}, 2);
  BOOST_TEST(register_at(cl, "app1", k, {"item:40"}).cacheable());
  send(pend_n, {MarkOp::Pend, 77, 10000}, 3);  // the Pend's round again, late
  BOOST_TEST(c.stat(0, "duplicate_invalidations") == 1u);
  BOOST_TEST(c.stat(0, "pend_applied") == 1u);
  BOOST_TEST(c.stat(0, "pending_marks") == 0u);
  uint64_t k2 = key_homed_at(topo, "app1", 11);
  BOOST_TEST(register_at(cl, "app1", k2, {"item:40"}).cacheable());
}

// Issue 29, path 5: a Pend (before a COMMIT) may give up on a home that does not answer instead of
// waiting the fence bound; the caller then does not commit. Only marks may give up.
BOOST_AUTO_TEST_CASE(a_pend_gives_up_on_a_frozen_home_before_the_bound) {
  Cluster c;
  auto writer = c.client(200ms);
  auto w = c.writer("app1");
  c.memd[1].signal(SIGSTOP);
  auto t0 = std::chrono::steady_clock::now();
  auto out = writer.invalidate(w, "app1", deps({"item:40"}), Scheme::DependencyLists,
                               PendingMark{MarkOp::Pend, 0x7e57, 2000}, 100ms);
  auto took = ms_since(t0);
  c.memd[1].signal(SIGCONT);
  BOOST_TEST_MESSAGE("gave up after " << took.count() << " ms (bound " << kBound.count() << " ms)");
  BOOST_TEST(!out.complete());
  BOOST_TEST(out.gave_up());
  BOOST_TEST(out.fenced.empty());  // not fenced: the bound has not passed
  BOOST_REQUIRE(out.gave_up_on.size() == 1u);
  BOOST_TEST(out.gave_up_on[0].rfind("app2", 0) == 0u, out.gave_up_on[0]);
  BOOST_TEST(out.acked == std::vector<std::string>{"app1"}, boost::test_tools::per_element());
  BOOST_TEST(took >= 100ms);
  BOOST_TEST(took < kBound);
  // every home up: the same gives up on nobody
  BOOST_REQUIRE(eventually([&] { return writer.read_seq("app2").has_value(); }, 5s));
  auto ok = writer.invalidate(w, "app1", deps({"item:40"}), Scheme::DependencyLists,
                              PendingMark{MarkOp::Release, 0x7e57, 0}, 1000ms);
  BOOST_TEST(ok.complete());
  BOOST_TEST(!ok.gave_up());
  // a plain invalidation keeps the rule: giving up is refused
  BOOST_CHECK_THROW(
      writer.invalidate(w, "app1", deps({"item:40"}), Scheme::DependencyLists, {}, 100ms),
      std::invalid_argument);
}
