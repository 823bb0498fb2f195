// tests/fuzz/replay_args.h — the one replay driver of every fuzz target (run without libFuzzer:
// g++ builds, and ctest's <target>_replay in every build):
//
//   <target>_replay [--iterations N] [--write-seeds DIR] [FILE...]
//
// --write-seeds writes the driver's built-in seeds as DIR/seed-0.. (the libFuzzer run's starting
// corpus) and exits; FILEs (crash reproducers, corpus entries) are run through the target first,
// then the seeds, then N mutated inputs. A target's main() only fills a Driver (name, seeds,
// iterations, random seed) and calls replay_main(); a format worth mutating in its own way
// (header fields set to interesting values, a selector byte) gives its mutation as the hook
// Driver::mutate, and its own counters as Driver::report.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace tierce_fuzz {

struct ReplayArgs {
  long iterations = 0;
  std::vector<std::string> files;
  std::optional<int> exit_code;  // set: the driver returns it at once (seeds written, bad usage)
};

// `Seed` is anything with data() and size() (std::vector<uint8_t>, std::string).
template <class Seed>
ReplayArgs parse_replay_args(int argc, char** argv, long default_iterations,
                             const std::vector<Seed>& seeds) {
  ReplayArgs a;
  a.iterations = default_iterations;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--iterations" || arg == "--write-seeds") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: %s needs a value\n", argv[0], arg.c_str());
        a.exit_code = 2;
        return a;
      }
      const std::string value = argv[++i];
      if (arg == "--iterations") {
        char* end = nullptr;
        a.iterations = std::strtol(value.c_str(), &end, 10);
        if (value.empty() || *end || a.iterations < 0) {
          std::fprintf(stderr, "%s: --iterations wants a count, not '%s'\n", argv[0],
                       value.c_str());
          a.exit_code = 2;
          return a;
        }
        continue;
      }
      int n = 0;
      for (const auto& s : seeds) {
        std::ofstream f(value + "/seed-" + std::to_string(n++), std::ios::binary);
        f.write(reinterpret_cast<const char*>(s.data()), std::streamsize(s.size()));
        if (!f) {
          std::fprintf(stderr, "%s: cannot write seeds into %s\n", argv[0], value.c_str());
          a.exit_code = 1;
          return a;
        }
      }
      std::printf("wrote %d seeds to %s\n", n, value.c_str());
      a.exit_code = 0;
      return a;
    }
    a.files.push_back(arg);
  }
  return a;
}

// Runs every file given on the command line through the target.
inline void replay_files(const std::vector<std::string>& files) {
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::vector<uint8_t> v((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(v.data(), v.size());
  }
}

// One step of the generic mutation loop the newer drivers share: 1..6 edits of a copy of a seed
// (a byte, a bit, a truncation, a splice of another seed, random bytes inserted, a range
// repeated). Byte 0 (the target's selector, when it has one) is mutated like any other.
template <class Seed>
std::vector<uint8_t> mutate(const std::vector<Seed>& seeds, std::mt19937_64& rng) {
  const Seed& s = seeds[rng() % seeds.size()];
  std::vector<uint8_t> v(s.data(), s.data() + s.size());
  int edits = 1 + int(rng() % 6);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 6) {
      case 0:
        if (!v.empty()) v[rng() % v.size()] = uint8_t(rng());
        break;
      case 1:
        if (!v.empty()) v[rng() % v.size()] ^= uint8_t(1u << (rng() % 8));
        break;
      case 2:
        if (v.size() > 1) v.resize(rng() % v.size());
        break;
      case 3: {
        const Seed& o = seeds[rng() % seeds.size()];
        size_t from = o.size() ? rng() % o.size() : 0;
        v.insert(v.begin() + long(v.empty() ? 0 : rng() % v.size()), o.data() + from,
                 o.data() + o.size());
        break;
      }
      case 4: {
        size_t n = 1 + rng() % 16, at = v.empty() ? 0 : rng() % v.size();
        for (size_t i = 0; i < n; ++i) v.insert(v.begin() + long(at), uint8_t(rng()));
        break;
      }
      default:
        if (v.size() > 2 && v.size() < 8192) {
          size_t a = rng() % v.size(), n = 1 + rng() % (v.size() - a);
          std::vector<uint8_t> r(v.begin() + long(a), v.begin() + long(a + n));
          v.insert(v.begin() + long(a), r.begin(), r.end());
        }
        break;
    }
  }
  return v;
}

// A binary format's mutations, from the common edits: a random byte, a bit flip, a truncation
// (or, with `extend`, sometimes random bytes appended), a field set to an interesting value, and
// the format's own edits. With `selector`, byte 0 chooses the target's mode: the common edits
// leave it alone and one edit of its own changes it.
struct BinaryMutations {
  int max_edits = 6;
  bool selector = true;
  bool extend = false;
  // Fields: `field_width` (4 or 8) bytes at field_first + field_stride * k, k < field_count.
  size_t field_width = 0, field_first = 1, field_stride = 4, field_count = 0;
  std::vector<uint64_t> field_values;
  std::vector<std::function<void(std::vector<uint8_t>&, std::mt19937_64&)>> own;

  std::vector<uint8_t> operator()(const std::vector<std::vector<uint8_t>>& seeds,
                                  std::mt19937_64& rng) const {
    std::vector<uint8_t> v = seeds[rng() % seeds.size()];
    const size_t from = selector ? 1 : 0;
    const size_t kinds = 3 + (field_count ? 1 : 0) + own.size() + (selector ? 1 : 0);
    int edits = 1 + int(rng() % max_edits);
    for (int e = 0; e < edits; ++e) {
      size_t k = rng() % kinds;
      if (k == 0) {  // a random byte
        if (v.size() > from) v[from + rng() % (v.size() - from)] = uint8_t(rng());
      } else if (k == 1) {  // a bit flip
        if (v.size() > from) v[from + rng() % (v.size() - from)] ^= uint8_t(1u << (rng() % 8));
      } else if (k == 2) {  // truncation (or extension)
        if (extend && rng() % 2)
          v.resize(v.size() + rng() % 16, uint8_t(rng()));
        else if (v.size() > from + 1)
          v.resize(from + rng() % (v.size() - from));
      } else if (field_count && k == 3) {  // a field set to an interesting value
        size_t off = field_first + field_stride * (rng() % field_count);
        uint64_t x = field_values[rng() % field_values.size()];
        if (v.size() >= off + field_width)
          for (size_t i = 0; i < field_width; ++i) v[off + i] = uint8_t(x >> (8 * i));
      } else if (size_t o = k - 3 - (field_count ? 1 : 0); o < own.size()) {
        own[o](v, rng);
      } else if (!v.empty()) {  // the selector
        v[0] = uint8_t(rng());
      }
    }
    return v;
  }
};

// A text format's mutations: a random byte, a bit flip, a truncation, another seed appended, an
// interesting token inserted, a few bytes erased; then `finish` (a rare long input, say).
struct TextMutations {
  int max_edits = 8;
  std::vector<std::string> tokens;
  std::function<void(std::string&, std::mt19937_64&)> finish;

  std::vector<uint8_t> operator()(const std::vector<std::string>& seeds, std::mt19937_64& rng) const {
    std::string v = seeds[rng() % seeds.size()];
    int edits = 1 + int(rng() % max_edits);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 6) {
        case 0:
          if (!v.empty()) v[rng() % v.size()] = char(rng());
          break;
        case 1:
          if (!v.empty()) v[rng() % v.size()] ^= char(1u << (rng() % 8));
          break;
        case 2:
          if (v.size() > 1) v.resize(rng() % v.size());
          break;
        case 3:
          v += seeds[rng() % seeds.size()];
          break;
        case 4:
          if (!tokens.empty()) v.insert(rng() % (v.size() + 1), tokens[rng() % tokens.size()]);
          break;
        default:
          if (!v.empty()) v.erase(rng() % v.size(), 1 + rng() % 8);
          break;
      }
    }
    if (finish) finish(v, rng);
    return std::vector<uint8_t>(v.begin(), v.end());
  }
};

// What a replay driver is made of: its name, its seeds, how many mutated inputs by default, the
// seed of its random numbers, and — for a format worth mutating in its own way (header fields set
// to interesting values, a selector byte kept) — its own mutation of one input (default: the
// generic mutate() above); `report` adds the target's own counters to the last line.
template <class Seed>
struct Driver {
  const char* name = "";
  long iterations = 0;
  std::vector<Seed> seeds;
  uint64_t rng_seed = 0;
  bool run_seeds = true;  // each seed through the target before the mutated inputs
  std::function<std::vector<uint8_t>(const std::vector<Seed>&, std::mt19937_64&)> mutate;
  std::function<std::string()> report;
};

// The one replay main: files given on the command line, the seeds, then the mutated inputs.
template <class Seed>
int replay_main(int argc, char** argv, const Driver<Seed>& d) {
  auto args = parse_replay_args(argc, argv, d.iterations, d.seeds);
  if (args.exit_code) return *args.exit_code;
  replay_files(args.files);
  if (d.run_seeds)
    for (const auto& s : d.seeds)
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  std::mt19937_64 rng(d.rng_seed);
  for (long it = 0; it < args.iterations; ++it) {
    auto v = d.mutate ? d.mutate(d.seeds, rng) : mutate(d.seeds, rng);
    LLVMFuzzerTestOneInput(v.data(), v.size());
  }
  std::printf("%s_replay: %zu files, %zu seeds, %ld mutated inputs, no failure%s%s\n", d.name,
              args.files.size(), d.seeds.size(), args.iterations, d.report ? "; " : "",
              d.report ? d.report().c_str() : "");
  return 0;
}

// The whole replay driver of a target that needs nothing but seeds: files, seeds, then
// `default_iterations` mutated inputs (overridable with --iterations). Returns main's code.
template <class Seed>
int replay_main(int argc, char** argv, const char* name, long default_iterations,
                const std::vector<Seed>& seeds, uint64_t rng_seed) {
  Driver<Seed> d;
  d.name = name;
  d.iterations = default_iterations;
  d.seeds = seeds;
  d.rng_seed = rng_seed;
  return replay_main(argc, argv, d);
}

}  // namespace tierce_fuzz
