// coherence/coop_slot.h — a self-verifying slot: the format of one cached object in pooled memory
// (a proxy's or an app node's donated memory, docs/coop_cache.md) that peers fetch with ONE
// one-sided read. A read may land on a slot that was evicted, erased or reused for another object
// meanwhile (RAMS's "RDMA read failure"), or while its writer is half-way through; verify_slot()
// turns every such read into a Miss with a reason, never into wrong bytes (CliqueMap's
// self-validating responses).
//
// Stored format (little-endian; a slot is `capacity` bytes, a multiple of 64, 64-byte aligned):
//
//   offset  size  field
//   0       4     magic "TCSL" (0x4C534354 read little-endian)
//   4       2     format version (1)
//   6       2     reserved (0)
//   8       8     checksum: XXH3-64 (seed 0) of bytes [16, 64 + key length + payload length):
//                 everything below and the key and payload, so also the generation, key hash,
//                 both lengths, the capacity and the flags
//   16      8     generation (seqlock): odd while the writer is changing the slot, even when it is
//                 stable; strictly increasing over the slot's life (write_slot() demands a larger
//                 even value, erase_slot() adds 2), so a reused slot never shows an old generation
//   24      8     key hash (coherence::key_hash of the full key, or whatever the caller uses)
//   32      4     payload length in bytes
//   36      4     key length in bytes
//   40      4     capacity: the slot's size in bytes as the writer knew it (header included)
//   44      4     flags: bit 0 kSlotOccupied (clear: an empty or erased slot)
//   48      16    reserved (0)
//   64      K     the full key (a key-hash collision is a miss, as in arena.h)
//   64+K    P     the payload
//   ...           unused up to capacity
//
// Writer protocol (one writer per slot at a time; the caller serialises writers): make the
// generation odd (a relaxed store followed by a release fence, so no byte store below becomes
// visible before it), write fields, key, payload and the checksum computed with the final even
// generation, then store that generation with release order. Readers:
//   - remote (one-sided read over tcp/shm/verbs): see one snapshot of header + bytes that may mix
//     writes; verify_slot() rejects an odd generation, a generation other than the expected one,
//     lengths out of bounds, and anything whose checksum does not match — a mix of two writes
//     fails the checksum (except with probability ~2^-64 per torn read).
//   - local CPU readers (same host, the mapping itself): copy_slot() does the seqlock read
//     (acquire load of the generation, copy, acquire fence, reload) and then verify_slot() checks
//     the copy.
// Never trust the header's lengths before they are bounds-checked against the bytes read.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string_view>
#include <variant>

namespace tierce::coherence {

inline constexpr uint32_t kSlotMagic = 0x4C534354u;  // "TCSL" little-endian
inline constexpr uint16_t kSlotVersion = 1;
inline constexpr size_t kSlotHeaderSize = 64;
inline constexpr size_t kSlotAlign = 64;
inline constexpr uint32_t kSlotOccupied = 1u << 0;

// Byte offsets of the header fields (see the table above).
namespace slot_field {
inline constexpr size_t kMagic = 0, kVersion = 4, kChecksum = 8, kGeneration = 16, kKeyHash = 24,
                        kPayloadLen = 32, kKeyLen = 36, kCapacity = 40, kFlags = 44;
inline constexpr size_t kChecksummed = 16;  // the checksum covers [16, 64 + K + P)
}  // namespace slot_field

// Why a read slot was not a hit. Every value is a miss; the caller fetches from the origin.
enum class MissReason : uint8_t {
  Empty,              // never written, or erased
  KeyMismatch,        // another key (hash or full key differs): the slot was reused
  GenerationChanged,  // not the generation the caller's metadata names: rewritten or erased
  Torn,               // odd generation: a writer was half-way through
  LengthOutOfBounds,  // header lengths beyond the bytes read / the capacity, or a short read
  BadMagic,
  BadVersion,
  Checksum,  // bytes and header disagree: a read that mixed two writes, or corruption
};
inline constexpr size_t kMissReasonCount = 8;
std::string_view to_string(MissReason r);
std::ostream& operator<<(std::ostream& o, MissReason r);

struct SlotHit {
  std::span<const uint8_t> payload;  // a view into the bytes given to verify_slot()
  uint64_t generation = 0;
};
struct Miss {
  MissReason reason;
};
using SlotResult = std::variant<SlotHit, Miss>;

// What a caller counts (per thread or per process; add them up with +=), for the status page.
struct SlotCounters {
  uint64_t hits = 0;
  std::array<uint64_t, kMissReasonCount> misses{};  // indexed by MissReason

  void count(const SlotResult& r);
  uint64_t miss(MissReason r) const { return misses[size_t(r)]; }
  uint64_t total_misses() const;
  SlotCounters& operator+=(const SlotCounters& o);
};

// The expected generation of verify_slot() when the caller's metadata does not name one.
inline constexpr std::optional<uint64_t> kAnyGeneration = std::nullopt;

// Largest key + payload a slot of `capacity` bytes holds (0 when it cannot hold a header).
inline constexpr size_t slot_room(size_t capacity) {
  return capacity > kSlotHeaderSize ? capacity - kSlotHeaderSize : 0;
}

// Formats `slot` as an empty slot of generation 0. Prereq: the slot is aligned to kSlotAlign, its
// size a non-zero multiple of 64, and nobody reads it yet (a fresh pool). Throws
// std::invalid_argument otherwise.
void init_slot(std::span<uint8_t> slot);

// The current generation of a slot in local memory (acquire load).
uint64_t slot_generation(std::span<const uint8_t> slot);
// The smallest generation write_slot() accepts next: the current one rounded up to even, plus 2.
uint64_t next_generation(std::span<const uint8_t> slot);

// The writer: stores (key_hash, key, payload) under `generation`.
// Prereq: `slot` was init_slot()ed (or written before), the caller is its only writer,
// `generation` is even and larger than the slot's current generation, and key.size() +
// payload.size() <= slot_room(slot.size()). Throws std::invalid_argument (slot untouched) when not.
void write_slot(std::span<uint8_t> slot, uint64_t key_hash, std::string_view key,
                std::span<const uint8_t> payload, uint64_t generation);

// Empties the slot and advances its generation by 2 (from an even one), so that any reader
// expecting the old contents misses. Returns the new generation. Same writer prereqs.
uint64_t erase_slot(std::span<uint8_t> slot);

// Local CPU reader: copies `slot` (a mapping another thread or process writes) into `out`
// (out.size() >= slot.size() bytes are copied; the rest is left alone) with the seqlock read
// discipline. Returns false when the generation changed during the copy or was odd (the copy is
// then torn; verify_slot() on it would say so too, this just says it earlier).
bool copy_slot(std::span<const uint8_t> slot, std::span<uint8_t> out);

// The reader's check of bytes fetched by one read (a private copy: remote read, or copy_slot()).
// `read_bytes` may have any alignment and any size (a short read is LengthOutOfBounds).
// Order of checks: size, magic, version, odd generation, occupied flag, expected generation, key
// hash, lengths, checksum, full key. Returns the payload (a view into read_bytes) or the reason.
SlotResult verify_slot(std::span<const uint8_t> read_bytes, uint64_t expected_key_hash,
                       std::string_view key, std::optional<uint64_t> expected_generation);

// XXH3-64 over the checksummed part of a slot whose lengths were already bounds-checked
// (exposed for tests that forge headers).
uint64_t slot_checksum(std::span<const uint8_t> slot_bytes, size_t key_len, size_t payload_len);

}  // namespace tierce::coherence
