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

// Key format (bytes; what hash64 is taken of):
//
//   base key     scheme "://" host [":" port] "\n" uri
//   variant key  base key "\0" vary_values        (vary_values: "name: value\n" per Vary name)
//
// scheme: the request's scheme lower-cased ("http", "https"; for httpd ap_http_scheme(r)): a page
// fetched over http and the same URL over https are different entries (they may differ: HSTS,
// absolute links, Secure cookies). host: lower-cased, as the client named it, with the port when
// the caller passes one; the scheme's default port (":80" for http, ":443" for https) is dropped,
// so "http://h:80" and "http://h" are one key while "http://h:443" is not "https://h". uri: the
// request target exactly as received (path + "?" + query, not decoded or normalised). GET and HEAD
// share the base key. Variants (Vary) hang off the base key: variant_key(base, "accept-language:
// fr\n..."). Example: base_key("HTTPS", "Shop.Example:443", "/item.php?id=1") ==
// "https://shop.example\n/item.php?id=1".
std::string base_key(std::string_view scheme, std::string_view host, std::string_view uri);
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
