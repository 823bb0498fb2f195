// coherence/client.h — how an Apache child (or a tool) talks to the app nodes' memd: version and
// sequence reads (one one-sided read each), writer-counter reads, registrations, and
// invalidations (invalidation.h: numbered, sent to every home, acknowledged in ack cells, or
// covered by the homes' fences).
//
// Thread-safe: each node has a small pool of fabric connections (pool.h); a thread borrows one
// for an operation. Never share a ClusterClient across fork(): make one per child (child_init).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "coherence/coop_directory.h"
#include "coherence/coop_directory_wire.h"
#include "coherence/home.h"
#include "coherence/pool.h"
#include "coherence/topology.h"
#include "coherence/writer.h"
#include "fabric/fabric.h"

namespace tierce::coherence {

struct InvalidateOutcome {
  IssuedNumber number;               // what the writer region numbered it
  size_t homes = 0;                  // app nodes it is for
  std::vector<std::string> acked;    // homes that acknowledged it (applied it)
  std::vector<std::string> fenced;   // homes that did not within the fence bound: they cannot
                                     // vouch for their tables any more (why, in words)
  std::vector<std::string> unconfirmed;  // homes of another topology (their acks header says)
                                         // that did not acknowledge: NOT covered by a fence
  std::vector<std::string> skipped;      // homes not waited for: marked unreachable in the writer
                                         // region since the bound or longer (they cannot vouch)
  std::vector<std::string> marked;       // homes this invalidation marked (not acknowledged by half
                                         // the bound)
  // With give_up_after: the homes that had not acknowledged when the invalidation gave up, before
  // the fence bound (why, in words). They MAY STILL VOUCH for pages that miss it.
  std::vector<std::string> gave_up_on;
  size_t rounds = 0;                 // send rounds (1 when every home answered the first)
  std::chrono::nanoseconds elapsed{0};
  bool gave_up() const { return !gave_up_on.empty(); }
  // Every home acknowledged, or was skipped (a skipped home vouches for nothing until it holds
  // this invalidation; like a home that missed a Pend and caught up, it holds no mark of it:
  // docs/coherence.md "Pending marks", "Under faults").
  bool complete() const { return fenced.empty() && gave_up_on.empty() && unconfirmed.empty(); }
};

class ClusterClient {
 public:
  ClusterClient(Topology topo, fabric::Secret secret, ClientTuning tuning, fabric::LogSink log);
  ~ClusterClient();
  ClusterClient(const ClusterClient&) = delete;
  ClusterClient& operator=(const ClusterClient&) = delete;

  const Topology& topology() const { return topo_; }
  // Signs every connection from now on as `node` with `key` (its node key): servers that know the
  // cluster's keys then count this client a MEMBER (registrations, invalidations, memberships),
  // not a reader (fabric::PeerInfo::member). Call before the first operation: connections made
  // earlier stay unsigned. Not thread-safe against operations in flight.
  void sign_as(const std::string& node, fabric::NodeKey key);

  // One one-sided 8-byte read of slot `slot` in `home`'s version table. nullopt = could not be
  // read in time (dead peer, timeout, revoked region, home fenced or of another topology, node
  // in retry_after): callers fail closed.
  std::optional<uint64_t> read_version(const std::string& home, uint64_t slot);
  // The home's invalidation sequence (read before the database is read).
  std::optional<uint64_t> read_seq(const std::string& home);
  // A node's writer region (its counter, digest, and the skip word of app node `home_index`), read
  // at its writer agent when the topology lists one, else at its memd: what a home reads before
  // renewing its fence. nullopt: not readable in time.
  std::optional<WriterReading> read_writer(const std::string& node, size_t home_index = SIZE_MAX);
  // Whether `home`'s memd answers (one read of its acks region's magic; unlike its version table,
  // it answers while the home is fenced): how a writer agent learns a marked home is back.
  bool home_answers(const std::string& home);
  // Registers a rendered page at its home, which derives the slot from the key. Not cacheable
  // on any failure (refusal Unreachable, reason says why).
  RegisterResult register_page(const std::string& home, uint64_t key, uint64_t seq_start,
                               std::span<const uint64_t> deps);
  // THE RULE (docs/coherence.md): takes the next number from `writer` (the writer region of
  // node `self`), sends the invalidation to every app node, and returns once every home has
  // acknowledged it — or once the fence bound ([coherence] lease_ms + clock_skew_ms) has passed
  // since it was numbered: a home that has not applied it by then cannot renew its fence without
  // catching up first, so no proxy validates a page against a table that misses it. Never
  // earlier, whatever fails. Scheme InvalidateAll ignores `deps`.
  // `mark` (the linearizable mode, docs/coherence.md "Pending marks"): Pend before the write's
  // commit, Release of the same token after it; it travels in every round of this invalidation.
  // SKIP MARKS (docs/coherence.md): a home marked in `writer` since at least the bound is not
  // waited for (reported in `skipped`); a home that has not acknowledged by half the bound is
  // marked (then waited for until the bound, as any other).
  // `give_up_after` (> 0; only with a mark): return once every home acknowledged or that long
  // after the numbering, whichever comes first — NOT the fence bound: the homes left are in
  // `gave_up_on` and may still vouch for pages that miss this invalidation. For a round that
  // covers no change of the database: a Pend whose COMMIT is then not sent (the write is refused),
  // or the Release of such a Pend. Throws std::invalid_argument without a mark.
  InvalidateOutcome invalidate(WriterLog& writer, const std::string& self,
                               std::span<const uint64_t> deps, Scheme scheme,
                               const PendingMark& mark = {},
                               std::chrono::milliseconds give_up_after = {});

  // ---- the cooperative cache (coop_cache.h): a proxy's directory part and arena ----------------
  // One one-sided read of the bucket of `key_hash` in `proxy`'s directory (memd [coop], region
  // coop.dir), checked by read_entry; a read that raced the owner (Torn, Checksum) is made once
  // more. nullopt: the directory could not be read in time (the proxy or its memd is down, it has
  // no [coop], or it is in retry_after).
  std::optional<DirReadResult> read_coop_entry(const std::string& proxy, uint64_t key_hash,
                                               uint64_t key_check);
  // One one-sided read of `bytes` at `offset` of `proxy`'s region "arena". nullopt: not readable
  // (down, out of the region's bounds, too large for one read).
  std::optional<std::vector<uint8_t>> read_arena(const std::string& proxy, uint64_t offset,
                                                 uint64_t bytes);
  // The same in `node`'s region "pool" (memd [pool]: donated memory, slots of pooled copies).
  std::optional<std::vector<uint8_t>> read_pool(const std::string& node, uint64_t offset,
                                                uint64_t bytes);
  // One one-sided write of `bytes` at `offset` of `node`'s region "pool" (a slot of a slab this
  // process holds). False when it could not be made.
  bool write_pool(const std::string& node, uint64_t offset, std::span<const uint8_t> bytes);
  // One message to `proxy`'s coop.dir.update; its decoded reply, nullopt when it was not
  // delivered or answered.
  std::optional<dirwire::Reply> coop_update(const std::string& proxy, const dirwire::Message& m);
  // The same, one-way (no reply awaited: withdrawals and invalidations are hint repairs, and a
  // request must not wait for them). False when it could not be sent.
  bool coop_notify(const std::string& proxy, const dirwire::Message& m);

 private:
  NodePool& node(const std::string& name);
  // borrow() for a peer of the cooperative cache; nullptr (logged) when it has no memd address.
  std::unique_ptr<NodePool::Conn> borrow_peer(NodePool& n);
  std::optional<std::vector<uint8_t>> read_bytes(const std::string& node, RegionKind kind,
                                                 uint64_t offset, uint64_t bytes);
  template <class Op>
  auto on_peer(const std::string& name, const char* what, Op op)
      -> decltype(op(std::declval<NodePool::Conn&>()));
  std::optional<uint64_t> read_word(NodePool& n, RegionKind kind, uint64_t off);

  Topology topo_;
  PoolContext ctx_;
  std::vector<std::unique_ptr<NodePool>> nodes_;
  // Whether `writer` is the segment the homes read for `self` (its node's writer agent or memd
  // exports the same incarnation): checked at most once a second. False while it could not be
  // checked yet or differs (a cloned node, a cron host with the node's name): then no home's fence
  // covers this process's numbers.
  bool own_writer_exported(WriterLog& writer, const std::string& self);
  std::mutex own_mu_;
  enum class OwnWriter { Unknown, Exported, Other } own_state_ = OwnWriter::Unknown;
  uint64_t own_incarnation_ = 0;
  std::chrono::steady_clock::time_point own_checked_{};
  // App nodes whose topology entry lists a writer agent: a pool of connections to it.
  std::vector<std::unique_ptr<NodePool>> writer_nodes_;
};

}  // namespace tierce::coherence
