// coherence/layout.h — the regions of the coherence protocol, as peers address them
// (docs/coherence.md). Little-endian u64 words in the data area of a fabric::SharedSegment.
//
// Region "versions" — a home's version table (app node's memd; segment <prefix>.versions):
//   offset 0   magic "TIERCVER"
//   offset 8   invalidation sequence (atomic): starts at a random base, +1 per invalidation the
//              home applies. A render reads it (one-sided) before it reads the database.
//   offset 16  number of slots
//   offset 24  base: the random value every slot started at (this incarnation's)
//   offset 32  topology digest (Topology::coherence_digest) of the home's topology file: a peer
//              whose own digest differs fails closed on this home instead of trusting it
//   offset 40  the home's identity: hash64 of its node name (0 in tables made before it was
//              stamped). A peer checks it against the node it dialled when it first looks the
//              table up, and fails closed on another node's table (a segment prefix shared by two
//              nodes, a memd started with another node's name); the handshake's node keys prove
//              the process, this proves the table it serves. The incarnation is the base (24).
//   offset 64  slot[0], slot[1], ...: the version of every key hashing to that slot (atomic)
//   The segment's lease is CAPPED by the home's fence (fabric/segment.h "lease cap"): it runs
//   only until the home's last proof that it holds every invalidation issued, + lease_ms.
//
// Region "acks" — where a home acknowledges invalidations (same node, segment <prefix>.acks):
//   offset 0   magic "TIERCACK"
//   offset 8   number of ack cells
//   offset 16  the home's topology digest (as in its version table, but readable while it is
//              fenced): a writer whose own digest differs cannot count on this home's fence (it may
//              not read that writer's counter) and needs its acknowledgement
//   offset 64 + 8*i   cell i: the tag of the last invalidation round acknowledged in this cell.
//              A writer picks a random cell and a random 64-bit tag per round and reads the cell
//              back: seeing its tag means the home applied that invalidation. A cell holds a tag,
//              not a count: an ack made twice counts once, a late ack never matches a later
//              round (its tag differs), and no cell is ever claimed, poisoned or exhausted.
//
// Region "writer" — a node's invalidation counter (segment <prefix>.writer, created by whichever
// of the node's httpd (mod_appversion), memd or writer agent maps it first; exported by the node's
// writer agent (memd [writer], docs/coherence.md "The writer agent") and by its memd):
//   offset 0   magic "TIERCWRT"
//   offset 8   incarnation: random, fixed when the segment is created
//   offset 16  issued (atomic): number of the last invalidation issued on this node. A writer
//              increments it (CPU atomic, no memd needed) BEFORE it sends the invalidation; a
//              home may renew its fence only after it has applied every invalidation numbered
//              up to what it read here, or invalidated everything since (docs/coherence.md).
//   offset 24  digest: Topology::coherence_digest of the process that numbers here, stored before
//              its first number (0: nobody numbered yet). A home whose own digest differs does
//              not renew its fence on it: that writer does not send to the homes this one knows.
//   offset 32  agent: 1 while the node's writer agent numbers for its httpd children (its agent
//              socket, docs/coherence.md "The agent socket"), else 0. The node's own home then
//              reads this region at the agent, as every other home does, not in its own mapping:
//              an invalidation queued in a dead agent's socket is never numbered, and a home
//              that cannot reach the agent stops vouching (the restarted agent makes it catch up).
//   offset 64 + 8*i   SKIP word for app node i (topology order, i < kMaxSkipHomes): 0 = writers
//              wait for home i as usual; kSkipPending = a mark being set; any other value = the
//              CLOCK_MONOTONIC time (ns, this host) since which writers may stop waiting for home i
//              once the fence bound has passed from it. Home i does not renew its fence while
//              its word here is not 0; the writer agent clears it once home i answers again.
#pragma once
#include <atomic>
#include <cstdint>

namespace tierce::coherence {

inline constexpr uint64_t kVersionsMagic = 0x5245564352454954ull;  // "TIERCVER"
inline constexpr uint64_t kAcksMagic = 0x4b43414352454954ull;      // "TIERCACK"
inline constexpr uint64_t kWriterMagic = 0x5452574352454954ull;    // "TIERCWRT"

// versions
inline constexpr uint64_t kSeqOffset = 8;
inline constexpr uint64_t kSlotCountOffset = 16;
inline constexpr uint64_t kBaseOffset = 24;
inline constexpr uint64_t kDigestOffset = 32;
inline constexpr uint64_t kHomeNodeOffset = 40;
inline constexpr uint64_t kVersionsHeaderBytes = 64;
inline constexpr uint64_t kSlotsOffset = 64;
inline constexpr uint64_t slot_offset(uint64_t slot) { return kSlotsOffset + 8 * slot; }
inline constexpr uint64_t versions_bytes(uint64_t slots) { return kSlotsOffset + 8 * slots; }

// acks
inline constexpr uint64_t kAcksDigestOffset = 16;
inline constexpr uint64_t kAckCellsOffset = 64;
inline constexpr uint64_t ack_cell_offset(uint64_t i) { return kAckCellsOffset + 8 * i; }
inline constexpr uint64_t acks_bytes(uint64_t cells) { return kAckCellsOffset + 8 * cells; }
inline constexpr uint64_t ack_cells_in(uint64_t region_len) {
  return region_len >= kAckCellsOffset ? (region_len - kAckCellsOffset) / 8 : 0;
}

// writer
inline constexpr uint64_t kWriterIncarnationOffset = 8;
inline constexpr uint64_t kWriterIssuedOffset = 16;
inline constexpr uint64_t kWriterDigestOffset = 24;
inline constexpr uint64_t kWriterAgentOffset = 32;
inline constexpr uint64_t kWriterHeaderBytes = 64;
inline constexpr uint64_t kWriterBytes = 4096;
inline constexpr uint64_t kMaxSkipHomes = (kWriterBytes - kWriterHeaderBytes) / 8;  // 504
inline constexpr uint64_t kSkipPending = 1;
inline constexpr uint64_t skip_offset(uint64_t home) {
  return kWriterHeaderBytes + 8 * home;
}

// Region names in memd's directory.
inline constexpr const char* kVersionsRegion = "versions";
inline constexpr const char* kAcksRegion = "acks";
inline constexpr const char* kWriterRegion = "writer";
inline constexpr const char* kArenaRegion = "arena";  // a proxy's cache arena (mod_rcache)

// Segment names of a node (segment_prefix + suffix).
inline constexpr const char* kVersionsSuffix = ".versions";
inline constexpr const char* kAcksSuffix = ".acks";
inline constexpr const char* kWriterSuffix = ".writer";

// Service names on an app node's memd.
inline constexpr const char* kRegisterService = "coherence.register";
inline constexpr const char* kInvalidateService = "coherence.invalidate";
inline constexpr const char* kStatusService = "coherence.status";
// An operator's "node out" / "node in" (docs/coherence.md "Taking a lost node out"): text body
// "out NODE", "in NODE" or "" (list); the reply lists the nodes taken out ("out: a b").
inline constexpr const char* kMembershipService = "coherence.membership";

// Views of the mapped data areas (CPU atomics on the same words peers reach one-sided).
inline std::atomic<uint64_t>& word_at(void* data, uint64_t off) {
  return *reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(data) + off);
}

}  // namespace tierce::coherence
