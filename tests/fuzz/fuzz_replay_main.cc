// tests/fuzz/fuzz_replay_main.cc — fuzz_wire's replay driver (the target is fuzz_wire.cc): its
// seed frames and its mutations (header fields set to interesting 64-bit values, frames spliced
// back to back) on the shared replay main (replay_args.h). Under the sanitizer build this is a
// real (if blind) fuzz run; with clang and -DTIERCE_FUZZ=ON the same target also runs under
// libFuzzer proper.
//   fuzz_wire_replay [--iterations N] [--write-seeds DIR] [FILE...]
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "replay_args.h"

#include "fabric/wire.h"

extern "C" void fuzz_wire_stats(uint64_t* one_sided, uint64_t* rejected, uint64_t* messages);

using namespace tierce::fabric;

static std::vector<std::vector<uint8_t>> seeds() {
  std::vector<std::vector<uint8_t>> out;
  auto frame = [&](wire::Op op, uint64_t a0, uint64_t a2, uint64_t a3,
                   std::vector<uint8_t> payload) {
    std::vector<uint8_t> v{0};
    wire::Header h;
    h.op = op;
    h.id = 1;
    h.a0 = a0;
    h.a1 = 0;  // the target substitutes the real key for region 1
    h.a2 = a2;
    h.a3 = a3;
    wire::append_frame(v, h, payload);
    out.push_back(v);
  };
  uint64_t base = uint64_t(1) << wire::kRegionShift;
  frame(wire::Op::Read, base + 8, 8, 0, {});
  frame(wire::Op::Read, base, 4096, 0, {});
  frame(wire::Op::Write, base + 16, 0, 0, std::vector<uint8_t>(24, 7));
  frame(wire::Op::Cas, base + 32, 0, 5, {});
  frame(wire::Op::Faa, base + 40, 1, 0, {});
  frame(wire::Op::Lookup, 0, 0, 0, {'d', 'a', 't', 'a'});
  frame(wire::Op::Map, base, 0, 0, {});
  frame(wire::Op::Call, 0, 0, 0, {4, 0, 'e', 'c', 'h', 'o', 1, 2, 3});
  frame(wire::Op::Send, 0, 0, 0, {4, 0, 'e', 'c', 'h', 'o'});
  frame(wire::Op::Ping, 0, 0, 0, {});
  // Two frames back to back.
  auto two = out[0];
  two.insert(two.end(), out[3].begin() + 1, out[3].end());
  out.push_back(two);
  return out;
}

int main(int argc, char** argv) {
  tierce_fuzz::Driver<decltype(seeds())::value_type> d;
  d.name = "fuzz_wire";
  d.iterations = 200000;
  d.seeds = seeds();
  d.rng_seed = 20261120;
  d.run_seeds = false;
  // This format's own mutations (what is worth changing in it).
  d.mutate = [](const auto& base, std::mt19937_64& rng) {
    std::vector<uint8_t> v = base[rng() % base.size()];
    int edits = 1 + int(rng() % 8);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 5) {
        case 0:
          if (!v.empty()) v[rng() % v.size()] = uint8_t(rng());
          break;  // byte
        case 1:
          if (!v.empty()) v[rng() % v.size()] ^= uint8_t(1u << (rng() % 8));
          break;  // bit
        case 2:
          if (v.size() > 1) v.resize(rng() % v.size());
          break;  // truncate
        case 3: {
          auto& o = base[rng() % base.size()];
          v.insert(v.end(), o.begin() + 1, o.end());
          break;
        }
        case 4: {  // an interesting 64-bit value into a header field
          static const uint64_t vals[] = {0,
                                          1,
                                          7,
                                          8,
                                          4095,
                                          4096,
                                          65535,
                                          65536,
                                          ~0ull,
                                          ~0ull - 7,
                                          uint64_t(1) << 40,
                                          (uint64_t(1) << 40) - 8,
                                          1ull << 63};
          if (v.size() >= 1 + wire::kHeaderSize) {
            size_t field = 8 + 8 * (rng() % 5);
            wire::store_le64(v.data() + 1 + field, vals[rng() % std::size(vals)]);
          }
          break;
        }
      }
    }
    return v;
  };
  d.report = [] {
    uint64_t ops = 0, rejected = 0, msgs = 0;
    fuzz_wire_stats(&ops, &rejected, &msgs);
    return "the responder handled " + std::to_string(ops) + " one-sided ops (" +
           std::to_string(rejected) + " rejected) and " + std::to_string(msgs) + " messages";
  };
  return tierce_fuzz::replay_main(argc, argv, d);
}
