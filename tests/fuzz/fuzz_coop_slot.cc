// tests/fuzz/fuzz_coop_slot.cc — fuzzes coherence::verify_slot (coop_slot.h), the check every
// byte fetched from a peer's pool goes through. Two properties per input:
//   1. the input itself, read as a slot: verify_slot never crashes or reads out of bounds, and a
//      hit's payload lies inside the input;
//   2. the input XORed over a known good slot (a corrupted read of it): a hit returns exactly the
//      original payload, never other bytes.
// Built twice (tests/fuzz/CMakeLists.txt): with -DTIERCE_LIBFUZZER under libFuzzer, and without
// it as a deterministic mutation driver in ctest:
//   fuzz_coop_slot_replay [--iterations N] [--write-seeds DIR] [FILE...]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "coherence/coop_slot.h"

using namespace tierce::coherence;

namespace {

constexpr size_t kSlot = 512;
const std::string kKey = "GET /item?id=42";
constexpr uint64_t kHash = 0xC0FFEE;
constexpr uint64_t kGen = 6;

struct Good {
  alignas(64) uint8_t bytes[kSlot];
  std::vector<uint8_t> payload;
  Good() {
    for (size_t i = 0; i < 200; ++i) payload.push_back(uint8_t(i * 7));
    init_slot(bytes);
    write_slot(bytes, kHash, kKey, payload, kGen);
  }
};
const Good& good() {
  static const Good g;
  return g;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::span<const uint8_t> in(data + 1, size - 1);
  std::optional<uint64_t> want_gen = mode & 1 ? std::optional<uint64_t>(kGen) : kAnyGeneration;

  // 1. The input as a slot (a private copy, as a remote read gives).
  std::vector<uint8_t> raw(in.begin(), in.end());
  auto r = verify_slot(raw, kHash, kKey, want_gen);
  if (auto* h = std::get_if<SlotHit>(&r)) {
    if (h->payload.data() < raw.data() ||
        h->payload.data() + h->payload.size() > raw.data() + raw.size())
      std::abort();
  }

  // 2. The input as a corruption mask over a good slot, truncated to the input's length when the
  // mode says so (a short read).
  std::vector<uint8_t> v(good().bytes, good().bytes + kSlot);
  for (size_t i = 0; i < in.size() && i < kSlot; ++i) v[i] ^= in[i];
  size_t len = mode & 2 ? std::min(in.size(), kSlot) : kSlot;
  auto m = verify_slot(std::span(v).first(len), kHash, kKey, want_gen);
  if (auto* h = std::get_if<SlotHit>(&m)) {
    const auto& p = good().payload;
    if (!std::equal(h->payload.begin(), h->payload.end(), p.begin(), p.end())) {
      std::fprintf(stderr, "fuzz_coop_slot: a corrupted slot verified with other bytes\n");
      std::abort();
    }
  }
  return 0;
}

#ifndef TIERCE_LIBFUZZER
// ---- deterministic replay driver (any compiler; in ctest) ---------------------------------------
#include <random>

#include "replay_args.h"

static std::vector<std::vector<uint8_t>> seeds() {
  std::vector<std::vector<uint8_t>> out;
  std::vector<uint8_t> slot(good().bytes, good().bytes + kSlot);
  for (uint8_t mode : {0, 1, 2, 3}) {
    std::vector<uint8_t> s{mode};
    s.insert(s.end(), slot.begin(), slot.end());  // the good slot itself (case 1)
    out.push_back(s);
    std::vector<uint8_t> zero{mode};
    zero.resize(1 + 80, 0);  // an all-zero mask: the good slot, maybe a short read (case 2)
    out.push_back(zero);
  }
  return out;
}

int main(int argc, char** argv) {
  tierce_fuzz::Driver<decltype(seeds())::value_type> d;
  d.name = "fuzz_coop_slot";
  d.iterations = 200000;
  d.seeds = seeds();
  d.rng_seed = 20260115;
  // This format's own mutations (what is worth changing in it).
  {
    tierce_fuzz::BinaryMutations m;  // a header field (either half of a u64) set to an interesting value
    m.field_width = 4, m.field_first = 1, m.field_stride = 4, m.field_count = 16;
    m.field_values = {0, 1, 63, 64, 511, 512, 513, 0x7FFFFFFF, 0xFFFFFFFF};
    d.mutate = m;
  }
  return tierce_fuzz::replay_main(argc, argv, d);
}
#endif  // TIERCE_LIBFUZZER
