// fabric/segment.h — a shared-memory segment that the fabric can export: the memory a local
// process (an httpd parent, an agent) shares with its children and, through memd, with peers.
//
// Stored format (one mapping, little-endian, 8-byte fields):
//
//   offset  size  field
//   0       8     magic "TIERCSEG"
//   8       4     layout version (1)
//   12      4     data offset (= kHeaderSize)
//   16      8     data length in bytes
//   24      8     incarnation: random, fixed at creation
//   32      8     creator pid
//   40      8     state (atomic): 0 creating, 1 live, 2 revoked
//   48      8     lease deadline (atomic): CLOCK_MONOTONIC ns until which the exporter vouches
//                 for the segment; 0 = never exported. Written by the exporting server's
//                 heartbeat, read by shm peers after each one-sided operation.
//   56      8     export key (atomic): the key of the current export, 0 when not exported. shm
//                 peers compare it with the key they mapped under, so a descriptor of an earlier
//                 export stops working the moment the segment is unexported or exported anew.
//                 Invariant: one exporter per segment.
//   64      8     lease cap (atomic): CLOCK_MONOTONIC ns past which the exporter's heartbeat never
//                 extends the lease; 0 = no cap. The segment's owner sets it when its vouching
//                 depends on more than the exporter being alive (a coherence home's fence,
//                 docs/coherence.md): it only ever moves forward. tcp responders refuse one-sided
//                 ops on a segment past its cap; the lease deadline (above) never exceeds it.
//   72      8     lease deadline, wall clock (atomic): the same instant as the lease deadline in
//                 CLOCK_REALTIME ns, for peers on other hosts whose HCA reads the header (verbs):
//                 a monotonic clock means nothing across hosts. 0 = withdrawn.
//   80      ...   reserved (zero)
//   4096    len   data: what RemoteRegion offsets address
//
// Invariant: the data area starts page-aligned, so an 8-byte-aligned offset is 8-byte aligned in
// memory and CPU atomics on it are lock-free and shared with every mapper.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fabric/errors.h"

namespace tierce::fabric {

inline constexpr uint64_t kSegmentMagic = 0x4745535443524954ull;  // "TIERCSEG" little-endian
inline constexpr uint32_t kSegmentLayout = 1;
inline constexpr size_t kHeaderSize = 4096;

enum class SegmentState : uint64_t { Creating = 0, Live = 1, Revoked = 2 };

struct SegmentHeader {
  uint64_t magic;
  uint32_t layout;
  uint32_t data_offset;
  uint64_t data_len;
  uint64_t incarnation;
  uint64_t creator_pid;
  std::atomic<uint64_t> state;
  std::atomic<uint64_t> lease_deadline_ns;
  std::atomic<uint64_t> export_key;
  std::atomic<uint64_t> lease_cap_ns;
  std::atomic<uint64_t> lease_deadline_wall_ns;
};
static_assert(sizeof(SegmentHeader) == 80);
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");

// CLOCK_MONOTONIC in ns: one clock for every process on the host, so leases compare across them.
uint64_t monotonic_ns();
// CLOCK_REALTIME in ns: the clock hosts keep in step (NTP/PTP), for leases judged on another host.
uint64_t realtime_ns();

// The exporter's heartbeat: the lease runs until now + lease_ns, but never past the cap; both
// deadline words are written (monotonic, then wall clock). Release stores: a peer that reads a
// fresh deadline after its data access knows the access happened while the exporter vouched.
void renew_lease(SegmentHeader* h, uint64_t lease_ns);
// The exporter withdraws its word (clean stop): both deadlines 0.
void withdraw_lease(SegmentHeader* h);
// Moves the cap forward to `cap_ns` (never back: a concurrent older value loses). Returns the cap
// in force afterwards.
uint64_t raise_lease_cap(SegmentHeader* h, uint64_t cap_ns);
// Moves the cap BACK to `cap_ns` (>= 1; 1 = passed at once) and the deadline words with it: the
// owner found its earlier cap unsafe (a pause its monotonic clock did not count, below). The next
// raise_lease_cap moves it forward again. A heartbeat racing with this re-checks the cap after
// its store (renew_lease), so the deadline words end at or below the new cap.
void lower_lease_cap(SegmentHeader* h, uint64_t cap_ns);
// Whether a capped segment's cap has passed (tcp responders refuse ops on it then).
inline bool past_lease_cap(const SegmentHeader* h, uint64_t now_ns) {
  uint64_t cap = h->lease_cap_ns.load(std::memory_order_acquire);
  return cap != 0 && now_ns > cap;
}

// The host's clocks, read together: CLOCK_MONOTONIC (leases), CLOCK_BOOTTIME (also counts the
// time the host was suspended) and CLOCK_REALTIME (stepped by NTP/PTP or a guest agent after a
// VM was stopped or migrated). Retried until BOOTTIME moved less than 1 ms across the read, so a
// preemption in the middle does not look like a pause.
struct HostClocks {
  uint64_t monotonic_ns = 0, boottime_ns = 0, realtime_ns = 0;
};
HostClocks read_host_clocks();

// Lease caps are CLOCK_MONOTONIC instants, and on Linux that clock stands still while the host is
// suspended, and in a VM that the hypervisor stopped (stop/cont, the stun of a live migration)
// the guest's clocks may stand still too: after the resume a cap taken before still looks valid
// for as long as the pause lasted, while writers on other hosts already returned on their bound.
// Fed readings in time order (the owner's fence loop, every few ms), the detector answers how much
// time MONOTONIC missed since the previous reading: BOOTTIME's or REALTIME's advance beyond
// MONOTONIC's, when above `threshold_ns` (else 0). A wall clock stepped forward by an operator
// reads as a pause too: the cost is one renewal, never a stale page. A wall clock stepped back is
// ignored. A pause whose clocks all stood still and whose wall clock is slewed back into step, not
// stepped, is invisible here (docs/coherence.md, "The fence").
class ClockPauseDetector {
 public:
  static constexpr uint64_t kDefaultThresholdNs = 5'000'000;  // 5 ms: far above sampling noise
  explicit ClockPauseDetector(uint64_t threshold_ns = kDefaultThresholdNs)
      : threshold_ns_(threshold_ns) {}
  uint64_t missed_ns(const HostClocks& now);

 private:
  uint64_t threshold_ns_;
  HostClocks last_{};
  bool primed_ = false;
};

// What a peer on another host reads of a segment's header to judge the exporter's word (verbs: one
// RDMA READ of the 40 bytes at offset 40, after the batch's data ops).
struct RemoteLeaseWords {
  uint64_t state = 0, deadline_ns = 0, export_key = 0, cap_ns = 0, deadline_wall_ns = 0;
};
// Ok when the exporter vouched for the segment at the time of the read: Live, exported under
// `expected_key` (else Revoked: look the name up again), and the wall-clock deadline is still
// ahead of `now_wall_ns` by more than `clock_skew_ns`, the largest difference between the two
// hosts' clocks (else PeerDead: a stopped, frozen or fenced exporter, whose HCA would keep
// serving memory nobody vouches for). Absolute, so a fresh connection's first read of a frozen
// exporter's header is refused too (a stalled word is not mistaken for a renewed one).
Errc judge_remote_lease(const RemoteLeaseWords& w, uint64_t expected_key, uint64_t now_wall_ns,
                        uint64_t clock_skew_ns);

// RAII owner of one mapping of a segment. Movable, not copyable.
class SharedSegment {
 public:
  // Creates POSIX shm object `name` (starts with '/', no other '/'), replacing any old one of that
  // name (its mappers keep the old memory, which the old exporter's lease then lets expire).
  // The object is built under a temporary name and renamed into place, so an opener never sees
  // a half-written header.
  static SharedSegment create(const std::string& name, size_t data_len, unsigned mode = 0600);
  // Creates an anonymous segment (memfd): shareable with children and, via fd passing, shm peers.
  static SharedSegment create_anonymous(const std::string& debug_name, size_t data_len);
  // Maps an existing named segment, validating its header. Throws FabricError on a bad one.
  static SharedSegment open(const std::string& name);
  // Maps the named segment if it exists, else creates it — never replacing one another process
  // created meanwhile (it is published with link(2), which fails on an existing name): two
  // processes that race here end up mapping the same object. `data_len` applies to a new one; an
  // existing one smaller than that is an error (another layout). An existing one owned by another
  // user than this one or root, or with permissions beyond `mode`, is refused (NotPermitted):
  // someone else created the name first and could read or change it.
  static SharedSegment open_or_create(const std::string& name, size_t data_len,
                                      unsigned mode = 0600);
  // Maps a segment from a file descriptor (taken over: closed with the segment).
  static SharedSegment from_fd(int fd, const std::string& debug_name);
  // Removes the name (mappings stay valid).
  static void unlink(const std::string& name);

  SharedSegment() = default;
  SharedSegment(SharedSegment&&) noexcept;
  SharedSegment& operator=(SharedSegment&&) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  ~SharedSegment();

  explicit operator bool() const { return base_ != nullptr; }
  SegmentHeader* header() const { return static_cast<SegmentHeader*>(base_); }
  uint8_t* data() const { return static_cast<uint8_t*>(base_) + kHeaderSize; }
  size_t size() const { return header()->data_len; }
  int fd() const { return fd_; }
  // False for a segment mapped from a read-only descriptor (a reader's shm MAP: PeerInfo::member):
  // its memory is mapped PROT_READ, and a write to it would fault — callers check first.
  bool writable() const { return writable_; }
  const std::string& name() const { return name_; }
  // Identity of the underlying object: a re-created segment of the same name has a new one.
  uint64_t incarnation() const { return header()->incarnation; }
  // Whether `name()` still names the object this mapping shows (not unlinked or replaced).
  bool still_named() const;

  void revoke() const {
    header()->state.store(uint64_t(SegmentState::Revoked), std::memory_order_release);
  }
  bool live() const {
    return header()->state.load(std::memory_order_acquire) == uint64_t(SegmentState::Live);
  }

 private:
  static SharedSegment map_fd(int fd, const std::string& name, bool init, size_t data_len);
  void reset();

  void* base_ = nullptr;
  size_t map_len_ = 0;
  int fd_ = -1;
  bool writable_ = true;
  std::string name_;
};

}  // namespace tierce::fabric
