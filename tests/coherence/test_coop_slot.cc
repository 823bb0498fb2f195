// tests/coherence/test_coop_slot.cc — self-verifying slots (coherence/coop_slot.h): round trips,
// every miss reason forced by a forged or corrupted header, random corruption that must never
// crash nor yield a hit with wrong bytes, and the writer's refusals.
#define BOOST_TEST_MODULE coop_slot
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "coherence/coop_slot.h"

using namespace tierce::coherence;

namespace {

// A 64-byte-aligned buffer of n bytes.
struct AlignedSlot {
  struct Free {
    void operator()(uint8_t* q) const { std::free(q); }
  };
  explicit AlignedSlot(size_t n) : size(n), p(static_cast<uint8_t*>(std::aligned_alloc(64, n))) {
    std::memset(p.get(), 0xAB, n);  // garbage, as in reused pool memory
  }
  std::span<uint8_t> span() { return {p.get(), size}; }
  size_t size;
  std::unique_ptr<uint8_t, Free> p;
};

std::vector<uint8_t> bytes_of(std::string_view s) {
  return {s.begin(), s.end()};
}

MissReason reason(const SlotResult& r) {
  BOOST_REQUIRE(std::holds_alternative<Miss>(r));
  return std::get<Miss>(r).reason;
}

std::vector<uint8_t> hit_payload(const SlotResult& r) {
  BOOST_REQUIRE(std::holds_alternative<SlotHit>(r));
  auto p = std::get<SlotHit>(r).payload;
  return {p.begin(), p.end()};
}

template <typename T>
void poke(std::vector<uint8_t>& v, size_t off, T x) {
  std::memcpy(v.data() + off, &x, sizeof x);
}

}  // namespace

BOOST_AUTO_TEST_CASE(round_trip_exact_and_any_generation) {
  AlignedSlot s(1024);
  init_slot(s.span());
  BOOST_TEST(slot_generation(s.span()) == 0u);
  auto payload = bytes_of("HTTP/1.1 200 OK\r\n\r\n<html>page</html>");
  uint64_t g = next_generation(s.span());
  BOOST_TEST(g == 2u);
  write_slot(s.span(), 0x1234, "GET /item?id=42", payload, g);
  BOOST_TEST(slot_generation(s.span()) == g);
  auto r = verify_slot(s.span(), 0x1234, "GET /item?id=42", g);
  BOOST_TEST(hit_payload(r) == payload);
  BOOST_TEST(std::get<SlotHit>(r).generation == g);
  BOOST_TEST(hit_payload(verify_slot(s.span(), 0x1234, "GET /item?id=42", kAnyGeneration)) ==
             payload);
  // A read of exactly the used bytes is enough; one byte less is a short read.
  size_t used = kSlotHeaderSize + 15 + payload.size();
  BOOST_TEST(hit_payload(verify_slot(s.span().first(used), 0x1234, "GET /item?id=42", g)) ==
             payload);
  BOOST_TEST(reason(verify_slot(s.span().first(used - 1), 0x1234, "GET /item?id=42", g)) ==
             MissReason::LengthOutOfBounds);
  // Empty payload and empty key round-trip too; the slot fills up to its room exactly.
  write_slot(s.span(), 7, "", {}, next_generation(s.span()));
  BOOST_TEST(hit_payload(verify_slot(s.span(), 7, "", kAnyGeneration)).empty());
  std::vector<uint8_t> full(slot_room(1024) - 3, 0x5A);
  write_slot(s.span(), 8, "abc", full, next_generation(s.span()));
  BOOST_TEST(hit_payload(verify_slot(s.span(), 8, "abc", kAnyGeneration)) == full);
  // copy_slot of a quiescent slot is stable and verifies.
  AlignedSlot c(1024);
  BOOST_TEST(copy_slot(s.span(), c.span()));
  BOOST_TEST(hit_payload(verify_slot(c.span(), 8, "abc", slot_generation(s.span()))) == full);
}

BOOST_AUTO_TEST_CASE(reuse_and_erase_are_misses) {
  AlignedSlot s(512);
  init_slot(s.span());
  BOOST_TEST(reason(verify_slot(s.span(), 1, "a", kAnyGeneration)) == MissReason::Empty);
  uint64_t g1 = next_generation(s.span());
  write_slot(s.span(), 1, "a", bytes_of("first"), g1);
  uint64_t g2 = next_generation(s.span());
  write_slot(s.span(), 2, "b", bytes_of("second"), g2);  // evicted, reused for another key
  BOOST_TEST(reason(verify_slot(s.span(), 1, "a", g1)) == MissReason::GenerationChanged);
  BOOST_TEST(reason(verify_slot(s.span(), 1, "a", kAnyGeneration)) == MissReason::KeyMismatch);
  // Same key rewritten: the reader holding the old generation misses, "any" gets the new bytes.
  uint64_t g3 = next_generation(s.span());
  write_slot(s.span(), 2, "b", bytes_of("third"), g3);
  BOOST_TEST(reason(verify_slot(s.span(), 2, "b", g2)) == MissReason::GenerationChanged);
  BOOST_TEST(hit_payload(verify_slot(s.span(), 2, "b", kAnyGeneration)) == bytes_of("third"));
  uint64_t g4 = erase_slot(s.span());
  BOOST_TEST(g4 == g3 + 2);
  BOOST_TEST(reason(verify_slot(s.span(), 2, "b", g3)) == MissReason::Empty);
  BOOST_TEST(reason(verify_slot(s.span(), 2, "b", kAnyGeneration)) == MissReason::Empty);
  // A key-hash collision: same hash and length, another key → a miss, never the other's bytes.
  write_slot(s.span(), 99, "key-A", bytes_of("A's page"), next_generation(s.span()));
  BOOST_TEST(reason(verify_slot(s.span(), 99, "key-B", kAnyGeneration)) == MissReason::KeyMismatch);
  BOOST_TEST(reason(verify_slot(s.span(), 99, "key-AA", kAnyGeneration)) ==
             MissReason::KeyMismatch);
}

BOOST_AUTO_TEST_CASE(every_miss_reason_from_a_forged_header) {
  AlignedSlot s(512);
  init_slot(s.span());
  const std::string key = "GET /category?id=3";
  auto payload = bytes_of("a page of some length, cached in the pool");
  uint64_t g = next_generation(s.span());
  write_slot(s.span(), 0xFEED, key, payload, g);
  const std::vector<uint8_t> good(s.span().begin(), s.span().end());
  auto check = [&](auto forge, MissReason want) {
    std::vector<uint8_t> v = good;
    forge(v);
    SlotCounters c;
    auto r = verify_slot(v, 0xFEED, key, g);
    c.count(r);
    BOOST_TEST(reason(r) == want, "wanted " << want);
    BOOST_TEST(c.miss(want) == 1u);
    BOOST_TEST(c.hits == 0u);
  };
  namespace o = slot_field;
  check([](auto& v) { poke<uint32_t>(v, o::kMagic, 0x12345678); }, MissReason::BadMagic);
  check([](auto& v) { poke<uint16_t>(v, o::kVersion, 2); }, MissReason::BadVersion);
  check([&](auto& v) { poke<uint64_t>(v, o::kGeneration, g + 1); }, MissReason::Torn);
  check([](auto& v) { poke<uint32_t>(v, o::kFlags, 0); }, MissReason::Empty);
  check([&](auto& v) { poke<uint64_t>(v, o::kGeneration, g + 2); }, MissReason::GenerationChanged);
  check([](auto& v) { poke<uint64_t>(v, o::kKeyHash, 0xBEEF); }, MissReason::KeyMismatch);
  check([](auto& v) { poke<uint32_t>(v, o::kPayloadLen, 0xFFFFFFFFu); },
        MissReason::LengthOutOfBounds);
  check([](auto& v) { poke<uint32_t>(v, o::kKeyLen, 0xFFFFFFF0u); }, MissReason::LengthOutOfBounds);
  check([](auto& v) { poke<uint32_t>(v, o::kPayloadLen, 512 - 64 - 18 + 1); },
        MissReason::LengthOutOfBounds);
  check([](auto& v) { poke<uint32_t>(v, o::kCapacity, 64); }, MissReason::LengthOutOfBounds);
  check([](auto& v) { poke<uint32_t>(v, o::kPayloadLen, 10); }, MissReason::Checksum);
  check([](auto& v) { v[64 + 18 + 5] ^= 1; }, MissReason::Checksum);      // payload byte
  check([](auto& v) { v[64 + 2] ^= 0x20; }, MissReason::Checksum);        // key byte
  check([](auto& v) { v[o::kChecksum] ^= 0x80; }, MissReason::Checksum);  // the checksum itself
  check([](auto& v) { v[50] = 1; }, MissReason::Checksum);                // reserved, covered
  // Short reads.
  BOOST_TEST(reason(verify_slot(std::span(good).first(63), 0xFEED, key, g)) ==
             MissReason::LengthOutOfBounds);
  BOOST_TEST(reason(verify_slot({}, 0xFEED, key, g)) == MissReason::LengthOutOfBounds);
  BOOST_TEST(std::string(to_string(MissReason::Checksum)) == "checksum");
}

BOOST_AUTO_TEST_CASE(random_corruption_never_crashes_nor_serves_wrong_bytes) {
  std::mt19937_64 rng(15);
  AlignedSlot s(2048);
  init_slot(s.span());
  SlotCounters total;
  uint64_t wrong = 0, flips_outside = 0;
  for (int round = 0; round < 200; ++round) {
    std::string key = "GET /item?id=" + std::to_string(rng() % 100000);
    std::vector<uint8_t> payload(rng() % (slot_room(2048) - key.size()));
    for (auto& b : payload) b = uint8_t(rng());
    uint64_t g = next_generation(s.span());
    write_slot(s.span(), std::hash<std::string>{}(key), key, payload, g);
    const std::vector<uint8_t> good(s.span().begin(), s.span().end());
    const size_t used = kSlotHeaderSize + key.size() + payload.size();
    for (int it = 0; it < 1000; ++it) {
      std::vector<uint8_t> v = good;
      int flips = 1 + int(rng() % 4);
      for (int f = 0; f < flips; ++f) {
        // Mostly the header and the used bytes, sometimes anywhere.
        size_t at = rng() % 4 == 0 ? rng() % v.size() : rng() % std::min(v.size(), used + 8);
        v[at] ^= uint8_t(1 + rng() % 255);
      }
      // Whether a byte the slot vouches for changed (all of [0, used) but the reserved 6..7).
      bool covered = false;
      for (size_t i = 0; i < used; ++i)
        if (v[i] != good[i] && i != 6 && i != 7) covered = true;
      // Sometimes a short read.
      size_t len = rng() % 8 == 0 ? rng() % v.size() : v.size();
      auto r = verify_slot(std::span(v).first(len), std::hash<std::string>{}(key), key,
                           rng() % 2 ? std::optional<uint64_t>(g) : kAnyGeneration);
      total.count(r);
      if (auto* h = std::get_if<SlotHit>(&r)) {
        if (!std::equal(h->payload.begin(), h->payload.end(), payload.begin(), payload.end()))
          ++wrong;
        if (covered) ++flips_outside;  // a hit despite a flip in vouched-for bytes
      }
    }
  }
  // Forged headers with random contents (magic and version right): never a hit.
  uint64_t forged_hits = 0;
  for (int it = 0; it < 100000; ++it) {
    std::vector<uint8_t> v(256);
    for (auto& b : v) b = uint8_t(rng());
    poke<uint32_t>(v, slot_field::kMagic, kSlotMagic);
    poke<uint16_t>(v, slot_field::kVersion, kSlotVersion);
    if (rng() % 2) poke<uint64_t>(v, slot_field::kGeneration, (rng() % 1000) * 2);
    if (rng() % 2) poke<uint32_t>(v, slot_field::kFlags, kSlotOccupied);
    if (rng() % 2) poke<uint32_t>(v, slot_field::kPayloadLen, uint32_t(rng() % 200));
    if (rng() % 2) poke<uint32_t>(v, slot_field::kKeyLen, 0);
    if (rng() % 2) poke<uint64_t>(v, slot_field::kKeyHash, 5);
    auto r = verify_slot(v, 5, "", kAnyGeneration);
    total.count(r);
    if (std::holds_alternative<SlotHit>(r)) ++forged_hits;
  }
  BOOST_TEST_MESSAGE("corruption: hits " << total.hits << ", misses " << total.total_misses());
  for (size_t i = 0; i < kMissReasonCount; ++i)
    BOOST_TEST_MESSAGE("  " << MissReason(i) << ": " << total.misses[i]);
  BOOST_TEST(wrong == 0u);
  BOOST_TEST(flips_outside == 0u);
  BOOST_TEST(forged_hits == 0u);
  BOOST_TEST(total.hits > 0u);  // flips outside the used bytes are harmless hits
  for (MissReason m : {MissReason::BadMagic, MissReason::BadVersion, MissReason::Torn,
                       MissReason::LengthOutOfBounds, MissReason::Checksum, MissReason::Empty,
                       MissReason::KeyMismatch, MissReason::GenerationChanged})
    BOOST_TEST(total.miss(m) > 0u, "no " << m << " seen");
}

BOOST_AUTO_TEST_CASE(writer_refuses_misuse_and_leaves_the_slot_intact) {
  AlignedSlot s(256);
  init_slot(s.span());
  uint64_t g = next_generation(s.span());
  write_slot(s.span(), 3, "k", bytes_of("v"), g);
  auto intact = [&] { return hit_payload(verify_slot(s.span(), 3, "k", g)) == bytes_of("v"); };
  BOOST_CHECK_THROW(write_slot(s.span(), 3, "k", bytes_of("w"), g), std::invalid_argument);
  BOOST_CHECK_THROW(write_slot(s.span(), 3, "k", bytes_of("w"), g + 3), std::invalid_argument);
  std::vector<uint8_t> big(slot_room(256));
  BOOST_CHECK_THROW(write_slot(s.span(), 3, "k", big, g + 2), std::invalid_argument);
  BOOST_CHECK_THROW(write_slot(s.span().subspan(1, 128), 3, "k", {}, g + 2),
                    std::invalid_argument);  // misaligned
  BOOST_CHECK_THROW(init_slot(s.span().first(100)), std::invalid_argument);
  BOOST_TEST(intact());
  AlignedSlot raw(128);  // never formatted
  BOOST_CHECK_THROW(write_slot(raw.span(), 3, "k", {}, 2), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(counters_add_up) {
  SlotCounters a, b;
  a.count(SlotHit{});
  a.count(Miss{MissReason::Torn});
  b.count(Miss{MissReason::Torn});
  b.count(Miss{MissReason::Checksum});
  a += b;
  BOOST_TEST(a.hits == 1u);
  BOOST_TEST(a.miss(MissReason::Torn) == 2u);
  BOOST_TEST(a.total_misses() == 3u);
}
