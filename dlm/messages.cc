// dlm/messages.cc — encoders and strict decoders of the lockd-to-lockd messages (messages.h).
#include "dlm/messages.h"

#include <cstring>

namespace tierce::dlm {
namespace {

class Writer {
 public:
  template <typename T>
  void put(T v) {
    uint8_t b[sizeof(T)];
    for (size_t i = 0; i < sizeof(T); ++i) b[i] = uint8_t(uint64_t(v) >> (8 * i));
    out.insert(out.end(), b, b + sizeof(T));
  }
  void bytes(std::string_view s) { out.insert(out.end(), s.begin(), s.end()); }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  template <typename T>
  bool get(T* v) {
    if (b_.size() - pos_ < sizeof(T)) return false;
    uint64_t x = 0;
    for (size_t i = 0; i < sizeof(T); ++i) x |= uint64_t(b_[pos_ + i]) << (8 * i);
    *v = T(x);
    pos_ += sizeof(T);
    return true;
  }
  std::string rest() {
    std::string s(b_.begin() + long(pos_), b_.end());
    pos_ = b_.size();
    return s;
  }
  bool done() const { return pos_ == b_.size(); }
  size_t left() const { return b_.size() - pos_; }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<uint8_t> Msg::encode() const {
  Writer w;
  w.put<uint8_t>(kMsgMagic);
  w.put<uint8_t>(uint8_t(type));
  w.put<uint16_t>(sender);
  w.put(home);
  w.put(slot);
  w.put(a);
  w.put(gen);
  w.put(b);
  w.put(c);
  w.put(x);
  w.put(y);
  w.put(from);
  return std::move(w.out);
}

std::optional<Msg> Msg::decode(std::span<const uint8_t> bytes) {
  if (bytes.size() != kMsgBytes) return std::nullopt;
  Reader r(bytes);
  uint8_t magic = 0, type = 0;
  Msg m;
  r.get(&magic);
  r.get(&type);
  r.get(&m.sender);
  if (magic != kMsgMagic || type < 1 || type > uint8_t(MsgType::SrslPurge))
    return std::nullopt;
  m.type = MsgType(type);
  r.get(&m.home);
  r.get(&m.slot);
  r.get(&m.a);
  r.get(&m.gen);
  r.get(&m.b);
  r.get(&m.c);
  r.get(&m.x);
  r.get(&m.y);
  r.get(&m.from);
  return m;
}

std::string_view to_string(MsgType t) {
  switch (t) {
    case MsgType::SharedReq: return "SHARED_REQ";
    case MsgType::SharedGrant: return "SHARED_GRANT";
    case MsgType::SharedRel: return "SHARED_REL";
    case MsgType::Successor: return "SUCCESSOR";
    case MsgType::ExclGrant: return "EXCL_GRANT";
    case MsgType::RecoveredRel: return "RECOVERED_REL";
    case MsgType::Resume: return "RESUME";
    case MsgType::SrslReq: return "SRSL_REQ";
    case MsgType::SrslGrant: return "SRSL_GRANT";
    case MsgType::SrslRel: return "SRSL_REL";
    case MsgType::SrslCancel: return "SRSL_CANCEL";
    case MsgType::SrslPurge: return "SRSL_PURGE";
  }
  return "?";
}

std::vector<uint8_t> Resolution::encode() const {
  Writer w;
  w.put<uint8_t>(uint8_t(status));
  if (status == Status::Ok) {
    w.put(slot);
    w.put(gen);
  } else {
    w.bytes(message);
  }
  return std::move(w.out);
}

std::optional<Resolution> Resolution::decode(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  uint8_t st = 0;
  if (!r.get(&st) || st > uint8_t(Status::Internal)) return std::nullopt;
  Resolution res;
  res.status = Status(st);
  if (res.status == Status::Ok) {
    if (!r.get(&res.slot) || !r.get(&res.gen) || !r.done()) return std::nullopt;
  } else {
    res.message = r.rest();
  }
  return res;
}

std::vector<uint8_t> Heartbeat::encode() const {
  Writer w;
  w.put(rank);
  w.put(digest);
  w.put(incarnation);
  w.put(epoch);
  return std::move(w.out);
}

std::optional<Heartbeat> Heartbeat::decode(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  Heartbeat h;
  if (!r.get(&h.rank) || !r.get(&h.digest) || !r.get(&h.incarnation) || !r.get(&h.epoch) ||
      !r.done())
    return std::nullopt;
  return h;
}

std::vector<uint8_t> RecoverRequest::encode() const {
  Writer w;
  w.put(home);
  w.put(slot);
  w.put(old_gen);
  w.put(new_gen);
  w.put(incarnation);
  return std::move(w.out);
}

std::optional<RecoverRequest> RecoverRequest::decode(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  RecoverRequest q;
  if (!r.get(&q.home) || !r.get(&q.slot) || !r.get(&q.old_gen) || !r.get(&q.new_gen) ||
      !r.get(&q.incarnation) || !r.done())
    return std::nullopt;
  return q;
}

std::vector<uint8_t> encode_report(const std::vector<ReportedHold>& holds) {
  Writer w;
  w.put(uint32_t(holds.size()));
  for (const auto& h : holds) {
    w.put<uint8_t>(uint8_t(h.mode));
    w.put(h.token);
  }
  return std::move(w.out);
}

std::optional<std::vector<ReportedHold>> decode_report(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  uint32_t n = 0;
  if (!r.get(&n) || r.left() != size_t(n) * 9) return std::nullopt;
  std::vector<ReportedHold> v(n);
  for (auto& h : v) {
    uint8_t m = 0;
    r.get(&m);
    if (m != uint8_t(Mode::Shared) && m != uint8_t(Mode::Exclusive)) return std::nullopt;
    h.mode = Mode(m);
    r.get(&h.token);
  }
  return v;
}

}  // namespace tierce::dlm
