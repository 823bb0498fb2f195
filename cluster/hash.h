// cluster/hash.h — the one hash every node must compute the same way (cache keys, dependency
// names, lock names, home choice): FNV-1a 64 over the bytes, then the splitmix64 finaliser to
// spread the bits. Stable across hosts, builds and restarts.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tierce::cluster {

uint64_t hash64(std::string_view bytes);

// 16 lower-case hex digits, and back (nullopt on anything else).
std::string to_hex(uint64_t v);
std::optional<uint64_t> parse_hex(std::string_view s);

}  // namespace tierce::cluster
