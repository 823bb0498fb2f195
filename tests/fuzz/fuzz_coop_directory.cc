// tests/fuzz/fuzz_coop_directory.cc — fuzzes what a directory home and its readers accept from
// others (coherence/coop_directory.h, coop_directory_wire.h). The first byte picks the case:
//   0. the input as a bucket read: read_entry / read_bucket never crash or read out of bounds;
//   1. the input XORed over a known good bucket (a corrupted read of it): an accepted result is
//      exactly the original state (the intact bucket), never other entries;
//   2. the input as an update message: decode_message throws DirWireError or returns a message
//      that encodes back to the same bytes; apply_body on a directory always answers;
//   3. the input as a reply, and as a directory header: never a crash.
// Built twice (tests/fuzz/CMakeLists.txt): with -DTIERCE_LIBFUZZER under libFuzzer, and without
// it as a deterministic mutation driver in ctest:
//   fuzz_coop_directory_replay [--iterations N] [--write-seeds DIR] [FILE...]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "coherence/coop_directory.h"
#include "coherence/coop_directory_wire.h"
#include "coherence/key.h"

using namespace tierce::coherence;

namespace {

constexpr uint64_t kBuckets = 4;

struct Good {
  std::vector<uint8_t> mem_storage;
  std::unique_ptr<CoopDirectory> dir;
  std::vector<uint8_t> bucket;  // bucket 0, holding kKeys keys
  std::vector<std::pair<uint64_t, uint64_t>> keys;
  std::vector<DirEntry> entries;  // read back from the intact bucket
  Good() {
    mem_storage.resize(CoopDirectory::bytes_for(kBuckets) + 64);
    auto* p = mem_storage.data();
    p += (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64;
    dir = CoopDirectory::create({p, CoopDirectory::bytes_for(kBuckets)}, kBuckets, 8, 1);
    for (int i = 0; keys.size() < 4; ++i) {
      std::string k = "GET /k" + std::to_string(i);
      uint64_t h = hash64(k), c = coop_key_check(k);
      if (dir->geometry().bucket_index(h) != 0) continue;
      for (uint16_t n = 0; n <= keys.size(); ++n)
        dir->publish(h, c, Tag{uint32_t(n), uint64_t(i), 3}, 100,
                     Location{n, CopyRegion::Pool, 64u * i, 2, 4096});
      keys.emplace_back(h, c);
    }
    auto m = dir->memory();
    bucket.assign(m.begin() + kDirHeaderSize, m.begin() + kDirHeaderSize + kDirBucketSize);
    for (auto [h, c] : keys)
      entries.push_back(std::get<DirEntry>(read_entry(dir->geometry(), bucket, h, c)));
  }
};
Good& good() {
  static Good g;
  return g;
}

bool same(const DirEntry& a, const DirEntry& b) {
  if (a.key_hash != b.key_hash || a.key_check != b.key_check || a.length != b.length ||
      a.tag.home != b.tag.home || a.tag.slot != b.tag.slot || a.tag.version != b.tag.version ||
      a.count != b.count || a.sequence != b.sequence)
    return false;
  for (size_t j = 0; j < a.count; ++j)
    if (!(a.locations[j] == b.locations[j])) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Good& g = good();
  const DirectoryGeometry& geo = g.dir->geometry();
  const uint8_t mode = data[0];
  std::span<const uint8_t> in(data + 1, size - 1);
  const auto [kh, kc] = g.keys[(mode >> 2) % g.keys.size()];
  switch (mode & 3) {
    case 0: {
      std::vector<uint8_t> raw(in.begin(), in.end());  // exact size: ASan sees any overread
      (void)read_entry(geo, raw, kh, kc);
      (void)read_entry(geo, raw, raw.size() >= 8 ? raw[1] : 0, 0);
      (void)read_bucket(geo, raw, 0);
      break;
    }
    case 1: {
      std::vector<uint8_t> v = g.bucket;
      for (size_t i = 0; i < in.size() && i < v.size(); ++i) v[i] ^= in[i];
      if (in.size() < 16) v.resize(in.size() * 40);  // short reads too
      auto r = read_entry(geo, v, kh, kc);
      if (auto* e = std::get_if<DirEntry>(&r)) {
        bool ok = false;
        for (auto& o : g.entries) ok |= same(*e, o);
        if (!ok || v != g.bucket) {
          std::fprintf(stderr, "fuzz_coop_directory: a corrupted bucket yielded an entry\n");
          std::abort();
        }
      }
      if (std::holds_alternative<DirBucket>(read_bucket(geo, v, 0)) && v != g.bucket) {
        std::fprintf(stderr, "fuzz_coop_directory: a corrupted bucket verified\n");
        std::abort();
      }
      break;
    }
    case 2: {
      try {
        auto m = dirwire::decode_message(in);
        auto again = dirwire::encode(m);
        if (!std::equal(again.begin(), again.end(), in.begin(), in.end())) {
          std::fprintf(stderr, "fuzz_coop_directory: a message decoded to another encoding\n");
          std::abort();
        }
      } catch (const dirwire::DirWireError&) {
      }
      (void)dirwire::decode_reply(dirwire::apply_body(*g.dir, in));  // always a valid reply
      break;
    }
    default: {
      try {
        (void)dirwire::decode_reply(in);
      } catch (const dirwire::DirWireError&) {
      }
      (void)parse_directory_header(in);
      break;
    }
  }
  return 0;
}

#ifndef TIERCE_LIBFUZZER
// ---- deterministic replay driver (any compiler; in ctest) ---------------------------------------
#include <random>

#include "replay_args.h"

static std::vector<std::vector<uint8_t>> seeds() {
  using namespace tierce::coherence::dirwire;
  std::vector<std::vector<uint8_t>> out;
  auto with = [&](uint8_t mode, std::vector<uint8_t> body) {
    body.insert(body.begin(), mode);
    out.push_back(std::move(body));
  };
  for (uint8_t k = 0; k < 4; ++k) {
    with(uint8_t(k << 2 | 0), good().bucket);
    with(uint8_t(k << 2 | 1), std::vector<uint8_t>(kDirBucketSize, 0));  // intact bucket
  }
  auto [h, c] = good().keys[0];
  with(
      2,
      encode(Message{Publish{h, c, 100, Tag{0, 1, 3}, Location{5, CopyRegion::Pool, 0, 4, 4096}}}));
  with(2, encode(Message{Withdraw{h, c, 0, CopyRegion::Pool, 0, 2}}));
  with(2, encode(Message{WithdrawNode{1}}));
  with(2, encode(Message{Invalidate{h, c}}));
  with(3, encode(Reply{UpdateStatus::BucketFull, 0, "full"}));
  auto m = good().dir->memory();
  with(3, std::vector<uint8_t>(m.begin(), m.begin() + kDirHeaderSize));
  return out;
}

int main(int argc, char** argv) {
  tierce_fuzz::Driver<decltype(seeds())::value_type> d;
  d.name = "fuzz_coop_directory";
  d.iterations = 200000;
  d.seeds = seeds();
  d.rng_seed = 20261126;
  // This format's own mutations (what is worth changing in it).
  {
    tierce_fuzz::BinaryMutations m;  // a 32-bit field set to an interesting value
    m.extend = true;
    m.field_width = 4, m.field_first = 1, m.field_stride = 4, m.field_count = 40;
    m.field_values = {0, 1, 2, 4, 5, 63, 64, 640, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF};
    d.mutate = m;
  }
  return tierce_fuzz::replay_main(argc, argv, d);
}
#endif  // TIERCE_LIBFUZZER
