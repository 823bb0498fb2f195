// coherence/slab_pool.h — the memory pool's bookkeeping: a donated memory area cut into fixed-size
// slabs that remote owners (proxies' cooperative caches) allocate, free and hold under a lease;
// and the requester side's placement policies (which donor to ask). memd's [pool] role
// (agents/memd, docs/memd.md "[pool]") wraps a SlabPool around a shared segment it exports as
// region "pool" and serves it with the messages of coherence/slab_pool_wire.h.
//
// Memory layout: the area is `slab_count = len / slab_bytes` slabs back to back; slab i is the
// bytes [i * slab_bytes, (i + 1) * slab_bytes) of the area (of region "pool"). The pool keeps no
// metadata inside the area: every byte of a slab belongs to its holder.
//
// Owners and leases. An owner is a name (1..64 printable bytes, no spaces, e.g. "proxy1") and an
// incarnation (a non-zero random number the owner process picks at start). Every accepted request
// of the current incarnation renews its lease; an owner silent for `lease` loses all its slabs at
// the next reclaim_expired(). A request naming another incarnation of a known owner means the old
// process is gone: the old incarnation's slabs are reclaimed first. An incarnation that lost its
// slabs (lease lapsed, or replaced) is refused with LeaseLost from then on: it must drop every
// descriptor it holds and start over with a new incarnation.
//
// Zeroing (the pool's half of the self-verifying reads, ARCHITECTURE §6): a slab that is freed or
// reclaimed is memset to zero before it goes back on the free list, outside the pool's lock (the
// slab is in a "zeroing" state meanwhile: neither held nor allocatable). So once free() or
// reclaim_expired() has returned, a stale one-sided read of the slab sees zeros (a miss), never
// the old owner's bytes; a read that races with the zeroing or with the next holder's writes may
// see a mix, which the slot's own checksum (coop_slot) turns into a miss. Cost: slab_bytes of
// memory bandwidth per slab (about 0.1 ms per MiB on one core), paid by the caller of free() /
// reclaim_expired(), never by alloc().
//
// Thread-safety: every method may be called from any thread (one internal mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tierce::coherence {

// Tunables and bounds (checked by SlabPool's constructor and by memd's configuration).
struct SlabPoolLimits {
  static constexpr size_t kMinSlabBytes = 64 * 1024;  // smaller slabs cost more bookkeeping than
                                                      // they save; a slab holds several pages
  static constexpr size_t kMaxSlabBytes = size_t(1) << 30;
  static constexpr size_t kMaxOwnerName = 64;
  static constexpr uint32_t kMaxSlabsPerCall = 4096;  // one alloc/free: reply stays < 100 KiB
  static constexpr size_t kMaxRetiredOwners = 1024;   // names remembered after their lease lapsed
};
static_assert(SlabPoolLimits::kMaxSlabsPerCall * 24 + 64 < (size_t(1) << 20),
              "an alloc reply must fit in one fabric message (1 MiB)");

struct SlabPoolOptions {
  size_t slab_bytes = size_t(1) << 20;  // power of two, kMinSlabBytes..kMaxSlabBytes
  uint64_t lease_ms = 2000;             // an owner silent this long loses its slabs (>= 1)
  uint32_t max_slabs_per_owner = 0;     // 0 = no quota
};

// Outcome of a pool request. Values are on the wire (slab_pool_wire.h): never renumber.
enum class PoolStatus : uint8_t {
  Ok = 0,
  NotEnoughFree = 1,  // fewer free slabs than asked for; nothing allocated
  OverQuota = 2,      // the owner would hold more than max_slabs_per_owner; nothing allocated
  NotHeld = 3,        // free() named a slab this owner does not hold; nothing freed
  BadSlab = 4,        // a slab index beyond the pool; nothing freed
  UnknownOwner = 5,   // renew()/free() of a name that holds nothing
  LeaseLost = 6,      // this incarnation's slabs were reclaimed (lease lapsed or replaced)
  BadRequest = 7,     // malformed: bad owner name, incarnation 0, count 0 or too large, ...
};
std::string_view to_string(PoolStatus s);

// What reclaim_expired() (or a new incarnation) took back from one owner.
struct Reclaimed {
  enum class Why : uint8_t { LeaseExpired, NewIncarnation };
  std::string owner;
  uint64_t incarnation = 0;
  std::vector<uint32_t> slabs;
  Why why = Why::LeaseExpired;
};

struct PoolResult {
  PoolStatus status = PoolStatus::Ok;
  std::string message;          // why, for a refusal (empty when Ok)
  std::vector<uint32_t> slabs;  // alloc: the slabs now held; free: the slabs freed
  uint32_t held = 0;            // slabs the owner holds after the request
  // Set when the request named a new incarnation of a known owner: what the old one lost.
  std::optional<Reclaimed> replaced;
  bool ok() const { return status == PoolStatus::Ok; }
};

// Where a slab lives inside region "pool".
struct SlabDescriptor {
  uint32_t slab = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Per-owner accounting. allocs/frees/reclaimed count slabs and survive incarnations and leases
// (until the name is forgotten: kMaxRetiredOwners names without slabs are kept).
struct OwnerUsage {
  std::string owner;
  uint64_t incarnation = 0;
  bool active = false;  // holds a lease now
  uint32_t slabs = 0;
  uint64_t bytes = 0;
  uint64_t allocs = 0, frees = 0, reclaimed = 0;
  uint64_t lease_ms_left = 0;  // at the time of the snapshot (0 when not active)
};

// Monotonic counters (never reset).
struct PoolCounters {
  uint64_t alloc_requests = 0, alloc_refusals = 0, slabs_allocated = 0;
  uint64_t free_requests = 0, free_refusals = 0, slabs_freed = 0;
  uint64_t renewals = 0, renew_refusals = 0;
  uint64_t leases_expired = 0;         // owners that lost their slabs to a lapsed lease
  uint64_t incarnations_replaced = 0;  // owners whose old incarnation was dropped
  uint64_t slabs_reclaimed = 0;        // by either of the two above
  uint64_t bytes_zeroed = 0;
};

struct PoolSnapshot {
  uint32_t slab_count = 0, free_slabs = 0, zeroing_slabs = 0;
  size_t slab_bytes = 0;
  uint64_t lease_ms = 0;
  uint32_t max_slabs_per_owner = 0;
  PoolCounters counters;
  std::vector<OwnerUsage> owners;  // by name
};

class SlabPool {
 public:
  // Manages `len` bytes at `base` (not owned; must outlive the pool). Throws std::invalid_argument
  // when slab_bytes is not a power of two in range, lease_ms is 0, or the area holds no slab.
  // Prereq: the area is zero (a freshly created segment is; zeroing it here would commit every
  // page of the donated memory at start).
  SlabPool(uint8_t* base, size_t len, SlabPoolOptions opts);
  SlabPool(const SlabPool&) = delete;
  SlabPool& operator=(const SlabPool&) = delete;

  // All or nothing: `count` free slabs for `owner`, or a refusal (NotEnoughFree, OverQuota,
  // BadRequest, LeaseLost). A new incarnation of a known owner first reclaims the old one's slabs.
  // `now_ms` is a monotonic clock in ms (the lease runs from it).
  PoolResult alloc(const std::string& owner, uint64_t incarnation, uint32_t count, uint64_t now_ms);
  // All or nothing: frees `slabs` (no duplicates), each zeroed before it can be handed out again;
  // refuses (changing nothing) with BadSlab, NotHeld, UnknownOwner, LeaseLost or BadRequest.
  // Returns after the zeroing.
  PoolResult free(const std::string& owner, uint64_t incarnation, std::span<const uint32_t> slabs,
                  uint64_t now_ms);
  // Renews the owner's lease. A name that holds nothing is UnknownOwner; a new incarnation of a
  // known owner reclaims the old one's slabs and is UnknownOwner too (it holds nothing yet).
  PoolResult renew(const std::string& owner, uint64_t incarnation, uint64_t now_ms);
  // Takes back (and zeroes) the slabs of every owner whose lease lapsed at `now_ms`.
  std::vector<Reclaimed> reclaim_expired(uint64_t now_ms);

  SlabDescriptor descriptor(uint32_t slab) const;  // Prereq: slab < slab_count()
  uint32_t slab_count() const { return slab_count_; }
  size_t slab_bytes() const { return opts_.slab_bytes; }
  const SlabPoolOptions& options() const { return opts_; }
  uint32_t free_slabs() const;
  PoolSnapshot snapshot(uint64_t now_ms) const;
  // Which owner holds `slab` now ("" when free or being zeroed). For tests and status.
  std::string holder(uint32_t slab) const;

 private:
  static constexpr uint32_t kFree = UINT32_MAX, kZeroing = UINT32_MAX - 1;
  struct Owner {
    std::string name;
    uint64_t incarnation = 0;
    uint64_t retired_incarnation = 0;  // the last incarnation that lost its slabs (LeaseLost)
    bool active = false;
    uint64_t last_renew_ms = 0;
    uint32_t slabs = 0;
    uint64_t allocs = 0, frees = 0, reclaimed = 0;
    uint64_t retired_at = 0;  // order of retirement, to forget the oldest names first
  };

  // Prereq: mu_ held. Marks every slab of `o` as zeroing, retires its incarnation, and returns the
  // slabs (the caller zeroes them with finish_zeroing once mu_ is released).
  std::vector<uint32_t> take_back(Owner& o, uint32_t index);
  void retire(Owner& o);                                    // Prereq: mu_ held; o holds no slab
  void finish_zeroing(const std::vector<uint32_t>& slabs);  // Prereq: mu_ NOT held
  void forget_old_retired();                                // Prereq: mu_ held
  // Prereq: mu_ NOT held. When `incarnation` is a new one of an active owner, retires the old one
  // and zeroes its slabs (returned); else nothing.
  std::optional<Reclaimed> replace_old_incarnation(const std::string& owner, uint64_t incarnation);
  // Prereq: mu_ held. Resolves the owner for a request; may retire an old incarnation (its slabs
  // appended to *zero). nullptr with *refusal set when the request must be refused.
  Owner* find_current(const std::string& owner, uint64_t incarnation, bool create,
                      std::vector<uint32_t>* zero, PoolResult* refusal);

  uint8_t* base_;
  SlabPoolOptions opts_;
  uint32_t slab_count_;

  mutable std::mutex mu_;
  std::vector<uint32_t> holder_;     // per slab: owner index, kFree or kZeroing
  std::vector<uint32_t> free_list_;  // LIFO of free slabs
  std::vector<Owner> owners_;        // index = what holder_ stores; entries are never moved
  std::map<std::string, uint32_t, std::less<>> by_name_;
  std::vector<uint32_t> vacant_;  // owner indices forgotten, reusable
  uint64_t retire_clock_ = 0;
  PoolCounters counters_;
};

// Checks an owner name: 1..kMaxOwnerName bytes, printable ASCII without spaces. Returns the
// problem ("" when fine).
std::string check_owner_name(std::string_view name);

// ---- placement: which donor a requester asks for slabs --------------------------------------

enum class Placement : uint8_t {
  LocalFirst,  // this node's own pool when it has room, else the remote donor with the most free
  MostFree,    // the donor with the most free slabs (a local one wins a tie)
  PowerOfTwo,  // two distinct donors at random among those with room: the one with more free
};
std::string_view to_string(Placement p);
std::optional<Placement> parse_placement(
    std::string_view s);  // "local_first|most_free|power_of_two"

struct DonorCandidate {
  std::string node;
  uint32_t free_slabs = 0;
  bool is_local = false;
};

// The index in `candidates` of the donor to ask for `need` slabs, or nullopt when no candidate has
// that many free. Pure: the same inputs and RNG state give the same answer. Ties are broken by
// position in `candidates` (the earlier wins), so callers list donors in a stable order.
std::optional<size_t> choose_donor(std::span<const DonorCandidate> candidates, uint32_t need,
                                   Placement policy, std::mt19937_64& rng);

}  // namespace tierce::coherence
