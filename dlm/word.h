// dlm/word.h — the N-CoSED lock word and its tickets (stored format in docs/dlm.md).
//
//   W (64 bits):  bit 63      released: the tail's holder has released (shared requests are
//                             granted at once while it is set)
//                 bits 62-32  tail ticket (31 bits): the last exclusive entry of the queue
//                 bits 31-0   shared count: fetch-and-adds since the tail was set
//   K (64 bits):  the fencing token of the tail's grant; valid while `released` is set
//
//   ticket (31 bits) = rank:10 | seq:21    rank 1..1023 (the lockd's member rank),
//                                          seq 1..kMaxSeq (never 0, never all ones)
//   kFence = all 31 bits set: the lock is being recovered by its home; nobody may CAS over it.
#pragma once
#include <cstdint>

namespace tierce::dlm {

using Ticket = uint32_t;

inline constexpr unsigned kSeqBits = 21;
inline constexpr Ticket kFence = 0x7fffffffu;
inline constexpr uint32_t kMaxSeq = (1u << kSeqBits) - 2;  // all ones is reserved for kFence
inline constexpr uint64_t kReleasedBit = 1ull << 63;
inline constexpr uint64_t kSlotBytes = 16;  // W then K
// A shared count past this is renormalised by an internal exclusive lock (docs/dlm.md):
// far below 2^32, so a carry into the tail cannot happen.
inline constexpr uint32_t kRenormaliseAt = 1u << 30;
// A recovery moves tokens past everything a lost holder may have been given.
inline constexpr uint64_t kRecoveryTokenJump = 1ull << 32;
// Tokens of an incarnation of a home start at epoch << kEpochShift.
inline constexpr unsigned kEpochShift = 48;

static_assert(kMaxSeq < (1u << kSeqBits) - 1, "seq all-ones would collide with kFence");

inline constexpr Ticket make_ticket(uint32_t rank, uint32_t seq) {
  return (rank << kSeqBits) | seq;
}
inline constexpr uint32_t rank_of(Ticket t) { return t >> kSeqBits; }

struct Word {
  bool released = false;
  Ticket tail = 0;
  uint32_t count = 0;

  static constexpr Word decode(uint64_t w) {
    return Word{(w & kReleasedBit) != 0, Ticket((w >> 32) & kFence), uint32_t(w)};
  }
  constexpr uint64_t encode() const {
    return (released ? kReleasedBit : 0) | (uint64_t(tail & kFence) << 32) | count;
  }
};

}  // namespace tierce::dlm
