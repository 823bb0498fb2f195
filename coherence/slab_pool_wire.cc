// coherence/slab_pool_wire.cc — strict encoders/decoders of the pool services (slab_pool_wire.h).
#include "coherence/slab_pool_wire.h"
#include "coherence/bytes.h"

#include <bit>
#include <cstring>

namespace tierce::coherence::poolwire {

namespace {

static_assert(std::endian::native == std::endian::little,
              "the pool wire format is little-endian; this host is not");

using bytes::get;
using bytes::put;

std::vector<uint8_t> request(uint32_t word4, uint64_t incarnation, const std::string& owner,
                             size_t extra) {
  if (owner.size() > 0xffff) throw PoolWireError("owner name over 65535 bytes");
  std::vector<uint8_t> b(kRequestHeader + owner.size() + extra, 0);
  b[0] = kPoolWireVersion;
  put<uint16_t>(b, 2, uint16_t(owner.size()));
  put<uint32_t>(b, 4, word4);
  put<uint64_t>(b, 8, incarnation);
  std::memcpy(b.data() + kRequestHeader, owner.data(), owner.size());
  return b;
}

struct Head {
  uint32_t word4;
  uint64_t incarnation;
  std::string owner;
};

// The common request header; `what` names the service in messages.
Head head(std::span<const uint8_t> b, const char* what) {
  if (b.size() < kRequestHeader)
    throw PoolWireError(std::string(what) + ": body of " + std::to_string(b.size()) +
                        " bytes is shorter than the 16-byte header");
  if (b[0] != kPoolWireVersion)
    throw PoolWireError(std::string(what) + ": version " + std::to_string(b[0]) +
                        " is not understood (this memd speaks version " +
                        std::to_string(kPoolWireVersion) + ")");
  if (b[1] != 0) throw PoolWireError(std::string(what) + ": reserved byte 1 is not 0");
  Head h;
  uint16_t len = get<uint16_t>(b, 2);
  h.word4 = get<uint32_t>(b, 4);
  h.incarnation = get<uint64_t>(b, 8);
  if (len == 0 || len > SlabPoolLimits::kMaxOwnerName)
    throw PoolWireError(std::string(what) + ": owner_len " + std::to_string(len) +
                        " is out of range 1.." + std::to_string(SlabPoolLimits::kMaxOwnerName));
  if (b.size() < kRequestHeader + len)
    throw PoolWireError(std::string(what) + ": body of " + std::to_string(b.size()) +
                        " bytes is shorter than its owner name says");
  h.owner.assign(reinterpret_cast<const char*>(b.data() + kRequestHeader), len);
  if (std::string why = check_owner_name(h.owner); !why.empty())
    throw PoolWireError(std::string(what) + ": " + why);
  if (h.incarnation == 0) throw PoolWireError(std::string(what) + ": incarnation 0 is reserved");
  return h;
}

void exact(std::span<const uint8_t> b, size_t want, const char* what) {
  if (b.size() != want)
    throw PoolWireError(std::string(what) + ": body of " + std::to_string(b.size()) +
                        " bytes, expected " + std::to_string(want));
}

}  // namespace

std::vector<uint8_t> encode(const AllocRequest& r) {
  return request(r.count, r.incarnation, r.owner, 0);
}

std::vector<uint8_t> encode(const FreeRequest& r) {
  auto b = request(uint32_t(r.slabs.size()), r.incarnation, r.owner, 4 * r.slabs.size());
  size_t at = kRequestHeader + r.owner.size();
  for (uint32_t s : r.slabs) {
    put<uint32_t>(b, at, s);
    at += 4;
  }
  return b;
}

std::vector<uint8_t> encode(const RenewRequest& r) {
  return request(0, r.incarnation, r.owner, 0);
}

std::vector<uint8_t> encode(const Reply& r) {
  std::string msg = r.message.substr(0, 0xffff);
  std::vector<uint8_t> b(kReplyHeader + kDescriptorBytes * r.slabs.size() + msg.size(), 0);
  b[0] = kPoolWireVersion;
  b[1] = uint8_t(r.status);
  put<uint16_t>(b, 2, uint16_t(msg.size()));
  put<uint32_t>(b, 4, uint32_t(r.slabs.size()));
  put<uint32_t>(b, 8, r.held);
  put<uint32_t>(b, 12, r.free_slabs);
  put<uint64_t>(b, 16, r.slab_bytes);
  put<uint64_t>(b, 24, r.pool_incarnation);
  put<uint64_t>(b, 32, r.lease_ms);
  size_t at = kReplyHeader;
  for (auto& d : r.slabs) {
    put<uint32_t>(b, at, d.slab);
    put<uint64_t>(b, at + 8, d.offset);
    put<uint64_t>(b, at + 16, d.length);
    at += kDescriptorBytes;
  }
  std::memcpy(b.data() + at, msg.data(), msg.size());
  return b;
}

AllocRequest decode_alloc(std::span<const uint8_t> b) {
  Head h = head(b, kAllocService);
  exact(b, kRequestHeader + h.owner.size(), kAllocService);
  if (h.word4 == 0 || h.word4 > SlabPoolLimits::kMaxSlabsPerCall)
    throw PoolWireError(std::string(kAllocService) + ": count " + std::to_string(h.word4) +
                        " is out of range 1.." + std::to_string(SlabPoolLimits::kMaxSlabsPerCall));
  return AllocRequest{h.owner, h.incarnation, h.word4};
}

FreeRequest decode_free(std::span<const uint8_t> b) {
  Head h = head(b, kFreeService);
  if (h.word4 == 0 || h.word4 > SlabPoolLimits::kMaxSlabsPerCall)
    throw PoolWireError(std::string(kFreeService) + ": count " + std::to_string(h.word4) +
                        " is out of range 1.." + std::to_string(SlabPoolLimits::kMaxSlabsPerCall));
  exact(b, kRequestHeader + h.owner.size() + 4 * size_t(h.word4), kFreeService);
  FreeRequest r{h.owner, h.incarnation, {}};
  size_t at = kRequestHeader + h.owner.size();
  for (uint32_t i = 0; i < h.word4; ++i, at += 4) r.slabs.push_back(get<uint32_t>(b, at));
  return r;
}

RenewRequest decode_renew(std::span<const uint8_t> b) {
  Head h = head(b, kRenewService);
  exact(b, kRequestHeader + h.owner.size(), kRenewService);
  if (h.word4 != 0) throw PoolWireError(std::string(kRenewService) + ": reserved word 4 is not 0");
  return RenewRequest{h.owner, h.incarnation};
}

Reply decode_reply(std::span<const uint8_t> b) {
  if (b.size() < kReplyHeader)
    throw PoolWireError("pool reply of " + std::to_string(b.size()) +
                        " bytes is shorter than the 40-byte header");
  if (b[0] != kPoolWireVersion)
    throw PoolWireError("pool reply version " + std::to_string(b[0]) + " is not understood");
  if (b[1] > uint8_t(PoolStatus::BadRequest))
    throw PoolWireError("pool reply status " + std::to_string(b[1]) + " is unknown");
  Reply r;
  r.status = PoolStatus(b[1]);
  uint16_t msg_len = get<uint16_t>(b, 2);
  uint32_t count = get<uint32_t>(b, 4);
  if (count > SlabPoolLimits::kMaxSlabsPerCall)
    throw PoolWireError("pool reply: " + std::to_string(count) + " descriptors is too many");
  exact(b, kReplyHeader + kDescriptorBytes * size_t(count) + msg_len, "pool reply");
  r.held = get<uint32_t>(b, 8);
  r.free_slabs = get<uint32_t>(b, 12);
  r.slab_bytes = get<uint64_t>(b, 16);
  r.pool_incarnation = get<uint64_t>(b, 24);
  r.lease_ms = get<uint64_t>(b, 32);
  size_t at = kReplyHeader;
  for (uint32_t i = 0; i < count; ++i, at += kDescriptorBytes) {
    if (get<uint32_t>(b, at + 4) != 0)
      throw PoolWireError("pool reply: reserved word of descriptor " + std::to_string(i) +
                          " is not 0");
    r.slabs.push_back(
        SlabDescriptor{get<uint32_t>(b, at), get<uint64_t>(b, at + 8), get<uint64_t>(b, at + 16)});
  }
  r.message.assign(reinterpret_cast<const char*>(b.data() + at), msg_len);
  return r;
}

}  // namespace tierce::coherence::poolwire
