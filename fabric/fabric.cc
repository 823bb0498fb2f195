// fabric/fabric.cc — addresses, transport choice, capabilities, and the generic parts of
// Connection.
#include "fabric/fabric.h"

#include <charconv>

#include "fabric/stream_transport.h"
#include "fabric/verbs_transport.h"
#include "fabric/wire.h"

namespace tierce::fabric {

std::string_view to_string(Transport t) {
  switch (t) {
    case Transport::Auto:
      return "auto";
    case Transport::Verbs:
      return "verbs";
    case Transport::Tcp:
      return "tcp";
    case Transport::Shm:
      return "shm";
  }
  return "?";
}

Transport parse_transport(std::string_view s) {
  if (s == "auto") return Transport::Auto;
  if (s == "verbs") return Transport::Verbs;
  if (s == "tcp") return Transport::Tcp;
  if (s == "shm") return Transport::Shm;
  throw FabricError(Errc::Config,
                    "unknown transport '" + std::string(s) + "' (use auto, verbs, tcp or shm)");
}

std::string_view to_string(Protection p) {
  switch (p) {
    case Protection::None:
      return "none";
    case Protection::Mac:
      return "mac";
    case Protection::Encrypt:
      return "encrypt";
  }
  return "?";
}

Protection parse_protection(std::string_view s) {
  if (s == "none") return Protection::None;
  if (s == "mac") return Protection::Mac;
  if (s == "encrypt") return Protection::Encrypt;
  throw FabricError(Errc::Config, "unknown protection '" + std::string(s) +
                                      "' (use mac, encrypt, or none for measurement only)");
}

Capabilities capabilities_of(Transport t) {
  Capabilities c;
  c.max_transfer = wire::kMaxTransfer;
  c.max_message = wire::kMaxMessage;
  switch (t) {
    case Transport::Shm:
      c.truly_one_sided = c.zero_copy = c.native_atomics = true;
      break;
    case Transport::Verbs:
      c.truly_one_sided = c.zero_copy = c.native_atomics = c.cross_host = true;
      break;
    case Transport::Tcp:
      c.cross_host = true;  // the target's responder thread does the work; bytes are copied
      break;
    case Transport::Auto:
      break;
  }
  return c;
}

std::string Address::uri() const {
  if (transport == Transport::Shm) return "shm://" + path;
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return std::string(to_string(transport)) + "://" + h + ":" + std::to_string(port);
}

Address parse_address(std::string_view uri) {
  auto bad = [&](const std::string& why) {
    return FabricError(
        Errc::Config,
        "bad address '" + std::string(uri) + "': " + why +
            " (expected tcp://HOST:PORT, verbs://HOST:PORT or shm:///path/to/socket)");
  };
  auto sep = uri.find("://");
  if (sep == std::string_view::npos) throw bad("no scheme");
  Address a;
  std::string_view scheme = uri.substr(0, sep), rest = uri.substr(sep + 3);
  if (scheme == "shm") {
    a.transport = Transport::Shm;
    if (rest.empty() || rest[0] != '/') throw bad("shm needs an absolute socket path");
    a.path = std::string(rest);
    return a;
  }
  if (scheme == "tcp")
    a.transport = Transport::Tcp;
  else if (scheme == "verbs")
    a.transport = Transport::Verbs;
  else
    throw bad("unknown scheme '" + std::string(scheme) + "'");
  std::string_view host, port;
  if (!rest.empty() && rest[0] == '[') {
    auto close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':')
      throw bad("bad [ipv6]:port");
    host = rest.substr(1, close - 1);
    port = rest.substr(close + 2);
  } else {
    auto colon = rest.rfind(':');
    if (colon == std::string_view::npos) throw bad("no port");
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty()) throw bad("no host");
  unsigned p = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc() || ptr != port.data() + port.size() || p > 65535) throw bad("bad port");
  a.host = std::string(host);
  a.port = uint16_t(p);
  return a;
}

bool verbs_device_available() {
  return verbs_probe().ok();
}

base::Result<std::string> verbs_device_probe() {
  return verbs_probe();
}

Transport resolve_auto(Transport preferred, bool peer_on_same_host) {
  if (preferred != Transport::Auto) return preferred;
  if (peer_on_same_host) return Transport::Shm;
  if (verbs_probe().ok()) return Transport::Verbs;
  return Transport::Tcp;
}

std::unique_ptr<Connection> connect(std::string_view uri, const ClientOptions& opts) {
  Address a = parse_address(uri);
  switch (a.transport) {
    case Transport::Tcp:
      return std::make_unique<StreamConnection>(a, opts);
    case Transport::Shm:
      return std::make_unique<ShmConnection>(a, opts);
    case Transport::Verbs:
      return verbs_connect(a, opts);
    case Transport::Auto:
      break;
  }
  throw FabricError(Errc::Config, "cannot connect to '" + std::string(uri) + "'");
}

void throw_op_error(const OneSidedOp& op, const std::string& uri) {
  static const char* names[] = {"read", "write", "cas64", "faa64"};
  throw FabricError(op.status, std::string(names[int(op.kind)]) + " at " + uri + " offset " +
                                   std::to_string(op.offset) + ": " +
                                   std::string(to_string(op.status)));
}

void Connection::execute(std::span<OneSidedOp> ops) {
  post(ops);
  wait(ops);
  for (auto& op : ops)
    if (op.status != Errc::Ok) throw_op_error(op, peer_uri());
}

void Connection::read(const RemoteRegion& r, uint64_t off, void* dst, size_t len) {
  OneSidedOp op;
  op.kind = OpKind::Read;
  op.region = &r;
  op.offset = off;
  op.dst = dst;
  op.len = len;
  run_one(op);
}

void Connection::write(const RemoteRegion& r, uint64_t off, const void* src, size_t len) {
  OneSidedOp op;
  op.kind = OpKind::Write;
  op.region = &r;
  op.offset = off;
  op.src = src;
  op.len = len;
  run_one(op);
}

uint64_t Connection::cas64(const RemoteRegion& r, uint64_t off, uint64_t expected,
                           uint64_t desired) {
  OneSidedOp op;
  op.kind = OpKind::Cas;
  op.region = &r;
  op.offset = off;
  op.arg0 = expected;
  op.arg1 = desired;
  run_one(op);
  return op.result;
}

uint64_t Connection::faa64(const RemoteRegion& r, uint64_t off, uint64_t add) {
  OneSidedOp op;
  op.kind = OpKind::Faa;
  op.region = &r;
  op.offset = off;
  op.arg0 = add;
  run_one(op);
  return op.result;
}

}  // namespace tierce::fabric
