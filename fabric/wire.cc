// fabric/wire.cc — frame encode/decode. Pure functions on bytes: the fuzz target's entry point.
#include "fabric/wire.h"

#include <cstring>

namespace tierce::fabric::wire {

bool is_known_op(uint8_t op) {
  switch (Op(op)) {
    case Op::Hello:
    case Op::Auth:
    case Op::AuthOk:
    case Op::Read:
    case Op::Write:
    case Op::Cas:
    case Op::Faa:
    case Op::Lookup:
    case Op::Map:
    case Op::Call:
    case Op::Send:
    case Op::StreamOpen:
    case Op::Ping:
      return true;
  }
  return false;
}

std::string_view op_name(Op op) {
  switch (op) {
    case Op::Hello:
      return "HELLO";
    case Op::Auth:
      return "AUTH";
    case Op::AuthOk:
      return "AUTH_OK";
    case Op::Read:
      return "READ";
    case Op::Write:
      return "WRITE";
    case Op::Cas:
      return "CAS";
    case Op::Faa:
      return "FAA";
    case Op::Lookup:
      return "LOOKUP";
    case Op::Map:
      return "MAP";
    case Op::Call:
      return "CALL";
    case Op::Send:
      return "SEND";
    case Op::StreamOpen:
      return "STREAM_OPEN";
    case Op::Ping:
      return "PING";
  }
  return "?";
}

void encode_header(const Header& h, uint8_t out[kHeaderSize]) {
  out[0] = kMagic;
  out[1] = uint8_t(uint8_t(h.op) | (h.reply ? kReplyBit : 0));
  out[2] = uint8_t(uint16_t(h.status) & 0xff);
  out[3] = uint8_t(uint16_t(h.status) >> 8);
  out[4] = uint8_t(h.length);
  out[5] = uint8_t(h.length >> 8);
  out[6] = uint8_t(h.length >> 16);
  out[7] = uint8_t(h.length >> 24);
  store_le64(out + 8, h.id);
  store_le64(out + 16, h.a0);
  store_le64(out + 24, h.a1);
  store_le64(out + 32, h.a2);
  store_le64(out + 40, h.a3);
}

base::Result<Header> decode_header(std::span<const uint8_t> b) {
  auto fail = [](const char* w) -> base::Result<Header> {
    return base::Status(base::Code::InvalidArgument, w);
  };
  if (b.size() < kHeaderSize) return fail("short header");
  if (b[0] != kMagic) return fail("bad magic");
  Header h;
  h.reply = (b[1] & kReplyBit) != 0;
  uint8_t op = b[1] & uint8_t(~kReplyBit);
  if (!is_known_op(op)) return fail("unknown opcode");
  h.op = Op(op);
  uint16_t status = uint16_t(b[2] | (b[3] << 8));
  if (!h.reply && status != 0) return fail("status set in a request");
  if (status > 0xff) return fail("status out of range");
  h.status = Errc(status);
  h.length = uint32_t(b[4]) | uint32_t(b[5]) << 8 | uint32_t(b[6]) << 16 | uint32_t(b[7]) << 24;
  if (h.length > kMaxPayload) return fail("payload length over the limit");
  h.id = load_le64(&b[8]);
  h.a0 = load_le64(&b[16]);
  h.a1 = load_le64(&b[24]);
  h.a2 = load_le64(&b[32]);
  h.a3 = load_le64(&b[40]);
  return h;
}

void append_frame(std::vector<uint8_t>& out, const Header& h, std::span<const uint8_t> payload) {
  size_t at = out.size();
  out.resize(at + kHeaderSize + payload.size());
  Header copy = h;
  copy.length = uint32_t(payload.size());
  encode_header(copy, out.data() + at);
  if (!payload.empty()) std::memcpy(out.data() + at + kHeaderSize, payload.data(), payload.size());
}

void encode_service_payload(std::vector<uint8_t>& out, std::string_view service,
                            std::span<const uint8_t> body) {
  out.clear();
  out.reserve(2 + service.size() + body.size());
  out.push_back(uint8_t(service.size()));
  out.push_back(uint8_t(service.size() >> 8));
  out.insert(out.end(), service.begin(), service.end());
  out.insert(out.end(), body.begin(), body.end());
}

base::Result<ServicePayload> decode_service_payload(std::span<const uint8_t> p) {
  auto fail = [](const char* w) -> base::Result<ServicePayload> {
    return base::Status(base::Code::InvalidArgument, w);
  };
  if (p.size() < 2) return fail("service payload shorter than its length field");
  size_t n = size_t(p[0]) | size_t(p[1]) << 8;
  if (n == 0 || n > kMaxServiceName || 2 + n > p.size()) return fail("bad service name length");
  ServicePayload out{std::string_view(reinterpret_cast<const char*>(p.data() + 2), n), p.subspan(2 + n)};
  if (out.body.size() > kMaxMessage) return fail("message body over the limit");
  return out;
}

}  // namespace tierce::fabric::wire
