// ftp_adts/server/data.h — the plain (RFC 959) data connections of a session: where they come from
// (PASV/EPSV listener that only takes the control peer's address; PORT/EPRT target) and how bytes
// move over them:
//   TYPE I, no TLS   RETR: sendfile(2) file -> socket (zero copy: the bytes never enter this
//                    process); STOR: recv into a 1 MiB buffer + pwrite, woken once per 512 KiB
//                    queued (SO_RCVLOWAT), or splice(2) socket -> pipe -> file (store_splice)
//   TYPE A, or TLS   through a user buffer (LF <-> CRLF conversion / encryption need the bytes)
// Every loop polls the control connection along with the data socket, so an ABOR is seen between
// chunks, and a data socket with no progress for the data timeout fails the transfer.
// The ADTS (TPRT) data sessions are in adts_channel.h.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "ftp_adts/ftp/tls.h"

namespace tierce::ftpd {

using Millis = std::chrono::milliseconds;

// A socket address with its length; printable.
struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
  int family() const { return ss.ss_family; }
  uint16_t port() const;
  void set_port(uint16_t p);
  // The numeric host; IPv4-mapped IPv6 addresses print as IPv4 ("127.0.0.1").
  std::string host() const;
  // Same host (the port is ignored); an IPv4-mapped address equals its IPv4 form.
  bool same_host(const SockAddr& o) const;
  static SockAddr local_of(int fd);
  static SockAddr peer_of(int fd);
  static bool parse(const std::string& host, uint16_t port, SockAddr* out);
};

// A connected plain data connection (TLS after PROT P). Owns the socket.
class DataConn {
 public:
  explicit DataConn(int fd) : fd_(fd) {}
  ~DataConn();
  DataConn(const DataConn&) = delete;
  DataConn& operator=(const DataConn&) = delete;
  int fd() const { return fd_; }
  void start_tls(std::shared_ptr<ftp::TlsContext> ctx, Millis timeout);
  ftp::TlsConnection* tls() { return tls_.get(); }
  // Clean end of the transfer: close_notify for TLS, then close.
  void finish();

 private:
  int fd_;
  std::unique_ptr<ftp::TlsConnection> tls_;
};

// Where the next data connection comes from: PASV/EPSV or PORT/EPRT. Invariant: at most one of
// the two is set.
class DataPort {
 public:
  ~DataPort();
  // Listens on `local`'s host, a port of [lo, hi] (0-0 = any). Returns the port; -errno on failure.
  int listen_passive(const SockAddr& local, uint16_t lo, uint16_t hi);
  void set_active(const SockAddr& target);
  bool ready() const { return listen_fd_ >= 0 || active_; }
  void reset();
  // The connection: accept (only from `peer`'s host; others are dropped and logged) or connect.
  // A failure or the timeout: Unavailable (the peer did not connect, refused, timed out),
  // Internal (a system call), FailedPrecondition (no PORT or PASV yet), with the reason.
  base::Result<std::unique_ptr<DataConn>> open(const SockAddr& peer, Millis timeout,
                                               const std::function<void(const std::string&)>& log);

 private:
  int listen_fd_ = -1;
  bool active_ = false;
  SockAddr target_;
};

struct TransferResult {
  // Aborted: plain data, the client's ABOR (or the control connection went away); ADTS, the
  // sender's ABORT block.
  // Quota: an upload passed its limit (TransferOptions::max_bytes, the ADTS sink's max_length).
  enum class Status { Ok, Aborted, Timeout, PeerError, LocalError, Quota } status = Status::Ok;
  uint64_t bytes = 0;       // payload bytes moved on the data connection (also when it failed)
  bool zero_copy = false;   // moved by sendfile/splice
  bool adts = false;        // moved (or meant to move) over the ADTS data session
  std::string error;        // for the log and the reply
};

struct TransferOptions {
  bool ascii = false;      // TYPE A: LF -> CRLF on send, CRLF -> LF on receive
  bool zero_copy = true;   // allowed (TYPE I without TLS)
  bool receive_splice = false;  // receive_file: splice, or recv + pwrite (adts::PlainOptions)
  Millis timeout{60000};   // no progress for this long -> Timeout
  int control_fd = -1;     // polled along with the data socket
  uint64_t max_bytes = UINT64_MAX;  // receive_file: more bytes arriving -> Quota (upload limits)
  // Called when the control socket is readable: true = the client sent ABOR (stop now);
  // it also returns true when the control connection is gone.
  std::function<bool()> abort;
};

// Sends [offset, EOF) of file_fd.
TransferResult send_file(DataConn& c, int file_fd, uint64_t offset, const TransferOptions& o);
// Sends bytes from memory (listings).
TransferResult send_bytes(DataConn& c, std::string_view bytes, const TransferOptions& o);
// Receives until the peer closes, writing to file_fd from offset.
TransferResult receive_file(DataConn& c, int file_fd, uint64_t offset, const TransferOptions& o);

// TYPE A conversions, incremental across chunks. *last_cr carries a CR at the end of a chunk.
std::string to_crlf(std::string_view in, bool* prev_cr);   // bare LF -> CRLF
std::string from_crlf(std::string_view in, bool* held_cr); // CRLF -> LF (lone CR kept)

}  // namespace tierce::ftpd
