// tests/fuzz/fuzz_coop_copy.cc — fuzzes the checks of what the cooperative cache reads from a
// peer besides directory buckets and bare slots (docs/coop_cache.md): CacheArena::verify_copy (a
// peer's arena entry, read one-sidedly) and a pooled entry (verify_slot + decode_pooled_entry).
// Per input:
//   1. the input as an arena copy and as a pool slot: never a crash or an out-of-bounds read;
//   2. the input XORed over a known good arena copy and a good pool slot (corrupted reads): a
//      result that verifies is exactly the original entry (key, tag, payload), never other bytes.
// Built twice (tests/fuzz/CMakeLists.txt): under libFuzzer with -DTIERCE_LIBFUZZER, and as the
// deterministic replay driver in ctest: fuzz_coop_copy_replay [--iterations N] [FILE...]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "coherence/arena.h"
#include "coherence/coop_pool_store.h"
#include "coherence/coop_slot.h"

using namespace tierce::coherence;

namespace {

const std::string kKey = "http://shop.test/item.php?id=42";
constexpr uint64_t kHash = 0xC0FFEE;
constexpr uint64_t kGen = 8;
const Tag kTag{1, 77, 1234};

struct Good {
  std::string payload;
  std::vector<uint8_t> arena_copy;
  uint64_t pos = 0;
  alignas(64) uint8_t slot[512];
  Good() {
    for (size_t i = 0; i < 150; ++i) payload.push_back(char('A' + i % 26));
    auto a = CacheArena::create_anonymous(1 << 20);
    auto c = a->store_located(kHash, kKey, kTag, payload);
    if (!c) std::abort();
    pos = c->pos;
    const uint8_t* p = a->segment().data() + c->offset;
    arena_copy.assign(p, p + c->bytes);
    std::string entry = encode_pooled_entry(kTag, 99, payload);
    init_slot(slot);
    write_slot(slot, kHash, kKey, {reinterpret_cast<const uint8_t*>(entry.data()), entry.size()},
               kGen);
  }
};
const Good& good() {
  static const Good g;
  return g;
}

bool is_original(const CachedEntry& e) {
  return e.key == kKey && e.payload == good().payload && e.tag.home == kTag.home &&
         e.tag.slot == kTag.slot && e.tag.version == kTag.version;
}

std::optional<CachedEntry> pooled(std::span<const uint8_t> b) {
  auto r = verify_slot(b, kHash, kKey, kGen);
  auto* h = std::get_if<SlotHit>(&r);
  if (!h) return std::nullopt;
  return decode_pooled_entry(kKey, h->payload);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::span<const uint8_t> in(data + 1, size - 1);
  const Good& g = good();

  // 1. The input itself.
  std::vector<uint8_t> raw(in.begin(), in.end());
  (void)CacheArena::verify_copy(raw, mode & 1 ? g.pos : uint64_t(mode) * 64, kHash, kKey);
  (void)pooled(raw);

  // 2. Corruptions of good reads (optionally short).
  std::vector<uint8_t> a = g.arena_copy;
  for (size_t i = 0; i < in.size() && i < a.size(); ++i) a[i] ^= in[i];
  size_t alen = mode & 2 ? std::min(in.size(), a.size()) : a.size();
  auto v = CacheArena::verify_copy(std::span(a).first(alen), g.pos, kHash, kKey);
  if (auto* e = std::get_if<CachedEntry>(&v); e && !is_original(*e)) {
    std::fprintf(stderr, "fuzz_coop_copy: a corrupted arena copy verified with other bytes\n");
    std::abort();
  }
  std::vector<uint8_t> s(g.slot, g.slot + sizeof g.slot);
  for (size_t i = 0; i < in.size() && i < s.size(); ++i) s[i] ^= in[i];
  size_t slen = mode & 2 ? std::min(in.size(), s.size()) : s.size();
  if (auto e = pooled(std::span(s).first(slen)); e && !is_original(*e)) {
    std::fprintf(stderr, "fuzz_coop_copy: a corrupted pool slot verified with other bytes\n");
    std::abort();
  }
  return 0;
}

#ifndef TIERCE_LIBFUZZER
#include <random>

#include "replay_args.h"

static std::vector<std::vector<uint8_t>> seeds() {
  std::vector<std::vector<uint8_t>> out;
  for (uint8_t mode : {0, 1, 2, 3}) {
    std::vector<uint8_t> s{mode};
    s.insert(s.end(), good().arena_copy.begin(), good().arena_copy.end());
    out.push_back(s);
    std::vector<uint8_t> t{mode};
    t.insert(t.end(), good().slot, good().slot + sizeof good().slot);
    out.push_back(t);
    std::vector<uint8_t> zero{mode};
    zero.resize(1 + 100, 0);
    out.push_back(zero);
  }
  return out;
}

int main(int argc, char** argv) {
  tierce_fuzz::Driver<decltype(seeds())::value_type> d;
  d.name = "fuzz_coop_copy";
  d.iterations = 200000;
  d.seeds = seeds();
  d.rng_seed = 20261126;
  // This format's own mutations (what is worth changing in it).
  {
    tierce_fuzz::BinaryMutations m;  // a header field (u64) set to an interesting value
    m.field_width = 8, m.field_first = 1, m.field_stride = 8, m.field_count = 10;
    m.field_values = {0, 1, 63, 64, 512, 0x7FFFFFFF, 0xFFFFFFFF, ~0ull};
    d.mutate = m;
  }
  return tierce_fuzz::replay_main(argc, argv, d);
}
#endif  // TIERCE_LIBFUZZER
