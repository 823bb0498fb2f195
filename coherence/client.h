// coherence/client.h — how an Apache child (or a tool) talks to the app nodes' memd: version and
// sequence reads (one one-sided read each), registrations, and invalidations with their acks.
//
// Thread-safe: each node has a small pool of fabric connections (a fabric::Connection serves one
// thread at a time); a thread borrows one for an operation. A failed operation drops its
// connection and the node is skipped for `retry_after` (callers fail closed at once instead of
// waiting for a dead peer again); the next use reconnects and looks the regions up again, so a
// restarted memd (new incarnation, new keys) is picked up.
// Never share a ClusterClient across fork(): make one per child (child_init).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "coherence/home.h"
#include "coherence/topology.h"
#include "fabric/fabric.h"

namespace tierce::coherence {

struct ClientTuning {
  std::chrono::milliseconds op_timeout{50};        // one version/seq read or register call
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds retry_after{100};      // after a failure, skip the node this long
  size_t max_connections_per_node = 8;
};

struct InvalidateOutcome {
  size_t homes = 0;                 // app nodes the invalidation went to
  size_t acked = 0;                 // acks received before the deadline
  std::vector<std::string> missing; // homes that did not ack (or could not be reached)
  std::chrono::nanoseconds elapsed{0};
  bool complete() const { return acked == homes; }
};

class ClusterClient {
 public:
  ClusterClient(Topology topo, fabric::Secret secret, ClientTuning tuning, fabric::LogSink log);
  ~ClusterClient();
  ClusterClient(const ClusterClient&) = delete;
  ClusterClient& operator=(const ClusterClient&) = delete;

  const Topology& topology() const { return topo_; }

  // One one-sided 8-byte read of slot `slot` in `home`'s version table. nullopt = could not be
  // read in time (dead peer, timeout, revoked region, node in retry_after): callers fail closed.
  std::optional<uint64_t> read_version(const std::string& home, uint64_t slot);
  // The home's invalidation sequence (read before the database is read).
  std::optional<uint64_t> read_seq(const std::string& home);
  // Registers a rendered page at its home. Not cacheable on any failure (reason says why).
  RegisterResult register_page(const std::string& home, uint64_t key, uint64_t slot,
                               uint64_t seq_start, std::span<const uint64_t> deps);
  // Sends the invalidation to every app node (`self` = this node, whose "acks" region collects
  // the acks), waits until all acked or `deadline` passed. Scheme InvalidateAll ignores `deps`.
  // When a home is missing it returns only once `deadline` has passed, even if the home could
  // not be reached at all: keep `deadline` above memd's lease_ms, so that by then no proxy can
  // still validate a page against the missing home's (possibly stale) version table.
  InvalidateOutcome invalidate(const std::string& self, std::span<const uint64_t> deps,
                               Scheme scheme, std::chrono::milliseconds deadline);
  // A home's acknowledgement: fetch-and-add 1 on ack counter `slot` of `origin`'s "acks" region.
  // A pooled connection that fails (the origin's memd restarted) is replaced once at once, even
  // while the node is marked down — but an add that timed out is never made again (it may yet be
  // applied: one home must not count twice). Throws on failure (the message says why).
  void acknowledge(const std::string& origin, uint32_t slot);

  struct Node;  // a node's connection pool (client.cc)

 private:
  Node& node(const std::string& name);
  Topology topo_;
  fabric::Secret secret_;
  ClientTuning tuning_;
  fabric::LogSink log_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

}  // namespace tierce::coherence
