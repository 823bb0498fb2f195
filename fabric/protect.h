// fabric/protect.h — per-frame protection of tcp connections after the handshake.
//
// Keys: HKDF-SHA256 (RFC 5869) with the shared secret as input keying material, salt = sn || cn
// (both handshake nonces, so every connection has fresh keys), info = "tierce-fabric v2 " plus
// the direction ("c2s"/"s2c") and the protection byte; one 32-byte AES-256 key per direction.
//
// Frames: header (48 bytes, wire.h) || payload || tag (16 bytes). The header's length field
// counts the payload only. The tag is AES-256-GCM's, with the 12-byte nonce = 4 zero bytes ||
// the direction's frame sequence number (u64 LE: 0 for the first frame after AUTH_OK, +1 per
// frame). The sequence number is implicit (both ends count), so a replayed, dropped, reordered or
// injected frame fails its tag: the receiver closes the connection.
//   mac      GMAC: header and payload are additional authenticated data, nothing is encrypted.
//   encrypt  the header is additional authenticated data, the payload is encrypted.
// Why AES-GCM and not a truncated HMAC-SHA256: with AES-NI and PCLMULQDQ (every x86-64 server of
// the last decade), GHASH runs at several GB/s and a keyed context is re-armed per frame by
// setting the IV alone, where HMAC-SHA256 costs two SHA-256 compressions of fixed overhead plus
// ~0.5 GB/s; one primitive also serves both modes. Nonce reuse, GCM's weak spot, cannot happen:
// keys are per connection and per direction, and the sequence number never wraps (2^64 frames).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "fabric/auth.h"
#include "fabric/fabric.h"

namespace tierce::fabric {

class FrameProtector {
 public:
  static constexpr size_t kTagSize = 16;

  FrameProtector();  // inactive: frames pass unprotected
  // `client` says which side this is (it picks the send and receive keys).
  FrameProtector(const Secret& s, const Nonce& sn, const Nonce& cn, Protection p, bool client);
  ~FrameProtector();
  FrameProtector(FrameProtector&&) noexcept;
  FrameProtector& operator=(FrameProtector&&) noexcept;

  bool active() const { return mode_ != Protection::None; }
  Protection mode() const { return mode_; }
  size_t tag_size() const { return active() ? kTagSize : 0; }

  // Seals the next outgoing frame: `hdr` is its encoded 48-byte header, `payload` its `len`
  // bytes, encrypted in place in Encrypt mode (in Mac mode they are only read). Writes the tag.
  void seal(const uint8_t* hdr, uint8_t* payload, size_t len, uint8_t* tag);
  // Mac mode: seals without touching the payload (large replies sent straight from a region).
  void seal_const(const uint8_t* hdr, const uint8_t* payload, size_t len, uint8_t* tag);
  // Checks the next incoming frame and decrypts its payload in place (Encrypt). False when the
  // tag does not match: the payload must not be used and the connection must be closed (the
  // sequence numbers no longer agree).
  bool open(const uint8_t* hdr, uint8_t* payload, size_t len, const uint8_t* tag);

  struct Dir;  // one direction's cipher context and sequence number (protect.cc)

 private:
  Protection mode_ = Protection::None;
  std::unique_ptr<Dir> send_, recv_;
};

// HKDF-SHA256 with a 32-byte output (exposed for the unit test against RFC 5869's vectors).
void hkdf_sha256_32(const uint8_t* salt, size_t salt_len, const uint8_t* ikm, size_t ikm_len,
                    const uint8_t* info, size_t info_len, uint8_t out[32]);

}  // namespace tierce::fabric
