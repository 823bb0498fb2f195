// coherence/coop_directory.h — the cooperative cache's directory (seed 000 ch.7's "key-table"):
// the part of the key space a proxy is home of, in one shared segment that the home proxy's memd
// owns and exports (region "coop.dir", docs/coop_cache.md). For each key it keeps where copies of
// the object are (node, region, offset, slot generation, slot size), the object's length and its
// coherence tag. Peers look a key up with ONE one-sided read of its bucket and verify the bytes on
// their own (seqlock word + XXH3-64 checksum, as coop_slot.h does for slots); updates are messages
// to the owner (coop_directory_wire.h), which alone writes the segment.
//
// Stored format (little-endian; the segment's data area, or any 64-byte-aligned span):
//
//   directory header, 64 bytes at offset 0
//   offset  size  field
//   0       4     magic "TCDR" (0x52444354 read little-endian)
//   4       2     format version (1)
//   6       2     entries per bucket (kDirEntriesPerBucket = 4)
//   8       2     locations per entry (kDirLocations = 4)
//   10      2     node count: location node indices are < this (the topology's node list)
//   12      4     bucket size in bytes (kDirBucketSize = 640)
//   16      8     bucket count (a power of two, 1 .. kDirMaxBuckets)
//   24      8     digest: what the owner was configured with (e.g. Topology::coherence_digest())
//   32      8     incarnation: random, non-zero, fixed at creation
//   40      8     header checksum: XXH3-64 (seed 0) of bytes [0, 40)
//   48      16    reserved (0)
//   64      ...   buckets: bucket i at 64 + i * 640 (64-byte aligned)
//
//   bucket, 640 bytes — what one one-sided read fetches
//   0       8     checksum: XXH3-64 (seed 0) of bytes [8, 640), computed with the final (even)
//                 sequence word: covers the sequence, the index, the count, every entry and the
//                 reserved bytes
//   8       8     sequence (seqlock): odd while the owner rewrites the bucket, even when stable;
//                 +2 per update, never repeats over the segment's life
//   16      8     bucket index (a read at the wrong offset is WrongBucket, not another key's data)
//   24      4     entry count (0 .. 4); entries are packed at the front, unused ones are zero
//   28      4     reserved (0)
//   32      144   entry 0   (then entries 1..3 at 176, 320, 464)
//   608     32    reserved (0)
//
//   entry, 144 bytes
//   0       8     key hash (coherence::hash64 of the full key)
//   8       8     key check: coop_key_check(full key), a second, independent 64-bit hash — the
//                 full key does not fit; both must match (a 128-bit collision is the residual risk,
//                 and every slot read still compares the full key, coop_slot.h)
//   16      8     object length in bytes
//   24      4     tag.home (index of the object's app home in the topology's node list)
//   28      4     location count (1 .. 4)
//   32      8     tag.slot (version slot at that home)
//   40      8     tag.version
//   48      24    location 0   (then 1..3 at 72, 96, 120); unused ones are zero
//
//   location, 24 bytes
//   0       2     node index (< node count)
//   2       1     region kind: 1 arena (a proxy's cache arena), 2 pool (slab pool slots)
//   3       1     reserved (0)
//   4       4     slot size in bytes (> 0, >= object length; pool: a multiple of 64)
//   8       8     offset within that node's region (pool: a multiple of 64)
//   16      8     slot generation (pool: even, the coop_slot generation the copy was written at)
//
// Writer (the owner, one process; a mutex serialises its threads): every update builds the new
// bucket image in private memory, then stores sequence + 1 (odd) with a release fence, copies the
// image, and stores sequence + 2 with release order. Readers:
//   - remote (one-sided read of the 640 bytes into a private buffer): read_entry() checks the
//     size, the sequence (odd: Torn), the checksum (a read that mixed two versions: Checksum), the
//     bucket index, then the counts before using them.
//   - local (the owner's process or a child mapping the segment): lookup() copies the bucket with
//     the seqlock discipline (acquire load, copy, acquire fence, reload) and checks the copy the
//     same way.
// Entries are hints (docs/coop_cache.md): a reader still verifies every slot it fetches, so a
// stale or colliding entry costs a miss, never wrong bytes.
//
// A bucket holds at most 4 keys and a key at most 4 copies. The directory does not evict: a
// publish into a full bucket (or of a fifth copy) is refused, see PublishStatus.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "coherence/arena.h"  // Tag
#include "coherence/topology.h"
#include "fabric/segment.h"

namespace tierce::coherence {

inline constexpr uint32_t kDirMagic = 0x52444354u;  // "TCDR" little-endian
inline constexpr uint16_t kDirVersion = 1;
inline constexpr size_t kDirHeaderSize = 64;
inline constexpr size_t kDirEntriesPerBucket = 4;
inline constexpr size_t kDirLocations = 4;
inline constexpr size_t kDirLocationSize = 24;
inline constexpr size_t kDirEntryHeader = 48;
inline constexpr size_t kDirEntrySize = kDirEntryHeader + kDirLocations * kDirLocationSize;
inline constexpr size_t kDirBucketHeader = 32;
// Entries plus reserved tail, rounded to a cache line: one read, one aligned block.
inline constexpr size_t kDirBucketSize = 640;
inline constexpr uint64_t kDirMaxBuckets = uint64_t(1) << 26;  // 40 GiB of buckets: a typo
static_assert(kDirEntrySize == 144);
static_assert(kDirBucketHeader + kDirEntriesPerBucket * kDirEntrySize <= kDirBucketSize);
static_assert(kDirBucketSize % 64 == 0 && kDirHeaderSize % 64 == 0);

// Byte offsets (see the tables above).
namespace dir_offset {
// header
inline constexpr size_t kMagic = 0, kVersion = 4, kEntries = 6, kLocations = 8, kNodes = 10,
                        kBucketSize = 12, kBuckets = 16, kDigest = 24, kIncarnation = 32,
                        kHeaderChecksum = 40, kHeaderChecksummed = 40;
// bucket
inline constexpr size_t kChecksum = 0, kSequence = 8, kIndex = 16, kCount = 24,
                        kFirstEntry = kDirBucketHeader, kChecksummed = 8;
// entry
inline constexpr size_t kKeyHash = 0, kKeyCheck = 8, kLength = 16, kTagHome = 24, kLocCount = 28,
                        kTagSlot = 32, kTagVersion = 40, kFirstLocation = kDirEntryHeader;
// location
inline constexpr size_t kNode = 0, kKind = 2, kSlotSize = 4, kOffset = 8, kGeneration = 16;
}  // namespace dir_offset

enum class CopyRegion : uint8_t { Arena = 1, Pool = 2 };
std::string_view to_string(CopyRegion k);

// One copy of an object.
struct Location {
  uint16_t node = 0;  // index into the topology's node list
  CopyRegion kind = CopyRegion::Pool;
  uint64_t offset = 0;      // within that node's region of this kind
  uint64_t generation = 0;  // the slot generation the copy was written at
  uint32_t slot_size = 0;   // bytes to read for it
  bool operator==(const Location&) const = default;
};

// A key's directory entry, as read back.
struct DirEntry {
  uint64_t key_hash = 0;
  uint64_t key_check = 0;
  uint64_t length = 0;
  Tag tag;
  uint32_t count = 0;  // valid locations
  std::array<Location, kDirLocations> locations{};
  uint64_t sequence = 0;  // the bucket's sequence word of the state it was read from
  std::span<const Location> copies() const { return {locations.data(), count}; }
};

// Why a directory read found no entry. NotFound is the ordinary miss (the key has no copies
// anywhere); Torn and Checksum are reads that raced the owner (retry once, then treat as a miss);
// the others mean a wrong descriptor, a format mismatch or corruption.
enum class DirMissReason : uint8_t {
  NotFound,
  Torn,         // odd sequence: the owner was rewriting the bucket
  Checksum,     // bytes and checksum disagree: a read that mixed two versions, or corruption
  ShortRead,    // fewer bytes than a bucket (or a header)
  WrongBucket,  // the bucket's index is not the one the key maps to (wrong offset/geometry)
  BadBucket,    // checksum fine but counts or fields out of range (another writer's format)
  BadHeader,    // the directory header: magic, version, geometry or checksum
};
inline constexpr size_t kDirMissReasonCount = 7;
static_assert(size_t(DirMissReason::BadHeader) + 1 == kDirMissReasonCount);
std::string_view to_string(DirMissReason r);
std::ostream& operator<<(std::ostream& o, DirMissReason r);

struct DirMiss {
  DirMissReason reason;
};
using DirReadResult = std::variant<DirEntry, DirMiss>;

// Per thread or per process, added up with += for the status page.
struct DirReadCounters {
  uint64_t hits = 0;
  std::array<uint64_t, kDirMissReasonCount> misses{};
  void count(const DirReadResult& r);
  uint64_t miss(DirMissReason r) const { return misses[size_t(r)]; }
  uint64_t total_misses() const;
  DirReadCounters& operator+=(const DirReadCounters& o);
};

// What a reader learns from the directory header (one read of kDirHeaderSize bytes, once per
// export: re-read it when the export's descriptor changes).
struct DirectoryGeometry {
  uint64_t buckets = 0;  // power of two
  uint16_t nodes = 0;
  uint64_t digest = 0;
  uint64_t incarnation = 0;

  uint64_t bucket_index(uint64_t key_hash) const;
  // Offset of the key's bucket within the directory (the region), and its size to read.
  uint64_t bucket_offset(uint64_t key_hash) const {
    return kDirHeaderSize + bucket_index(key_hash) * kDirBucketSize;
  }
  static constexpr size_t bucket_bytes() { return kDirBucketSize; }
  uint64_t total_bytes() const { return kDirHeaderSize + buckets * kDirBucketSize; }
};
// Validates a header read (magic, version, the compiled-in geometry, bucket count, node count,
// checksum). BadHeader or ShortRead otherwise.
std::variant<DirectoryGeometry, DirMiss> parse_directory_header(std::span<const uint8_t> bytes);

// The second key hash stored in entries (XXH3-64 with a fixed seed: independent of hash64).
uint64_t coop_key_check(std::string_view key);

// The remote reader's check of one bucket fetched with one read (any alignment; a private copy).
// Never trusts a count before it is bounds-checked; a hit's locations passed the same range checks
// as the owner's publish (node < geometry.nodes, kind known, slot size >= length...).
DirReadResult read_entry(const DirectoryGeometry& g, std::span<const uint8_t> bucket_bytes,
                         uint64_t key_hash, uint64_t key_check);
// A local reader's lookup in a directory it maps (a child of the owner's process, or any process
// that mapped the exported segment): `memory` is the directory (64-byte aligned, as created),
// `g` what parse_directory_header(memory) returned. Copies the bucket with the seqlock read
// discipline (acquire load, copy, acquire fence, reload: Torn when it moved) and checks the copy
// with read_entry. ShortRead when `memory` is smaller than the geometry says.
DirReadResult lookup_local(std::span<const uint8_t> memory, const DirectoryGeometry& g,
                           uint64_t key_hash, uint64_t key_check);

// Every entry of a verified bucket (tests, status pages): the checks of read_entry, and the
// unused entry slots must be zero.
struct DirBucket {
  uint64_t sequence = 0;  // of the state read
  std::vector<DirEntry> entries;
};
std::variant<DirBucket, DirMiss> read_bucket(const DirectoryGeometry& g,
                                             std::span<const uint8_t> bucket_bytes,
                                             uint64_t expected_index);

// The home proxy of a key: rendezvous hashing over the topology's proxies (role = "proxy"), the
// same weight as page homes (hash64(to_hex(key_hash) + "@" + name)). Throws TopologyError when
// the topology has no proxy.
const NodeInfo& directory_home_of(const Topology& t, uint64_t key_hash);
// Index of a node in the topology's node list (what Location::node and Tag::home hold).
// Throws TopologyError for an unknown name or a list longer than 65535.
uint16_t node_index(const Topology& t, std::string_view name);

// Results of updates (the reply status of the update messages too).
enum class UpdateStatus : uint8_t {
  Added,               // publish: a new copy (and a new entry if the key had none)
  Replaced,            // publish: the copy at the same node + region + offset was replaced
  Superseded,          // publish with a newer tag: the older version's copies were dropped first
  Withdrawn,           // withdraw: the copy is gone (and the entry, if it was the last)
  Invalidated,         // invalidate: the entry is gone
  NodeWithdrawn,       // withdraw_node: done (count says how many copies went)
  NotFound,            // withdraw/invalidate: no such key or copy (a no-op)
  GenerationMismatch,  // withdraw: a copy at that place but of another generation: kept
  BucketFull,          // publish refused: the key's bucket already holds 4 other keys
  LocationsFull,       // publish refused: the key already has 4 copies
  StaleTag,            // publish refused: the entry has a newer version of that object
  LengthMismatch,      // publish refused: same tag, other length (a caller bug)
  BadLocation,  // publish/withdraw refused: node out of range, unknown kind, size/offset invalid
  BadRequest,   // apply_body(): the message did not decode (coop_directory_wire.h)
};
inline constexpr size_t kUpdateStatusCount = 14;
static_assert(size_t(UpdateStatus::BadRequest) + 1 == kUpdateStatusCount);
std::string_view to_string(UpdateStatus s);
std::ostream& operator<<(std::ostream& o, UpdateStatus s);
// Whether the update changed (or legitimately did not need to change) the directory.
bool update_ok(UpdateStatus s);

struct UpdateResult {
  UpdateStatus status = UpdateStatus::NotFound;
  uint32_t count = 0;  // withdraw_node: copies removed; otherwise 1 when something changed
  std::string why;     // refusals: what the caller should do (empty otherwise)
};

// The owner's view: creates (formats) the directory and applies updates. Local lookups are
// lock-free and may run in any process mapping the memory.
class CoopDirectory {
 public:
  // Bytes a directory of `buckets` needs.
  static size_t bytes_for(uint64_t buckets) { return kDirHeaderSize + buckets * kDirBucketSize; }

  // Formats `memory` (64-byte aligned, at least bytes_for(buckets)) as an empty directory.
  // Prereq: nobody reads it yet. `buckets` a power of two in 1..kDirMaxBuckets, `nodes` in
  // 1..65535. Throws std::invalid_argument otherwise.
  static std::unique_ptr<CoopDirectory> create(std::span<uint8_t> memory, uint64_t buckets,
                                               uint16_t nodes, uint64_t digest);
  // Same, in a new fabric segment (named: SharedSegment::create, replacing an older one; empty
  // name: anonymous memfd) that memd can export with Server::export_region(..., segment()).
  static std::unique_ptr<CoopDirectory> create_segment(const std::string& name, uint64_t buckets,
                                                       uint16_t nodes, uint64_t digest);

  // Updates (the owner's threads; serialised by an internal mutex). Each changed bucket gets one
  // seqlock write; refusals change nothing.
  //
  // publish: adds `where` as a copy of the key's object (tag, length). Same tag as the entry's:
  // added (Replaced when a copy at the same node + kind + offset exists: its generation and size
  // are updated). A newer tag (same home and slot, higher version; or another home/slot): the
  // entry is reset to this one copy (Superseded). An older version: StaleTag.
  // Refusals say what to do in `why`: BucketFull — keep the copy unpublished (it serves the local
  // node only) or withdraw/invalidate a less useful key of that bucket first; a directory that
  // refuses often is too small for its working set (more buckets). LocationsFull — the key is
  // replicated enough: keep the copy local, or withdraw one of the others first.
  UpdateResult publish(uint64_t key_hash, uint64_t key_check, const Tag& tag, uint64_t length,
                       const Location& where);
  // Drops the copy at (node, kind, offset) if its generation is `generation`.
  UpdateResult withdraw(uint64_t key_hash, uint64_t key_check, uint16_t node, CopyRegion kind,
                        uint64_t offset, uint64_t generation);
  // Drops every copy on `node` (it died or lost its regions); entries left without copies go.
  UpdateResult withdraw_node(uint16_t node);
  // Drops the key's entry (the object changed at its app home).
  UpdateResult invalidate(uint64_t key_hash, uint64_t key_check);

  // Local reader (lock-free, any thread): lookup_local() on this directory's memory.
  DirReadResult lookup(uint64_t key_hash, uint64_t key_check) const;

  const DirectoryGeometry& geometry() const { return geo_; }
  std::span<const uint8_t> memory() const { return mem_; }
  // The segment created by create_segment() (nullptr after create()).
  const std::shared_ptr<fabric::SharedSegment>& segment() const { return seg_; }
  // Current sequence word of bucket i (acquire). Prereq: i < buckets.
  uint64_t bucket_sequence(uint64_t i) const;
  // How many updates ended with each status (a snapshot).
  std::array<uint64_t, kUpdateStatusCount> update_counters() const;
  size_t entries() const;  // live entries (a scan: O(buckets))

 private:
  CoopDirectory(std::span<uint8_t> memory, DirectoryGeometry g,
                std::shared_ptr<fabric::SharedSegment> seg);
  struct Image;  // a decoded bucket, edited in private memory
  Image load_locked(uint64_t i) const;
  void store_locked(uint64_t i, const Image& img);
  uint8_t* bucket(uint64_t i) const { return mem_.data() + kDirHeaderSize + i * kDirBucketSize; }
  UpdateResult done_locked(UpdateResult r);

  std::span<uint8_t> mem_;
  DirectoryGeometry geo_;
  std::shared_ptr<fabric::SharedSegment> seg_;
  mutable std::mutex mu_;
  std::array<uint64_t, kUpdateStatusCount> counters_{};
};

}  // namespace tierce::coherence
