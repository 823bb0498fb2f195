// fabric/auth.h — shared-secret challenge-response between peers (before any region is served).
//
// Exchange (frames in wire.h): the server sends HELLO with nonce sn; the client answers AUTH with
// its nonce cn and mac_c = HMAC-SHA256(secret, "tierce-c" || sn || cn); the server checks mac_c in
// constant time and answers AUTH_OK with mac_s = HMAC-SHA256(secret, "tierce-s" || cn || sn), which
// the client checks. Either side closes on a mismatch. Fresh nonces on both sides keep a recorded
// exchange from being replayed; the secret itself never crosses the wire.
//
// Identity (version 3, identity.h): the secret proves membership only. A server with a node key
// appends to AUTH_OK its Ed25519 signature of the transcript ("tierce-S", version, both protection
// settings, sn, cn, its HELLO name); a client that expects a node checks it with that node's public
// key. A client with a node key appends to AUTH its name and its signature ("tierce-C", the same
// fields and both names); a server that knows the cluster's keys checks it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fabric/identity.h"
#include "fabric/wire.h"

namespace tierce::fabric {

inline constexpr size_t kMinSecretBytes = 16;

// The secret file's bytes are not a key: an operator may have typed them. Every proof and frame
// key is made from scrypt(file bytes, kSecretSalt, N, r, p) (the scrypt paper's interactive
// parameters: ~0.1 s and 16 MiB once per process), so a recorded handshake lets an attacker test
// a guessed secret at that cost, not at one HMAC's (issue 32: an offline dictionary on a weak
// secret). Changing any of these is a protocol change (wire::kProtocolVersion).
inline constexpr const char* kSecretSalt = "tierce cluster secret v4";
inline constexpr uint64_t kSecretScryptN = 1u << 14, kSecretScryptR = 8, kSecretScryptP = 1;
inline constexpr size_t kSecretKeyBytes = 32;

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

// The cluster secret, held as the key derived from it (above): the file's bytes are overwritten as
// soon as the key is made. Every copy overwrites its key when it is destroyed or assigned over
// (OPENSSL_cleanse), so a freed copy leaves nothing behind in the heap for a memory scan to find.
class Secret {
 public:
  Secret() = default;
  // Throws FabricError{Config} when shorter than kMinSecretBytes. Runs scrypt (~0.1 s).
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
  // The derived key (kSecretKeyBytes), never the file's bytes.
  const std::string& key() const { return bytes_; }
  bool operator==(const Secret& o) const { return mac_equal_bytes(bytes_, o.bytes_); }

 private:
  static bool mac_equal_bytes(const std::string& a, const std::string& b);
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

// Who a client expects at the other end, and who it is (identity.h). Every field optional.
struct ClientIdentity {
  // The node this connection is for: the server's HELLO must name it ("" = any member).
  std::string expect_node;
  // That node's public key: the server must sign the handshake with it, or the connection fails
  // (AuthFailed) before it is used. Unset: the shared secret alone is checked.
  std::optional<PublicKey> expect_key;
  // This client's node name and key: when both are set it signs the handshake.
  std::string node;
  NodeKey key;
};

// A server's identity and what it knows of its clients'.
struct ServerIdentity {
  NodeKey key;  // signs every handshake (with the server's name) when set
  // Public keys by node name: a client that signs is checked against its name's key (an
  // unknown name is refused). Empty: signatures are not checked, every client counts as unsigned.
  std::map<std::string, PublicKey> peers;
  bool require_clients = false;  // refuse a client that does not sign
};

// AUTH's payload: the client's nonce and proof, then (a client with a key) u8 name length, name,
// signature. nullopt when malformed.
struct AuthRequest {
  Nonce cn{};
  Mac mac{};
  std::string node;  // "" when the client did not sign
  Signature sig{};
};
std::optional<AuthRequest> parse_auth(std::span<const uint8_t> payload);

enum class AuthVerdict {
  Ok,
  BadProof,      // the shared secret's proof does not match (another secret?)
  UnknownNode,   // signed as a node this server has no key for
  BadSignature,  // signed as a node, but not with its key
  Unsigned,      // the server requires a signed client
};
// The server's check of AUTH. *node = the client's proven node name ("" when it did not sign).
AuthVerdict check_auth(const AuthRequest& a, const Secret& s, const Nonce& sn,
                       const HandshakeParams& p, const std::string& server_name,
                       const ServerIdentity& id, std::string* node);
// The log line (with its message id) for a refusal other than BadProof: `remote` the peer's
// address, `claimed` the node it signed as.
std::string identity_refusal(AuthVerdict v, const std::string& remote, const std::string& claimed);
// AUTH_OK's payload: the server's proof, then its signature when it has a key.
std::vector<uint8_t> auth_ok_payload(const Secret& s, const Nonce& sn, const Nonce& cn,
                                     const HandshakeParams& p, const std::string& server_name,
                                     const ServerIdentity& id);

// Frees what OpenSSL keeps for the calling thread (its per-thread state, made by the MACs above).
// A detached thread calls it before it tells anyone it is done: otherwise a process that exits
// right after may do so before the thread's own exit handlers freed it (LeakSanitizer saw that).
void release_thread_crypto();

// The client's half of HELLO → AUTH → AUTH_OK, whatever carries the frames (sockets, verbs).
class ClientHandshake {
 public:
  // `wanted`: the least protection this client accepts (None on shm and verbs).
  // `id`: whom it expects and who it is (nullptr: neither); must outlive the handshake.
  explicit ClientHandshake(const Secret& s, Protection wanted = Protection::None,
                           const ClientIdentity* id = nullptr)
      : secret_(s), id_(id), cn_(make_nonce()) {
    params_.client = wanted;
  }
  // Checks the server's HELLO; returns the AUTH payload to send. Throws FabricError{Protocol}
  // (not a Tierce server, or another protocol version) or {Busy} (the server refused us).
  std::vector<uint8_t> answer_hello(const wire::Header& h, std::span<const uint8_t> payload);
  // The AUTH header to send with that payload.
  wire::Header auth_header() const;
  // Checks the answer to AUTH (and, with an expected key, the server's signature). Throws
  // FabricError{AuthFailed} or {Protocol}.
  void check_answer(const wire::Header& h, std::span<const uint8_t> payload) const;
  const std::string& server_name() const { return name_; }
  // After check_answer: the protection in force and the nonces its keys derive from.
  Protection protection() const { return params_.agreed(); }
  const Nonce& server_nonce() const { return sn_; }
  const Nonce& client_nonce() const { return cn_; }

 private:
  const Secret& secret_;
  const ClientIdentity* id_;
  Nonce sn_{}, cn_;
  HandshakeParams params_;
  std::string name_;
};

}  // namespace tierce::fabric
