// coherence/coop_slot.cc — writer, local reader and verifier of self-verifying slots (coop_slot.h).
#include "coherence/coop_slot.h"
#include "coherence/bytes.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack (the writer hashes in two parts)
#include <xxhash.h>

#include <atomic>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

#include "base/tsan.h"

namespace tierce::coherence {

// The header fields are stored in host order and the generation word is a CPU atomic shared with
// local readers: the documented little-endian layout holds on little-endian hosts only.
static_assert(std::endian::native == std::endian::little, "coop_slot.h's layout is little-endian");
static_assert(std::atomic_ref<uint64_t>::required_alignment <= 8);

namespace {

using namespace slot_field;

using bytes::load;
using bytes::store;

std::atomic_ref<uint64_t> generation_word(const uint8_t* slot) {
  // The slot is kSlotAlign-aligned (checked by the callers), so offset 16 is 8-aligned.
  return std::atomic_ref<uint64_t>(
      *reinterpret_cast<uint64_t*>(const_cast<uint8_t*>(slot) + kGeneration));
}

void check_geometry(std::span<const uint8_t> slot, const char* what) {
  if (reinterpret_cast<uintptr_t>(slot.data()) % kSlotAlign != 0 || slot.empty() ||
      slot.size() % kSlotAlign != 0 || slot.size() > UINT32_MAX)
    throw std::invalid_argument(std::string(what) +
                                ": a slot must be 64-byte aligned, a non-zero multiple of 64 bytes "
                                "and below 4 GiB");
}

void check_writable(std::span<const uint8_t> slot, const char* what) {
  check_geometry(slot, what);
  if (load<uint32_t>(slot.data() + kMagic) != kSlotMagic ||
      load<uint16_t>(slot.data() + kVersion) != kSlotVersion)
    throw std::invalid_argument(std::string(what) +
                                ": not a formatted slot (call init_slot first)");
  if (generation_word(slot.data()).load(std::memory_order_relaxed) % 2 != 0)
    throw std::invalid_argument(std::string(what) +
                                ": odd generation: another writer is active or one died mid-write");
}

// Seqlock, writer side. The relaxed store of the odd value followed by a release fence orders it
// before every later store of this thread (the fence pairs with the reader's acquire fence in
// copy_slot()): a local reader that sees any new byte also sees the odd generation on its reload.
void begin_write(uint8_t* slot, uint64_t odd) {
  generation_word(slot).store(odd, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}
// Publishes the even generation after every byte (release: a reader that acquires it sees them).
void end_write(uint8_t* slot, uint64_t even) {
  generation_word(slot).store(even, std::memory_order_release);
}

}  // namespace

std::string_view to_string(MissReason r) {
  switch (r) {
    case MissReason::Empty:
      return "empty";
    case MissReason::KeyMismatch:
      return "key_mismatch";
    case MissReason::GenerationChanged:
      return "generation_changed";
    case MissReason::Torn:
      return "torn";
    case MissReason::LengthOutOfBounds:
      return "length_out_of_bounds";
    case MissReason::BadMagic:
      return "bad_magic";
    case MissReason::BadVersion:
      return "bad_version";
    case MissReason::Checksum:
      return "checksum";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& o, MissReason r) {
  return o << to_string(r);
}

void SlotCounters::count(const SlotResult& r) {
  if (const Miss* m = std::get_if<Miss>(&r))
    ++misses[size_t(m->reason)];
  else
    ++hits;
}

uint64_t SlotCounters::total_misses() const {
  uint64_t n = 0;
  for (uint64_t m : misses) n += m;
  return n;
}

SlotCounters& SlotCounters::operator+=(const SlotCounters& o) {
  hits += o.hits;
  for (size_t i = 0; i < kMissReasonCount; ++i) misses[i] += o.misses[i];
  return *this;
}

uint64_t slot_checksum(std::span<const uint8_t> slot_bytes, size_t key_len, size_t payload_len) {
  const size_t end = kSlotHeaderSize + key_len + payload_len;
  if (end > slot_bytes.size() || end < kSlotHeaderSize)
    throw std::invalid_argument("slot_checksum: lengths beyond the bytes given");
  return XXH3_64bits(slot_bytes.data() + kChecksummed, end - kChecksummed);
}

void init_slot(std::span<uint8_t> slot) {
  check_geometry(slot, "init_slot");
  std::memset(slot.data(), 0, kSlotHeaderSize);
  uint8_t* s = slot.data();
  store<uint32_t>(s + kMagic, kSlotMagic);
  store<uint16_t>(s + kVersion, kSlotVersion);
  store<uint32_t>(s + kCapacity, uint32_t(slot.size()));
  store<uint64_t>(s + kChecksum, slot_checksum(slot, 0, 0));
  end_write(s, 0);
}

uint64_t slot_generation(std::span<const uint8_t> slot) {
  check_geometry(slot, "slot_generation");
  return generation_word(slot.data()).load(std::memory_order_acquire);
}

uint64_t next_generation(std::span<const uint8_t> slot) {
  uint64_t g = slot_generation(slot);
  return (g + 1) / 2 * 2 + 2;
}

void write_slot(std::span<uint8_t> slot, uint64_t key_hash, std::string_view key,
                std::span<const uint8_t> payload, uint64_t generation) {
  check_writable(slot, "write_slot");
  uint8_t* s = slot.data();
  const uint64_t current = generation_word(s).load(std::memory_order_relaxed);
  if (generation % 2 != 0 || generation <= current)
    throw std::invalid_argument("write_slot: generation " + std::to_string(generation) +
                                " must be even and above the slot's " + std::to_string(current));
  const size_t room = slot_room(slot.size());
  if (key.size() > room || payload.size() > room - key.size())
    throw std::invalid_argument("write_slot: key (" + std::to_string(key.size()) +
                                " bytes) + payload (" + std::to_string(payload.size()) +
                                " bytes) exceed the slot's room of " + std::to_string(room));

  begin_write(s, generation - 1);
  store<uint64_t>(s + kKeyHash, key_hash);
  store<uint32_t>(s + kPayloadLen, uint32_t(payload.size()));
  store<uint32_t>(s + kKeyLen, uint32_t(key.size()));
  store<uint32_t>(s + kCapacity, uint32_t(slot.size()));
  store<uint32_t>(s + kFlags, kSlotOccupied);
  std::memset(s + 48, 0, kSlotHeaderSize - 48);
  if (!key.empty()) std::memcpy(s + kSlotHeaderSize, key.data(), key.size());
  if (!payload.empty())
    std::memcpy(s + kSlotHeaderSize + key.size(), payload.data(), payload.size());
  // The checksum covers the generation word: computed over the final (even) value, written into
  // the checksum input only for the computation and restored to odd before publication. Doing it
  // on a stack copy of the header keeps the shared word odd throughout.
  uint8_t head[kSlotHeaderSize];
  std::memcpy(head, s, kSlotHeaderSize);
  store<uint64_t>(head + kGeneration, generation);
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, head + kChecksummed, kSlotHeaderSize - kChecksummed);
  XXH3_64bits_update(&st, s + kSlotHeaderSize, key.size() + payload.size());
  store<uint64_t>(s + kChecksum, XXH3_64bits_digest(&st));
  end_write(s, generation);
}

uint64_t erase_slot(std::span<uint8_t> slot) {
  check_writable(slot, "erase_slot");
  uint8_t* s = slot.data();
  const uint64_t next = generation_word(s).load(std::memory_order_relaxed) + 2;
  begin_write(s, next - 1);
  store<uint64_t>(s + kKeyHash, 0);
  store<uint32_t>(s + kPayloadLen, 0);
  store<uint32_t>(s + kKeyLen, 0);
  store<uint32_t>(s + kFlags, 0);
  uint8_t head[kSlotHeaderSize];
  std::memcpy(head, s, kSlotHeaderSize);
  store<uint64_t>(head + kGeneration, next);
  store<uint64_t>(s + kChecksum, XXH3_64bits(head + kChecksummed, kSlotHeaderSize - kChecksummed));
  end_write(s, next);
  return next;
}

bool copy_slot(std::span<const uint8_t> slot, std::span<uint8_t> out) {
  check_geometry(slot, "copy_slot");
  if (out.size() < slot.size()) throw std::invalid_argument("copy_slot: output smaller than slot");
  const uint64_t before = generation_word(slot.data()).load(std::memory_order_acquire);
  {
    // Seqlock copy: races with write_slot()/erase_slot() by design; the generation re-check below
    // (and verify_slot()'s checksum) throws a torn copy away. Not recorded by ThreadSanitizer.
    TIERCE_TSAN_RACY_READS();
    std::memcpy(out.data(), slot.data(), slot.size());
  }
  // Orders the copy's loads before the reload (pairs with the writer's release fence).
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t after = generation_word(slot.data()).load(std::memory_order_relaxed);
  return before == after && before % 2 == 0;
}

SlotResult verify_slot(std::span<const uint8_t> b, uint64_t expected_key_hash, std::string_view key,
                       std::optional<uint64_t> expected_generation) {
  if (b.size() < kSlotHeaderSize) return Miss{MissReason::LengthOutOfBounds};
  const uint8_t* p = b.data();
  if (load<uint32_t>(p + kMagic) != kSlotMagic) return Miss{MissReason::BadMagic};
  if (load<uint16_t>(p + kVersion) != kSlotVersion) return Miss{MissReason::BadVersion};
  const uint64_t gen = load<uint64_t>(p + kGeneration);
  if (gen % 2 != 0) return Miss{MissReason::Torn};
  if ((load<uint32_t>(p + kFlags) & kSlotOccupied) == 0) return Miss{MissReason::Empty};
  if (expected_generation && gen != *expected_generation)
    return Miss{MissReason::GenerationChanged};
  if (load<uint64_t>(p + kKeyHash) != expected_key_hash) return Miss{MissReason::KeyMismatch};
  // Bounds before any use of the lengths, in 64-bit arithmetic (no overflow).
  const uint64_t key_len = load<uint32_t>(p + kKeyLen);
  const uint64_t payload_len = load<uint32_t>(p + kPayloadLen);
  const uint64_t capacity = load<uint32_t>(p + kCapacity);
  const uint64_t end = kSlotHeaderSize + key_len + payload_len;
  if (end > b.size() || end > capacity) return Miss{MissReason::LengthOutOfBounds};
  if (key_len != key.size()) return Miss{MissReason::KeyMismatch};
  if (XXH3_64bits(p + kChecksummed, size_t(end) - kChecksummed) != load<uint64_t>(p + kChecksum))
    return Miss{MissReason::Checksum};
  // A genuine hash collision: another key's intact slot.
  if (key_len != 0 && std::memcmp(p + kSlotHeaderSize, key.data(), key_len) != 0)
    return Miss{MissReason::KeyMismatch};
  return SlotHit{b.subspan(kSlotHeaderSize + size_t(key_len), size_t(payload_len)), gen};
}

}  // namespace tierce::coherence
