// coherence/layout.h — the two regions each app node (its memd) exports, as peers address them.
//
// Region "versions" (data area of a fabric::SharedSegment, little-endian u64 words):
//   offset 0   magic "TIERCVER"
//   offset 8   invalidation sequence (atomic): starts at a random base, +1 per invalidation the
//              home applies. A render reads it (one-sided) before it reads the database.
//   offset 16  number of slots
//   offset 24  base: the random value every slot started at (this incarnation's)
//   offset 64  slot[0], slot[1], ...: the version of every key hashing to that slot (atomic)
//
// Region "acks": counters that homes fetch-and-add to acknowledge an invalidation:
//   offset 0   magic "TIERCACK"
//   offset 8   number of ack slots
//   offset 64 + 16*i   owner word of slot i (0 free, else the claimer's token; kPoisoned for ever
//                      after a round that timed out: a late ack must not count for a later round)
//   offset 72 + 16*i   counter of slot i
#pragma once
#include <atomic>
#include <cstdint>

namespace tierce::coherence {

inline constexpr uint64_t kVersionsMagic = 0x5245564352454954ull;  // "TIERCVER"
inline constexpr uint64_t kAcksMagic = 0x4b43414352454954ull;      // "TIERCACK"
inline constexpr uint64_t kSeqOffset = 8;
inline constexpr uint64_t kSlotsOffset = 64;
inline constexpr uint64_t kPoisoned = ~0ull;

inline constexpr uint64_t slot_offset(uint64_t slot) { return kSlotsOffset + 8 * slot; }
inline constexpr uint64_t versions_bytes(uint64_t slots) { return kSlotsOffset + 8 * slots; }
inline constexpr uint64_t ack_owner_offset(uint64_t i) { return 64 + 16 * i; }
inline constexpr uint64_t ack_counter_offset(uint64_t i) { return 72 + 16 * i; }
inline constexpr uint64_t acks_bytes(uint64_t n) { return 64 + 16 * n; }

// Region names in memd's directory.
inline constexpr const char* kVersionsRegion = "versions";
inline constexpr const char* kAcksRegion = "acks";

// Service names on an app node's memd.
inline constexpr const char* kRegisterService = "coherence.register";
inline constexpr const char* kInvalidateService = "coherence.invalidate";
inline constexpr const char* kStatusService = "coherence.status";

// Views of the mapped data areas (CPU atomics on the same words peers reach one-sided).
inline std::atomic<uint64_t>& word_at(void* data, uint64_t off) {
  return *reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(data) + off);
}

}  // namespace tierce::coherence
