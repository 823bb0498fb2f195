// fabric/protect.cc — AES-256-GCM frame tags (and payload encryption) through OpenSSL EVP.
#include "fabric/protect.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "fabric/errors.h"
#include "fabric/wire.h"

namespace tierce::fabric {

void hkdf_sha256_32(const uint8_t* salt, size_t salt_len, const uint8_t* ikm, size_t ikm_len,
                    const uint8_t* info, size_t info_len, uint8_t out[32]) {
  uint8_t prk[32];
  unsigned n = 0;
  if (!HMAC(EVP_sha256(), salt, int(salt_len), ikm, ikm_len, prk, &n) || n != 32)
    throw FabricError(Errc::System, "HKDF extract failed (OpenSSL)");
  // Expand, one block: T(1) = HMAC(PRK, info || 0x01).
  std::string msg(reinterpret_cast<const char*>(info), info_len);
  msg.push_back('\x01');
  if (!HMAC(EVP_sha256(), prk, sizeof prk, reinterpret_cast<const uint8_t*>(msg.data()),
            msg.size(), out, &n) ||
      n != 32)
    throw FabricError(Errc::System, "HKDF expand failed (OpenSSL)");
  OPENSSL_cleanse(prk, sizeof prk);
}

struct FrameProtector::Dir {
  EVP_CIPHER_CTX* ctx = nullptr;
  uint64_t seq = 0;
  bool encrypt = false;  // this context seals (EVP_Encrypt*) rather than opens
  ~Dir() { EVP_CIPHER_CTX_free(ctx); }

  void iv(uint8_t out[12]) {
    std::memset(out, 0, 4);
    wire::store_le64(out + 4, seq);
    if (++seq == 0) throw FabricError(Errc::Protocol, "frame sequence number wrapped");
  }
};

namespace {

[[noreturn]] void evp_failed(const char* what) {
  throw FabricError(Errc::System, std::string("AES-GCM ") + what + " failed (OpenSSL)");
}

std::unique_ptr<FrameProtector::Dir> make_dir(const uint8_t key[32], bool encrypt);

}  // namespace

FrameProtector::FrameProtector(const Secret& s, const Nonce& sn, const Nonce& cn, Protection p,
                               bool client)
    : mode_(p) {
  if (p == Protection::None) return;
  uint8_t salt[64];
  std::memcpy(salt, sn.data(), 32);
  std::memcpy(salt + 32, cn.data(), 32);
  uint8_t c2s[32], s2c[32];
  auto derive = [&](const char* dir, uint8_t* out) {
    std::string info = std::string("tierce-fabric v2 ") + dir;
    info.push_back(char(p));
    hkdf_sha256_32(salt, sizeof salt, reinterpret_cast<const uint8_t*>(s.key().data()),
                   s.key().size(), reinterpret_cast<const uint8_t*>(info.data()), info.size(),
                   out);
  };
  derive("c2s", c2s);
  derive("s2c", s2c);
  send_ = make_dir(client ? c2s : s2c, true);
  recv_ = make_dir(client ? s2c : c2s, false);
  OPENSSL_cleanse(c2s, sizeof c2s);
  OPENSSL_cleanse(s2c, sizeof s2c);
}

FrameProtector::FrameProtector() = default;
FrameProtector::~FrameProtector() = default;
FrameProtector::FrameProtector(FrameProtector&&) noexcept = default;
FrameProtector& FrameProtector::operator=(FrameProtector&&) noexcept = default;

namespace {

std::unique_ptr<FrameProtector::Dir> make_dir(const uint8_t key[32], bool encrypt) {
  auto d = std::make_unique<FrameProtector::Dir>();
  d->encrypt = encrypt;
  d->ctx = EVP_CIPHER_CTX_new();
  if (!d->ctx) evp_failed("context");
  // The key is set once; each frame only sets its IV (cheap: no key schedule per frame).
  int ok = encrypt ? EVP_EncryptInit_ex(d->ctx, EVP_aes_256_gcm(), nullptr, key, nullptr)
                   : EVP_DecryptInit_ex(d->ctx, EVP_aes_256_gcm(), nullptr, key, nullptr);
  if (ok != 1) evp_failed("key setup");
  return d;
}

// GCM's AAD and data lengths are ints in EVP: feed big buffers in slices.
constexpr size_t kSlice = size_t(1) << 30;

}  // namespace

void FrameProtector::seal_const(const uint8_t* hdr, const uint8_t* p, size_t len, uint8_t* tag) {
  if (mode_ != Protection::Mac) throw std::logic_error("seal_const outside Mac mode");
  seal(hdr, const_cast<uint8_t*>(p), len, tag);  // Mac mode only reads the payload
}

void FrameProtector::seal(const uint8_t* hdr, uint8_t* p, size_t len, uint8_t* tag) {
  Dir& d = *send_;
  uint8_t iv[12];
  d.iv(iv);
  int n = 0;
  if (EVP_EncryptInit_ex(d.ctx, nullptr, nullptr, nullptr, iv) != 1) evp_failed("IV");
  if (mode_ == Protection::Mac && p == hdr + wire::kHeaderSize && len < kSlice) {
    // Header and payload contiguous (a frame built in one buffer): one AAD pass.
    if (EVP_EncryptUpdate(d.ctx, nullptr, &n, hdr, int(wire::kHeaderSize + len)) != 1)
      evp_failed("AAD");
  } else {
    if (EVP_EncryptUpdate(d.ctx, nullptr, &n, hdr, int(wire::kHeaderSize)) != 1)
      evp_failed("AAD");
    for (size_t off = 0; off < len; off += kSlice) {
      int k = int(std::min(kSlice, len - off));
      int r = mode_ == Protection::Encrypt ? EVP_EncryptUpdate(d.ctx, p + off, &n, p + off, k)
                                           : EVP_EncryptUpdate(d.ctx, nullptr, &n, p + off, k);
      if (r != 1) evp_failed("update");
    }
  }
  if (EVP_EncryptFinal_ex(d.ctx, nullptr, &n) != 1) evp_failed("final");
  if (EVP_CIPHER_CTX_ctrl(d.ctx, EVP_CTRL_GCM_GET_TAG, int(kTagSize), tag) != 1) evp_failed("tag");
}

bool FrameProtector::open(const uint8_t* hdr, uint8_t* p, size_t len, const uint8_t* tag) {
  Dir& d = *recv_;
  uint8_t iv[12];
  d.iv(iv);
  int n = 0;
  if (EVP_DecryptInit_ex(d.ctx, nullptr, nullptr, nullptr, iv) != 1) evp_failed("IV");
  if (EVP_DecryptUpdate(d.ctx, nullptr, &n, hdr, int(wire::kHeaderSize)) != 1) evp_failed("AAD");
  for (size_t off = 0; off < len; off += kSlice) {
    int k = int(std::min(kSlice, len - off));
    int r = mode_ == Protection::Encrypt ? EVP_DecryptUpdate(d.ctx, p + off, &n, p + off, k)
                                         : EVP_DecryptUpdate(d.ctx, nullptr, &n, p + off, k);
    if (r != 1) evp_failed("update");
  }
  uint8_t t[kTagSize];
  std::memcpy(t, tag, kTagSize);
  if (EVP_CIPHER_CTX_ctrl(d.ctx, EVP_CTRL_GCM_SET_TAG, int(kTagSize), t) != 1) evp_failed("tag");
  return EVP_DecryptFinal_ex(d.ctx, nullptr, &n) == 1;
}

}  // namespace tierce::fabric
