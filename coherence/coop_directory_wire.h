// coherence/coop_directory_wire.h — the update messages of the cooperative cache's directory
// (coop_directory.h): what a proxy sends to a key's home proxy (its memd's [coop] role, service
// "coop.dir.update") to publish or withdraw a copy, withdraw a dead node's copies or invalidate a
// key.
// Metadata reads are one-sided (read_entry); only updates are messages, applied by the owner.
//
// All integers little-endian; every message has a fixed size. Common head (8 bytes):
//
//   0 version u8 (kDirWireVersion = 1) | 1 type u8 (MessageType) | 2 reserved u16 = 0
//   | 4 reserved u32 = 0
//
//   publish (1)        8 key_hash u64 | 16 key_check u64 | 24 length u64 | 32 tag.home u32
//                      | 36 reserved u32 = 0 | 40 tag.slot u64 | 48 tag.version u64
//                      | 56 node u16 | 58 kind u8 (1 arena, 2 pool) | 59 reserved u8 = 0
//                      | 60 slot_size u32 | 64 offset u64 | 72 generation u64          = 80
//   withdraw (2)       8 key_hash u64 | 16 key_check u64 | 24 node u16 | 26 kind u8
//                      | 27 reserved u8 = 0 | 28 reserved u32 = 0 | 32 offset u64
//                      | 40 generation u64                                             = 48
//   withdraw_node (3)  8 node u16 | 10 reserved u16 = 0 | 12 reserved u32 = 0            = 16
//   invalidate (4)     8 key_hash u64 | 16 key_check u64                                  = 24
//
// Reply (home -> sender), 8 bytes + message:
//
//   0 version u8 | 1 status u8 (UpdateStatus) | 2 msg_len u16 | 4 count u32 | 8 message
//                                                                            = 8 + msg_len
//
// Decoders are strict: a wrong size for the type, an unknown version or type, a non-zero reserved
// field, an unknown region kind, a status out of range is a DirWireError naming what is wrong.
// Range checks that need the directory (node < its node count, slot size >= length, pool
// alignment) are the directory's: apply_message() returns BadLocation for them.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "coherence/coop_directory.h"

namespace tierce::coherence::dirwire {

inline constexpr uint8_t kDirWireVersion = 1;
inline constexpr size_t kHead = 8;
inline constexpr size_t kPublishBytes = 80, kWithdrawBytes = 48, kWithdrawNodeBytes = 16,
                        kInvalidateBytes = 24, kReplyHead = 8;
inline constexpr size_t kMaxReplyMessage = 1024;  // longer reasons are cut

inline constexpr const char* kRegion = "coop.dir";
inline constexpr const char* kUpdateService = "coop.dir.update";

enum class MessageType : uint8_t { Publish = 1, Withdraw = 2, WithdrawNode = 3, Invalidate = 4 };

class DirWireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Publish {
  uint64_t key_hash = 0;
  uint64_t key_check = 0;
  uint64_t length = 0;
  Tag tag;
  Location where;
};
struct Withdraw {
  uint64_t key_hash = 0;
  uint64_t key_check = 0;
  uint16_t node = 0;
  CopyRegion kind = CopyRegion::Pool;
  uint64_t offset = 0;
  uint64_t generation = 0;
};
struct WithdrawNode {
  uint16_t node = 0;
};
struct Invalidate {
  uint64_t key_hash = 0;
  uint64_t key_check = 0;
};
using Message = std::variant<Publish, Withdraw, WithdrawNode, Invalidate>;

struct Reply {
  UpdateStatus status = UpdateStatus::NotFound;
  uint32_t count = 0;
  std::string message;
};

std::vector<uint8_t> encode(const Message& m);
std::vector<uint8_t> encode(const Reply& r);
// Throw DirWireError naming what is wrong.
Message decode_message(std::span<const uint8_t> body);
Reply decode_reply(std::span<const uint8_t> body);

// The owner's entry point for one message: applies a decoded message to `dir`. (Not named
// apply: argument-dependent lookup would offer std::apply for a std::variant or std::vector.)
UpdateResult apply_message(CoopDirectory& dir, const Message& m);
// The service handler's body: decodes, applies and encodes the reply. A body that does not decode
// is a BadRequest reply with the reason (never an exception, never a change).
std::vector<uint8_t> apply_body(CoopDirectory& dir, std::span<const uint8_t> body);

}  // namespace tierce::coherence::dirwire
