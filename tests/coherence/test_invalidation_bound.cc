// A writer's update with several silent homes returns within the fence bound plus ONE overshoot
// floor (issue 29, path 8): the floor of InvalidationRound::op_deadline is a budget the homes
// share, not one each, one after another.
//
// In process, over tcp: one healthy home and several SILENT ones, each a fabric::Server exporting
// an "acks" region. The healthy home acknowledges (writes the tag in its cell, as HomeService
// does). A silent home completes the handshake and the region lookup, then its invalidation
// handler blocks until the test ends: on tcp a connection's requests are served in order, so the
// writer's reads of its ack cell are never answered — a frozen memd as the writer sees it.
//
// Deterministic by construction: the writer's op_timeout is longer than the bound, so the first
// silent home's read takes exactly what is left of the bound (the update is at the bound when it
// fails), and every later silent home can only add the floor. Before the fix that is
// (k - 1) x 50 ms past the bound (200 ms for k = 5); after it at most 50 ms. The test allows the
// floor plus a scheduling margin of 60 ms, half-way between the two.
#define BOOST_TEST_MODULE coherence_invalidation_bound
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <condition_variable>
#include <mutex>

#include "coherence/client.h"
#include "coherence/invalidation.h"
#include "coherence/layout.h"
#include "coherence/protocol.h"
#include "coherence/writer.h"
#include "fabric/segment.h"
#include "tests/test_util.h"

using namespace tierce;
using namespace tierce::coherence;
using namespace tierce_test;
using namespace std::chrono_literals;

namespace {

constexpr int kLeaseMs = 300;
constexpr int kSkewMs = 20;
constexpr auto kBound = std::chrono::milliseconds(kLeaseMs + kSkewMs);
constexpr auto kMargin = 60ms;  // scheduling on a busy 2-core machine
constexpr uint32_t kCells = 64;

// Released when the test ends: the silent homes' handlers wait on it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return open; });
  }
  void release() {
    {
      std::lock_guard lk(mu);
      open = true;
    }
    cv.notify_all();
  }
};

struct FakeHome {
  std::shared_ptr<fabric::SharedSegment> acks;
  std::unique_ptr<fabric::Server> server;
  std::string uri;
};

struct Homes {
  TempDir dir;
  std::string secret = make_secret(dir);
  std::string prefix = "/tierce.t" + std::to_string(::getpid()) + random_suffix().substr(0, 6);
  Gate gate;
  std::vector<FakeHome> homes;  // [0] healthy, the rest silent
  std::string topo_path = dir / "cluster.toml";

  explicit Homes(size_t silent) {
    for (size_t i = 0; i <= silent; ++i) {
      FakeHome h;
      std::string seg = prefix + ".acks" + std::to_string(i);
      h.acks = std::make_shared<fabric::SharedSegment>(
          fabric::SharedSegment::create(seg, acks_bytes(kCells)));
      word_at(h.acks->data(), 0).store(kAcksMagic);
      word_at(h.acks->data(), 8).store(kCells);
      fabric::ServerOptions o;
      o.secret = fabric::Secret::from_file(secret);
      o.listen = {"tcp://127.0.0.1:0"};
      o.log = [](fabric::LogLevel, std::string_view) {};
      h.server = std::make_unique<fabric::Server>(o);
      h.server->export_region(kAcksRegion, h.acks);
      auto* data = h.acks->data();
      if (i == 0) {
        h.server->on_call(kInvalidateService, [data](const fabric::PeerInfo&,
                                                     std::span<const uint8_t> b) {
          InvalidateRequest r = decode_invalidate(b);
          if (r.ack_cell < kCells)
            word_at(data, ack_cell_offset(r.ack_cell)).store(r.ack_tag, std::memory_order_release);
          return std::vector<uint8_t>{};
        });
      } else {
        h.server->on_call(kInvalidateService,
                          [this](const fabric::PeerInfo&, std::span<const uint8_t>) {
                            gate.wait();  // frozen: nothing on this connection is answered
                            return std::vector<uint8_t>{};
                          });
      }
      h.uri = h.server->bound_uris().at(0);
      homes.push_back(std::move(h));
    }
    std::string t = "[cluster]\nname = \"t\"\nsecret_file = \"" + secret +
                    "\"\ntransport = \"tcp\"\nversion_slots = 4096\n[coherence]\nlease_ms = " +
                    std::to_string(kLeaseMs) + "\nclock_skew_ms = " + std::to_string(kSkewMs) +
                    "\n";
    for (size_t i = 0; i < homes.size(); ++i)
      t += "[[node]]\nname = \"app" + std::to_string(i + 1) + "\"\nrole = \"app\"\nmemd = [\"" +
           homes[i].uri + "\"]\nsegment_prefix = \"" + prefix + ".app" + std::to_string(i + 1) +
           "\"\n";
    write_file(topo_path, t);
    // Homes of this topology (acks header), as HomeService writes it: the writer counts on the
    // fences of the silent ones (a home of another digest would be "unconfirmed", not fenced).
    const uint64_t digest = Topology::load(topo_path).coherence_digest();
    for (auto& h : homes) word_at(h.acks->data(), kAcksDigestOffset).store(digest);
  }
  ~Homes() {
    gate.release();
    for (auto& h : homes) {
      h.server->stop();
      fabric::SharedSegment::unlink(h.acks->name());
    }
    fabric::SharedSegment::unlink(prefix + ".app1" + kWriterSuffix);
  }
  ClusterClient client(std::chrono::milliseconds op) const {
    ClientTuning t;
    t.op_timeout = op;
    t.connect_timeout = 500ms;
    t.retry_after = 0ms;
    return ClusterClient(Topology::load(topo_path), fabric::Secret::from_file(secret), t, nullptr);
  }
};

std::chrono::milliseconds ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               t0);
}

// One update with every home's connection pooled (as after earlier updates), then frozen.
void check_overshoot(size_t silent, std::chrono::milliseconds op_timeout) {
  Homes hs(silent);
  auto cl = hs.client(op_timeout);
  WriterLog w(hs.prefix + ".app1" + kWriterSuffix, cl.topology().coherence_digest());
  // app1's writer region, exported where the topology says (its memd): the writer checks that the
  // homes read the segment it numbers in (COH0109), or no fence would cover it.
  hs.homes[0].server->export_region(kWriterRegion, w.segment());
  // The first update connects to every home (the silent ones only freeze once a message
  // arrives, so their handshakes and lookups succeed) and pools the connections.
  auto warm = cl.invalidate(w, "app1", {}, Scheme::InvalidateAll);
  BOOST_REQUIRE(warm.acked.size() == 1u);
  auto t0 = std::chrono::steady_clock::now();
  auto out = cl.invalidate(w, "app1", {}, Scheme::InvalidateAll);
  auto took = ms_since(t0);
  BOOST_TEST_MESSAGE(
      silent << " silent homes, op_timeout " << op_timeout.count() << " ms: the update took "
             << took.count() << " ms (bound " << kBound.count() << " ms, floor "
             << InvalidationRound::kOvershootFloor.count() << " ms), " << out.rounds << " rounds");
  BOOST_TEST(out.acked.size() == 1u);  // the healthy home acknowledged
  BOOST_TEST(out.fenced.size() == silent);
  BOOST_TEST(took >= kBound);  // never earlier than the bound
  BOOST_TEST(took <= kBound + InvalidationRound::kOvershootFloor + kMargin,
             "overshot the bound by " << (took - kBound).count() << " ms with " << silent
                                      << " silent homes");
}

}  // namespace

BOOST_AUTO_TEST_CASE(five_silent_homes_overshoot_the_bound_by_one_floor_at_most) {
  // op_timeout above the bound: the first silent home's read ends on the bound itself.
  check_overshoot(5, 1000ms);
}

BOOST_AUTO_TEST_CASE(the_same_with_the_default_op_timeout_of_an_app_node) {
  // mod_appversion's default (AppVersionOpTimeout 200 ms): two silent reads reach the bound.
  check_overshoot(5, 200ms);
}
