// coherence/protocol.h — the messages between app nodes (fabric CALL/SEND bodies), with strict
// decoding: a short, long or inconsistent body is a ProtocolError, never a crash.
//
//   coherence.register (CALL)   u64 key, u64 slot, u64 seq_start, u32 n, n x u64 dependency
//                    reply      u8 cacheable, u64 version, u16 len, reason bytes
//   coherence.invalidate (SEND) u8 scheme, u32 ack_slot, u64 ack_token, u16 len, origin node
//                               name, u32 n, n x u64 dependency
//     The home applies it, then fetch-and-adds 1 at ack_counter_offset(ack_slot) of the origin
//     node's "acks" region.
#pragma once
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "coherence/home.h"

namespace tierce::coherence {

class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr size_t kMaxDependencies = 4096;  // per message

struct RegisterRequest {
  uint64_t key = 0, slot = 0, seq_start = 0;
  std::vector<uint64_t> deps;
};
struct InvalidateRequest {
  Scheme scheme = Scheme::DependencyLists;
  uint32_t ack_slot = 0;
  uint64_t ack_token = 0;
  std::string origin;
  std::vector<uint64_t> deps;
};

std::vector<uint8_t> encode(const RegisterRequest& m);
std::vector<uint8_t> encode(const RegisterResult& m);
std::vector<uint8_t> encode(const InvalidateRequest& m);
RegisterRequest decode_register(std::span<const uint8_t> body);
RegisterResult decode_register_reply(std::span<const uint8_t> body);
InvalidateRequest decode_invalidate(std::span<const uint8_t> body);

// "item:42 category:7, user:3" -> hashes of item:42, category:7, user:3 (separators: space,
// comma, tab). Names longer than 256 bytes or more than kMaxDependencies are a ProtocolError.
std::vector<uint64_t> parse_dependencies(std::string_view header_value);

}  // namespace tierce::coherence
