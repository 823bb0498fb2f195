// fabric/auth.h — shared-secret challenge-response between peers (before any region is served).
//
// Exchange (frames in wire.h): the server sends HELLO with nonce sn; the client answers AUTH with
// its nonce cn and mac_c = HMAC-SHA256(secret, "tierce-c" || sn || cn); the server checks mac_c in
// constant time and answers AUTH_OK with mac_s = HMAC-SHA256(secret, "tierce-s" || cn || sn), which
// the client checks. Either side closes on a mismatch. Fresh nonces on both sides keep a recorded
// exchange from being replayed; the secret itself never crosses the wire.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fabric/wire.h"

namespace tierce::fabric {

inline constexpr size_t kMinSecretBytes = 16;

// Protection of tcp frames after the handshake (fabric.h explains the values, protect.h the
// format). Here because the handshake proofs cover it.
enum class Protection : uint8_t { None = 0, Mac = 1, Encrypt = 2 };

// What the proofs bind besides the nonces: the protocol version and both sides' protection
// settings, so that an on-path attacker cannot downgrade the protection by editing HELLO or AUTH.
struct HandshakeParams {
  uint8_t version = uint8_t(wire::kProtocolVersion);
  Protection server = Protection::None;
  Protection client = Protection::None;
  Protection agreed() const { return server > client ? server : client; }
};

using Nonce = std::array<uint8_t, 32>;
using Mac = std::array<uint8_t, 32>;

// The cluster secret. Every copy overwrites its bytes when it is destroyed or assigned over
// (OPENSSL_cleanse), so a freed copy leaves nothing behind in the heap for a memory scan to find.
class Secret {
 public:
  Secret() = default;
  // Throws FabricError{Config} when shorter than kMinSecretBytes.
  explicit Secret(std::string bytes);
  Secret(const Secret&) = default;
  Secret(Secret&& o) noexcept : bytes_(std::move(o.bytes_)) { o.wipe(); }
  Secret& operator=(const Secret& o) {
    if (this != &o) {
      wipe();
      bytes_ = o.bytes_;
    }
    return *this;
  }
  Secret& operator=(Secret&& o) noexcept {
    if (this != &o) {
      wipe();
      bytes_ = std::move(o.bytes_);
      o.wipe();
    }
    return *this;
  }
  ~Secret() { wipe(); }
  // Reads a secret file (surrounding whitespace stripped). Refuses (FabricError{Config}, with the
  // fix in the message) a file that its group or others may read or write, or that is owned by
  // neither the running user nor root.
  static Secret from_file(const std::string& path);
  bool empty() const { return bytes_.empty(); }
  const std::string& bytes() const { return bytes_; }

 private:
  void wipe() noexcept;  // overwrites the bytes (and the string's whole buffer), then clears
  std::string bytes_;
};

Nonce make_nonce();
Mac client_proof(const Secret& s, const Nonce& server_nonce, const Nonce& client_nonce,
                 const HandshakeParams& p = {});
Mac server_proof(const Secret& s, const Nonce& server_nonce, const Nonce& client_nonce,
                 const HandshakeParams& p = {});
// Constant-time comparison.
bool mac_equal(std::span<const uint8_t> a, std::span<const uint8_t> b);

// Frees what OpenSSL keeps for the calling thread (its per-thread state, made by the MACs above).
// A detached thread calls it before it tells anyone it is done: otherwise a process that exits
// right after may do so before the thread's own exit handlers freed it (LeakSanitizer saw that).
void release_thread_crypto();

// The client's half of HELLO → AUTH → AUTH_OK, whatever carries the frames (sockets, verbs).
class ClientHandshake {
 public:
  // `wanted`: the least protection this client accepts (None on shm and verbs).
  explicit ClientHandshake(const Secret& s, Protection wanted = Protection::None)
      : secret_(s), cn_(make_nonce()) {
    params_.client = wanted;
  }
  // Checks the server's HELLO; returns the AUTH payload to send. Throws FabricError{Protocol}
  // (not a Tierce server, or another protocol version) or {Busy} (the server refused us).
  std::vector<uint8_t> answer_hello(const wire::Header& h, std::span<const uint8_t> payload);
  // The AUTH header to send with that payload.
  wire::Header auth_header() const;
  // Checks the answer to AUTH. Throws FabricError{AuthFailed} or {Protocol}.
  void check_answer(const wire::Header& h, std::span<const uint8_t> payload) const;
  const std::string& server_name() const { return name_; }
  // After check_answer: the protection in force and the nonces its keys derive from.
  Protection protection() const { return params_.agreed(); }
  const Nonce& server_nonce() const { return sn_; }
  const Nonce& client_nonce() const { return cn_; }

 private:
  const Secret& secret_;
  Nonce sn_{}, cn_;
  HandshakeParams params_;
  std::string name_;
};

}  // namespace tierce::fabric
