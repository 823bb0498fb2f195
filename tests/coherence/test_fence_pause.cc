// A home whose host was paused stops vouching (issue 29, path 2). The fence's cap is a
// CLOCK_MONOTONIC instant; on Linux that clock stands still while the host is suspended, and a VM
// stopped by its hypervisor may come back with its clocks behind: the cap then looks valid for as
// long as the pause lasted. The home compares CLOCK_BOOTTIME and CLOCK_REALTIME with it.
//
// A SIGSTOP of a real memd cannot show this: MONOTONIC keeps running while a process is stopped,
// and the cap already covers that case (test_cluster.cc, a_frozen_home_*). So the pause is
// injected: the detector is fed readings, and the home reads its clocks through
// HomeServiceOptions::host_clocks, where the test advances BOOTTIME alone.
#define BOOST_TEST_MODULE coherence_fence_pause
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <atomic>
#include <thread>

#include "coherence/client.h"
#include "coherence/home_service.h"
#include "coherence/layout.h"
#include "coherence/writer.h"
#include "fabric/segment.h"
#include "tests/test_util.h"

using namespace tierce;
using namespace tierce::coherence;
using namespace tierce_test;
using namespace std::chrono_literals;

namespace {
constexpr uint64_t kMs = 1'000'000;
fabric::HostClocks at(uint64_t mono_ms, uint64_t boot_ms, uint64_t real_ms) {
  return {mono_ms * kMs, boot_ms * kMs, real_ms * kMs};
}
}  // namespace

BOOST_AUTO_TEST_SUITE(detector)

BOOST_AUTO_TEST_CASE(clocks_in_step_are_no_pause) {
  fabric::ClockPauseDetector d;
  BOOST_TEST(d.missed_ns(at(1000, 5000, 90000)) == 0u);  // first reading: nothing to compare
  BOOST_TEST(d.missed_ns(at(1250, 5250, 90250)) == 0u);
  BOOST_TEST(d.missed_ns(at(1252, 5254, 90253)) == 0u);  // 2-3 ms of noise: below threshold
  // Real readings of this host, one after another.
  fabric::ClockPauseDetector r;
  for (int i = 0; i < 20; ++i) {
    BOOST_TEST(r.missed_ns(fabric::read_host_clocks()) == 0u);
    std::this_thread::sleep_for(1ms);
  }
}

BOOST_AUTO_TEST_CASE(boottime_ahead_of_monotonic_is_a_suspend) {
  fabric::ClockPauseDetector d;
  d.missed_ns(at(1000, 5000, 90000));
  // Suspended for 30 s: MONOTONIC moved 250 ms, BOOTTIME 30.25 s.
  BOOST_TEST(d.missed_ns(at(1250, 35250, 120250)) == 30000 * kMs);
  BOOST_TEST(d.missed_ns(at(1500, 35500, 120500)) == 0u);  // once
}

BOOST_AUTO_TEST_CASE(a_wall_clock_stepped_forward_is_a_pause_and_back_is_not) {
  fabric::ClockPauseDetector d;
  d.missed_ns(at(1000, 5000, 90000));
  // A stopped VM: every clock stood still; the guest agent steps the wall clock 2 s forward.
  BOOST_TEST(d.missed_ns(at(1010, 5010, 92010)) == 2000 * kMs);
  BOOST_TEST(d.missed_ns(at(1020, 5020, 80000)) == 0u);  // stepped back: no time was missed
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(lowering_the_cap_fences_at_once_and_a_raise_restores_it) {
  auto seg = fabric::SharedSegment::create_anonymous("cap", 4096);
  auto* h = seg.header();
  const uint64_t now = fabric::monotonic_ns();
  fabric::raise_lease_cap(h, now + 10'000 * kMs);
  fabric::renew_lease(h, 5'000 * kMs);
  BOOST_TEST(!fabric::past_lease_cap(h, fabric::monotonic_ns()));
  fabric::lower_lease_cap(h, 1);
  BOOST_TEST(fabric::past_lease_cap(h, fabric::monotonic_ns()));
  BOOST_TEST(h->lease_deadline_ns.load() <= 1u);
  BOOST_TEST(h->lease_deadline_wall_ns.load() == 1u);
  fabric::renew_lease(h, 5'000 * kMs);  // the exporter's heartbeat never passes the lowered cap
  BOOST_TEST(h->lease_deadline_ns.load() <= 1u);
  fabric::raise_lease_cap(h, fabric::monotonic_ns() + 10'000 * kMs);  // the next renewal
  BOOST_TEST(!fabric::past_lease_cap(h, fabric::monotonic_ns()));
}

namespace {

// app1's home in process (a fabric::Server and a HomeService, as in memd), and app2 played by a
// bare fabric::Server that exports app2's writer counter: unexporting it makes app1's renewals
// fail, so that only its cap keeps it vouching.
struct OneHome {
  TempDir dir;
  std::string secret = make_secret(dir);
  std::string prefix = "/tierce.t" + std::to_string(::getpid()) + random_suffix().substr(0, 6);
  std::unique_ptr<fabric::Server> s1, s2;
  std::unique_ptr<WriterLog> w2;
  std::unique_ptr<HomeService> home;
  std::atomic<uint64_t> boot_ahead_ns{0};  // added to BOOTTIME: the injected pause
  // A pause inside one renewal made by `pausing_thread` (renew_now): from its second reading of
  // the clocks on, BOOTTIME is 1 s ahead (the first one is taken with t_req). Other threads (the
  // fence loop) see the clocks as they are.
  std::atomic<std::thread::id> pausing_thread{};
  std::atomic<int> pausing_reads{0};

  static std::unique_ptr<fabric::Server> server(const std::string& secret_path) {
    fabric::ServerOptions o;
    o.secret = fabric::Secret::from_file(secret_path);
    o.listen = {"tcp://127.0.0.1:0"};
    o.log = [](fabric::LogLevel, std::string_view) {};
    return std::make_unique<fabric::Server>(o);
  }
  // app2's writer segment, created before the topology file exists: its digest is stamped at the
  // first issue(), once the file is written.
  std::shared_ptr<fabric::SharedSegment> w2_segment() {
    w2 = std::make_unique<WriterLog>(prefix + ".app2" + kWriterSuffix, digest_of_this_topology());
    return w2->segment();
  }
  uint64_t digest_of_this_topology() const {
    // The digest covers the cluster name, version_slots, [coherence] and the app nodes' names,
    // not their addresses: the same text with any address gives it.
    std::string t = "[cluster]\nname = \"t\"\nsecret_file = \"" + secret +
                    "\"\ntransport = \"tcp\"\nversion_slots = 4096\n"
                    "[coherence]\nlease_ms = 3000\nclock_skew_ms = 20\n";
    for (const char* n : {"app1", "app2"})
      t += std::string("[[node]]\nname = \"") + n +
           "\"\nrole = \"app\"\nmemd = [\"tcp://127.0.0.1:1\"]\n" + "segment_prefix = \"" + prefix +
           "." + n + "\"\n";
    return Topology::parse(t, "digest").coherence_digest();
  }
  OneHome() {
    s1 = server(secret);
    s2 = server(secret);
    s2->export_region(kWriterRegion, w2_segment());
    std::string t = "[cluster]\nname = \"t\"\nsecret_file = \"" + secret +
                    "\"\ntransport = \"tcp\"\nversion_slots = 4096\n"
                    "[coherence]\nlease_ms = 3000\nclock_skew_ms = 20\n";
    for (auto& [n, s] : {std::pair{"app1", s1.get()}, std::pair{"app2", s2.get()}})
      t += std::string("[[node]]\nname = \"") + n + "\"\nrole = \"app\"\nmemd = [\"" +
           s->bound_uris().at(0) + "\"]\nsegment_prefix = \"" + prefix + "." + n + "\"\n";
    write_file(dir / "cluster.toml", t);
    // app2 numbers under this topology (its digest goes into the region before the number).
    w2->issue();
    HomeServiceOptions o;
    o.host_clocks = [this] {
      auto c = fabric::read_host_clocks();
      c.boottime_ns += boot_ahead_ns.load();
      if (pausing_thread.load() == std::this_thread::get_id() && pausing_reads++ >= 1)
        c.boottime_ns += 1000 * kMs;
      return c;
    };
    home = std::make_unique<HomeService>(*s1, Topology::load(dir / "cluster.toml"), "app1",
                                         fabric::Secret::from_file(secret), o, nullptr);
  }
  ~OneHome() {
    home.reset();
    s1->stop();
    s2->stop();
    for (const char* n : {".app1", ".app2"})
      fabric::SharedSegment::unlink(prefix + n + kWriterSuffix);
  }
  ClusterClient proxy() const {
    ClientTuning t;
    t.op_timeout = 200ms;
    t.retry_after = 0ms;
    return ClusterClient(Topology::load(dir / "cluster.toml"), fabric::Secret::from_file(secret), t,
                         nullptr);
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_home_whose_monotonic_clock_missed_a_pause_stops_vouching) {
  OneHome h;
  auto proxy = h.proxy();
  BOOST_REQUIRE_MESSAGE(eventually([&] { return proxy.read_seq("app1").has_value(); }, 5s),
                        "the home did not start vouching");
  // app2's counter becomes unreadable: no renewal from now on; the cap (3 s) keeps it vouching.
  h.s2->unexport_region(kWriterRegion);
  BOOST_REQUIRE(eventually([&] { return h.home->fence().failed_renewals > 0; }, 3s));
  BOOST_REQUIRE(h.home->fence().vouching);
  BOOST_REQUIRE(proxy.read_seq("app1").has_value());

  // The host comes back from a 1 s suspend: BOOTTIME moved, MONOTONIC did not.
  auto t0 = std::chrono::steady_clock::now();
  h.boot_ahead_ns += 1000 * kMs;
  bool fenced = eventually([&] { return !h.home->fence().vouching; }, 1s);
  auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  BOOST_TEST_MESSAGE("fenced " << took.count() << " ms after the pause was injected");
  BOOST_TEST(fenced, "the home kept vouching on a cap taken before the pause");
  BOOST_TEST(h.home->fence().pauses == 1u);
  BOOST_TEST(!proxy.read_seq("app1").has_value());  // tcp responder: Fenced
  BOOST_TEST(h.home->status_text().find("fence_clock_pauses 1\n") != std::string::npos);

  // Its next successful renewal (reading after the pause) makes it vouch again.
  h.s2->export_region(kWriterRegion, h.w2->segment());
  BOOST_TEST(eventually([&] { return proxy.read_seq("app1").has_value(); }, 5s));
  BOOST_TEST(h.home->fence().pauses == 1u);
}

// The model's finding (coherence/model, PAUSE_UNCHECKED at t_req): a pause between a renewal's
// reading and its raise of the cap must not give a cap counted from that (stale) reading. The
// renewal itself compares the clocks it took with t_req with those just before the raise.
BOOST_AUTO_TEST_CASE(a_renewal_during_which_the_host_was_paused_sets_no_cap) {
  OneHome h;
  auto proxy = h.proxy();
  BOOST_REQUIRE_MESSAGE(eventually([&] { return proxy.read_seq("app1").has_value(); }, 5s),
                        "the home did not start vouching");
  BOOST_REQUIRE(h.home->renew_now());  // a renewal without a pause succeeds
  h.pausing_thread = std::this_thread::get_id();
  h.pausing_reads = 0;
  BOOST_TEST(!h.home->renew_now(), "a renewal spanning a pause set a cap");
  BOOST_TEST(h.pausing_reads.load() >= 2);
  h.pausing_thread = std::thread::id{};
  BOOST_TEST(h.home->renew_now());
}
