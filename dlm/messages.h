// dlm/messages.h — what lockds say to each other over the fabric (service "dlm.msg", one-way),
// plus the bodies of the calls dlm.resolve, dlm.heartbeat and dlm.recover.
//
// dlm.msg body: one or more fixed 56-byte frames (a step's messages to one member travel
// together), little-endian:
//
//   offset size field   meaning per type (see docs/dlm.md)
//   0      1    magic   0xD1
//   1      1    type    MsgType
//   2      2    sender  the sending lockd's rank
//   4      4    home    rank of the lock's home
//   8      4    slot    the lock's slot at its home
//   12     4    a       ticket (T or E)            | SRSL: mode   | recovery: ticket R
//   16     8    gen     the lock's generation (epoch << 32 | recoveries): stale ones are dropped
//   24     4    b       successor ticket / member k | SRSL: try(1)
//   28     4    c       requester rank / count
//   32     8    x       request id / pre-granted flag
//   40     8    y       token                      | SRSL to the home: the sender's floor
//   48     8    from    sender's incarnation (a restarted sender's old messages are dropped)
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dlm/types.h"
#include "dlm/word.h"

namespace tierce::dlm {

enum class MsgType : uint8_t {
  SharedReq = 1,    // to T's node: member b of G(a) on rank c, request x, waits for a grant
  SharedGrant = 2,  // to the member's node: request x granted with token y
  SharedRel = 3,    // to T's node: one member of G(a) released
  Successor = 4,    // to T's node: a's successor is b, |G(a)| = c; x = 1: b was granted at once
  ExclGrant = 5,    // to E's node: ticket a granted with token y
  RecoveredRel = 6, // to the home: a holder reported in the recovery of ticket a released
  Resume = 7,       // home to members: the recovery of the lock ended, generation gen
  // SRSL messages to the home carry in y the sender's floor for that home: every request of
  // rank c on the home's locks with an id below y is gone at rank c (it dropped them when it
  // gave the home up, member_down), so the home drops whatever it still keeps of them.
  SrslReq = 8,      // to the home: rank c, request x, mode a, try b
  SrslGrant = 9,    // to the requester: request x -> status a (Ok: token y; WouldBlock)
  SrslRel = 10,     // to the home: rank c releases request x
  SrslCancel = 11,  // to the home: rank c withdraws request x (waiting, or granted unseen)
  SrslPurge = 12,   // to the home: rank c's floor y (sent when the home is up again); under
                   // N-CoSED/DQNL: rank c dropped its queue entries on the home's locks
                   // (it gave the home up): the home recovers its locks
};
inline constexpr uint8_t kMsgMagic = 0xD1;
inline constexpr size_t kMsgBytes = 56;

struct Msg {
  MsgType type = MsgType::SharedReq;
  uint32_t home = 0;
  uint32_t slot = 0;
  uint32_t a = 0;
  uint64_t gen = 0;
  uint32_t b = 0;
  uint32_t c = 0;
  uint64_t x = 0;
  uint64_t y = 0;
  uint64_t from = 0;    // the sender's incarnation
  uint16_t sender = 0;  // the sender's rank

  std::vector<uint8_t> encode() const;
  // nullopt on anything malformed (wrong size, magic, type).
  static std::optional<Msg> decode(std::span<const uint8_t> bytes);
};
std::string_view to_string(MsgType t);

// Views of a Msg by type: what a, b, c, x and y carry in it (the table above). A view only names
// the fields: the frame, the field sizes and the encoding are Msg's, and a setter stores exactly
// what was stored in the raw field before. Over a const Msg a view reads; over a Msg it writes
// too: `GrantView{m}.token()`, `SuccessorView{m}.set_count(n)`. RECOVERED_REL and RESUME carry
// nothing beyond the header (home, slot, gen).

// SHARED_REQ, to the node of T: member `member` of the group G(T) of ticket T = `group_owner`,
// request `request` of rank `rank`, waits for a SHARED_GRANT.
template <typename M>
class SharedReqView {
 public:
  explicit SharedReqView(M& m) : m_(m) {}
  Ticket group_owner() const { return m_.a; }
  uint32_t member() const { return m_.b; }
  uint32_t rank() const { return m_.c; }
  uint64_t request() const { return m_.x; }
  void set_group_owner(Ticket t) { m_.a = t; }
  void set_member(uint32_t k) { m_.b = k; }
  void set_rank(uint32_t rank) { m_.c = rank; }
  void set_request(uint64_t id) { m_.x = id; }

 private:
  M& m_;
};

// SHARED_REL, to the node of T: one member of G(T), T = `group_owner`, released.
template <typename M>
class SharedRelView {
 public:
  explicit SharedRelView(M& m) : m_(m) {}
  Ticket group_owner() const { return m_.a; }
  void set_group_owner(Ticket t) { m_.a = t; }

 private:
  M& m_;
};

// SUCCESSOR, to the predecessor's node: the successor of ticket `predecessor` is ticket
// `successor`, the predecessor's group has `count` members; `pre_granted`: the successor was
// granted at once (x = 1), the predecessor's record may go.
template <typename M>
class SuccessorView {
 public:
  explicit SuccessorView(M& m) : m_(m) {}
  Ticket predecessor() const { return m_.a; }
  Ticket successor() const { return m_.b; }
  uint32_t count() const { return m_.c; }
  bool pre_granted() const { return m_.x != 0; }
  void set_predecessor(Ticket t) { m_.a = t; }
  void set_successor(Ticket t) { m_.b = t; }
  void set_count(uint32_t n) { m_.c = n; }
  void set_pre_granted(bool yes) { m_.x = yes ? 1 : 0; }

 private:
  M& m_;
};

// EXCL_GRANT, to the successor's node: ticket `ticket` granted with token `token`.
template <typename M>
class ExclGrantView {
 public:
  explicit ExclGrantView(M& m) : m_(m) {}
  Ticket ticket() const { return m_.a; }
  Token token() const { return m_.y; }
  void set_ticket(Ticket t) { m_.a = t; }
  void set_token(Token t) { m_.y = t; }

 private:
  M& m_;
};

// SHARED_GRANT and SRSL_GRANT, to the requester: request `request` -> `status` (Ok: granted with
// `token`; SRSL: WouldBlock, or Timeout to confirm a withdrawal). SHARED_GRANT's status is Ok.
template <typename M>
class GrantView {
 public:
  explicit GrantView(M& m) : m_(m) {}
  Status status() const { return Status(m_.a); }
  uint64_t request() const { return m_.x; }
  Token token() const { return m_.y; }
  void set_status(Status s) { m_.a = uint32_t(s); }
  void set_request(uint64_t id) { m_.x = id; }
  void set_token(Token t) { m_.y = t; }

 private:
  M& m_;
};

// SRSL_REQ, SRSL_REL, SRSL_CANCEL and SRSL_PURGE, to the home: from rank `rank`, its request
// `request` (not in SRSL_PURGE) and its floor for this home (`floor`, see MsgType); SRSL_REQ also
// the `mode` asked and `try_only` (a try-lock: WouldBlock rather than wait).
template <typename M>
class SrslToHomeView {
 public:
  explicit SrslToHomeView(M& m) : m_(m) {}
  uint32_t rank() const { return m_.c; }
  uint64_t request() const { return m_.x; }
  uint64_t floor() const { return m_.y; }
  Mode mode() const { return Mode(m_.a); }
  bool try_only() const { return m_.b != 0; }
  void set_rank(uint32_t rank) { m_.c = rank; }
  void set_request(uint64_t id) { m_.x = id; }
  void set_floor(uint64_t floor) { m_.y = floor; }
  void set_mode(Mode mode) { m_.a = uint32_t(mode); }
  void set_try_only(bool yes) { m_.b = yes ? 1 : 0; }

 private:
  M& m_;
};

// dlm.resolve: request = the lock name; reply = status u8, slot u32, gen u64 (Status::Ok), or
// status + message (TooMany: the home's table is full; BadName).
struct Resolution {
  Status status = Status::Internal;
  uint32_t slot = 0;
  uint64_t gen = 0;
  std::string message;
  std::vector<uint8_t> encode() const;
  static std::optional<Resolution> decode(std::span<const uint8_t> bytes);
};

// dlm.heartbeat: both ways the same body: rank u32, digest u64, incarnation u64, epoch u64.
struct Heartbeat {
  uint32_t rank = 0;
  uint64_t digest = 0;
  uint64_t incarnation = 0;
  uint64_t epoch = 0;
  std::vector<uint8_t> encode() const;
  static std::optional<Heartbeat> decode(std::span<const uint8_t> bytes);
};

// dlm.recover: request = home u32, slot u32, old gen u64, new gen u64, home incarnation u64.
// Reply = count u32, then per holder: mode u8, token u64. The member drops its waiting entries
// of the lock (re-requested on Resume) and reports what it holds.
struct RecoverRequest {
  uint32_t home = 0;
  uint32_t slot = 0;
  uint64_t old_gen = 0;
  uint64_t new_gen = 0;
  uint64_t incarnation = 0;
  std::vector<uint8_t> encode() const;
  static std::optional<RecoverRequest> decode(std::span<const uint8_t> bytes);
};
struct ReportedHold {
  Mode mode = Mode::Shared;
  Token token = 0;
};
std::vector<uint8_t> encode_report(const std::vector<ReportedHold>& holds);
std::optional<std::vector<ReportedHold>> decode_report(std::span<const uint8_t> bytes);

}  // namespace tierce::dlm
