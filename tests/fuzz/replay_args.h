// tests/fuzz/replay_args.h — the command line every *_replay driver shares (the deterministic
// drivers that run a fuzz target without libFuzzer, see fuzz_replay_main.cc):
//
//   <target>_replay [--iterations N] [--write-seeds DIR] [FILE...]
//
// --write-seeds writes the driver's built-in seeds as DIR/seed-0.. (the libFuzzer run's starting
// corpus) and exits; FILEs (crash reproducers, corpus entries) are run through the target before
// the mutation loop, which stays each driver's own (what is worth mutating differs per format).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
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

}  // namespace tierce_fuzz
