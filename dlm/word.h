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
//   seq (21 bits)    = block:2 | n:19      block = the issuing incarnation's epoch mod 4,
//                                          n 1..kSeqPerBlock (wraps within the block)
//     so the tickets of the last four incarnations of a member are pairwise distinct: a new
//     incarnation never issues a ticket that its predecessors' entries, still in a queue, in W
//     or in a message in flight until the home's recovery, may name (docs/dlm.md "Tickets").
//   kFence = all 31 bits set: the lock is being recovered by its home; nobody may CAS over it.
#pragma once
#include <cstdint>

namespace tierce::dlm {

using Ticket = uint32_t;

inline constexpr unsigned kSeqBits = 21;
inline constexpr Ticket kFence = 0x7fffffffu;
inline constexpr uint32_t kMaxSeq = (1u << kSeqBits) - 2;  // all ones is reserved for kFence
// The incarnation block of a seq (its top bits) and the numbers within one block.
inline constexpr unsigned kSeqBlockBits = 2;
inline constexpr unsigned kSeqNumberBits = kSeqBits - kSeqBlockBits;
inline constexpr uint32_t kSeqPerBlock = (1u << kSeqNumberBits) - 2;  // n = 1..2^19-2
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
static_assert((((1u << kSeqBlockBits) - 1) << kSeqNumberBits | kSeqPerBlock) <= kMaxSeq,
              "the last block's highest seq must stay below all ones");

// The seq of number n (1..kSeqPerBlock) in the block of incarnation epoch `epoch`.
inline constexpr uint32_t block_seq(uint64_t epoch, uint32_t n) {
  return uint32_t(epoch % (1u << kSeqBlockBits)) << kSeqNumberBits | n;
}

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
