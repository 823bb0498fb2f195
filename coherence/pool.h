// coherence/pool.h — per-node pools of fabric connections, shared by ClusterClient's reads and
// registrations and by invalidation rounds (invalidation.h). Internal to the coherence library.
//
// A thread borrows a connection for one operation. A failed operation drops its connection and
// the node is skipped for `retry_after` (callers fail closed at once instead of waiting for a
// dead peer again); the next use reconnects and looks the regions up again, so a restarted memd
// (new incarnation, new keys) is picked up.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "coherence/coop_directory.h"
#include "coherence/topology.h"
#include "fabric/fabric.h"

namespace tierce::coherence {

struct ClientTuning {
  std::chrono::milliseconds op_timeout{50};  // one version/seq read or register call
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds retry_after{100};  // after a failure, skip the node this long
  size_t max_connections_per_node = 8;
};

// What a peer's "versions" region header says, checked once per connection at lookup.
enum class TableCheck { Ok, NotATable, OtherTopology };

struct NodePool {
  using Clock = std::chrono::steady_clock;
  struct Conn {
    std::unique_ptr<fabric::Connection> c;
    std::optional<fabric::RemoteRegion> versions, acks, writer;
    uint64_t acks_digest = 0;  // the home's topology digest, from its acks header (0: none)
    std::string node;          // the node this connection was made for (its version table's)
    // A proxy's cooperative-cache regions (docs/coop_cache.md) and the directory's geometry,
    // read from its header at lookup.
    std::optional<fabric::RemoteRegion> coop_dir, arena, pool;
    DirectoryGeometry coop_geometry;
  };
  const NodeInfo* info = nullptr;
  std::string uri;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<Conn>> idle;
  size_t total = 0;
  Clock::time_point down_until{};
};

// A borrowed connection: returned to the pool on success (the node is then up), dropped (and the
// node marked down for retry_after) when the operation failed.
class Borrowed {
 public:
  Borrowed(NodePool& n, std::unique_ptr<NodePool::Conn> c, std::chrono::milliseconds retry_after)
      : n_(n), c_(std::move(c)), retry_after_(retry_after) {}
  Borrowed(Borrowed&&) = delete;
  ~Borrowed();
  NodePool::Conn& operator*() { return *c_; }
  NodePool::Conn* operator->() { return c_.get(); }
  void done() { ok_ = true; }

 private:
  NodePool& n_;
  std::unique_ptr<NodePool::Conn> c_;
  std::chrono::milliseconds retry_after_;
  bool ok_ = false;
};

struct PoolContext {
  fabric::Secret secret;
  // Signs every connection as this node with this key when set (ClusterClient::sign_as): a
  // member, not a reader, at servers that know the cluster's keys (fabric::PeerInfo::member).
  std::string sign_node;
  fabric::NodeKey sign_key;
  ClientTuning tuning;
  fabric::LogSink log;
  uint64_t digest = 0;       // Topology::coherence_digest: a version table must carry it
  fabric::Millis clock_skew{50};
};

// A connection of `n` (an idle one, or a new one); nullptr when the node is marked down (unless
// `ignore_down`) or cannot be reached (then it is marked down; logged as COH0101).
std::unique_ptr<NodePool::Conn> borrow(NodePool& n, const PoolContext& ctx,
                                       bool ignore_down = false);
// An idle pooled connection of `n`, or nullptr — never connects, never waits.
std::unique_ptr<NodePool::Conn> borrow_idle(NodePool& n);
// A new connection, even while the node is marked down, after dropping its idle pooled ones (they
// may lead to a previous incarnation of its memd); nullptr when it cannot be reached. Quiet.
std::unique_ptr<NodePool::Conn> borrow_fresh(NodePool& n, const PoolContext& ctx);

enum class RegionKind { Versions, Acks, Writer, CoopDir, Arena, Pool };
// The descriptor of `kind` on this connection, looked up once. For Versions the header is read
// and checked against the digest first: a table of another topology throws FabricError{Fenced}
// with the reason (the caller fails closed on that home). For CoopDir the directory header is
// read and parsed into c.coop_geometry (FabricError{Fenced} when it is not a directory).
const fabric::RemoteRegion& region(NodePool::Conn& c, RegionKind kind, const PoolContext& ctx);

}  // namespace tierce::coherence
