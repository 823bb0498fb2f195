// sqldeps/names.cc — name parts and canonical values (names.h, deps.h).
#include "sqldeps/names.h"

#include <cstdint>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace tierce::sqldeps::detail {
namespace {

bool plain_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '@' || c == '-';
}

std::optional<std::string> integer_value(std::string_view s) {
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (i >= s.size()) return std::nullopt;
  for (size_t k = i; k < s.size(); ++k)
    if (s[k] < '0' || s[k] > '9') return std::nullopt;
  while (i + 1 < s.size() && s[i] == '0') ++i;
  std::string_view digits = s.substr(i);
  if (digits.size() > 15) return std::nullopt;
  if (digits == "0") return std::string("0");
  return neg ? "-" + std::string(digits) : std::string(digits);
}

}  // namespace

std::string hashed(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  uint64_t h = XXH3_64bits(s.data(), s.size());
  std::string out(17, '~');
  for (int i = 0; i < 16; ++i) out[size_t(16 - i)] = kHex[(h >> (4 * i)) & 0xf];
  return out;
}

std::string encode(std::string_view s) {
  if (s.empty() || s.size() > 64) return hashed(s);
  for (unsigned char c : s)
    if (!plain_byte(c)) return hashed(s);
  return std::string(s);
}

std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (auto& c : out)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return out;
}

std::string ident(std::string_view name) { return encode(lower_ascii(name)); }

// ---- canonical values (deps.h) -----------------------------------------------------------------

std::optional<std::string> canonical(std::string_view raw, ColumnType type) {
  switch (type) {
    case ColumnType::Integer:
    case ColumnType::Other:
      return integer_value(raw);
    case ColumnType::Text: {
      size_t n = raw.size();
      while (n > 0 && raw[n - 1] == ' ') --n;
      std::string_view s = raw.substr(0, n);
      if (!s.empty()) {
        char c = s[0];
        if ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == ' ')
          return std::nullopt;
      }
      for (unsigned char c : s)
        if (c < 0x20 || c > 0x7e) return std::nullopt;
      return encode(lower_ascii(s));
    }
    case ColumnType::Opaque:
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace tierce::sqldeps::detail
