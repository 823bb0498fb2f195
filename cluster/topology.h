// cluster/topology.h — the cluster topology file, shared by both Apache modules and the agents
// (memd, lockd) and the tools.
//
//   [cluster]
//   name = "demo"                       # used in log lines and segment names
//   secret_file = "/etc/tierce/secret"  # the fabric secret (>= 16 bytes, not world-readable)
//   transport = "shm"                   # auto | tcp | shm | verbs: how peers reach memd
//   version_slots = 262144              # slots of each app node's version table
//   op_timeout_ms = 50                  # default deadline of one version read (modules may
//   override)
//
//   [coherence]                         # optional: what every node must agree on for page caches
//   scheme = "dependency-lists"         # dependency-lists | invalidate-all: one per cluster
//   lease_ms = 1000                     # a home vouches for its version table this long after it
//                                       # last proved it holds every invalidation issued (the
//                                       fence)
//   clock_skew_ms = 50                  # bound on the clock difference between hosts (and drift
//                                       # over a lease); an update waits at most lease + skew
//
//   [arbiter]                           # optional: the database drops a lost app node from the
//                                       # fence (docs/coherence.md, "A lost node: the database
//                                       # as the arbiter"); every app node's writes check its row
//   table = "tierce.fence"              # schema.table on the application's MariaDB/MySQL server
//   host = "127.0.0.1"                  # where the homes reach that server (or socket = "...")
//   port = 3306
//   user = "tierce_fence"               # needs SELECT, INSERT, UPDATE on table and table_track
//   password_file = "/etc/tierce/arbiter-password"   # optional (not world-readable)
//   drop_after_ms = 3000                # a home that cannot read an app node's writer counter
//                                       # this long drops it (>= 2 x lease_ms)
//
//   [dlm]                               # optional: the lock manager (docs/dlm.md)
//   algorithm = "ncosed"                # ncosed | dqnl | srsl (the baselines, for comparison)
//   transport = "shm"                   # how lockds reach each other (default: [cluster]
//   transport) heartbeat_ms = 100                  # lockd -> lockd heartbeat period lease_ms =
//   1000                     # a node silent this long is dead: its locks are released lock_slots =
//   65536                  # lock words each lockd's home table holds
//
//   [[node]]                            # one per node, any order; names unique
//   name = "app1"
//   role = "app"                        # app (has a version table: a home) | proxy
//   memd = ["tcp://127.0.0.1:7101", "shm:///run/tierce/app1-memd.sock"]
//   lockd = ["tcp://127.0.0.1:7301", "shm:///run/tierce/app1-lockd.sock"]   # optional
//   writer = ["tcp://127.0.0.1:7151", "shm:///run/tierce/app1-writer.sock"]  # optional, app
//                                       # nodes: the node's writer agent (memd [writer]), from
//                                       # which the homes read its writer counter; without it
//                                       # they read it from memd (docs/coherence.md)
//   segment_prefix = "/tierce.demo.app1"
//   public_key = "ed25519:...="          # optional: the node's key (tierce-fabric keygen); its
//                                       # daemons prove they are this node to every client.
//                                       # Every node has one, or none has
//
// A page's home is chosen among the app nodes, a lock's home among the nodes with a lockd, by
// rendezvous hashing on (key hash, node name): every reader of the same file picks the same
// home, and adding a node moves only its share. A node needs memd, lockd or both. Unknown keys
// are errors (with the file and line).
#pragma once
#include <cstdint>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fabric/fabric.h"

namespace tierce::cluster {

enum class Role : uint8_t { App, Proxy };

struct NodeInfo {
  std::string name;
  Role role = Role::App;
  std::vector<std::string> memd;   // URIs of its memd (may be empty when it runs only a lockd)
  std::vector<std::string> lockd;  // URIs of its lockd (empty: not a lock manager member)
  std::vector<std::string> writer;  // URIs of its writer agent (empty: read the counter at memd)
  std::string segment_prefix;     // "/tierce.demo.app1"
  // Its node key's public half (fabric/identity.h): its memd, writer agent and lockd sign each
  // handshake with the private half, and every client of the cluster checks it. Every node has
  // one or none has (then only the shared secret is checked).
  std::optional<fabric::PublicKey> public_key;
};

// What a client connecting to n's memd, writer agent or lockd expects: n's name and key (the
// server must prove both) in a keyed cluster; nothing beyond the secret otherwise.
fabric::ClientIdentity expect(const NodeInfo& n);

// How an update invalidates cached pages (seed 000 §6.2.1): bump the pages registered under the
// dependencies it names, or every registered page. One scheme per cluster: a page registered
// under one and an update under the other could miss each other.
enum class Scheme : uint8_t { DependencyLists = 0, InvalidateAll = 1 };
std::string_view to_string(Scheme s);
Scheme parse_scheme(std::string_view s);  // "dependency-lists" | "invalidate-all"; throws
std::ostream& operator<<(std::ostream& o, Scheme s);

struct CoherenceSettings {
  Scheme scheme = Scheme::DependencyLists;
  uint32_t lease_ms = 1000;
  uint32_t clock_skew_ms = 50;
  // The longest an update waits for a home it cannot confirm: by then that home is fenced.
  uint32_t fence_bound_ms() const { return lease_ms + clock_skew_ms; }
};

// The database as the fence's arbiter (issue 29 Part 2): a row per app node in `table`
// (node, epoch, state in|out) that each write transaction of that node reads with a locking read;
// a home that cannot read the node's writer counter for drop_after_ms bumps it to "out" first,
// catches up, and vouches without it; the homes re-admit it together (`table`_track).
struct ArbiterSettings {
  std::string table;  // "schema.table"; empty: no arbiter (an operator takes lost nodes out)
  std::string host = "127.0.0.1";
  uint32_t port = 3306;
  std::string socket;
  std::string user = "tierce_fence";
  std::string password_file;
  uint32_t drop_after_ms = 0;  // 0: 3 x lease_ms
  bool enabled() const { return !table.empty(); }
  std::string track_table() const { return table + "_track"; }
  std::string password() const;  // reads password_file ("" when none); throws TopologyError
};

enum class LockAlgorithm : uint8_t { NCoSED, DQNL, SRSL };
std::string_view to_string(LockAlgorithm a);

struct DlmSettings {
  LockAlgorithm algorithm = LockAlgorithm::NCoSED;
  std::optional<fabric::Transport> transport;  // unset: the cluster's
  uint32_t heartbeat_ms = 100;
  uint32_t lease_ms = 1000;
  uint32_t lock_slots = 65536;
};

struct Topology {
  std::string path;  // the file it was loaded from
  std::string name;
  std::string secret_file;
  fabric::Transport transport = fabric::Transport::Auto;
  uint64_t version_slots = 262144;
  uint32_t op_timeout_ms = 50;
  CoherenceSettings coherence;
  ArbiterSettings arbiter;
  uint32_t arbiter_drop_after_ms() const {
    return arbiter.drop_after_ms ? arbiter.drop_after_ms : 3 * coherence.lease_ms;
  }
  DlmSettings dlm;
  std::vector<NodeInfo> nodes;

  // Throws TopologyError naming file:line and the key.
  static Topology load(const std::string& path);
  static Topology parse(std::string_view toml_text, const std::string& origin);

  const NodeInfo* find(std::string_view node) const;
  const NodeInfo& node(std::string_view name) const;  // throws TopologyError
  std::vector<const NodeInfo*> app_nodes() const;
  // Throws TopologyError when no node has role = "app" (the page caches need a home).
  void require_app_nodes() const;
  const NodeInfo& home_of(uint64_t key_hash) const;  // throws TopologyError without app nodes

  // Lock manager members (nodes with a lockd), in file order; rank = index + 1 (1..1023).
  std::vector<const NodeInfo*> lockd_nodes() const;
  uint32_t rank_of(std::string_view node) const;  // throws TopologyError when not a member
  const NodeInfo& lock_home_of(uint64_t name_hash) const;  // throws without lockd nodes
  // The lockd URI of `n` under the dlm transport (same rules as uri_of).
  std::string lockd_uri_of(const NodeInfo& n) const;
  // A digest of what every lockd must agree on (members, ranks, algorithm, lease): heartbeats
  // carry it, so a node started from another file is refused instead of corrupting locks.
  uint64_t dlm_digest() const;
  // A digest of what every node must agree on for the page caches (cluster name, version_slots,
  // [coherence], the app nodes' names): registrations, invalidations and each home's version
  // table carry it, so a node started from another file is refused instead of leaving pages that
  // no update invalidates. Addresses are not part of it (nodes may reach each other differently).
  uint64_t coherence_digest() const;
  // The memd URI of `n` to use under the cluster's transport (auto: shm when it has one and
  // verbs is absent, else tcp). Throws TopologyError when the node has none of that kind.
  std::string uri_of(const NodeInfo& n) const;
  // Where the homes read `n`'s writer counter: its writer agent's URI under the cluster's
  // transport, or its memd's (uri_of) when it lists none. Throws TopologyError as uri_of.
  std::string writer_uri_of(const NodeInfo& n) const;
  fabric::Secret secret() const;  // reads secret_file
};

class TopologyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tierce::cluster
