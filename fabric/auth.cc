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
}

void Secret::wipe() noexcept {
  // The whole buffer: a string that shrank keeps old bytes past its size.
  if (bytes_.capacity()) OPENSSL_cleanse(bytes_.data(), bytes_.capacity());
  bytes_.clear();
}

Secret Secret::from_file(const std::string& path) {
  // Checked on the descriptor that is then read, so the file cannot be swapped in between.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd) throw_errno("open secret file " + path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_errno("secret file " + path);
  if (!S_ISREG(st.st_mode))
    throw FabricError(Errc::Config, "secret file " + path + " is not a regular file");
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    throw FabricError(Errc::Config,
                      "secret file " + path + " is owned by uid " + std::to_string(st.st_uid) +
                          ", neither this user (uid " + std::to_string(::geteuid()) +
                          ") nor root: anyone who owns it can change it; chown it to the user "
                          "the service runs as, then chmod 600 " + path);
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    throw FabricError(Errc::Config, "secret file " + path + " is accessible to its group or "
                                        "others (mode " + [&] {
                                          char m[8];
                                          std::snprintf(m, sizeof m, "%04o",
                                                        unsigned(st.st_mode & 07777));
                                          return std::string(m);
                                        }() + "): chmod 600 " + path);
  // The file is read into one buffer of its size (no reallocation leaves a copy behind), and the
  // read buffer and that one are overwritten once the Secret holds the bytes.
  if (st.st_size > off_t(1) << 20)
    throw FabricError(Errc::Config, "secret file " + path + " is over 1 MiB: not a secret?");
  std::string s(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < s.size()) {
    ssize_t n = ::read(fd.get(), s.data() + got, s.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      OPENSSL_cleanse(s.data(), s.size());
      throw_errno("read secret file " + path);
    }
    if (n == 0) break;
    got += size_t(n);
  }
  auto b = s.find_first_not_of(" \t\r\n");
  auto e = s.find_last_not_of(" \t\r\n");
  std::string trimmed = b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  OPENSSL_cleanse(s.data(), s.size());
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
  if (!HMAC(EVP_sha256(), s.bytes().data(), int(s.bytes().size()), msg, sizeof msg, out.data(),
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
                          " (frame protection): run the same Tierce release on both ends");
  if (p.size() < wire::kNonceSize || h.a1 > uint64_t(Protection::Encrypt))
    throw FabricError(Errc::Protocol, "malformed HELLO from the server");
  params_.server = Protection(h.a1);
  std::memcpy(sn_.data(), p.data(), sn_.size());
  name_.assign(p.begin() + wire::kNonceSize, p.end());
  Mac mac = client_proof(secret_, sn_, cn_, params_);
  std::vector<uint8_t> auth(cn_.begin(), cn_.end());
  auth.insert(auth.end(), mac.begin(), mac.end());
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
  if (h.op != wire::Op::AuthOk || !h.reply || h.status != Errc::Ok || p.size() != wire::kMacSize)
    throw FabricError(Errc::Protocol, "unexpected answer to AUTH from " + name_);
  if (h.a1 != uint64_t(params_.agreed()))
    throw FabricError(Errc::Protocol, "server " + name_ + " announced protection " +
                                          std::to_string(h.a1) + ", expected " +
                                          std::to_string(unsigned(params_.agreed())));
  if (!mac_equal(server_proof(secret_, sn_, cn_, params_), p))
    throw FabricError(Errc::AuthFailed,
                      "server " + name_ + " could not prove the shared secret: refusing it");
}

void release_thread_crypto() { OPENSSL_thread_stop(); }

}  // namespace tierce::fabric
