// dlm/ipc.cc — encoders and strict decoders of the local IPC frames (layout in ipc.h).
#include "dlm/ipc.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace tierce::dlm::ipc {

namespace {

// Little-endian stores/loads at any offset (frames are packed, fields may be unaligned).
void put8(uint8_t* p, uint8_t v) {
  p[0] = v;
}
void put16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint16_t get16(const uint8_t* p) {
  return uint16_t(p[0] | (p[1] << 8));
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void header(Frame* f, FrameType t, uint8_t flags = 0) {
  f->bytes[0] = kMagic;
  f->bytes[1] = kVersion;
  f->bytes[2] = uint8_t(t);
  f->bytes[3] = flags;
}

// Copies at most `cap` bytes of `s` after a u16 length at `len_at`; returns the frame size.
size_t put_string(Frame* f, size_t len_at, std::string_view s, size_t cap) {
  size_t n = std::min(s.size(), cap);
  put16(f->bytes + len_at, uint16_t(n));
  if (n) std::memcpy(f->bytes + len_at + 2, s.data(), n);
  return len_at + 2 + n;
}

bool fail(DecodeError* err, std::string why, std::optional<uint64_t> req_id = std::nullopt,
          Status s = Status::BadRequest) {
  if (err) {
    err->why = std::move(why);
    err->req_id = req_id;
    err->status = s;
  }
  return false;
}

// The checks every frame shares: magic, version, flags allowed for its type.
bool check_header(std::span<const uint8_t> b, DecodeError* err) {
  if (b.size() > kMaxFrame)
    return fail(err, "frame of " + std::to_string(b.size()) + " bytes (max " +
                         std::to_string(kMaxFrame) + ")");
  if (b.size() < kHeaderSize)
    return fail(err, "frame of " + std::to_string(b.size()) + " bytes is shorter than a header");
  if (b[0] != kMagic) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", b[0]);
    return fail(err, std::string("bad magic ") + hex + ": the peer does not speak the lockd IPC");
  }
  if (b[1] != kVersion) {
    // Bytes 0..11 of a request are the same in every version: the id can still be answered.
    std::optional<uint64_t> id;
    if (b.size() >= 12 && (b[2] & 0x80) == 0) id = get64(b.data() + 4);
    return fail(err,
                "the peer speaks lockd IPC version " + std::to_string(b[1]) + ", this side " +
                    std::to_string(kVersion) +
                    ": use tierce-lockd and client libraries of the same release",
                id);
  }
  return true;
}

}  // namespace

std::string_view name_problem(std::string_view name) {
  if (name.empty()) return "the lock name is empty";
  if (name.size() > kMaxNameBytes) return "the lock name is longer than 255 bytes";
  if (name.find('\0') != std::string_view::npos) return "the lock name contains a NUL byte";
  return {};
}

std::string_view to_string(FrameType t) {
  switch (t) {
    case FrameType::Lock:
      return "LOCK";
    case FrameType::Unlock:
      return "UNLOCK";
    case FrameType::Status:
      return "STATUS";
    case FrameType::Reply:
      return "REPLY";
    case FrameType::Revoked:
      return "REVOKED";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// Encoders

void encode(const LockRequest& r, Frame* f) {
  header(f, FrameType::Lock);
  put64(f->bytes + 4, r.req_id);
  put32(f->bytes + 12, uint32_t(r.timeout_ms));
  put8(f->bytes + 16, uint8_t(r.mode));
  put8(f->bytes + 17, 0);
  f->size = put_string(f, 18, r.name, kMaxNameBytes);
}

void encode(const UnlockRequest& r, Frame* f) {
  header(f, FrameType::Unlock, r.no_reply ? kFlagNoReply : 0);
  put64(f->bytes + 4, r.req_id);
  put64(f->bytes + 12, r.hold);
  f->size = kUnlockSize;
}

void encode(const StatusRequest& r, Frame* f) {
  header(f, FrameType::Status, r.metrics ? kFlagMetrics : 0);
  put64(f->bytes + 4, r.req_id);
  f->size = kStatusSize;
}

void encode(const Request& r, Frame* f) {
  std::visit([f](const auto& x) { encode(x, f); }, r);
}

void encode(const Reply& r, Frame* f) {
  header(f, FrameType::Reply, r.more ? kFlagMore : 0);
  put64(f->bytes + 4, r.req_id);
  put64(f->bytes + 12, r.hold);
  put64(f->bytes + 20, r.token);
  put64(f->bytes + 28, r.valid_until);
  put8(f->bytes + 36, uint8_t(r.status));
  put8(f->bytes + 37, 0);
  f->size = put_string(f, 38, r.message, kMaxReplyMessage);
}

void encode(const RevokedEvent& r, Frame* f) {
  header(f, FrameType::Revoked);
  put64(f->bytes + 4, r.hold);
  f->size = put_string(f, 12, r.why, kMaxRevokedWhy);
}

// ---------------------------------------------------------------------------------------------
// Decoders

std::optional<Request> decode_request(std::span<const uint8_t> b, DecodeError* err) {
  if (!check_header(b, err)) return std::nullopt;
  const uint8_t* p = b.data();
  auto type = FrameType(p[2]);
  if (type != FrameType::Lock && type != FrameType::Unlock && type != FrameType::Status) {
    std::optional<uint64_t> id;
    if (b.size() >= 12 && (p[2] & 0x80) == 0) id = get64(p + 4);
    fail(err, "unknown request type " + std::to_string(p[2]), id);
    return std::nullopt;
  }
  if (b.size() < 12) {
    fail(err,
         std::string(to_string(type)) + " frame truncated: " + std::to_string(b.size()) + " bytes");
    return std::nullopt;
  }
  const uint64_t id = get64(p + 4);
  auto size_is = [&](size_t want) {
    if (b.size() == want) return true;
    return fail(err,
                std::string(to_string(type)) + " frame of " + std::to_string(b.size()) +
                    " bytes, expected " + std::to_string(want),
                id);
  };
  const uint8_t allowed = type == FrameType::Unlock   ? kFlagNoReply
                          : type == FrameType::Status ? kFlagMetrics
                                                      : 0;
  if ((p[3] & ~allowed) != 0) {
    fail(err, std::string(to_string(type)) + " frame with flags " + std::to_string(p[3]), id);
    return std::nullopt;
  }
  switch (type) {
    case FrameType::Lock: {
      if (b.size() < kLockFixed) {
        size_is(kLockFixed);
        return std::nullopt;
      }
      const size_t len = get16(p + 18);
      if (!size_is(kLockFixed + len)) return std::nullopt;
      LockRequest r;
      r.req_id = id;
      r.timeout_ms = int32_t(get32(p + 12));
      if (p[16] != uint8_t(Mode::Shared) && p[16] != uint8_t(Mode::Exclusive)) {
        fail(err, "LOCK with unknown mode " + std::to_string(p[16]), id);
        return std::nullopt;
      }
      r.mode = Mode(p[16]);
      if (p[17] != 0) {
        fail(err, "LOCK with a non-zero reserved byte", id);
        return std::nullopt;
      }
      std::string_view name(reinterpret_cast<const char*>(p + kLockFixed), len);
      if (auto why = name_problem(name); !why.empty()) {
        fail(err, std::string(why), id, Status::BadName);
        return std::nullopt;
      }
      r.name.assign(name);
      return Request(std::move(r));
    }
    case FrameType::Unlock:
      if (!size_is(kUnlockSize)) return std::nullopt;
      return Request(UnlockRequest{id, get64(p + 12), (p[3] & kFlagNoReply) != 0});
    case FrameType::Status:
      if (!size_is(kStatusSize)) return std::nullopt;
      return Request(StatusRequest{id, (p[3] & kFlagMetrics) != 0});
    default:
      break;
  }
  return std::nullopt;  // not reached: the type was checked above
}

std::optional<Event> decode_event(std::span<const uint8_t> b, DecodeError* err) {
  if (!check_header(b, err)) return std::nullopt;
  const uint8_t* p = b.data();
  const auto type = FrameType(p[2]);
  if (type == FrameType::Reply) {
    if (b.size() < kReplyFixed) {
      fail(err, "REPLY frame truncated: " + std::to_string(b.size()) + " bytes");
      return std::nullopt;
    }
    const uint64_t id = get64(p + 4);
    if ((p[3] & ~kFlagMore) != 0) {
      fail(err, "REPLY frame with flags " + std::to_string(p[3]), id);
      return std::nullopt;
    }
    const size_t len = get16(p + 38);
    if (b.size() != kReplyFixed + len) {
      fail(err,
           "REPLY frame of " + std::to_string(b.size()) + " bytes, expected " +
               std::to_string(kReplyFixed + len),
           id);
      return std::nullopt;
    }
    if (p[36] > uint8_t(Status::Internal) || p[37] != 0) {
      fail(err, "REPLY with unknown status " + std::to_string(p[36]), id);
      return std::nullopt;
    }
    Reply r;
    r.req_id = id;
    r.hold = get64(p + 12);
    r.token = get64(p + 20);
    r.valid_until = get64(p + 28);
    r.status = Status(p[36]);
    r.more = (p[3] & kFlagMore) != 0;
    r.message.assign(reinterpret_cast<const char*>(p + kReplyFixed), len);
    return Event(std::move(r));
  }
  if (type == FrameType::Revoked) {
    if (b.size() < kRevokedFixed) {
      fail(err, "REVOKED frame truncated: " + std::to_string(b.size()) + " bytes");
      return std::nullopt;
    }
    const size_t len = get16(p + 12);
    if (p[3] != 0 || b.size() != kRevokedFixed + len) {
      fail(err, "malformed REVOKED frame (" + std::to_string(b.size()) + " bytes)");
      return std::nullopt;
    }
    RevokedEvent e;
    e.hold = get64(p + 4);
    e.why.assign(reinterpret_cast<const char*>(p + kRevokedFixed), len);
    return Event(std::move(e));
  }
  fail(err, "unknown event type " + std::to_string(p[2]));
  return std::nullopt;
}

}  // namespace tierce::dlm::ipc
