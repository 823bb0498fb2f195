// coherence/home_service.h — an app node's home role, hosted by its memd: creates the node's
// "versions" and "acks" segments (fresh random bases: a new incarnation on every start), maps the
// node's "writer" segment (writer.h), exports all three on the memd's fabric::Server, serves
// coherence.register / coherence.invalidate / coherence.status, and keeps its FENCE.
//
// The fence (docs/coherence.md, "The rule"): the versions segment's lease is capped (fabric
// segment.h) at t + lease_ms, where t is the moment just before the home last read every app
// node's writer counter and found it held every invalidation numbered up to what it read (or
// caught up: invalidated every registered page after the read). A renewal runs every lease/4.
// A home that cannot read some node's counter, or is frozen, or is behind for longer than a
// grace period without catching up, stops vouching when its cap passes: proxies fail closed on
// its pages and registrations are refused (Fenced). A writer that cannot confirm a home returns
// after lease + clock skew from numbering its invalidation: by then that home has applied it,
// caught up, or stopped vouching.
//
// After a crash, a new incarnation first waits out the lease its predecessor last renewed
// (COH0205): until then proxies may still read the old table.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/metrics.h"
#include "coherence/client.h"
#include "coherence/home.h"
#include "coherence/ledger.h"
#include "coherence/skip_keeper.h"
#include "coherence/topology.h"
#include "coherence/arbiter.h"
#include "coherence/writer.h"
#include "fabric/fabric.h"
#include "fabric/segment.h"

namespace tierce::coherence {

struct HomeServiceOptions {
  HomeLimits limits;
  uint32_t ack_cells = 4096;
  // Reads of other nodes' writer counters: deadline of one read (0 = lease_ms / 4).
  std::chrono::milliseconds peer_op_timeout{0};
  // The exporting server's heartbeat lease (memd lease_ms): how far a renewal extends the
  // segment's lease word at once (it never passes the fence's cap).
  std::chrono::milliseconds exporter_lease{500};
  // Where the fence reads the host's clocks to detect pauses (empty: fabric::read_host_clocks;
  // tests inject a pause here).
  std::function<fabric::HostClocks()> host_clocks;
  // The database as the arbiter (topology [arbiter]; arbiter.h): drops app nodes this home
  // cannot read for drop_after (0: the topology's) and re-admits them with the other homes.
  // Null: no arbiter (a lost node fails every home closed until an operator takes it out).
  std::shared_ptr<Arbiter> arbiter;
  std::chrono::milliseconds drop_after{0};
};

// Where an app node stands in this home's fence under the arbiter.
enum class ArbState : uint8_t {
  Tracked,    // its counter is read at every renewal (it may write)
  Out,        // dropped in the database (epoch `epoch`); this home caught up after the drop and
              // vouches without reading it
  Rejoining,  // out, but readable again: read at every renewal (the first reading catches up),
              // not yet recorded in the database (losing it again just goes back to Out)
};
std::string_view to_string(ArbState s);

struct ArbiterOriginStatus {
  std::string node;
  ArbState state = ArbState::Tracked;
  uint64_t epoch = 0;          // the row's epoch as this home last saw it
  uint64_t tracked_epoch = 0;  // the epoch this home recorded it reads the node at (0: none)
  int64_t unreadable_ms = 0;   // how long its counter has been unreadable (0: read last time)
};

// What the fence looks like now (status page, tests).
struct FenceStatus {
  bool vouching = false;            // the cap is ahead of now
  int64_t vouch_ms_left = 0;        // cap - now (negative: fenced for that long)
  uint64_t renewals = 0, catch_ups = 0, failed_renewals = 0, gap_waits = 0;
  uint64_t pauses = 0;              // clock pauses detected (the cap was dropped: COH0240)
  uint64_t drops = 0, admissions = 0, arbiter_errors = 0;  // the arbiter (drops done here)
  std::string last_failure;         // why the last renewal failed ("" when none)
};

class HomeService {
 public:
  // `node` must be an app node of `topo`. Creates <prefix>.versions and <prefix>.acks (replacing
  // stale ones), maps <prefix>.writer, exports them as "versions", "acks" and "writer",
  // registers the services and starts the fence thread (the home vouches after its first
  // renewal).
  HomeService(fabric::Server& server, Topology topo, std::string node, fabric::Secret secret,
              HomeServiceOptions opts, fabric::LogSink log);
  ~HomeService();  // stops the fence, unexports, revokes and unlinks versions and acks

  HomeState& state() { return *state_; }
  std::string status_text() const;  // "key value" lines
  void metrics(base::Metrics& m) const;  // tierce_home_* families (the memd's metrics)
  FenceStatus fence() const;
  SkipMarkStats skip_marks() const;
  uint64_t acks_sent() const { return acks_sent_.load(); }

  // Runs one renewal now (tests; the fence thread does this every lease/4). True when renewed.
  bool renew_now();

  // An operator's decision (coherence.membership): `node` (an app node) is lost for good and can
  // no longer write — its host is off, or it is cut off from the database. This home stops reading
  // its counter (and vouches again without it); take_in() reads it again (the first reading
  // catches up). Returns "" or why not. Safe ONLY under that premise (docs/coherence.md).
  std::string take_out(const std::string& node);
  std::string take_in(const std::string& node);
  std::vector<std::string> taken_out() const;

  // The arbiter's view (empty without one).
  std::vector<ArbiterOriginStatus> arbiter_status() const;
  // One pass of the arbiter thread now (tests; the thread runs one every lease/4).
  void arbiter_pass_now();

 private:
  void on_invalidate(std::span<const uint8_t> body);
  std::vector<uint8_t> on_register(std::span<const uint8_t> body);
  std::vector<uint8_t> on_membership(std::span<const uint8_t> body);
  void await_predecessor_lease(std::initializer_list<std::string> names);
  void ack(uint32_t cell, uint64_t tag);
  bool renew_once();
  // The parts of renew_once (Prereq: renew_mu_ held). Reads every origin's writer counter into
  // readings[i], setting out[i] for those not waited for this time; returns why this renewal
  // cannot vouch ("" when it can go on).
  std::string read_origins(std::vector<IssuedNumber>& readings, std::vector<bool>& out,
                           const std::vector<ArbState>& arb);
  // Waits (up to lease/2) until every origin read is Current here, or catches up. False: stopping.
  bool await_current(const std::vector<IssuedNumber>& readings, const std::vector<bool>& out);
  void fence_loop();
  // Pause detection (issue 29, path 2): true when the host's monotonic clock missed time since
  // the last check; the cap is then dropped (fenced until the next renewal).
  bool check_clock_pause();
  // The fence loop's wait, in slices of kPauseCheck with a pause check after each. True: stopping.
  bool wait_watching_clocks(std::chrono::milliseconds wait);
  void catch_up(const std::vector<IssuedNumber>& readings, const std::string& why);
  bool vouching_now() const;
  size_t origin_index(const std::string& name) const;  // SIZE_MAX when not an app node

  fabric::Server& server_;
  Topology topo_;
  std::string node_;
  fabric::Secret secret_;
  HomeServiceOptions opts_;
  fabric::LogSink log_;
  uint64_t digest_ = 0;
  std::vector<std::string> origins_;  // the app nodes, in topology order
  size_t self_ = 0;                   // our index in origins_
  std::shared_ptr<fabric::SharedSegment> versions_, acks_;
  std::unique_ptr<WriterLog> writer_;  // our node's writer segment (mapped; exported unless
                                       // the node has a writer agent)
  bool exports_writer_ = true;
  std::unique_ptr<HomeState> state_;
  OriginLedger ledger_;
  std::unique_ptr<ClusterClient> peers_;  // reads of the other nodes' writer counters
  // Lifts this node's skip marks when the marked homes answer (its own thread and client: a
  // probe of a frozen home must not delay a renewal).
  std::unique_ptr<ClusterClient> probe_client_;
  std::unique_ptr<SkipMarkKeeper> keeper_;
  std::thread keeper_thread_;
  void keeper_loop();

  // ---- the arbiter (null opts_.arbiter: unused) ----
  struct ArbOrigin {
    ArbState state = ArbState::Tracked;
    uint64_t epoch = 0, tracked_epoch = 0;
    uint64_t unreadable_since_ns = 0;  // first failed reading since the last good one (0: none)
    bool covered = false;  // a renewal read and covered it since its last change of state
  };
  mutable std::mutex arb_mu_;      // arb_ (taken inside renew_mu_, never the other way round)
  std::vector<ArbOrigin> arb_;
  bool arb_ensured_ = false;       // arbiter thread only
  std::string arb_last_error_;     // arbiter thread only: logged when it changes
  std::unique_ptr<ClusterClient> arb_probe_;  // reads of dropped nodes' counters
  std::thread arbiter_thread_;
  void arbiter_loop();
  void arbiter_pass();
  void drop_node(size_t i);

  std::mutex renew_mu_;  // one renewal at a time
  mutable std::mutex out_mu_;  // out_
  std::vector<bool> out_;      // per origin: taken out of the fence by an operator
  mutable std::mutex fence_mu_;
  std::condition_variable fence_cv_;
  bool stopping_ = false;
  FenceStatus fence_stats_;
  fabric::ClockPauseDetector pause_detector_;  // fence thread only (and renew_mu_ held)
  std::thread fence_thread_;

  mutable std::mutex keeper_mu_;  // keeper_'s stats, read by status pages
  std::atomic<uint64_t> acks_sent_{0}, bad_messages_{0}, refused_topology_{0}, duplicates_{0},
      unknown_origin_{0}, foreign_invalidations_{0};
};

}  // namespace tierce::coherence
