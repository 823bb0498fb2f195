// ftp_adts/adts/wire.h — the ADTS stream formats (docs/ftp.md "ADTS wire format") and the socket
// primitives every channel shares: non-blocking I/O where each wait is bounded by the session's
// data timeout (no progress for that long = AdtsError{Timeout}). Internal to tierce::adts.
//
//   HELLO (24)      u32 'TADS' | u16 version=1 | u16 stream_index | u16 streams | u16 0 | u64 cookie
//   HELLO-ACK (8)   u32 'TADA' | u32 status (HelloStatus)
//   BLOCK (32)      u32 'TBLK' | u8 type | u8[3] 0 | u64 transfer_id | u64 offset | u64 length
// All little-endian.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/fd.h"
#include "ftp_adts/adts/adts.h"

namespace tierce::adts::wire {

constexpr uint32_t kHelloMagic = 0x53444154;  // "TADS"
constexpr uint32_t kAckMagic = 0x41444154;    // "TADA"
constexpr uint32_t kBlockMagic = 0x4b4c4254;  // "TBLK"
constexpr uint16_t kVersion = 1;
constexpr size_t kHelloSize = 24;
constexpr size_t kAckSize = 8;
constexpr size_t kHeaderSize = 32;

enum class BlockType : uint8_t { Begin = 1, Data = 2, End = 3, Abort = 4 };

// HELLO-ACK status: why a stream was refused (0 = accepted).
enum class HelloStatus : uint32_t {
  Ok = 0,
  BadMagic = 1,
  BadVersion = 2,
  BadCookie = 3,
  BadStreamCount = 4,
  BadIndex = 5,      // index >= streams, or an index already connected
};
std::string to_string(HelloStatus s);

struct Hello {
  uint32_t magic = kHelloMagic;
  uint16_t version = kVersion;
  uint16_t index = 0;
  uint16_t streams = 1;
  uint16_t reserved = 0;
  uint64_t cookie = 0;
};
void encode(const Hello& h, uint8_t out[kHelloSize]);
Hello decode_hello(const uint8_t in[kHelloSize]);

struct Header {
  uint32_t magic = kBlockMagic;
  BlockType type = BlockType::Data;
  uint64_t transfer_id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};
void encode(const Header& h, uint8_t out[kHeaderSize]);
// Decodes and checks magic and type; throws AdtsError{Protocol} naming what was wrong.
Header decode_header(const uint8_t in[kHeaderSize]);

void put_u16(uint8_t* p, uint16_t v);
void put_u32(uint8_t* p, uint32_t v);
void put_u64(uint8_t* p, uint64_t v);
uint16_t get_u16(const uint8_t* p);
uint32_t get_u32(const uint8_t* p);
uint64_t get_u64(const uint8_t* p);

// ---- socket primitives ------------------------------------------------------------------------

std::string errno_text(int e);
[[noreturn]] void throw_errno(AdtsError::Code c, const std::string& what, int e);
// AdtsError{Timeout}: "no progress <what> within <timeout> ms".
[[noreturn]] void throw_no_progress(const char* what, Millis timeout);
// Whether a socket errno means the peer or the path to it is gone (PeerClosed, not LocalIo).
bool is_peer_gone(int e);

void set_nonblocking(int fd);
void tune_socket(int fd);  // TCP_NODELAY off, large buffers left to autotuning; SIGPIPE-free I/O

// Waits for `events` on fd for at most `timeout`; throws Timeout naming `what` on expiry.
// Returns the revents (POLLHUP/POLLERR are left for the following I/O call to report).
short wait_fd(int fd, short events, Millis timeout, const char* what);

// Whole-buffer send/recv on a non-blocking socket. EOF / reset -> PeerClosed; no progress within
// timeout -> Timeout.
void send_all(int fd, const void* buf, size_t n, Millis timeout);
void recv_all(int fd, void* buf, size_t n, Millis timeout);
// Reads and drops n bytes.
void discard(int fd, uint64_t n, Millis timeout);

// Sends [off, off+len) of file fd with sendfile(2). A file that ends early returns the bytes sent
// (< len); a socket failure throws PeerClosed/Timeout, a read error LocalIo.
uint64_t sendfile_some(int sock, int file, uint64_t off, uint64_t len, Millis timeout);

// sendfile(2) has no MSG_NOSIGNAL: while one of these lives, SIGPIPE is blocked in this thread,
// and a SIGPIPE raised by our write is consumed before the mask is restored, so a closed peer is
// an EPIPE error and never kills the process.
class SigpipeGuard {
 public:
  SigpipeGuard();
  ~SigpipeGuard();
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  bool was_pending_ = false;
  bool was_blocked_ = false;
};

// TCP connect with a deadline; throws PeerClosed (refused/unreachable) or Timeout.
int connect_tcp(const std::string& host, uint16_t port, Millis timeout);

// The numeric host of an address ("192.0.2.7", "2001:db8::1"), an IPv4-mapped IPv6 address as
// IPv4 (how SessionParams::allowed_peer is compared); "" for null or another family.
std::string numeric_host(const ::sockaddr* sa);

using base::Fd;  // owns one fd (base/fd.h)

}  // namespace tierce::adts::wire
