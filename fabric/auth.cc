// fabric/auth.cc — HMAC-SHA256 proofs through OpenSSL.
#include "fabric/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "fabric/errors.h"
#include "fabric/random.h"

namespace tierce::fabric {

Secret::Secret(std::string bytes) : bytes_(std::move(bytes)) {
  if (bytes_.size() < kMinSecretBytes)
    throw FabricError(Errc::Config,
                      "shared secret is " + std::to_string(bytes_.size()) + " bytes; at least " +
                          std::to_string(kMinSecretBytes) +
                          " are needed (e.g. head -c 32 /dev/urandom | base64 > secret)");
}

Secret Secret::from_file(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw_errno("secret file " + path);
  if (st.st_mode & S_IROTH)
    throw FabricError(Errc::Config,
                      "secret file " + path + " is readable by others: chmod o-r " + path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_errno("open secret file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  auto b = s.find_first_not_of(" \t\r\n");
  auto e = s.find_last_not_of(" \t\r\n");
  s = b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  return Secret(std::move(s));
}

Nonce make_nonce() {
  Nonce n;
  random_bytes(n.data(), n.size());
  return n;
}

namespace {
Mac proof(const Secret& s, const char* label, const Nonce& first, const Nonce& second) {
  uint8_t msg[8 + 64];
  std::memcpy(msg, label, 8);
  std::memcpy(msg + 8, first.data(), 32);
  std::memcpy(msg + 40, second.data(), 32);
  Mac out{};
  unsigned len = 0;
  if (!HMAC(EVP_sha256(), s.bytes().data(), int(s.bytes().size()), msg, sizeof msg, out.data(),
            &len) ||
      len != out.size())
    throw FabricError(Errc::System, "HMAC-SHA256 failed (OpenSSL)");
  return out;
}
}  // namespace

Mac client_proof(const Secret& s, const Nonce& sn, const Nonce& cn) {
  return proof(s, "tierce-c", sn, cn);
}
Mac server_proof(const Secret& s, const Nonce& sn, const Nonce& cn) {
  return proof(s, "tierce-s", cn, sn);
}

bool mac_equal(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::vector<uint8_t> ClientHandshake::answer_hello(const wire::Header& h,
                                                   std::span<const uint8_t> p) {
  if (h.op != wire::Op::Hello || h.reply || p.size() < wire::kNonceSize)
    throw FabricError(Errc::Protocol,
                      "server did not start with HELLO: not a Tierce fabric server?");
  std::memcpy(sn_.data(), p.data(), sn_.size());
  name_.assign(p.begin() + wire::kNonceSize, p.end());
  Mac mac = client_proof(secret_, sn_, cn_);
  std::vector<uint8_t> auth(cn_.begin(), cn_.end());
  auth.insert(auth.end(), mac.begin(), mac.end());
  return auth;
}

void ClientHandshake::check_answer(const wire::Header& h, std::span<const uint8_t> p) const {
  if (h.status == Errc::AuthFailed)
    throw FabricError(Errc::AuthFailed,
                      "server " + name_ + " refused our credentials (shared secret differs?)");
  if (h.op != wire::Op::AuthOk || !h.reply || h.status != Errc::Ok || p.size() != wire::kMacSize)
    throw FabricError(Errc::Protocol, "unexpected answer to AUTH from " + name_);
  if (!mac_equal(server_proof(secret_, sn_, cn_), p))
    throw FabricError(Errc::AuthFailed,
                      "server " + name_ + " could not prove the shared secret: refusing it");
}

void release_thread_crypto() { OPENSSL_thread_stop(); }

}  // namespace tierce::fabric
