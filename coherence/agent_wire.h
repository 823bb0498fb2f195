// coherence/agent_wire.h — the writer agent's local socket (issue 32 point 3): how the processes
// that run app code (the app node's httpd children under mod_php: mod_appversion and the PHP
// extension) ask the node's writer agent for what they used to do with the cluster secret. They
// hold no fabric credential and do not map the writer counter: they can ask only for what cannot
// make a page stale (a sequence read, a registration the home checks, an invalidation: a miss at
// worst). docs/coherence.md "The agent socket".
//
// One request per SOCK_SEQPACKET message, one reply per request, in order. All integers
// little-endian.
//
// Request header (16 bytes):   0 magic u32 (kRequestMagic) | 4 op u8 (Op) | 5 reserved u8 = 0
//                              | 6 reserved u16 = 0 | 8 id u64 (echoed in the reply)
//   ReadSeq    16 key u64                                                              = 24
//   Register   16 key u64 | 24 seq_start u64 | 32 ndeps u32 | 36 reserved u32 = 0
//              | 40 deps u64 x ndeps                                          = 40 + 8*ndeps
//   Invalidate 16 scheme u8 (Scheme) | 17 mark_op u8 (MarkOp) | 18 reserved u16 = 0
//              | 20 ttl_ms u32 | 24 token u64 | 32 give_up_after_ms u32 | 36 ndeps u32
//              | 40 deps u64 x ndeps                                          = 40 + 8*ndeps
//
// Reply header (16 bytes):     0 magic u32 (kReplyMagic) | 4 op u8 | 5 status u8 (Status)
//                              | 6 reserved u16 = 0 | 8 id u64
//   status != Ok       16 message (the rest of the reply: why, in words)
//   ReadSeq Ok         16 seq u64                                                      = 24
//   Register Ok        16 refusal u8 (Refusal) | 17 reserved u8 x 7 = 0 | 24 slot u64
//                      | 32 version u64 | 40 reason (the rest)
//   Invalidate Ok      16 incarnation u64 | 24 number u64 | 32 homes u32 | 36 rounds u32
//                      | 40 elapsed_ns u64 | 48 six name lists: acked, fenced, unconfirmed,
//                      skipped, marked, gave_up_on; each count u16, then count x (len u16, bytes)
//
// Decoders are strict (AgentWireError): a wrong magic or size, a non-zero reserved field, an
// unknown op, scheme, mark or refusal, more than kMaxDeps dependencies, a list longer than the
// bytes left or than kMaxListNames, a name longer than kMaxListName. The agent answers a request it cannot decode with BadRequest and the reason, and
// keeps the connection.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "coherence/client.h"
#include "coherence/home.h"
#include "coherence/topology.h"

namespace tierce::coherence::agentwire {

inline constexpr uint32_t kRequestMagic = 0x51414354;  // "TCAQ"
inline constexpr uint32_t kReplyMagic = 0x52414354;    // "TCAR"
inline constexpr size_t kHeaderBytes = 16;
inline constexpr size_t kMaxDeps = 8192;  // an invalidation or a page names at most this many
// The largest message either side sends or accepts (a request with kMaxDeps, a reply's lists).
inline constexpr size_t kMaxMessage = 96 * 1024;
// A reply's home lists: at most this many names each (more are cut when encoding), of at most
// this many bytes (a home's name and why it is listed).
inline constexpr size_t kMaxListNames = 256;
inline constexpr size_t kMaxListName = 1024;

enum class Op : uint8_t { ReadSeq = 1, Register = 2, Invalidate = 3 };
enum class Status : uint8_t {
  Ok = 0,
  BadRequest = 1,   // the request could not be decoded, or asks for what this agent refuses
  Unavailable = 2,  // could not be done now (the home did not answer in time, a read failed)
  Busy = 3,         // too many connections: the agent closes this one after the reply
};
std::string_view to_string(Op op);
std::string_view to_string(Status s);

class AgentWireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Request {
  Op op = Op::ReadSeq;
  uint64_t id = 0;
  uint64_t key = 0;        // ReadSeq, Register
  uint64_t seq_start = 0;  // Register
  Scheme scheme = Scheme::DependencyLists;  // Invalidate
  PendingMark mark;                         // Invalidate
  uint32_t give_up_after_ms = 0;            // Invalidate (only with a mark)
  std::vector<uint64_t> deps;               // Register, Invalidate
};

struct Reply {
  Op op = Op::ReadSeq;
  Status status = Status::Ok;
  uint64_t id = 0;
  std::string message;          // status != Ok
  uint64_t seq = 0;             // ReadSeq
  RegisterResult registered;    // Register
  InvalidateOutcome outcome;    // Invalidate (elapsed, number, homes, rounds and the lists)
};

std::vector<uint8_t> encode(const Request& r);
Request decode_request(std::span<const uint8_t> b);
std::vector<uint8_t> encode(const Reply& r);
Reply decode_reply(std::span<const uint8_t> b);

// The id of a message too short to decode otherwise (0 when it has no full header): what a
// BadRequest reply echoes.
uint64_t peek_id(std::span<const uint8_t> b);
// The op byte of a request, when it is a known one (else ReadSeq): what a BadRequest reply names.
Op peek_op(std::span<const uint8_t> b);

}  // namespace tierce::coherence::agentwire
