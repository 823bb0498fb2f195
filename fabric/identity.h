// fabric/identity.h — node identity: one Ed25519 key pair per node (issue 32, point 1).
//
// The cluster secret proves membership: whoever holds it may connect. It cannot prove *which*
// node answered a connection: every node can make every proof. A node's private key can. In the
// handshake (auth.h) a server that has a key signs the transcript — protocol version, both
// protection settings, both nonces and its node name — and a client that expects a node checks
// the signature against that node's public key from the topology (`public_key` of its [[node]]).
// A connection redirected to another node (another lockd, another memd) fails right there, before
// any region or lock word is touched. A client may sign too (its own name); a server that knows
// the cluster's keys then knows which node is calling (PeerInfo::verified_node).
//
// Key files: PEM (PKCS#8, "-----BEGIN PRIVATE KEY-----"), mode 0600, owned by the running user or
// root, like the secret file. `tierce-fabric keygen FILE` writes one and prints its public key.
// Public keys are written "ed25519:" followed by the 32 bytes in base64.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

typedef struct evp_pkey_st EVP_PKEY;

namespace tierce::fabric {

using PublicKey = std::array<uint8_t, 32>;
using Signature = std::array<uint8_t, 64>;

// "ed25519:BASE64" <-> 32 bytes. parse_public_key: nullopt on anything else.
std::string format_public_key(const PublicKey& k);
std::optional<PublicKey> parse_public_key(std::string_view text);

// True when `sig` is k's signature of `msg`.
bool verify_signature(const PublicKey& k, std::span<const uint8_t> msg, const Signature& sig);

// A node's private key. Copies share the one OpenSSL key object (freed, and its bytes cleared by
// OpenSSL, with the last copy).
class NodeKey {
 public:
  NodeKey() = default;
  // A new random key.
  static NodeKey generate();
  // Reads a PEM private key file. Throws FabricError{Config} saying what to fix: a file its group
  // or others may read or write, owned by neither this user nor root, not a PEM Ed25519 key.
  static NodeKey from_file(const std::string& path);
  // Writes the key to `path` (created 0600; refuses to overwrite). Throws FabricError.
  void write_file(const std::string& path) const;
  bool empty() const { return !pkey_; }
  const PublicKey& public_key() const { return pub_; }
  Signature sign(std::span<const uint8_t> msg) const;

 private:
  explicit NodeKey(std::shared_ptr<EVP_PKEY> k);
  std::shared_ptr<EVP_PKEY> pkey_;
  PublicKey pub_{};
};

}  // namespace tierce::fabric
