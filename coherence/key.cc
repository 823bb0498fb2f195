// coherence/key.cc — stable key hashing (see key.h).
#include "coherence/key.h"

#include <cctype>

namespace tierce::coherence {

uint64_t hash64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;  // splitmix64 finaliser: FNV's low bits are weak for short keys
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

std::string base_key(std::string_view host, std::string_view uri) {
  std::string k;
  k.reserve(host.size() + uri.size() + 1);
  for (char c : host) k.push_back(char(std::tolower(static_cast<unsigned char>(c))));
  for (std::string_view port : {":80", ":443"}) {
    if (k.size() > port.size() && k.ends_with(port)) {
      k.resize(k.size() - port.size());
      break;
    }
  }
  k.push_back('\n');
  k.append(uri);
  return k;
}

std::string variant_key(std::string_view base, std::string_view vary_values) {
  std::string k(base);
  k.push_back('\0');
  k.append(vary_values);
  return k;
}

std::string to_hex(uint64_t v) {
  static const char* d = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[size_t(i)] = d[v & 15];
  return s;
}

std::optional<uint64_t> parse_hex(std::string_view s) {
  if (s.empty() || s.size() > 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int x;
    if (c >= '0' && c <= '9') x = c - '0';
    else if (c >= 'a' && c <= 'f') x = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') x = c - 'A' + 10;
    else return std::nullopt;
    v = (v << 4) | uint64_t(x);
  }
  return v;
}

}  // namespace tierce::coherence
