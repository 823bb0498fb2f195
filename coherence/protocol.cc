// coherence/protocol.cc — encoding and strict decoding of the app-node messages (see protocol.h).
#include "coherence/protocol.h"

#include <cstring>

#include "coherence/key.h"

namespace tierce::coherence {
namespace {

class Out {
 public:
  template <class T>
  void put(T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
    buf.insert(buf.end(), b, b + sizeof(T));
  }
  void bytes(std::string_view s) { buf.insert(buf.end(), s.begin(), s.end()); }
  std::vector<uint8_t> buf;
};

class In {
 public:
  In(std::span<const uint8_t> b, const char* what) : b_(b), what_(what) {}
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(size_t n) {
    need(n);
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  std::vector<uint64_t> deps() {
    uint32_t n = get<uint32_t>();
    if (n > kMaxDependencies)
      throw ProtocolError(std::string(what_) + ": " + std::to_string(n) + " dependencies (max " +
                          std::to_string(kMaxDependencies) + ")");
    need(size_t(n) * 8);
    std::vector<uint64_t> v(n);
    for (auto& d : v) d = get<uint64_t>();
    return v;
  }
  size_t left() const { return b_.size() - pos_; }
  void end() const {
    if (pos_ != b_.size())
      throw ProtocolError(std::string(what_) + ": " + std::to_string(b_.size() - pos_) +
                          " trailing bytes");
  }

 private:
  void need(size_t n) const {
    if (b_.size() - pos_ < n) throw ProtocolError(std::string(what_) + ": message too short");
  }
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
  const char* what_;
};

}  // namespace

namespace {
void check_version(In& in, const char* what) {
  uint8_t v = in.get<uint8_t>();
  if (v != kProtocolVersion)
    throw ProtocolError(std::string(what) + ": protocol version " + std::to_string(v) +
                        ", this node speaks " + std::to_string(kProtocolVersion) +
                        " (run the same Tierce version on every node)");
}
}  // namespace

std::vector<uint8_t> encode(const RegisterRequest& m) {
  Out o;
  o.put(kProtocolVersion);
  o.put(m.digest);
  o.put(m.key);
  o.put(m.seq_start);
  o.put(uint32_t(m.deps.size()));
  for (auto d : m.deps) o.put(d);
  return o.buf;
}

std::vector<uint8_t> encode(const RegisterResult& m) {
  Out o;
  o.put(uint8_t(m.refusal));
  o.put(m.slot);
  o.put(m.version);
  std::string_view r = std::string_view(m.reason).substr(0, 1024);
  o.put(uint16_t(r.size()));
  o.bytes(r);
  return o.buf;
}

std::vector<uint8_t> encode(const InvalidateRequest& m) {
  Out o;
  o.put(kProtocolVersion);
  o.put(m.digest);
  o.put(uint8_t(m.scheme));
  o.put(uint16_t(m.origin.size()));
  o.bytes(m.origin);
  o.put(m.writer_incarnation);
  o.put(m.number);
  o.put(m.ack_cell);
  o.put(m.ack_tag);
  o.put(uint32_t(m.deps.size()));
  for (auto d : m.deps) o.put(d);
  if (m.mark.op != MarkOp::None) {
    o.put(uint8_t(m.mark.op));
    o.put(m.mark.token);
    o.put(m.mark.ttl_ms);
  }
  return o.buf;
}

RegisterRequest decode_register(std::span<const uint8_t> body) {
  In in(body, "coherence.register");
  check_version(in, "coherence.register");
  RegisterRequest m;
  m.digest = in.get<uint64_t>();
  m.key = in.get<uint64_t>();
  m.seq_start = in.get<uint64_t>();
  m.deps = in.deps();
  in.end();
  return m;
}

RegisterResult decode_register_reply(std::span<const uint8_t> body) {
  In in(body, "coherence.register reply");
  RegisterResult m;
  uint8_t c = in.get<uint8_t>();
  if (c > kMaxRefusal) throw ProtocolError("coherence.register reply: unknown refusal " + std::to_string(c));
  m.refusal = Refusal(c);
  m.slot = in.get<uint64_t>();
  m.version = in.get<uint64_t>();
  m.reason = in.str(in.get<uint16_t>());
  in.end();
  return m;
}

InvalidateRequest decode_invalidate(std::span<const uint8_t> body) {
  In in(body, "coherence.invalidate");
  check_version(in, "coherence.invalidate");
  InvalidateRequest m;
  m.digest = in.get<uint64_t>();
  uint8_t s = in.get<uint8_t>();
  if (s > uint8_t(Scheme::InvalidateAll))
    throw ProtocolError("coherence.invalidate: unknown scheme " + std::to_string(s));
  m.scheme = Scheme(s);
  uint16_t n = in.get<uint16_t>();
  if (n == 0 || n > 64) throw ProtocolError("coherence.invalidate: bad origin name length");
  m.origin = in.str(n);
  m.writer_incarnation = in.get<uint64_t>();
  m.number = in.get<uint64_t>();
  m.ack_cell = in.get<uint32_t>();
  m.ack_tag = in.get<uint64_t>();
  m.deps = in.deps();
  if (in.left() != 0) {  // the optional pending mark
    if (in.left() != kMarkTrailerBytes)
      throw ProtocolError("coherence.invalidate: " + std::to_string(in.left()) +
                          " bytes after the dependencies (a pending mark is " +
                          std::to_string(kMarkTrailerBytes) + ")");
    uint8_t op = in.get<uint8_t>();
    if (op > kMaxMarkOp)
      throw ProtocolError("coherence.invalidate: unknown mark op " + std::to_string(op));
    m.mark.op = MarkOp(op);
    m.mark.token = in.get<uint64_t>();
    m.mark.ttl_ms = in.get<uint32_t>();
  }
  in.end();
  return m;
}

std::vector<uint64_t> parse_dependencies(std::string_view v) {
  std::vector<uint64_t> out;
  size_t i = 0;
  while (i < v.size()) {
    while (i < v.size() && (v[i] == ' ' || v[i] == ',' || v[i] == '\t')) ++i;
    size_t j = i;
    while (j < v.size() && v[j] != ' ' && v[j] != ',' && v[j] != '\t') ++j;
    if (j > i) {
      std::string_view name = v.substr(i, j - i);
      if (name.size() > 256)
        throw ProtocolError("dependency name longer than 256 bytes: \"" +
                            std::string(name.substr(0, 40)) + "...\"");
      for (unsigned char c : name)
        if (c < 0x21 || c == 0x7f)
          throw ProtocolError("dependency name with a control character");
      out.push_back(dependency_hash(name));
      if (out.size() > kMaxDependencies)
        throw ProtocolError("more than " + std::to_string(kMaxDependencies) + " dependencies");
    }
    i = j;
  }
  return out;
}

}  // namespace tierce::coherence
