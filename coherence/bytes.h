// coherence/bytes.h — fixed-width fields in byte buffers, in host order: the layouts of
// coop_slot.h and coop_directory.h and the pool and directory messages are documented
// little-endian, and every file that uses these asserts that the host is.
#pragma once
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace tierce::coherence::bytes {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
void store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}
// Prereq: at + sizeof(T) <= b.size().
template <typename T>
void put(std::vector<uint8_t>& b, size_t at, T v) {
  store(b.data() + at, v);
}
template <typename T>
T get(std::span<const uint8_t> b, size_t at) {
  return load<T>(b.data() + at);
}

}  // namespace tierce::coherence::bytes
