// coherence/key.h — what every tier must compute the same way: the cache key of a request, its
// 64-bit hash (cluster/hash.h), and the hash of a dependency name. Stable across hosts, builds
// and restarts.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cluster/hash.h"

namespace tierce::coherence {

using cluster::hash64;
using cluster::parse_hex;
using cluster::to_hex;

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

}  // namespace tierce::coherence
