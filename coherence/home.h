// coherence/home.h — what a home app node keeps for the keys it is home of: the version table,
// the dependency index (dependency -> keys) and the invalidation log that closes the
// registration race (docs/ARCHITECTURE.md §4). Plain logic over a mapped "versions" data area;
// thread-safe (one mutex: registrations and invalidations are serialised at their home).
//
// The race: a page rendered from rows read *before* an update committed must not be registered
// as valid when its registration reaches the home *after* that update's invalidation passed.
// A render reads the home's invalidation sequence S before it reads the database; register_page
// refuses (not cacheable) when an invalidation logged with a sequence > S touched one of its
// dependencies (or was an invalidate-all), or when the log no longer reaches back to S.
#pragma once
#include <cstdint>
#include <deque>
#include <mutex>
#include <ostream>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cluster/topology.h"

namespace tierce::coherence {

using cluster::parse_scheme;  // "dependency-lists" | "invalidate-all"; throws
using cluster::Scheme;
using cluster::to_string;

struct HomeLimits {
  size_t max_keys = 1u << 20;     // registered keys kept; the oldest is evicted (and bumped)
  size_t log_entries = 1u << 16;  // invalidated dependencies remembered for the race check
};

// Why a home did not register a page (the wire value of a register reply; None = registered).
enum class Refusal : uint8_t {
  None = 0,
  Race = 1,              // an invalidation of its dependencies passed while it was rendered
  LogTooShort = 2,       // the invalidation log no longer reaches back to the render's start
  OtherIncarnation = 3,  // the render read the sequence of another incarnation of this home
  Fenced = 4,            // the home cannot prove it holds every invalidation: it vouches for nothing
  OtherTopology = 5,     // the request came from a node with another topology (digest)
  NotHome = 6,           // this node is not the key's home under its topology
  Evicted = 7,           // evicted at once (max_keys too small)
  NoDependencies = 8,    // no dependency under dependency-lists: no update would ever bump it
  BadRequest = 9,        // malformed message
  Unreachable = 10,      // (client side) no answer from the home in time
};
inline constexpr uint8_t kMaxRefusal = 10;
std::string_view to_string(Refusal r);
std::ostream& operator<<(std::ostream& o, Refusal r);

struct RegisterResult {
  Refusal refusal = Refusal::Unreachable;
  uint64_t slot = 0;     // the slot the home derived from the key
  uint64_t version = 0;  // the slot's version the page is tagged with (when cacheable)
  std::string reason;    // why not, in words (when not cacheable)
  bool cacheable() const { return refusal == Refusal::None; }
};

struct InvalidateResult {
  uint64_t seq = 0;            // the sequence number this invalidation got
  uint64_t keys_bumped = 0;    // registered keys invalidated
  uint64_t slots_bumped = 0;   // distinct slots incremented (each once)
};

struct HomeStats {
  uint64_t registrations = 0, refused_race = 0, refused_log = 0, refused_other = 0,
           invalidations = 0, keys_bumped = 0, slots_bumped = 0, evictions = 0, keys = 0,
           dependencies = 0;
};

class HomeState {
 public:
  // `versions` is the data area of the "versions" region (layout.h); `init` writes its header
  // (with `digest`, Topology::coherence_digest) and sets every slot and the sequence to fresh
  // random bases (a new incarnation). Under Scheme::DependencyLists a page must name at least one
  // dependency.
  HomeState(void* versions, uint64_t slots, HomeLimits limits, bool init, uint64_t digest = 0,
            Scheme scheme = Scheme::DependencyLists);

  uint64_t seq() const;
  uint64_t version(uint64_t slot) const;
  uint64_t slots() const { return slots_; }

  // The slot is derived here from the key (slot_of), never taken from the caller.
  RegisterResult register_page(uint64_t key, uint64_t seq_start,
                               std::span<const uint64_t> dependencies);
  InvalidateResult invalidate(std::span<const uint64_t> dependencies, Scheme scheme);
  HomeStats stats() const;

 private:
  struct Key {
    uint64_t slot;
    std::vector<uint64_t> deps;
    uint64_t order;  // insertion order, for eviction
  };
  void drop_key_locked(uint64_t key, const Key& k);
  uint64_t bump_locked(uint64_t slot);
  void evict_locked();

  void* versions_;
  uint64_t slots_;
  HomeLimits limits_;
  Scheme scheme_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Key> keys_;
  std::unordered_map<uint64_t, std::unordered_set<uint64_t>> deps_;  // dep -> keys
  std::deque<std::pair<uint64_t, uint64_t>> order_;  // (order, key), oldest first (lazy)
  uint64_t next_order_ = 0;
  // Log of invalidated dependencies: (seq, dep); dep kAll = an invalidate-all.
  std::deque<std::pair<uint64_t, uint64_t>> log_;
  uint64_t log_floor_ = 0;  // registrations with seq_start < log_floor_ are refused
  HomeStats stats_;

 public:
  static constexpr uint64_t kAll = 0;  // log marker of an invalidate-all
};

}  // namespace tierce::coherence
