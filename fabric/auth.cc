// fabric/auth.cc — HMAC-SHA256 proofs through OpenSSL.
#include "fabric/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "fabric/errors.h"
#include "fabric/private_file.h"
#include "fabric/random.h"
#include "fabric/socket.h"

namespace tierce::fabric {

Secret::Secret(std::string bytes) : bytes_(std::move(bytes)) {
  if (bytes_.size() < kMinSecretBytes) {
    const size_t n = bytes_.size();
    wipe();  // no destructor runs for an object whose constructor throws
    throw FabricError(Errc::Config,
                      "shared secret is " + std::to_string(n) + " bytes; at least " +
                          std::to_string(kMinSecretBytes) +
                          " are needed (e.g. head -c 32 /dev/urandom | base64 > secret)");
  }
  // The key every proof and frame key is made from: scrypt of the file's bytes (auth.h). The
  // file's own bytes are overwritten at once.
  std::string key(kSecretKeyBytes, '\0');
  const bool ok = EVP_PBE_scrypt(bytes_.data(), bytes_.size(),
                                 reinterpret_cast<const unsigned char*>(kSecretSalt),
                                 std::strlen(kSecretSalt), kSecretScryptN, kSecretScryptR,
                                 kSecretScryptP, 64ull << 20,
                                 reinterpret_cast<unsigned char*>(key.data()), key.size()) == 1;
  wipe();
  if (!ok) {
    OPENSSL_cleanse(key.data(), key.size());
    throw FabricError(Errc::Config,
                      "scrypt (the cluster secret's key derivation) failed in OpenSSL; out of "
                      "memory? it needs 16 MiB");
  }
  bytes_ = std::move(key);
}

void Secret::wipe() noexcept {
  // The whole buffer: a string that shrank keeps old bytes past its size.
  if (bytes_.capacity()) OPENSSL_cleanse(bytes_.data(), bytes_.capacity());
  bytes_.clear();
}

Secret Secret::from_file(const std::string& path) {
  // The read buffer and the trimmed copy are overwritten once the Secret holds the bytes.
  std::string s =
      read_private_file(path, "secret file", size_t(1) << 20, "over 1 MiB: not a secret?");
  auto b = s.find_first_not_of(" \t\r\n");
  auto e = s.find_last_not_of(" \t\r\n");
  std::string trimmed = b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  OPENSSL_cleanse(s.data(), s.capacity());
  Secret out(std::move(trimmed));  // throws when too short: `trimmed` is then wiped below
  OPENSSL_cleanse(trimmed.data(), trimmed.capacity());
  return out;
}

Nonce make_nonce() {
  Nonce n;
  random_bytes(n.data(), n.size());
  return n;
}

namespace {
Mac proof(const Secret& s, const char* label, const Nonce& first, const Nonce& second,
          const HandshakeParams& p) {
  uint8_t msg[8 + 3 + 64];
  std::memcpy(msg, label, 8);
  msg[8] = p.version;
  msg[9] = uint8_t(p.server);
  msg[10] = uint8_t(p.client);
  std::memcpy(msg + 11, first.data(), 32);
  std::memcpy(msg + 43, second.data(), 32);
  Mac out{};
  unsigned len = 0;
  if (!HMAC(EVP_sha256(), s.key().data(), int(s.key().size()), msg, sizeof msg, out.data(),
            &len) ||
      len != out.size())
    throw FabricError(Errc::System, "HMAC-SHA256 failed (OpenSSL)");
  return out;
}
}  // namespace

Mac client_proof(const Secret& s, const Nonce& sn, const Nonce& cn, const HandshakeParams& p) {
  return proof(s, "tierce-c", sn, cn, p);
}
Mac server_proof(const Secret& s, const Nonce& sn, const Nonce& cn, const HandshakeParams& p) {
  return proof(s, "tierce-s", cn, sn, p);
}

bool mac_equal(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool Secret::mac_equal_bytes(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

namespace {

// What the node signatures cover: a label ("tierce-S" from a server, "tierce-C" from a client),
// the version, both protection settings, both nonces, the server's HELLO name and the client's
// node name (empty in the server's). Lengths are prefixed: no two transcripts read alike.
std::vector<uint8_t> transcript(const char* label, const HandshakeParams& p, const Nonce& sn,
                                const Nonce& cn, std::string_view server, std::string_view client) {
  std::vector<uint8_t> t(label, label + 8);
  t.push_back(p.version);
  t.push_back(uint8_t(p.server));
  t.push_back(uint8_t(p.client));
  t.insert(t.end(), sn.begin(), sn.end());
  t.insert(t.end(), cn.begin(), cn.end());
  for (std::string_view s : {server, client}) {
    t.push_back(uint8_t(s.size() >> 8));
    t.push_back(uint8_t(s.size()));
    t.insert(t.end(), s.begin(), s.end());
  }
  return t;
}

constexpr size_t kMaxNodeName = 255;

}  // namespace

std::optional<AuthRequest> parse_auth(std::span<const uint8_t> p) {
  const size_t base = wire::kNonceSize + wire::kMacSize;
  if (p.size() < base) return std::nullopt;
  AuthRequest a;
  std::memcpy(a.cn.data(), p.data(), a.cn.size());
  std::memcpy(a.mac.data(), p.data() + wire::kNonceSize, a.mac.size());
  if (p.size() == base) return a;
  const size_t n = p[base];
  if (n == 0 || p.size() != base + 1 + n + a.sig.size()) return std::nullopt;
  a.node.assign(p.begin() + base + 1, p.begin() + base + 1 + n);
  std::memcpy(a.sig.data(), p.data() + base + 1 + n, a.sig.size());
  return a;
}

AuthVerdict check_auth(const AuthRequest& a, const Secret& s, const Nonce& sn,
                       const HandshakeParams& p, const std::string& server_name,
                       const ServerIdentity& id, std::string* node) {
  node->clear();
  if (!mac_equal(client_proof(s, sn, a.cn, p), a.mac)) return AuthVerdict::BadProof;
  // A server that knows no keys cannot check a signature: the client counts as unsigned (its
  // name is not taken as proven), which is refused only where signatures are required.
  if (a.node.empty() || id.peers.empty())
    return id.require_clients ? AuthVerdict::Unsigned : AuthVerdict::Ok;
  auto k = id.peers.find(a.node);
  if (k == id.peers.end()) return AuthVerdict::UnknownNode;
  if (!verify_signature(k->second, transcript("tierce-C", p, sn, a.cn, server_name, a.node), a.sig))
    return AuthVerdict::BadSignature;
  *node = a.node;
  return AuthVerdict::Ok;
}

std::string identity_refusal(AuthVerdict v, const std::string& remote, const std::string& claimed) {
  switch (v) {
    case AuthVerdict::UnknownNode:
      return "FAB0212 peer " + remote + " signed as node " + claimed +
             ", which has no public key in this server's topology; closing";
    case AuthVerdict::BadSignature:
      return "FAB0213 peer " + remote + " signed as node " + claimed +
             " but its signature does not match that node's public key (another host holding "
             "the cluster secret, or a stale key?); closing";
    case AuthVerdict::Unsigned:
      return "FAB0214 peer " + remote + " did not sign as a node and this server requires it "
             "(a client without node_key?); closing";
    case AuthVerdict::BadProof:
    case AuthVerdict::Ok:
      break;
  }
  return "FAB0202 peer " + remote + " failed authentication (wrong shared secret?); closing";
}

std::vector<uint8_t> auth_ok_payload(const Secret& s, const Nonce& sn, const Nonce& cn,
                                     const HandshakeParams& p, const std::string& server_name,
                                     const ServerIdentity& id) {
  Mac sp = server_proof(s, sn, cn, p);
  std::vector<uint8_t> out(sp.begin(), sp.end());
  if (!id.key.empty()) {
    Signature sig = id.key.sign(transcript("tierce-S", p, sn, cn, server_name, {}));
    out.insert(out.end(), sig.begin(), sig.end());
  }
  return out;
}

std::vector<uint8_t> ClientHandshake::answer_hello(const wire::Header& h,
                                                   std::span<const uint8_t> p) {
  if (h.op == wire::Op::Hello && h.reply && h.status != Errc::Ok)  // refused at a limit
    throw FabricError(h.status, "server refused the connection: " +
                                    std::string(p.begin(), p.end()));
  if (h.op != wire::Op::Hello || h.reply)
    throw FabricError(Errc::Protocol,
                      "server did not start with HELLO: not a Tierce fabric server?");
  if (h.a0 != wire::kProtocolVersion)
    throw FabricError(Errc::Protocol,
                      "server speaks fabric protocol version " +
                          std::to_string(h.a0 == 0 ? 1 : h.a0) + ", this client version " +
                          std::to_string(wire::kProtocolVersion) +
                          " (node identity): run the same Tierce release on both ends");
  if (p.size() < wire::kNonceSize || h.a1 > uint64_t(Protection::Encrypt))
    throw FabricError(Errc::Protocol, "malformed HELLO from the server");
  params_.server = Protection(h.a1);
  std::memcpy(sn_.data(), p.data(), sn_.size());
  name_.assign(p.begin() + wire::kNonceSize, p.end());
  if (id_ && !id_->expect_node.empty() && name_ != id_->expect_node)
    throw FabricError(Errc::AuthFailed, "dialled node " + id_->expect_node + " but node " +
                                            name_ + " answered: refusing it (a redirected "
                                            "connection, or the topology names the wrong address)");
  Mac mac = client_proof(secret_, sn_, cn_, params_);
  std::vector<uint8_t> auth(cn_.begin(), cn_.end());
  auth.insert(auth.end(), mac.begin(), mac.end());
  if (id_ && !id_->key.empty() && !id_->node.empty()) {
    if (id_->node.size() > kMaxNodeName)
      throw FabricError(Errc::Config, "node name " + id_->node + " is over " +
                                          std::to_string(kMaxNodeName) + " bytes");
    Signature sig = id_->key.sign(transcript("tierce-C", params_, sn_, cn_, name_, id_->node));
    auth.push_back(uint8_t(id_->node.size()));
    auth.insert(auth.end(), id_->node.begin(), id_->node.end());
    auth.insert(auth.end(), sig.begin(), sig.end());
  }
  return auth;
}

wire::Header ClientHandshake::auth_header() const {
  wire::Header a;
  a.op = wire::Op::Auth;
  a.id = 1;
  a.a0 = wire::kProtocolVersion;
  a.a1 = uint64_t(params_.client);
  return a;
}

void ClientHandshake::check_answer(const wire::Header& h, std::span<const uint8_t> p) const {
  if (h.status == Errc::AuthFailed)
    throw FabricError(Errc::AuthFailed,
                      "server " + name_ + " refused our credentials (" +
                          (p.empty() ? std::string("shared secret differs?")
                                     : std::string(p.begin(), p.end())) +
                          ")");
  const size_t signed_size = wire::kMacSize + Signature().size();
  if (h.op != wire::Op::AuthOk || !h.reply || h.status != Errc::Ok ||
      (p.size() != wire::kMacSize && p.size() != signed_size))
    throw FabricError(Errc::Protocol, "unexpected answer to AUTH from " + name_);
  if (h.a1 != uint64_t(params_.agreed()))
    throw FabricError(Errc::Protocol, "server " + name_ + " announced protection " +
                                          std::to_string(h.a1) + ", expected " +
                                          std::to_string(unsigned(params_.agreed())));
  if (!mac_equal(server_proof(secret_, sn_, cn_, params_), p.first(wire::kMacSize)))
    throw FabricError(Errc::AuthFailed,
                      "server " + name_ + " could not prove the shared secret: refusing it");
  if (id_ && id_->expect_key) {
    if (p.size() != signed_size)
      throw FabricError(Errc::AuthFailed,
                        "server " + name_ + " did not prove its node identity (no node_key "
                        "configured there?): refusing it");
    Signature sig;
    std::memcpy(sig.data(), p.data() + wire::kMacSize, sig.size());
    if (!verify_signature(*id_->expect_key, transcript("tierce-S", params_, sn_, cn_, name_, {}),
                          sig))
      throw FabricError(Errc::AuthFailed,
                        "server " + name_ + " failed to prove it is node " + name_ +
                            " (its signature does not match that node's public key in the "
                            "topology: another host holding the cluster secret?): refusing it");
  }
}

void release_thread_crypto() { OPENSSL_thread_stop(); }

}  // namespace tierce::fabric
