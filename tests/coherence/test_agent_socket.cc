// The writer agent's socket over real processes (issue 32 point 3): two app nodes' tierce-memd
// homes and their writer agents with [writer] socket; the test process plays app1's httpd child
// through coherence::AgentClient only — it holds no secret and maps no counter for its requests
// (the fixture's ClusterClient is the proxies' reader, used to look at versions). Reads,
// registrations and invalidations through the socket; a malformed request; the agent's faults:
// killed (the invalidation is lost: returned after the bound, the homes stop vouching, the
// restarted agent makes them catch up, so the page is not served stale), frozen (the invalidation
// waits in the socket and is carried out when it thaws).
#define BOOST_TEST_MODULE coherence_agent_socket
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <sys/un.h>

#include <future>

#include "coherence/agent_client.h"
#include "coherence/agent_wire.h"
#include "tests/coherence/cluster_fixture.h"

namespace {

ClusterOptions with_agents() {
  ClusterOptions o;
  o.writer_agents = true;
  o.agent_sockets = true;
  return o;
}

AgentClient agent_of(const Cluster& c, size_t i) {
  AgentTimeouts t;
  t.op = 500ms;
  t.connect = 500ms;
  t.cap = 20s;
  t.fence_bound = kBound;
  return AgentClient(c.agent_socket(i), t);
}

// A page at `key`'s home registered through the agent; its version slot as the proxies read it.
struct Page {
  uint64_t key = 0;
  RegisterResult reg;
};
Page register_through(AgentClient& ac, uint64_t key, std::initializer_list<const char*> d) {
  Page p;
  p.key = key;
  auto seq = ac.read_seq(key);
  BOOST_REQUIRE_MESSAGE(seq.ok(), "sequence through the agent: " << seq.message());
  p.reg = ac.register_page(key, *seq, deps(d));
  BOOST_REQUIRE_MESSAGE(p.reg.cacheable(), "registration through the agent refused: "
                                               << to_string(p.reg.refusal) << " "
                                               << p.reg.reason);
  return p;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_app_tier_reads_registers_and_invalidates_through_the_agent) {
  Cluster c(with_agents());
  auto cl = c.client();
  auto ac = agent_of(c, 0);
  const auto topo = Topology::load(c.topo_path);
  for (const char* home : {"app1", "app2"}) {
    Page p = register_through(ac, key_homed_at(topo, home), {"item:7"});
    auto v = cl.read_version(home, p.reg.slot);
    BOOST_REQUIRE(v.has_value());
    BOOST_CHECK_EQUAL(*v, p.reg.version);
  }
  const uint64_t before = c.writer("app1").last().number;
  AgentInvalidation inv = ac.invalidate(deps({"item:7"}), Scheme::DependencyLists);
  BOOST_REQUIRE_MESSAGE(inv.answered(), to_string(inv.kind) << ": " << inv.why);
  BOOST_CHECK(inv.outcome.complete());
  BOOST_CHECK_EQUAL(inv.outcome.acked.size(), 2u);
  BOOST_CHECK_GT(inv.outcome.number.number, before);  // the agent numbered it in app1's counter
  for (const char* home : {"app1", "app2"}) {
    Page p;
    p.key = key_homed_at(topo, home);
    // The old tag no longer matches: re-register and see the new version differ.
    auto seq = ac.read_seq(p.key);
    BOOST_REQUIRE(seq.ok());
    auto again = ac.register_page(p.key, *seq, deps({"item:7"}));
    BOOST_REQUIRE(again.cacheable());
    auto v = cl.read_version(home, again.slot);
    BOOST_REQUIRE(v.has_value());
    BOOST_CHECK_EQUAL(*v, again.version);
  }
  // An invalidate-all and a pending mark's round go through as well.
  AgentInvalidation all = ac.invalidate({}, Scheme::InvalidateAll);
  BOOST_CHECK_MESSAGE(all.answered() && all.outcome.complete(), all.why);
  AgentInvalidation pend = ac.invalidate(deps({"item:8"}), Scheme::DependencyLists,
                                         PendingMark{MarkOp::Pend, 42, 5000}, 200ms);
  BOOST_CHECK_MESSAGE(pend.answered() && pend.outcome.complete(), pend.why);
  AgentInvalidation rel =
      ac.invalidate(deps({"item:8"}), Scheme::DependencyLists, PendingMark{MarkOp::Release, 42, 0});
  BOOST_CHECK_MESSAGE(rel.answered() && rel.outcome.complete(), rel.why);
}

BOOST_AUTO_TEST_CASE(a_malformed_request_is_refused_and_the_connection_kept) {
  Cluster c(with_agents());
  tierce::base::Fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::string path = c.agent_socket(0);
  std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
  BOOST_REQUIRE_EQUAL(::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  timeval tv{5, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  auto ask = [&](const std::vector<uint8_t>& msg) {
    BOOST_REQUIRE_EQUAL(::send(fd.get(), msg.data(), msg.size(), 0), ssize_t(msg.size()));
    std::vector<uint8_t> in(agentwire::kMaxMessage);
    ssize_t n = ::recv(fd.get(), in.data(), in.size(), 0);
    BOOST_REQUIRE_MESSAGE(n > 0, "no answer from the agent");
    return agentwire::decode_reply(std::span<const uint8_t>(in.data(), size_t(n)));
  };
  // Garbage, a truncated request, a dependency count beyond its bytes: each a BadRequest.
  std::vector<std::vector<uint8_t>> bad = {{1, 2, 3}, std::vector<uint8_t>(40, 0xff)};
  agentwire::Request q;
  q.op = agentwire::Op::Register;
  q.id = 9;
  q.deps = deps({"a", "b"});
  auto reg = agentwire::encode(q);
  reg.resize(reg.size() - 8);  // one dependency short
  bad.push_back(reg);
  for (const auto& b : bad) {
    auto r = ask(b);
    BOOST_CHECK(r.status == agentwire::Status::BadRequest);
    BOOST_CHECK(!r.message.empty());
  }
  // The same connection still serves a good one.
  agentwire::Request good;
  good.op = agentwire::Op::ReadSeq;
  good.id = 77;
  good.key = 1;
  auto r = ask(agentwire::encode(good));
  BOOST_CHECK(r.status == agentwire::Status::Ok);
  BOOST_CHECK_EQUAL(r.id, 77u);
}

BOOST_AUTO_TEST_CASE(an_invalidation_lost_with_a_dead_agent_never_leaves_a_stale_page) {
  Cluster c(with_agents());
  auto cl = c.client(200ms, 0ms);
  auto ac = agent_of(c, 0);
  const auto topo = Topology::load(c.topo_path);
  Page p1 = register_through(ac, key_homed_at(topo, "app1"), {"item:1"});
  Page p2 = register_through(ac, key_homed_at(topo, "app2"), {"item:1"});
  const uint64_t catch1 = c.stat(0, "fence_catch_ups"), catch2 = c.stat(1, "fence_catch_ups");

  c.writer_agent[0].kill_now();  // app1's agent: the update's invalidation cannot be sent
  auto t0 = std::chrono::steady_clock::now();
  AgentInvalidation inv = ac.invalidate(deps({"item:1"}), Scheme::DependencyLists);
  BOOST_CHECK_MESSAGE(inv.kind == AgentInvalidation::Kind::Lost, to_string(inv.kind) << ": " << inv.why);
  BOOST_CHECK_GE(ms_since(t0).count(), kBound.count());  // never before the bound
  // By then neither home vouches on app1's counter: its own home reads it at the agent too.
  BOOST_CHECK_MESSAGE(eventually([&] { return !cl.read_seq("app1") && !cl.read_seq("app2"); }, 2s),
                      "a home still vouches while app1's writer agent is dead");
  // No version check passes for the pages meanwhile (a fenced table refuses every read).
  BOOST_CHECK(!cl.read_version("app1", p1.reg.slot).has_value());
  BOOST_CHECK(!cl.read_version("app2", p2.reg.slot).has_value());

  c.start_writer_agent(0);  // numbers once bare before it exports: the homes catch up
  BOOST_REQUIRE_MESSAGE(c.both_vouch(), "the homes did not vouch again after the agent's restart");
  BOOST_CHECK_GT(c.stat(0, "fence_catch_ups"), catch1);
  BOOST_CHECK_GT(c.stat(1, "fence_catch_ups"), catch2);
  // The pages registered before the lost invalidation are never valid again.
  for (const auto& [home, p] : {std::pair{"app1", p1}, std::pair{"app2", p2}}) {
    auto v = cl.read_version(home, p.reg.slot);
    BOOST_REQUIRE(v.has_value());
    BOOST_CHECK_MESSAGE(*v != p.reg.version, home << "'s page kept its version across the lost "
                                                     "invalidation: it would be served stale");
  }
  // And the agent serves again.
  AgentInvalidation again = ac.invalidate(deps({"item:1"}), Scheme::DependencyLists);
  BOOST_CHECK_MESSAGE(again.answered() && again.outcome.complete(), again.why);
}

BOOST_AUTO_TEST_CASE(a_frozen_agent_holds_the_invalidation_until_it_thaws) {
  Cluster c(with_agents());
  auto cl = c.client(200ms, 0ms);
  auto ac = agent_of(c, 0);
  const auto topo = Topology::load(c.topo_path);
  Page p = register_through(ac, key_homed_at(topo, "app2"), {"item:2"});
  freeze(c.writer_agent[0]);
  auto t0 = std::chrono::steady_clock::now();
  auto fut = std::async(std::launch::async, [&] {
    return ac.invalidate(deps({"item:2"}), Scheme::DependencyLists);
  });
  // The update does not return while the agent is frozen (its request waits in the socket).
  BOOST_CHECK(fut.wait_for(1500ms) == std::future_status::timeout);
  c.writer_agent[0].signal(SIGCONT);
  AgentInvalidation inv = fut.get();
  BOOST_CHECK_MESSAGE(inv.answered(), to_string(inv.kind) << ": " << inv.why);
  BOOST_CHECK_GE(ms_since(t0).count(), 1500);
  BOOST_REQUIRE_MESSAGE(c.both_vouch(), "the homes did not vouch again after the thaw");
  auto v = cl.read_version("app2", p.reg.slot);
  BOOST_REQUIRE(v.has_value());
  BOOST_CHECK_NE(*v, p.reg.version);
}

BOOST_AUTO_TEST_CASE(no_agent_running_is_a_lost_invalidation_not_a_hang) {
  Cluster c(with_agents());
  auto ac = agent_of(c, 1);
  c.writer_agent[1].kill_now();
  auto seq = ac.read_seq(1);
  BOOST_CHECK(!seq.ok());
  BOOST_CHECK_MESSAGE(seq.message().find("writer agent") != std::string::npos, seq.message());
  auto reg = ac.register_page(1, 1, deps({"x"}));
  BOOST_CHECK(!reg.cacheable());
  auto t0 = std::chrono::steady_clock::now();
  AgentInvalidation inv = ac.invalidate(deps({"x"}), Scheme::DependencyLists);
  BOOST_CHECK(inv.kind == AgentInvalidation::Kind::Lost);
  BOOST_CHECK_GE(ms_since(t0).count(), kBound.count());
  BOOST_CHECK_LT(ms_since(t0).count(), 5000);
  // A Pend gives up at once instead (its COMMIT is not sent: nothing to cover).
  AgentInvalidation pend = ac.invalidate(deps({"x"}), Scheme::DependencyLists,
                                         PendingMark{MarkOp::Pend, 1, 1000}, 100ms);
  BOOST_CHECK(pend.kind == AgentInvalidation::Kind::GaveUp);
}
