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
//   64      ...   reserved (zero)
//   4096    len   data: what RemoteRegion offsets address
//
// Invariant: the data area starts page-aligned, so an 8-byte-aligned offset is 8-byte aligned in
// memory and CPU atomics on it are lock-free and shared with every mapper.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

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
};
static_assert(sizeof(SegmentHeader) == 64);
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");

// CLOCK_MONOTONIC in ns: one clock for every process on the host, so leases compare across them.
uint64_t monotonic_ns();

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
  const std::string& name() const { return name_; }
  // Identity of the underlying object: a re-created segment of the same name has a new one.
  uint64_t incarnation() const { return header()->incarnation; }

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
  std::string name_;
};

}  // namespace tierce::fabric
