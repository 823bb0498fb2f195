// fabric/identity.cc — Ed25519 keys and signatures through OpenSSL's EVP interface.
#include "fabric/identity.h"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "fabric/errors.h"
#include "fabric/private_file.h"
#include "fabric/socket.h"

namespace tierce::fabric {

namespace {

constexpr std::string_view kPrefix = "ed25519:";

[[noreturn]] void crypto_failed(const std::string& what) {
  throw FabricError(Errc::System, what + " failed (OpenSSL)");
}

std::shared_ptr<EVP_PKEY> own(EVP_PKEY* k) { return std::shared_ptr<EVP_PKEY>(k, EVP_PKEY_free); }

}  // namespace

std::string format_public_key(const PublicKey& k) {
  unsigned char out[4 * ((32 + 2) / 3) + 1];
  int n = EVP_EncodeBlock(out, k.data(), int(k.size()));
  return std::string(kPrefix) + std::string(reinterpret_cast<char*>(out), size_t(n));
}

std::optional<PublicKey> parse_public_key(std::string_view text) {
  if (text.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  std::string_view b64 = text.substr(kPrefix.size());
  if (b64.size() != 44 || b64[43] != '=' || b64[42] == '=') return std::nullopt;  // 32 bytes
  unsigned char out[33];
  int n = EVP_DecodeBlock(out, reinterpret_cast<const unsigned char*>(b64.data()), int(b64.size()));
  if (n != 33) return std::nullopt;  // 44 characters decode to 33 bytes, the last one padding
  PublicKey k;
  std::memcpy(k.data(), out, k.size());
  // Round trip: no other spelling of the same bytes is accepted.
  if (format_public_key(k) != text) return std::nullopt;
  return k;
}

bool verify_signature(const PublicKey& k, std::span<const uint8_t> msg, const Signature& sig) {
  auto key = own(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, k.data(), k.size()));
  if (!key) return false;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1)
    return false;
  return EVP_DigestVerify(ctx.get(), sig.data(), sig.size(), msg.data(), msg.size()) == 1;
}

NodeKey::NodeKey(std::shared_ptr<EVP_PKEY> k) : pkey_(std::move(k)) {
  size_t len = pub_.size();
  if (EVP_PKEY_get_raw_public_key(pkey_.get(), pub_.data(), &len) != 1 || len != pub_.size())
    crypto_failed("reading an Ed25519 public key");
}

NodeKey NodeKey::generate() {
  EVP_PKEY* k = nullptr;
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(
      EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr), EVP_PKEY_CTX_free);
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_keygen(ctx.get(), &k) != 1)
    crypto_failed("generating an Ed25519 key");
  return NodeKey(own(k));
}

NodeKey NodeKey::from_file(const std::string& path) {
  std::string buf = read_private_file(path, "node key file", 16384, "over 16 KiB: not a key?");
  BIO* bio = BIO_new_mem_buf(buf.data(), int(buf.size()));
  EVP_PKEY* k = bio ? PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(bio);
  OPENSSL_cleanse(buf.data(), buf.capacity());
  if (!k || EVP_PKEY_id(k) != EVP_PKEY_ED25519) {
    EVP_PKEY_free(k);
    throw FabricError(Errc::Config, "node key file " + path +
                                        " does not hold a PEM Ed25519 private key (make one "
                                        "with: tierce-fabric keygen " + path + ")");
  }
  return NodeKey(own(k));
}

void NodeKey::write_file(const std::string& path) const {
  if (!pkey_) throw FabricError(Errc::Config, "no key to write");
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600));
  if (!fd) throw_errno("create node key file " + path);
  BIO* bio = BIO_new(BIO_s_mem());
  if (!bio || PEM_write_bio_PrivateKey(bio, pkey_.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    BIO_free(bio);
    crypto_failed("encoding the key");
  }
  char* data = nullptr;
  long len = BIO_get_mem_data(bio, &data);
  long off = 0;
  while (off < len) {
    ssize_t n = ::write(fd.get(), data + off, size_t(len - off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      BIO_free(bio);  // (a memory BIO: its buffer is freed; the file is removed below)
      ::unlink(path.c_str());
      errno = e;
      throw_errno("write node key file " + path);
    }
    off += n;
  }
  OPENSSL_cleanse(data, size_t(len));
  BIO_free(bio);
  if (::fsync(fd.get()) != 0) throw_errno("fsync node key file " + path);
}

Signature NodeKey::sign(std::span<const uint8_t> msg) const {
  if (!pkey_) throw FabricError(Errc::Config, "signing without a node key");
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  Signature sig{};
  size_t len = sig.size();
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, pkey_.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig.data(), &len, msg.data(), msg.size()) != 1 || len != sig.size())
    crypto_failed("Ed25519 signing");
  return sig;
}

}  // namespace tierce::fabric
