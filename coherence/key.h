// coherence/key.h — what every tier must compute the same way: the cache key of a request, its
// 64-bit hash, and the hash of a dependency name. Stable across hosts, builds and restarts
// (FNV-1a 64 over the bytes, then the splitmix64 finaliser to spread the bits).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tierce::coherence {

uint64_t hash64(std::string_view bytes);

// The base key of a cacheable request: "host" "\n" "uri" with the host lower-cased and without a
// default port; uri is the request target as received (path + "?" + query). GET and HEAD share
// it. Variants (Vary) hang off the base key: variant_key(base, "accept-language: fr\n...").
std::string base_key(std::string_view host, std::string_view uri);
std::string variant_key(std::string_view base, std::string_view vary_values);

// The version slot of a key at its home: independent of the bits that chose the home.
inline uint64_t slot_of(uint64_t key_hash, uint64_t slots) {
  uint64_t x = key_hash ^ 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull;
  return (x ^ (x >> 29)) % slots;
}

// A dependency ("item:42") as the home node keeps it. Names are trimmed; case matters.
inline uint64_t dependency_hash(std::string_view name) { return hash64(name); }

// 16 lower-case hex digits, and back (nullopt on anything else).
std::string to_hex(uint64_t v);
std::optional<uint64_t> parse_hex(std::string_view s);

}  // namespace tierce::coherence
