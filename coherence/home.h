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
//
// Pending marks (the linearizable mode, docs/coherence.md "Pending marks"): a writer invalidates
// its dependencies with a Pend mark BEFORE it commits and with a Release of that mark after. While
// a dependency holds a live mark no page that depends on it registers (Refusal::Pending): a
// render that may have read the committed rows cannot be cached until the Release says the
// commit is visible to every reader (and then the Release's own log entry refuses renders that
// started before it). A mark whose Release never comes expires at its deadline, which counts as
// an invalidation of its dependencies.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <ostream>
#include <set>
#include <span>
#include <string>
#include <tuple>
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
  // Pending marks held at once (one per dependency and token); a Pend beyond it is applied as
  // an invalidate-all with one global mark (conservative).
  size_t max_pending_marks = 1u << 16;
};

// What an invalidation does to the pending marks (the wire value of its trailing extension).
enum class MarkOp : uint8_t {
  None = 0,     // a plain invalidation
  Pend = 1,     // before the commit: mark its dependencies (token, ttl) until Release or expiry
  Release = 2,  // after the commit: remove every mark of the token
};
inline constexpr uint8_t kMaxMarkOp = 2;
std::string_view to_string(MarkOp op);
std::ostream& operator<<(std::ostream& o, MarkOp op);
struct PendingMark {
  MarkOp op = MarkOp::None;
  uint64_t token = 0;   // chosen by the writer (random): what Release names
  uint32_t ttl_ms = 0;  // Pend: how long the mark lives without a Release (0 = the default)
};
inline constexpr uint32_t kDefaultMarkTtlMs = 30'000;
inline constexpr uint32_t kMaxMarkTtlMs = 600'000;
// ttl_ms as a home applies it: 0 -> kDefaultMarkTtlMs, then clamped to [1, kMaxMarkTtlMs].
uint32_t effective_ttl_ms(uint32_t ttl_ms);

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
  Pending = 11,          // a write of one of its dependencies is pending (marked, not released)
};
inline constexpr uint8_t kMaxRefusal = 11;
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
  // Pending marks: held now (one per dependency and token, the overflow mark counts one), Pends
  // and Releases applied, marks that expired (their Release never came), registrations refused
  // because of a mark, Pends applied as an invalidate-all with a global mark (max_pending_marks).
  uint64_t pending_marks = 0, pend_applied = 0, released = 0, expired = 0, refused_pending = 0,
           pend_overflows = 0;
};

class HomeState {
 public:
  // `versions` is the data area of the "versions" region (layout.h); `init` writes its header
  // (with `digest`, Topology::coherence_digest) and sets every slot and the sequence to fresh
  // random bases (a new incarnation). Under Scheme::DependencyLists a page must name at least one
  // dependency.
  // `node`: hash64 of the home's node name, stamped in the header (layout.h offset 40).
  HomeState(void* versions, uint64_t slots, HomeLimits limits, bool init, uint64_t digest = 0,
            Scheme scheme = Scheme::DependencyLists, uint64_t node = 0);

  uint64_t seq() const;
  uint64_t version(uint64_t slot) const;
  uint64_t slots() const { return slots_; }

  // The slot is derived here from the key (slot_of), never taken from the caller.
  // Refused with Refusal::Pending while one of `dependencies` (or every page: a global mark)
  // holds a live pending mark. Expired marks are expired first.
  RegisterResult register_page(uint64_t key, uint64_t seq_start,
                               std::span<const uint64_t> dependencies);
  // Applies the invalidation (bump, forget, log, publish), then its mark: Pend records a mark
  // (token, now + ttl) on each dependency (one global mark under InvalidateAll or with no
  // dependency), Release removes every mark of the token (an unknown token: nothing more).
  // Expired marks are expired first.
  InvalidateResult invalidate(std::span<const uint64_t> dependencies, Scheme scheme,
                              const PendingMark& mark = {});
  // Expires every mark past its deadline now: one invalidation of their dependencies (bumped,
  // logged with a new sequence, so renders that started before are refused). Returns how many
  // marks expired. The home service calls it periodically; register_page and invalidate too.
  size_t expire_marks();
  HomeStats stats() const;

  // The monotonic clock the marks' deadlines are taken from, in nanoseconds (tests step it).
  using NowNs = std::function<uint64_t()>;
  void set_clock(NowNs now_ns);

 private:
  struct Key {
    uint64_t slot;
    std::vector<uint64_t> deps;
    uint64_t order;  // insertion order, for eviction
  };
  void drop_key_locked(uint64_t key, const Key& k);
  uint64_t bump_locked(uint64_t slot);
  void evict_locked();
  // bump + forget + log + publish; `all`: every registered key, logged as kAll.
  InvalidateResult apply_locked(std::span<const uint64_t> dependencies, bool all);
  size_t expire_locked(uint64_t now);
  void add_mark_locked(uint64_t dep, uint64_t token, uint64_t deadline);
  void release_locked(uint64_t token);
  bool marked_locked(std::span<const uint64_t> dependencies, uint64_t now) const;
  size_t marks_locked() const { return by_deadline_.size() + (overflow_deadline_ ? 1 : 0); }

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
  // Pending marks: dep (kAll: global) -> token -> deadline; token -> its deps (Release); every
  // mark by (deadline, token, dep), soonest first (expiry). The overflow mark (a Pend when
  // max_pending_marks are held) is global, names no token and only expires: 0 = none.
  NowNs now_ns_;
  std::unordered_map<uint64_t, std::unordered_map<uint64_t, uint64_t>> marks_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> mark_tokens_;
  std::set<std::tuple<uint64_t, uint64_t, uint64_t>> by_deadline_;
  uint64_t overflow_deadline_ = 0;

 public:
  static constexpr uint64_t kAll = 0;  // log marker of an invalidate-all
};

}  // namespace tierce::coherence
