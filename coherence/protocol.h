// coherence/protocol.h — the messages between app nodes (fabric CALL/SEND bodies), with strict
// decoding: a short, long or inconsistent body, or another protocol version, is a ProtocolError,
// never a crash. Little-endian; every message starts with u8 kProtocolVersion and the sender's
// u64 topology digest (Topology::coherence_digest), which the home compares with its own.
//
//   coherence.register (CALL)   u8 version, u64 digest, u64 key, u64 seq_start, u32 n,
//                               n x u64 dependency
//                    reply      u8 refusal (Refusal; 0 = registered), u64 slot, u64 version,
//                               u16 len, reason bytes
//   coherence.invalidate (SEND) u8 version, u64 digest, u8 scheme, u16 len, origin node name,
//                               u64 writer incarnation, u64 number, u32 ack cell, u64 ack tag,
//                               u32 n, n x u64 dependency
//                               [u8 mark op, u64 mark token, u32 mark ttl_ms]   (optional)
//     The home applies it (unless it holds that number already), then stores the tag in ack
//     cell `ack cell` of its own "acks" region, which the writer reads back.
//     The trailing pending mark (13 bytes; op: home.h MarkOp, 1 = Pend, 2 = Release, 0 reads as
//     none) is sent only when the invalidation carries one. A body that ends after the
//     dependencies has none (op None): bodies of nodes built before marks still decode. A partial
//     trailer, more bytes, or an op > 2 is a ProtocolError.
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
inline constexpr size_t kMarkTrailerBytes = 1 + 8 + 4;  // u8 op, u64 token, u32 ttl_ms

inline constexpr uint8_t kProtocolVersion = 2;

struct RegisterRequest {
  uint64_t digest = 0, key = 0, seq_start = 0;
  std::vector<uint64_t> deps;
};
struct InvalidateRequest {
  uint64_t digest = 0;
  Scheme scheme = Scheme::DependencyLists;
  std::string origin;            // the app node whose writer region numbered it
  uint64_t writer_incarnation = 0, number = 0;
  uint32_t ack_cell = 0;
  uint64_t ack_tag = 0;
  std::vector<uint64_t> deps;
  PendingMark mark;              // op None: a plain invalidation (no trailer on the wire)
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
