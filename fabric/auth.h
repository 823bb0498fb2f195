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

using Nonce = std::array<uint8_t, 32>;
using Mac = std::array<uint8_t, 32>;

class Secret {
 public:
  Secret() = default;
  // Throws FabricError{Config} when shorter than kMinSecretBytes.
  explicit Secret(std::string bytes);
  // Reads a secret file (surrounding whitespace stripped). Refuses a file readable by others.
  static Secret from_file(const std::string& path);
  bool empty() const { return bytes_.empty(); }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

Nonce make_nonce();
Mac client_proof(const Secret& s, const Nonce& server_nonce, const Nonce& client_nonce);
Mac server_proof(const Secret& s, const Nonce& server_nonce, const Nonce& client_nonce);
// Constant-time comparison.
bool mac_equal(std::span<const uint8_t> a, std::span<const uint8_t> b);

// Frees what OpenSSL keeps for the calling thread (its per-thread state, made by the MACs above).
// A detached thread calls it before it tells anyone it is done: otherwise a process that exits
// right after may do so before the thread's own exit handlers freed it (LeakSanitizer saw that).
void release_thread_crypto();

// The client's half of HELLO → AUTH → AUTH_OK, whatever carries the frames (sockets, verbs).
class ClientHandshake {
 public:
  explicit ClientHandshake(const Secret& s) : secret_(s), cn_(make_nonce()) {}
  // Checks the server's HELLO; returns the AUTH payload to send. Throws FabricError{Protocol}.
  std::vector<uint8_t> answer_hello(const wire::Header& h, std::span<const uint8_t> payload);
  // Checks the answer to AUTH. Throws FabricError{AuthFailed} or {Protocol}.
  void check_answer(const wire::Header& h, std::span<const uint8_t> payload) const;
  const std::string& server_name() const { return name_; }

 private:
  const Secret& secret_;
  Nonce sn_{}, cn_;
  std::string name_;
};

}  // namespace tierce::fabric
