// ftp_adts/adts/adts.h — the Advanced Data Transfer Service (seed 000 ch.9): persistent data
// sessions that move whole transfers (files or memory) over a chosen channel.
//
//   Channel     tcp   — one TCP stream: sendfile(2) on send, splice(2) on receive (zero copy
//                       between page cache and socket; no user-space copy);
//               ptcp  — N parallel TCP streams, blocks striped across them (long, fat links);
//               verbs — rdma-core RC send/recv from a pre-registered pool, shared receive queue,
//                       receiver-side credits (zero copy); needs an RDMA device.
//   Session     a set of connected streams kept across many transfers (persistent data session,
//               negotiated by FTP's TPRT); wire format in docs/ftp.md.
//   BufferPool  pre-allocated aligned buffers with a registration cache (verbs: ibv_reg_mr once
//               per buffer, reused across transfers and sessions).
//   Pipeline    a disk thread and a network thread with buffers between them, for the paths where
//               the kernel cannot move the bytes itself (verbs, TLS, non-regular files).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tierce::adts {

using Millis = std::chrono::milliseconds;

enum class ChannelKind : uint8_t { Tcp, ParallelTcp, Verbs };
std::string_view to_string(ChannelKind k);  // "TCP", "PTCP", "VERBS" (as in TPRT)

class AdtsError : public std::runtime_error {
 public:
  enum class Code {
    Timeout,     // the peer did not send/accept within the data timeout
    PeerClosed,  // a stream broke
    Protocol,    // malformed HELLO or block; the message says what
    Aborted,     // the sender aborted this transfer (session still usable)
    LocalIo,     // reading/writing the local file failed (errno text in the message)
    NoDevice,    // verbs: no RDMA device
    Config,      // bad parameters
    TooLarge,    // the transfer passes the receiver's limit (Sink::max_length,
                 // PlainOptions::max_bytes); nothing beyond the limit was written
  };
  AdtsError(Code c, const std::string& what) : std::runtime_error(what), code_(c) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

struct SessionParams {
  ChannelKind kind = ChannelKind::Tcp;
  unsigned streams = 1;         // ptcp: 1..kMaxStreams; tcp and verbs: 1
  size_t block = 1 << 20;       // largest DATA block
  bool zero_copy = true;        // tcp/ptcp: sendfile/splice; false = pipeline through buffers
  Millis timeout{60000};        // data timeout: no progress for this long is an error
  uint64_t cookie = 0;          // from the TPRT reply; checked in every HELLO
  // Listener (tcp/ptcp): accept streams only from this numeric host (an IPv4-mapped address
  // counts as IPv4); "" = from anywhere. tierce-ftpd sets the control connection's peer.
  std::string allowed_peer;
};
constexpr unsigned kMaxStreams = 64;

// What one transfer sends: a region of a file (zero-copy capable) or bytes in memory.
struct Source {
  int fd = -1;                         // file to send from (if memory is empty)
  uint64_t offset = 0;                 // file offset to start at (REST)
  uint64_t length = 0;                 // bytes to send from the file
  std::span<const uint8_t> memory;     // or these bytes (LIST output, tests)
};

// Where one transfer's bytes go: a file at an offset, or a memory buffer.
struct Sink {
  int fd = -1;                          // file to write at offset..offset+total
  uint64_t offset = 0;
  std::vector<uint8_t>* memory = nullptr;  // or append here
  uint64_t max_length = UINT64_MAX;     // a larger BEGIN is TooLarge (nothing written; the
                                        // session is broken: its streams are mid-transfer)
  // Memory sinks grow as the blocks arrive (in offset order), never to the announced total up
  // front: a peer announcing 1 GiB and sending nothing costs nothing.
};

// Progress of the transfer in flight: bytes so far, total (called from the calling thread).
using Progress = std::function<void(uint64_t done, uint64_t total)>;

struct SessionStats {
  uint64_t transfers = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t zero_copy_bytes = 0;   // moved by sendfile/splice/zero-copy verbs
  uint64_t copied_bytes = 0;      // moved through user-space buffers
  uint64_t registration_hits = 0;    // pool buffers whose registration was cached (reuse)
  uint64_t registration_misses = 0;  // pool buffers registered for the first time
};

// One persistent data session. Not thread-safe: one transfer at a time, from one thread (the
// session may use threads of its own inside a transfer).
class Session {
 public:
  virtual ~Session() = default;
  virtual ChannelKind kind() const = 0;
  virtual unsigned streams() const = 0;
  // Sends one transfer (BEGIN, DATA..., END); returns the bytes sent. A local read error sends
  // ABORT and throws AdtsError{LocalIo}; a stream failure throws and leaves the session broken().
  virtual uint64_t send(const Source& src, const Progress& progress = {}) = 0;
  // Receives one transfer; returns its total bytes. ABORT from the sender throws
  // AdtsError{Aborted} (session still usable).
  virtual uint64_t receive(const Sink& sink, const Progress& progress = {}) = 0;
  virtual bool broken() const = 0;
  virtual SessionStats stats() const = 0;
  virtual void close() = 0;  // closes every stream; idempotent
};

// The passive side: listens on `host` (port 0 = any; or a port from [port_min, port_max]) and
// accepts the HELLOs of one session. accept() runs on one thread at a time; cancel() and port()
// may be called from any thread meanwhile.
class Listener {
 public:
  // Throws AdtsError{Config} when no port of the range is free.
  Listener(const std::string& host, uint16_t port_min, uint16_t port_max, const SessionParams& p);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  uint16_t port() const;
  // Waits (up to params.timeout) for params.streams streams with the right cookie; streams with a
  // wrong HELLO are refused (HELLO-ACK status != 0) and logged through `log` if set.
  // After cancel() it throws AdtsError{Aborted}.
  std::unique_ptr<Session> accept(const std::function<void(const std::string&)>& log = {});
  // Thread-safe; idempotent. Stops the listener for good: an accept() blocked in another thread
  // returns promptly (it wakes on an eventfd polled with the listening socket), closing the streams
  // it had accepted so far, and throws AdtsError{Aborted, "data session cancelled"}; so does every
  // later accept(). The listening port is closed once no accept() is in progress: at once when
  // none is, else by that accept() as it returns — so it is closed when cancel() was called and
  // the accepting thread has been joined. An accept() that completed before cancel() keeps its
  // session (cancel() only closes the port then).
  void cancel();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The active side: connects params.streams streams to host:port and sends the HELLOs.
std::unique_ptr<Session> connect(const std::string& host, uint16_t port, const SessionParams& p);

// Plain (non-ADTS) data connections of RFC 959 use these: zero-copy moves between a file and a
// connected socket, bounded by a timeout of no progress. tierce-ftpd and tierce-ftp both move their
// TYPE I, non-TLS data with them; the socket may be blocking or not.
struct PlainOptions {
  // Called each time another 1 MiB has moved, with the bytes moved so far; returning false stops
  // the move with AdtsError{Aborted}. Client: progress; server: the ABOR check.
  std::function<bool(uint64_t done)> on_chunk;
  // Polled along with the data socket while a move waits; when it turns readable on_chunk is
  // asked too, so a stalled data connection still notices (server: the control connection).
  // Not watched any more once it reports POLLHUP/POLLERR and on_chunk said go on.
  int watch_fd = -1;
  // send_file: a file that ends before `length` ends the move (returns the bytes sent) instead of
  // AdtsError{LocalIo}.
  bool short_file_ok = false;
  // Out, if set: how many of the bytes moved went through a user-space buffer (a file or socket
  // that refuses sendfile/splice, a non-seekable file, receive_by_splice off); 0 = all zero copy.
  uint64_t* copied = nullptr;
  // receive_file: splice socket -> pipe -> file (true), or recv into a 1 MiB buffer + pwrite
  // (false). Splice keeps the arriving socket buffers referenced until they reach the file; a
  // sender that writes from user buffers (curl, lftp: send(2), not sendfile) must then allocate
  // fresh ones, and over loopback that stalled such uploads to 0.35-0.45x of a copying receiver
  // in some runs (benchmarks/ftp/README.md). tierce-ftpd receives uploads from any client by
  // copy; tierce-ftp downloads (servers send with sendfile) by splice. Either way the receiver
  // is woken once 512 KiB is queued (SO_RCVLOWAT, back to 1 afterwards), not once per segment, and
  // reads whatever trickled in every 200 ms, so a slow sender is still progress.
  bool receive_by_splice = true;
  // receive_file: the most bytes to take; one more arriving throws AdtsError{TooLarge} with the
  // first max_bytes written (an upload limit).
  uint64_t max_bytes = UINT64_MAX;
};
// Sends [offset, offset+length) of fd to sock with sendfile(2); returns bytes sent.
uint64_t send_file(int sock, int fd, uint64_t offset, uint64_t length, Millis timeout,
                   const PlainOptions& o = {});
// Writes what arrives on sock until EOF to fd at offset with splice(2), or through a buffer
// (PlainOptions::receive_by_splice; also when the file does not support splice; write(2) when it
// is not seekable, e.g. a pipe); returns bytes written.
uint64_t receive_file(int sock, int fd, uint64_t offset, Millis timeout,
                      const PlainOptions& o = {});

// Whether the verbs channel can run here.
bool verbs_available();
// What was found: the RDMA devices, or why there is none (Unavailable).
base::Result<std::string> verbs_probe();

}  // namespace tierce::adts
