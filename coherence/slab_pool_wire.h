// coherence/slab_pool_wire.h — the bodies of memd's pool services (fabric call messages;
// docs/memd.md "[pool]"). The pool itself is coherence/slab_pool.h.
//
// All integers little-endian. Requests (owner -> memd):
//
//   pool.alloc  0 version u8 (kPoolWireVersion = 1) | 1 reserved u8 = 0 | 2 owner_len u16
//               | 4 count u32 (1..kMaxSlabsPerCall) | 8 incarnation u64 (!= 0)
//               | 16 owner (owner_len bytes)                                   = 16+owner_len
//   pool.free   0 version u8 | 1 reserved u8 = 0 | 2 owner_len u16 | 4 count u32 (1..4096)
//               | 8 incarnation u64 | 16 owner | 16+owner_len slab u32 × count
//                                                                   = 16+owner_len+4*count
//   pool.renew  0 version u8 | 1 reserved u8 = 0 | 2 owner_len u16 | 4 reserved u32 = 0
//               | 8 incarnation u64 | 16 owner                                  = 16+owner_len
//   pool.status, pool.metrics: empty body; the reply is text (see docs/memd.md).
//
// Reply to alloc, free and renew (memd -> owner):
//
//   0 version u8 | 1 status u8 (PoolStatus) | 2 msg_len u16 | 4 count u32 (descriptors that
//   follow: alloc Ok only, else 0) | 8 held u32 (slabs the owner holds now)
//   | 12 free u32 (slabs free in the pool after the request: what requesters place by)
//   | 16 slab_bytes u64 | 24 pool_incarnation u64 (region "pool"'s segment incarnation)
//   | 32 lease_ms u64
//   | 40 descriptors, count × { 0 slab u32 | 4 reserved u32 = 0 | 8 offset u64 | 16 length u64 }
//     (24 bytes each; offset/length within region "pool")
//   | 40+24*count message (msg_len bytes: why, for a refusal)     = 40 + 24*count + msg_len
//
// - owner: 1..64 printable ASCII bytes without spaces; incarnation: a random non-zero number the
//   owner picks at start. An alloc/free/renew with a new incarnation of a known owner reclaims the
//   old incarnation's slabs first (slab_pool.h).
// - A request memd cannot decode gets a reply with status BadRequest and the reason (never a
//   crash, never a dropped connection). Slab indices are checked by the pool (BadSlab).
// - Decoders are strict: a wrong size, an unknown version, a non-zero reserved field, a count or
//   name length out of range is a PoolWireError.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "coherence/slab_pool.h"

namespace tierce::coherence::poolwire {

inline constexpr uint8_t kPoolWireVersion = 1;
inline constexpr size_t kRequestHeader = 16;
inline constexpr size_t kReplyHeader = 40;
inline constexpr size_t kDescriptorBytes = 24;

inline constexpr const char* kRegion = "pool";
inline constexpr const char* kAllocService = "pool.alloc";
inline constexpr const char* kFreeService = "pool.free";
inline constexpr const char* kRenewService = "pool.renew";
inline constexpr const char* kStatusService = "pool.status";
inline constexpr const char* kMetricsService = "pool.metrics";

class PoolWireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct AllocRequest {
  std::string owner;
  uint64_t incarnation = 0;
  uint32_t count = 0;
};
struct FreeRequest {
  std::string owner;
  uint64_t incarnation = 0;
  std::vector<uint32_t> slabs;
};
struct RenewRequest {
  std::string owner;
  uint64_t incarnation = 0;
};

struct Reply {
  PoolStatus status = PoolStatus::Ok;
  std::string message;
  uint32_t held = 0;
  uint32_t free_slabs = 0;  // in the pool, after the request
  uint64_t slab_bytes = 0;
  uint64_t pool_incarnation = 0;
  uint64_t lease_ms = 0;
  std::vector<SlabDescriptor> slabs;  // alloc Ok: the slabs allocated
};

std::vector<uint8_t> encode(const AllocRequest& r);
std::vector<uint8_t> encode(const FreeRequest& r);
std::vector<uint8_t> encode(const RenewRequest& r);
std::vector<uint8_t> encode(const Reply& r);

// Throw PoolWireError naming what is wrong.
AllocRequest decode_alloc(std::span<const uint8_t> body);
FreeRequest decode_free(std::span<const uint8_t> body);
RenewRequest decode_renew(std::span<const uint8_t> body);
Reply decode_reply(std::span<const uint8_t> body);

}  // namespace tierce::coherence::poolwire
