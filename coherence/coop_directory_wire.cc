// coherence/coop_directory_wire.cc — strict encoders/decoders of the directory's update messages
// (coop_directory_wire.h).
#include "coherence/coop_directory_wire.h"
#include "coherence/bytes.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace tierce::coherence::dirwire {

namespace {

static_assert(std::endian::native == std::endian::little,
              "the directory wire format is little-endian; this host is not");

using bytes::get;
using bytes::put;

std::vector<uint8_t> head(MessageType t, size_t size) {
  std::vector<uint8_t> b(size, 0);
  b[0] = kDirWireVersion;
  b[1] = uint8_t(t);
  return b;
}

const char* name_of(MessageType t) {
  switch (t) {
    case MessageType::Publish:
      return "publish";
    case MessageType::Withdraw:
      return "withdraw";
    case MessageType::WithdrawNode:
      return "withdraw_node";
    case MessageType::Invalidate:
      return "invalidate";
  }
  return "?";
}

void exact(std::span<const uint8_t> b, size_t want, MessageType t) {
  if (b.size() != want)
    throw DirWireError(std::string("coop.dir ") + name_of(t) + ": body of " +
                       std::to_string(b.size()) + " bytes, expected " + std::to_string(want));
}
void zero(std::span<const uint8_t> b, size_t at, size_t len, MessageType t) {
  for (size_t k = at; k < at + len; ++k)
    if (b[k] != 0)
      throw DirWireError(std::string("coop.dir ") + name_of(t) + ": reserved byte " +
                         std::to_string(k) + " is not 0");
}
CopyRegion kind_of(uint8_t k, MessageType t) {
  if (k != uint8_t(CopyRegion::Arena) && k != uint8_t(CopyRegion::Pool))
    throw DirWireError(std::string("coop.dir ") + name_of(t) + ": region kind " +
                       std::to_string(k) + " is neither arena (1) nor pool (2)");
  return CopyRegion(k);
}

struct Encoder {
  std::vector<uint8_t> operator()(const Publish& m) const {
    auto b = head(MessageType::Publish, kPublishBytes);
    put<uint64_t>(b, 8, m.key_hash);
    put<uint64_t>(b, 16, m.key_check);
    put<uint64_t>(b, 24, m.length);
    put<uint32_t>(b, 32, m.tag.home);
    put<uint64_t>(b, 40, m.tag.slot);
    put<uint64_t>(b, 48, m.tag.version);
    put<uint16_t>(b, 56, m.where.node);
    b[58] = uint8_t(m.where.kind);
    put<uint32_t>(b, 60, m.where.slot_size);
    put<uint64_t>(b, 64, m.where.offset);
    put<uint64_t>(b, 72, m.where.generation);
    return b;
  }
  std::vector<uint8_t> operator()(const Withdraw& m) const {
    auto b = head(MessageType::Withdraw, kWithdrawBytes);
    put<uint64_t>(b, 8, m.key_hash);
    put<uint64_t>(b, 16, m.key_check);
    put<uint16_t>(b, 24, m.node);
    b[26] = uint8_t(m.kind);
    put<uint64_t>(b, 32, m.offset);
    put<uint64_t>(b, 40, m.generation);
    return b;
  }
  std::vector<uint8_t> operator()(const WithdrawNode& m) const {
    auto b = head(MessageType::WithdrawNode, kWithdrawNodeBytes);
    put<uint16_t>(b, 8, m.node);
    return b;
  }
  std::vector<uint8_t> operator()(const Invalidate& m) const {
    auto b = head(MessageType::Invalidate, kInvalidateBytes);
    put<uint64_t>(b, 8, m.key_hash);
    put<uint64_t>(b, 16, m.key_check);
    return b;
  }
};

}  // namespace

std::vector<uint8_t> encode(const Message& m) {
  return std::visit(Encoder{}, m);
}

std::vector<uint8_t> encode(const Reply& r) {
  const size_t len = std::min(r.message.size(), kMaxReplyMessage);
  std::vector<uint8_t> b(kReplyHead + len, 0);
  b[0] = kDirWireVersion;
  b[1] = uint8_t(r.status);
  put<uint16_t>(b, 2, uint16_t(len));
  put<uint32_t>(b, 4, r.count);
  std::memcpy(b.data() + kReplyHead, r.message.data(), len);
  return b;
}

Message decode_message(std::span<const uint8_t> b) {
  if (b.size() < kHead)
    throw DirWireError("coop.dir: body of " + std::to_string(b.size()) +
                       " bytes is shorter than the 8-byte head");
  if (b[0] != kDirWireVersion)
    throw DirWireError("coop.dir: version " + std::to_string(b[0]) +
                       " is not understood (this side speaks version " +
                       std::to_string(kDirWireVersion) + ")");
  const uint8_t type = b[1];
  if (type < uint8_t(MessageType::Publish) || type > uint8_t(MessageType::Invalidate))
    throw DirWireError("coop.dir: unknown message type " + std::to_string(type));
  const auto t = MessageType(type);
  zero(b, 2, 6, t);
  switch (t) {
    case MessageType::Publish: {
      exact(b, kPublishBytes, t);
      zero(b, 36, 4, t);
      zero(b, 59, 1, t);
      Publish m;
      m.key_hash = get<uint64_t>(b, 8);
      m.key_check = get<uint64_t>(b, 16);
      m.length = get<uint64_t>(b, 24);
      m.tag.home = get<uint32_t>(b, 32);
      m.tag.slot = get<uint64_t>(b, 40);
      m.tag.version = get<uint64_t>(b, 48);
      m.where.node = get<uint16_t>(b, 56);
      m.where.kind = kind_of(b[58], t);
      m.where.slot_size = get<uint32_t>(b, 60);
      m.where.offset = get<uint64_t>(b, 64);
      m.where.generation = get<uint64_t>(b, 72);
      if (m.where.slot_size == 0) throw DirWireError("coop.dir publish: slot size 0");
      if (m.length > m.where.slot_size)
        throw DirWireError("coop.dir publish: length " + std::to_string(m.length) +
                           " exceeds the slot size " + std::to_string(m.where.slot_size));
      return m;
    }
    case MessageType::Withdraw: {
      exact(b, kWithdrawBytes, t);
      zero(b, 27, 5, t);
      Withdraw m;
      m.key_hash = get<uint64_t>(b, 8);
      m.key_check = get<uint64_t>(b, 16);
      m.node = get<uint16_t>(b, 24);
      m.kind = kind_of(b[26], t);
      m.offset = get<uint64_t>(b, 32);
      m.generation = get<uint64_t>(b, 40);
      return m;
    }
    case MessageType::WithdrawNode: {
      exact(b, kWithdrawNodeBytes, t);
      zero(b, 10, 6, t);
      return WithdrawNode{get<uint16_t>(b, 8)};
    }
    case MessageType::Invalidate: {
      exact(b, kInvalidateBytes, t);
      return Invalidate{get<uint64_t>(b, 8), get<uint64_t>(b, 16)};
    }
  }
  throw DirWireError("coop.dir: unknown message type");  // unreachable: type checked above
}

Reply decode_reply(std::span<const uint8_t> b) {
  if (b.size() < kReplyHead)
    throw DirWireError("coop.dir reply: " + std::to_string(b.size()) +
                       " bytes is shorter than the 8-byte head");
  if (b[0] != kDirWireVersion)
    throw DirWireError("coop.dir reply: version " + std::to_string(b[0]) + " is not understood");
  if (b[1] >= kUpdateStatusCount)
    throw DirWireError("coop.dir reply: status " + std::to_string(b[1]) + " is out of range");
  const uint16_t len = get<uint16_t>(b, 2);
  if (len > kMaxReplyMessage || b.size() != kReplyHead + len)
    throw DirWireError("coop.dir reply: " + std::to_string(b.size()) +
                       " bytes do not match its message length " + std::to_string(len));
  Reply r;
  r.status = UpdateStatus(b[1]);
  r.count = get<uint32_t>(b, 4);
  r.message.assign(reinterpret_cast<const char*>(b.data() + kReplyHead), len);
  return r;
}

UpdateResult apply_message(CoopDirectory& dir, const Message& m) {
  struct V {
    CoopDirectory& d;
    UpdateResult operator()(const Publish& p) const {
      return d.publish(p.key_hash, p.key_check, p.tag, p.length, p.where);
    }
    UpdateResult operator()(const Withdraw& w) const {
      return d.withdraw(w.key_hash, w.key_check, w.node, w.kind, w.offset, w.generation);
    }
    UpdateResult operator()(const WithdrawNode& w) const { return d.withdraw_node(w.node); }
    UpdateResult operator()(const Invalidate& i) const {
      return d.invalidate(i.key_hash, i.key_check);
    }
  };
  return std::visit(V{dir}, m);
}

std::vector<uint8_t> apply_body(CoopDirectory& dir, std::span<const uint8_t> body) {
  Reply r;
  try {
    UpdateResult u = apply_message(dir, decode_message(body));
    r.status = u.status;
    r.count = u.count;
    r.message = std::move(u.why);
  } catch (const DirWireError& e) {
    r.status = UpdateStatus::BadRequest;
    r.message = e.what();
  }
  return encode(r);
}

}  // namespace tierce::coherence::dirwire
