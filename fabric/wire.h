// fabric/wire.h — the frame format of the stream transports (tcp, and the control channel of shm;
// verbs carries the same frames in SEND/RECV messages).
//
// Every frame is a 48-byte header followed by `length` payload bytes. All integers little-endian.
//
//   offset  size  field
//   0       1     magic 0xC7
//   1       1     opcode (Op); a reply carries the request's opcode | 0x80
//   2       2     status (Errc, replies only; 0 in requests)
//   4       4     payload length (<= kMaxPayload)
//   8       8     request id, echoed in the reply
//   16      8     a0: remote address (tcp/shm: region id << 40 | offset)
//   24      8     a1: region key
//   32      8     a2: length (READ) | expected (CAS) | addend (FAA)
//   40      8     a3: desired (CAS)
//   48      ...   payload
//
// Requests and their replies:
//   HELLO        server→client first: a0 = protocol version (kProtocolVersion; 0 from servers
//                before version 2), a1 = the server's protection (Protection: 0 none, 1 mac,
//                2 encrypt; always 0 on shm and verbs), payload = 32-byte server nonce + server
//                name. A server refusing the connection (a limit) sends instead a HELLO with
//                the reply bit, status Busy and a text payload saying why, and closes.
//   AUTH         a0 = protocol version, a1 = the protection the client wants (0 on shm/verbs),
//                payload = 32-byte client nonce + HMAC-SHA256(secret, "tierce-c" v ps pc sn cn)
//                [+ u8 n + the client's n-byte node name + its 64-byte Ed25519 signature of
//                the transcript (auth.cc)] (a client with a node key)
//   AUTH_OK      server→client: a1 = the protection in force = max(ps, pc),
//                payload = HMAC-SHA256(secret, "tierce-s" v ps pc cn sn) (mutual auth)
//                [+ the server's 64-byte Ed25519 signature of the transcript] (a server with a
//                node key)
//   After AUTH_OK, on tcp with protection mac or encrypt, every frame is followed by a 16-byte
//   tag, and in encrypt mode its payload is encrypted (fabric/protect.h).
//   READ         a0 addr, a1 key, a2 len            → reply payload = the bytes
//   WRITE        a0 addr, a1 key, payload = bytes    → empty reply
//   CAS          a0 addr, a1 key, a2 expect, a3 desired → reply a0 = old value
//   FAA          a0 addr, a1 key, a2 add             → reply a0 = old value
//   LOOKUP       payload = region name               → reply a0 addr, a1 key, a2 len
//   MAP          a0 addr, a1 key (shm only)          → reply carries the segment fd (SCM_RIGHTS)
//   CALL         payload = u16 service name length, name, body → reply payload = response body
//   SEND         like CALL, one-way: no reply
//   STREAM_OPEN  payload = service name              → reply, then the socket is a raw byte stream
//   PING         → empty reply
//
// A frame with a bad magic, unknown opcode, non-zero status in a request or oversize length is
// malformed: the receiver closes the connection. A well-formed request the server cannot honour
// (wrong key, out of bounds, ...) gets a reply with that status and the connection goes on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "fabric/errors.h"

namespace tierce::fabric::wire {

inline constexpr uint8_t kMagic = 0xC7;
// Version 2: HELLO/AUTH carry versions and protection settings, frames after AUTH_OK carry tags.
// Version 3: AUTH and AUTH_OK may carry the node signatures (fabric/auth.h, identity.h).
// Version 4: the proofs and frame keys use scrypt of the secret file's bytes (auth.h), not the
// bytes themselves.
// A peer of another version is refused at the handshake with a message saying so.
inline constexpr uint64_t kProtocolVersion = 4;
inline constexpr size_t kHeaderSize = 48;
// Largest one-sided transfer (READ/WRITE) and largest message body. One-sided transfers are
// bounded so a peer cannot make the responder allocate without limit.
inline constexpr size_t kMaxTransfer = size_t(16) << 20;
inline constexpr size_t kMaxMessage = size_t(1) << 20;
inline constexpr size_t kMaxPayload = kMaxTransfer;
static_assert(kMaxMessage <= kMaxPayload);
inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kMacSize = 32;
inline constexpr size_t kMaxServiceName = 64;
inline constexpr size_t kMaxRegionName = 128;
inline constexpr uint8_t kReplyBit = 0x80;

// tcp/shm remote addresses: region id in the top 24 bits, offset in the low 40.
inline constexpr unsigned kRegionShift = 40;
inline constexpr uint64_t kOffsetMask = (uint64_t(1) << kRegionShift) - 1;

enum class Op : uint8_t {
  Hello = 1,
  Auth = 2,
  AuthOk = 3,
  Read = 10,
  Write = 11,
  Cas = 12,
  Faa = 13,
  Lookup = 20,
  Map = 21,
  Call = 30,
  Send = 31,
  StreamOpen = 40,
  Ping = 50,
};

bool is_known_op(uint8_t op);
std::string_view op_name(Op op);

struct Header {
  Op op = Op::Ping;
  bool reply = false;
  Errc status = Errc::Ok;
  uint32_t length = 0;
  uint64_t id = 0;
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
};

void encode_header(const Header& h, uint8_t out[kHeaderSize]);

// Decodes and validates a header; InvalidArgument (what is wrong) when the frame is malformed.
base::Result<Header> decode_header(std::span<const uint8_t> bytes);

// Appends a whole frame to `out`.
void append_frame(std::vector<uint8_t>& out, const Header& h,
                  std::span<const uint8_t> payload = {});

// Service-addressed message payload (CALL/SEND): u16 name length, name, body.
void encode_service_payload(std::vector<uint8_t>& out, std::string_view service,
                            std::span<const uint8_t> body);
// A service payload split: views into the payload it was decoded from.
struct ServicePayload {
  std::string_view service;
  std::span<const uint8_t> body;
};
// Splits a service payload; InvalidArgument (what is wrong) when malformed.
base::Result<ServicePayload> decode_service_payload(std::span<const uint8_t> payload);

inline void store_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

}  // namespace tierce::fabric::wire
