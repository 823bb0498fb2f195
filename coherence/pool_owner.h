// coherence/pool_owner.h — the requester side of the memory pool (docs/coop_cache.md, "Memory
// pool"; the donor side is memd's [pool], docs/memd.md): a long-lived process (a proxy's memd)
// that holds slabs of other nodes' donated memory, under one owner name and a random incarnation.
//
// - alloc() asks one donor, chosen by the placement policy (choose_donor in slab_pool.h) among
//   the donors whose last reply showed room, for `count` slabs: all from that donor or none.
// - renew_now() (the renewal thread runs it every lease/3) asks every donor: it keeps the leases
//   of the slabs held and learns every donor's free count (a donor we hold nothing from answers
//   UnknownOwner with its free count: that is how placement learns about it).
// - Slabs are **lost** — dropped from held() and reported to the on_lost callback, once — when
//   their donor says so (LeaseLost, or UnknownOwner while we hold slabs there: it reclaimed them),
//   when its pool has another incarnation (memd restarted: every descriptor of the old pool is
//   void), or when no renewal of that donor succeeded for lease − lease/4: the donor reclaims and
//   zeroes them after a whole lease without renewal, so the owner must stop writing into them a
//   quarter lease before (writable()). A stale read of a reclaimed slab sees zeros or another
//   owner's slots: the self-verifying slots (coop_slot.h) make it a miss.
//
// Thread-safe. Calls to a donor are serialised on that donor's connection; a donor that fails a
// call is reconnected at the next call (a restarted memd is found again by its URI).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "coherence/slab_pool.h"
#include "coherence/slab_pool_wire.h"
#include "fabric/fabric.h"
#include "fabric/log.h"

namespace tierce::coherence {

struct PoolDonor {
  std::string node;  // for logs, placement ties and status
  std::string uri;   // its memd's fabric address (tcp://, shm://, verbs://)
  bool local = false;
  fabric::ClientIdentity identity;  // what its memd must prove (cluster::expect)
};

struct OwnedSlab {
  size_t donor = 0;               // index into the donors given to PoolOwner
  uint64_t pool_incarnation = 0;  // of the donor's pool when the slab was allocated
  SlabDescriptor slab;            // offset/length within the donor's region "pool"
};

struct PoolOwnerOptions {
  std::string owner;         // 1..64 printable bytes without spaces (slab_pool_wire.h)
  uint64_t incarnation = 0;  // 0: a random non-zero number (a process's own)
  fabric::ClientOptions client;
  Placement placement = Placement::LocalFirst;
  uint64_t seed = 0;  // the power-of-two policy's RNG; 0: random
  // How often the renewal thread runs: 0 = a third of the shortest lease the donors announced
  // (200 ms until one answered).
  std::chrono::milliseconds renew_period{0};
};

struct DonorStatus {
  std::string node, uri;
  bool answered = false;          // its last call succeeded
  uint32_t free_slabs = 0;        // as of its last reply
  uint32_t held = 0;              // slabs we hold there
  uint64_t pool_incarnation = 0;  // 0 until it answered
  uint64_t lease_ms = 0;
  std::string last_error;
};

struct PoolOwnerCounters {
  uint64_t allocs = 0, alloc_refusals = 0, slabs_allocated = 0, slabs_freed = 0, renewals = 0,
           renew_failures = 0, slabs_lost = 0;
};

class PoolOwner {
 public:
  using LostFn = std::function<void(const std::vector<OwnedSlab>& lost, const std::string& why)>;

  // Prereq: donors not empty. Throws std::invalid_argument for a bad owner name or no donor.
  // Connects lazily; call renew_now() (or start()) to learn the donors' free counts.
  PoolOwner(std::vector<PoolDonor> donors, PoolOwnerOptions opts, fabric::LogSink log = {});
  ~PoolOwner();  // stops the renewal thread and frees every slab held (best effort)
  PoolOwner(const PoolOwner&) = delete;
  PoolOwner& operator=(const PoolOwner&) = delete;

  // Called (without the owner's lock) with slabs that were lost and why. Set before start().
  void on_lost(LostFn fn);
  // Starts the renewal thread.
  void start();

  // `count` slabs from one donor, or why none (ResourceExhausted: no donor had them, the
  // refusals listed; InvalidArgument: count out of range). A donor that refuses (full, over
  // quota) is skipped and the next choice asked, at most once per donor.
  base::Result<std::vector<OwnedSlab>> alloc(uint32_t count);
  // Gives slabs back (the donor zeroes them before anyone else gets them). Slabs the donor no
  // longer knows as ours are simply dropped. Not held (any more): ignored.
  void free(std::span<const OwnedSlab> slabs);
  // One renewal round over every donor (see above). Returns the number of donors that answered.
  size_t renew_now();

  // Whether the owner may still write into slabs of donor `donor`: its last successful renewal
  // (or alloc) was sent less than lease − lease/4 ago and no loss was seen since.
  bool writable(size_t donor) const;

  std::vector<OwnedSlab> held() const;
  std::vector<DonorStatus> donors() const;
  PoolOwnerCounters counters() const;
  const std::string& owner() const { return opts_.owner; }
  uint64_t incarnation() const { return opts_.incarnation; }
  // "key value" lines for status pages.
  std::string status_text() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Donor;

  // One call to donor `i` (under its call mutex): the reply's bytes, or why not (Unavailable).
  base::Result<std::vector<uint8_t>> call(size_t i, const char* service,
                                          const std::vector<uint8_t>& body);
  // call() and decode (InvalidArgument: a malformed reply).
  base::Result<poolwire::Reply> call_reply(size_t i, const char* service,
                                           const std::vector<uint8_t>& body);
  // Slabs to report lost, and why.
  struct Loss {
    std::vector<OwnedSlab> slabs;
    std::string why;
  };
  // Applies what a reply says about donor `i` (free count, incarnation, lease); returns the slabs
  // it voids (a new pool incarnation) and why. Prereq: mu_ held.
  Loss note_reply_locked(size_t i, uint32_t free, uint64_t pool_incarnation, uint64_t lease_ms);
  std::vector<OwnedSlab> drop_donor_locked(size_t i);
  void flush_pending_free(size_t i);
  void report_lost(const std::vector<OwnedSlab>& lost, const std::string& why);
  void renew_loop();
  std::chrono::milliseconds renew_period() const;

  PoolOwnerOptions opts_;
  fabric::LogSink log_;
  std::vector<std::unique_ptr<Donor>> donors_;
  mutable std::mutex mu_;  // everything below and each Donor's state (not its connection)
  std::condition_variable cv_;
  std::vector<OwnedSlab> held_;
  PoolOwnerCounters counters_;
  std::mt19937_64 rng_;
  LostFn on_lost_;
  bool stopping_ = false;
  std::thread renewer_;
};

}  // namespace tierce::coherence
