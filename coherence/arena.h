// coherence/arena.h — the proxy tier's cache arena: one shared-memory segment mapped by every
// httpd child (created by the httpd parent, exported by the proxy's memd as region "arena"),
// holding self-describing entries (full key, tag, payload length, payload) in a log-structured
// ring, an open-addressing index (key hash -> ring position), and the module's shared counters.
//
// Concurrency: any number of readers in any processes/threads, lock-free; writers serialise on a
// process-shared robust mutex in the segment (a writer that dies holding it leaves the arena
// consistent). A writer waits for that mutex at most kLockTimeoutNs (20 ms): one frozen while
// holding it (SIGSTOP, a debugger, a child swapped out) costs the others a skipped store or
// erase, counted in lock_timeouts, never a stall. A reader copies an entry out and then checks that the ring's tail has not passed
// the entry's position: an entry is never handed out half-overwritten. Eviction is FIFO over the
// ring (the oldest entries are overwritten first); an entry is also dropped by erase() or when a
// newer entry of the same key replaces it.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "coherence/coop_slot.h"
#include "fabric/segment.h"

namespace tierce::coherence {

// Which version proves an entry current: slot `slot` of home node `home` (index into the
// topology's node list) must still hold `version`.
struct Tag {
  uint32_t home = 0;
  uint64_t slot = 0;
  uint64_t version = 0;
};

struct CachedEntry {
  std::string key;      // the full key it was stored under
  Tag tag;
  // When the page was FIRST stored (rendered), in CLOCK_REALTIME microseconds of the proxy that
  // stored it then. A copy passed between proxies (the cooperative cache) carries it unchanged:
  // the max-age backstop (coherence/hit.h) counts from the first store wherever the copy lives.
  int64_t stored_at_us = 0;
  std::string payload;  // what the module stored (serialized status + headers + body)
};

// Where a stored entry is, for a peer's one-sided read of it (the cooperative cache: a directory
// location of kind Arena, docs/coop_cache.md). `offset` is within the segment's data area (what
// memd exports as region "arena"); `pos` is the entry's absolute ring position, which the entry
// carries (the "generation" a reader checks); `bytes` is how much to read.
struct ArenaCopy {
  uint64_t offset = 0;
  uint64_t pos = 0;
  uint64_t bytes = 0;
};

// Counters of the cooperative cache (mod_rcache with RCacheCoop, docs/coop_cache.md), shared by
// the children like ArenaCounters. Reasons a fetched copy was not used are counted per
// MissReason (coop_slot.h), directory reads per DirMissReason (coop_directory.h).
struct CoopCounters {
  std::atomic<uint64_t> lookups;        // directory lookups after a local miss
  std::atomic<uint64_t> dir_hits;       // the directory named copies
  std::atomic<uint64_t> dir_misses[8];  // by DirMissReason (NotFound = the key is nowhere)
  std::atomic<uint64_t> dir_unreachable;  // the home proxy's directory could not be read
  std::atomic<uint64_t> copy_reads;     // one-sided reads of a peer's copy
  std::atomic<uint64_t> copy_hits;      // ... that verified
  std::atomic<uint64_t> copy_misses[8];  // ... that did not, by MissReason
  std::atomic<uint64_t> copy_unreachable;  // the holder could not be read
  std::atomic<uint64_t> remote_hits;    // pages served from a peer's copy (version checked)
  std::atomic<uint64_t> remote_stale;   // a peer's copy whose version was old: invalidated
  std::atomic<uint64_t> remote_unverifiable;
  std::atomic<uint64_t> kept_local;     // fetched copies also stored locally (BCC; CCWR in free room)
  std::atomic<uint64_t> stored_local;   // rendered pages stored in this proxy's arena
  std::atomic<uint64_t> stored_pool;    // ... written to pool memory (MTACC, HYBCC)
  std::atomic<uint64_t> pool_failures;  // ... that pool memory could not take (kept locally)
  std::atomic<uint64_t> demoted;        // MTACC: live entries the ring evicted, moved to the pool
  std::atomic<uint64_t> publishes, publish_refused, withdrawals, invalidations, messages_failed;
  std::atomic<uint64_t> lookup_ns;      // total time of directory + copy reads (cost per request)
};

// Counters the module keeps in the arena, shared by all children (monotonic, relaxed atomics).
// The arena itself bumps stores, store_refused, evictions (live entries dropped to make room in
// the ring or in a full index probe window), erased and lock_timeouts (a store or erase skipped
// because the writers' mutex was not free within kLockTimeoutNs); the others are the module's to
// count (a lookup that finds an entry is not yet a hit: its version has to be checked first;
// expired: entries found older than the module's max age, see coherence/hit.h; tag_mismatches:
// responses not stored and entries dropped because their tag is not their key's home and slot,
// coherence::tag_binding).
struct ArenaCounters {
  std::atomic<uint64_t> hits, misses, version_failures, stale_rejects, stores, store_refused,
      uncacheable, evictions, erased, expired, lock_timeouts, tag_mismatches;
  // Version-check latency histogram: bucket i counts checks that took [lo(i), lo(i+1)) ns, with
  // 8 sub-buckets per power of two (see latency_bucket_lo()).
  static constexpr size_t kLatencyBuckets = 8 * 40;
  std::atomic<uint64_t> latency[kLatencyBuckets];
  CoopCounters coop;
  // Per home (the app node a page is homed at, by its index in the topology's node list; nodes
  // from kHomeCounters on are not counted): lookups of the cache (every request that consulted
  // it), hits among them, and unverifiable ones (the home's version could not be read or it was
  // not vouching: forwarded, fail closed). The module's to count, like hits.
  struct Home {
    std::atomic<uint64_t> lookups, hits, unverifiable;
  };
  static constexpr size_t kHomeCounters = 64;
  Home home[kHomeCounters];
};

struct ArenaStats {
  uint64_t capacity_bytes = 0;  // ring size
  uint64_t used_bytes = 0;      // bytes between tail and head
  uint64_t entries = 0;         // live indexed entries (a scan of the whole index: O(buckets))
  uint64_t index_buckets = 0;
};

class CacheArena {
 public:
  // Creates the named segment (the httpd parent, after it detached) with a ring of `bytes`
  // (rounded up to 64) and an index sized for it. `bytes` >= 1 MiB. The segment is initialised
  // under a temporary name and renamed into place (replacing an older arena of that name), so an
  // opener never sees a half-initialised arena.
  static std::unique_ptr<CacheArena> create(const std::string& segment_name, size_t bytes);
  // Same, anonymous (tests, or no memd export wanted).
  static std::unique_ptr<CacheArena> create_anonymous(size_t bytes);
  // Maps an existing arena (validates its header). Throws fabric::FabricError / runtime_error.
  static std::unique_ptr<CacheArena> open(const std::string& segment_name);

  // Copies out the entry stored under `key` (hash `key_hash`) if there is a complete one.
  // A different key with the same hash is a miss.
  std::optional<CachedEntry> lookup(uint64_t key_hash, std::string_view key) const;
  // Stores (replacing any entry of that key). Returns false, storing nothing, when the entry is
  // larger than max_entry_bytes(), the arena is being torn down, or the writers' mutex was not
  // free within kLockTimeoutNs (counted in lock_timeouts and store_refused).
  // `first_stored_us`: when the page was first stored (CachedEntry::stored_at_us of the copy this
  // is a copy of); 0 = a page stored for the first time: now. A time ahead of this host's clock
  // is stored as now: an entry never carries a time later than its store, so the time of a copy
  // only goes down as it hops between proxies and never restarts its max age.
  bool store(uint64_t key_hash, std::string_view key, const Tag& tag, std::string_view payload,
             int64_t first_stored_us = 0);
  // The same, saying where the entry went (for a peer to read it: ArenaCopy). With `evicted`,
  // every live entry the ring dropped to make room is copied out there (MTACC demotes them to
  // pool memory instead of losing them).
  struct Evicted {
    uint64_t key_hash = 0;
    CachedEntry entry;
    ArenaCopy where;  // where it was
  };
  std::optional<ArenaCopy> store_located(uint64_t key_hash, std::string_view key, const Tag& tag,
                                         std::string_view payload, int64_t first_stored_us = 0,
                                         std::vector<Evicted>* evicted = nullptr);
  // Whether an entry of that size would be stored now without evicting anything (a snapshot:
  // another child may store meanwhile). CCWR keeps a fetched copy only then.
  bool fits_without_eviction(size_t key_bytes, size_t payload_bytes) const;
  // A peer's check of an entry it read with one one-sided read of ArenaCopy::bytes at
  // ArenaCopy::offset (no tail to re-check remotely): the entry at that offset must still be the
  // one stored at ring position `pos` (else GenerationChanged: the ring moved on), of this key
  // (KeyMismatch), with lengths inside the bytes (LengthOutOfBounds) and its checksum over header,
  // key and payload (Checksum: the read overlapped a rewrite). Never trusts a length before it is
  // bounds-checked.
  static std::variant<CachedEntry, MissReason> verify_copy(std::span<const uint8_t> bytes,
                                                          uint64_t pos, uint64_t key_hash,
                                                          std::string_view key);
  // Drops the entry of `key` if present. Skipped when the writers' mutex was not free within
  // kLockTimeoutNs (counted in lock_timeouts): callers erase entries that failed their version
  // check, and such an entry simply fails it again at its next lookup.
  void erase(uint64_t key_hash, std::string_view key);

  // How long a writer waits for the writers' mutex before it skips its store/erase. Stores copy
  // at most max_entry_bytes() (a few KB typically, memcpy speed), so a healthy holder lets go in
  // microseconds; 20 ms covers a busy machine's scheduling delays many times over and is still
  // short next to a request's time budget. Measured on CLOCK_REALTIME, as
  // pthread_mutex_timedlock wants: a clock step during the wait lengthens or shortens it by
  // that step (harmless: the wait is a bound, not a deadline anything relies on).
  static constexpr long kLockTimeoutNs = 20'000'000;

  size_t max_entry_bytes() const;  // ring / 4
  ArenaStats stats() const;
  ArenaCounters& counters() const;
  void record_latency(uint64_t ns) const;
  // p is a fraction (0.5 = median, 0.99 = p99; clamped to [0, 1]). Nearest rank over the
  // histogram; returns the LOWER bound (latency_bucket_lo) of the bucket holding that rank, so
  // it under-reports by at most 1/8 (exact below 16 ns). ns, 0 when nothing recorded.
  uint64_t latency_percentile(double p) const;
  // Buckets 0..15 hold exactly 0..15 ns; from there each power of two [2^e, 2^(e+1)) is split in
  // 8 equal sub-buckets. The last bucket also takes everything above its lower bound (~68 min).
  // Returns UINT64_MAX for i >= kLatencyBuckets.
  static uint64_t latency_bucket_lo(size_t i);

  const fabric::SharedSegment& segment() const { return seg_; }
  ~CacheArena();

 private:
  explicit CacheArena(fabric::SharedSegment seg);
  struct Header;
  struct Bucket;
  struct EntryHeader;
  friend struct ArenaTestHooks;  // tests only: kill a writer mid-store (robust mutex test)

  Header* hdr() const;
  enum class LockResult { Locked, TimedOut, Failed };  // Failed: the mutex is unrecoverable
  // Waits at most kLockTimeoutNs; takes over the mutex of a writer that died holding it.
  LockResult lock() const;
  void unlock() const;
  // Writer side (mutex held).
  void evict_oldest_locked(std::vector<Evicted>* evicted = nullptr);
  bool entry_has_key_locked(uint64_t pos, uint64_t hash, std::string_view key) const;
  size_t find_bucket_locked(uint64_t hash, std::string_view key) const;  // SIZE_MAX: none
  void drop_bucket_locked(size_t i);
  // Reader side: copies the entry at `pos` if it is complete, of that key, and not overwritten.
  std::optional<CachedEntry> read_entry(uint64_t pos, uint64_t hash, std::string_view key) const;

  // Called (when set) at points inside store() with the mutex held: 1 after room was made in the
  // ring, 2 with the entry half written. Process-local; tests only.
  static void (*test_store_hook_)(int stage);

  fabric::SharedSegment seg_;
  // Geometry, validated once at create/open and kept here: the copies in shared memory are never
  // trusted for indexing afterwards.
  Bucket* index_ = nullptr;
  uint64_t mask_ = 0;  // buckets - 1
  uint8_t* ring_ = nullptr;
  uint64_t ring_bytes_ = 0;
};

}  // namespace tierce::coherence
