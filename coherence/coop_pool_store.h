// coherence/coop_pool_store.h — pooled copies of the cooperative cache (MTACC, HYBCC; docs/
// coop_cache.md): a process's share of other nodes' donated memory (memd [pool]), held through a
// PoolOwner, filled as a log of self-verifying slots (coop_slot.h), each written with ONE
// one-sided write of its whole image and read back by anyone with ONE one-sided read.
//
// Each slab held is a log: objects are appended at its cursor; when every slab is full and no
// more can be had (the per-process cap, or the donors refuse), the oldest slab is rewound and
// reused (FIFO, as the arena's ring). A slot overwritten that way fails verification (another
// generation, key or checksum) for a reader that still holds its old location: a miss.
//
// Writes go only to slabs whose lease the owner still vouches for (PoolOwner::writable): a slab
// lost (donor restarted, silence past the lease) is dropped before anyone else can be given it.
//
// The slot payload is the entry: u32 tag home | u64 tag slot | u64 tag version | i64 stored_at_us
// (CLOCK_REALTIME µs) | the entry's payload (little-endian).
//
// Thread-safe (one mutex around the log; the write itself is made outside it).
#pragma once
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "coherence/arena.h"
#include "coherence/coop_directory.h"
#include "coherence/pool_owner.h"
#include "coherence/topology.h"

namespace tierce::coherence {

class ClusterClient;

inline constexpr size_t kPooledEntryPrefix = 28;
// The slot payload of an entry, and back (nullopt when shorter than the prefix).
std::string encode_pooled_entry(const Tag& tag, int64_t stored_at_us, std::string_view payload);
std::optional<CachedEntry> decode_pooled_entry(std::string_view key, std::span<const uint8_t> bytes);

struct PoolStoreStats {
  uint64_t puts = 0, put_failures = 0, slabs_held = 0, slabs_reused = 0, slabs_lost = 0,
           bytes_written = 0;
};

class PoolStore {
 public:
  // `donor_nodes[i]` is the topology index of PoolOwner donor i (same order). `max_slabs`: the
  // most slabs this process holds (then the oldest is reused). `client` reaches the donors'
  // region "pool" for the writes.
  PoolStore(PoolOwner& owner, ClusterClient& client, const Topology& topo,
            std::vector<uint16_t> donor_nodes, size_t max_slabs);

  // Appends an object; its location (kind Pool, node = the donor's topology index), or nullopt
  // when no pool memory could be had or the write failed (the caller keeps the page elsewhere).
  // `stored_at_us`: when the page was first stored (kept for the max-age backstop); 0 = now.
  std::optional<Location> put(uint64_t key_hash, std::string_view key, const Tag& tag,
                              std::string_view payload, int64_t stored_at_us = 0);
  // Slabs the owner lost (PoolOwner::on_lost): they are no longer written.
  void lost(const std::vector<OwnedSlab>& slabs);
  PoolStoreStats stats() const;

 private:
  struct Slab {
    OwnedSlab s;
    uint64_t cursor = 0;
  };
  PoolOwner& owner_;
  ClusterClient& client_;
  const Topology& topo_;
  std::vector<uint16_t> donor_nodes_;
  size_t max_slabs_;
  mutable std::mutex mu_;
  std::vector<Slab> slabs_;  // in allocation order; back() is being filled
  size_t current_ = 0;       // index of the slab being filled
  uint64_t generation_ = 0;  // even; +2 per slot written
  PoolStoreStats stats_;
};

}  // namespace tierce::coherence
