// dlm/ipc.h — the frames a local client (dlm/client.h, the C API, tierce-lock) and its node's
// tierce-lockd exchange over a unix SOCK_SEQPACKET socket: one frame = one message, so there is
// no length prefix and a frame is never split or merged by the socket.
//
// All integers little-endian. Every frame is at most kMaxFrame (4096) bytes and starts with:
//
//   offset  size  field
//   0       1     magic 0xD1 ("dlm IPC"): anything else is not a lockd frame
//   1       1     version (kVersion = 2; version 1 had no valid_until in REPLY)
//   2       1     type (FrameType)
//   3       1     flags: bit 0 MORE (REPLY only, see STATUS), bit 1 NOREPLY (UNLOCK only),
//                 bit 2 METRICS (STATUS only); every other bit 0
//
// Requests (client -> lockd); bytes 0..11 (header + req_id) keep this layout in every future
// version, so a lockd can always answer a request of another version with BadRequest:
//
//   LOCK    (1)  4 req_id u64 | 12 timeout_ms i32 (<0 forever, 0 try) | 16 mode u8 (1 S, 2 X)
//                | 17 reserved u8 = 0 | 18 name_len u16 | 20 name (name_len bytes)       = 20+len
//   UNLOCK  (2)  4 req_id u64 | 12 hold u64                                              = 20
//   STATUS  (3)  4 req_id u64                                                            = 12
//
// Replies and events (lockd -> client):
//
//   REPLY   (0x81) 4 req_id u64 | 12 hold u64 | 20 token u64 | 28 valid_until u64
//                  | 36 status u8 (dlm::Status) | 37 reserved u8 = 0 | 38 msg_len u16
//                  | 40 message (msg_len bytes)                                         = 40+len
//   REVOKED (0x82) 4 hold u64 | 12 why_len u16 | 14 why (why_len bytes)                  = 14+len
//
// - A REPLY answers the request with the same req_id. hold/token are meaningful for a LOCK
//   answered Ok; message is the error text (or, for STATUS, the status text); both may be 0/empty.
// - valid_until (a LOCK answered Ok on a lock homed on another member; else 0): the end of
//   lockd's lease on that member, in nanoseconds of the host's CLOCK_MONOTONIC. After it the
//   home may give the lock away, so a client that reads the grant at or after valid_until (lockd
//   or the client was frozen or slow between the grant and the read) must not use it: the client
//   library releases it and reports LeaseLost (docs/dlm.md, "Faults, exactly").
// - A REPLY with req_id 0 is about the connection itself (lockd refusing a client over its
//   limit, lockd stopping): the client reports its status/message for every call from then on.
// - STATUS: the text is split into consecutive REPLY frames of the same req_id, every one but
//   the last with flag MORE; lockd caps the whole text at kMaxStatusText. With flag METRICS the
//   text is lockd's metrics in Prometheus text format instead (docs/dlm.md "Metrics"); a lockd
//   older than the flag answers BadRequest (its decoder refuses unknown flags).
// - UNLOCK with NOREPLY gets no REPLY: the client does not wait for a release (as the shared
//   release of docs/dlm.md, one-way). Frames of one connection are handled in order, so its next
//   request sees the release; a hold revoked meanwhile is reported by REVOKED as always.
// - REVOKED is unsolicited: lockd revoked that hold (LeaseLost); it is no longer held. The
//   client acknowledges with an UNLOCK of that hold (NOREPLY; lockd would answer NotHeld) once
//   its caller has been told: until then, or lease_ms, lockd keeps reporting the hold to the
//   lock's home as held, so the home does not hand the lock on while the caller may still use
//   it. A client that never acknowledges (older library) costs the lock lease_ms per revocation.
// - Names are 1..kMaxNameBytes bytes without NUL; the decoder refuses others with BadName.
//
// Decoders are strict: a wrong size, a non-zero reserved field or flag, an unknown type or mode,
// an over-long string is an error (with the req_id when it could be read), never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "dlm/types.h"

namespace tierce::dlm::ipc {

inline constexpr uint8_t kMagic = 0xD1;
inline constexpr uint8_t kVersion = 2;
inline constexpr size_t kMaxFrame = 4096;  // one SEQPACKET message, both directions
inline constexpr size_t kHeaderSize = 4;
inline constexpr uint8_t kFlagMore = 0x01;     // REPLY: more frames of this reply follow
inline constexpr uint8_t kFlagNoReply = 0x02;  // UNLOCK: do not answer
inline constexpr uint8_t kFlagMetrics = 0x04;  // STATUS: the Prometheus text, not the report

inline constexpr size_t kLockFixed = 20;
inline constexpr size_t kUnlockSize = 20;
inline constexpr size_t kStatusSize = 12;
inline constexpr size_t kReplyFixed = 40;
inline constexpr size_t kRevokedFixed = 14;
// The longest message one REPLY / REVOKED frame carries (longer text is cut, or split: STATUS).
inline constexpr size_t kMaxReplyMessage = kMaxFrame - kReplyFixed;
inline constexpr size_t kMaxRevokedWhy = kMaxFrame - kRevokedFixed;
// The whole STATUS text, over all its frames (lockd cuts it there, saying so).
inline constexpr size_t kMaxStatusText = size_t(1) << 20;
static_assert(kLockFixed + kMaxNameBytes <= kMaxFrame, "a LOCK with the longest name must fit");
static_assert(kMaxFrame <= 0xffff, "string lengths are u16");

enum class FrameType : uint8_t {
  Lock = 1,
  Unlock = 2,
  Status = 3,
  Reply = 0x81,
  Revoked = 0x82,
};

struct LockRequest {
  uint64_t req_id = 0;
  Mode mode = Mode::Exclusive;
  int32_t timeout_ms = -1;
  std::string name;
};
struct UnlockRequest {
  uint64_t req_id = 0;
  uint64_t hold = 0;
  bool no_reply = false;  // one-way (flag NOREPLY)
};
struct StatusRequest {
  uint64_t req_id = 0;
  bool metrics = false;  // flag METRICS: Prometheus text instead of the status report
};
using Request = std::variant<LockRequest, UnlockRequest, StatusRequest>;

struct Reply {
  uint64_t req_id = 0;
  Status status = Status::Internal;
  uint64_t hold = 0;
  Token token = 0;
  // LOCK answered Ok: lockd's lease on the lock's home ends here (CLOCK_MONOTONIC ns); 0: none
  // (the lock is homed on this node's lockd).
  uint64_t valid_until = 0;
  std::string message;
  bool more = false;  // STATUS: more frames of this reply follow
};
struct RevokedEvent {
  uint64_t hold = 0;
  std::string why;
};
using Event = std::variant<Reply, RevokedEvent>;  // what lockd sends

// Why a frame was refused. `req_id` is set when the frame carried a readable request id, so
// lockd can answer it; `status` is what to answer (BadRequest, or BadName for a bad name).
struct DecodeError {
  std::string why;
  std::optional<uint64_t> req_id;
  Status status = Status::BadRequest;
};

// One encoded frame, on the stack (no allocation on the lock path).
struct Frame {
  uint8_t bytes[kMaxFrame];
  size_t size = 0;
  std::span<const uint8_t> view() const { return {bytes, size}; }
};

// Prereq (LOCK): the name is valid (name_problem); the client checks before encoding.
void encode(const LockRequest& r, Frame* f);
void encode(const UnlockRequest& r, Frame* f);
void encode(const StatusRequest& r, Frame* f);
void encode(const Request& r, Frame* f);
// Messages longer than kMaxReplyMessage / kMaxRevokedWhy are cut to fit.
void encode(const Reply& r, Frame* f);
void encode(const RevokedEvent& r, Frame* f);

std::optional<Request> decode_request(std::span<const uint8_t> frame, DecodeError* err);
std::optional<Event> decode_event(std::span<const uint8_t> frame, DecodeError* err);

// Why `name` is not a lock name (empty, longer than kMaxNameBytes, containing NUL: the codec
// answers Status::BadName), or an empty view when it is one. (The client library links nothing of
// ours, base/ included: it ends up in Apache children and C programs.)
std::string_view name_problem(std::string_view name);

std::string_view to_string(FrameType t);

}  // namespace tierce::dlm::ipc
