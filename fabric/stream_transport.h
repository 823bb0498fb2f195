// fabric/stream_transport.h — the tcp backend and the control channel of the shm backend: the
// frames of wire.h over a stream socket (TCP, or a Unix socket for shm).
// Internal to the fabric library.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "fabric/fabric.h"
#include "fabric/protect.h"
#include "fabric/responder.h"
#include "fabric/socket.h"
#include "fabric/wire.h"

namespace tierce::fabric {

// A Stream over a connected socket.
class SocketStream final : public Stream {
 public:
  SocketStream(Fd fd, Millis timeout) : fd_(std::move(fd)), timeout_(timeout) {}
  void write_all(std::span<const uint8_t> bytes) override;
  size_t read_some(std::span<uint8_t> buf) override;
  void shutdown_write() override;
  void set_timeout(Millis t) override { timeout_ = t; }
  int native_fd() const override { return fd_.get(); }

 private:
  Fd fd_;
  Millis timeout_;
};

// Buffered frame input: one recv() can bring many frames (a posted batch, pipelined requests),
// so a batch of N costs about one system call per side instead of 2N.
// Invariant: bytes are only ever read ahead inside frames the peer already sent, so nothing
// beyond the current reply is consumed while a MAP reply's descriptor may still be in flight.
class FrameReader {
 public:
  static constexpr size_t kBufferSize = 64 * 1024;
  explicit FrameReader(int fd, std::chrono::microseconds spin = {})
      : fd_(fd), spin_(spin), buf_(kBufferSize) {}
  // Next header; false on a clean EOF between frames. Throws Protocol on a malformed header.
  bool header(wire::Header* h, Deadline d);
  // Exactly n bytes of the current frame's payload.
  void body(void* dst, size_t n, Deadline d);
  // After body(): reads the frame's tag and checks it (decrypting `payload` in place), when a
  // protector was set and is active. False when the frame is not authentic: close the connection.
  bool finish(const wire::Header& h, uint8_t* payload, Deadline d);
  void protect(FrameProtector* p) { prot_ = p; }
  size_t buffered() const { return end_ - begin_; }

 private:
  int fd_;
  FrameProtector* prot_ = nullptr;
  std::chrono::microseconds spin_;  // poll this long before sleeping for the next header
  unsigned backoff_ = 0, skip_ = 0;   // adaptive spin: waits to sleep at once after a failed spin
  std::vector<uint8_t> buf_;
  size_t begin_ = 0, end_ = 0;
};

// What a serving connection needs from its server.
struct ServeContext {
  const ServerOptions* opts;
  const RegionTable* regions;
  const ServiceTable* services;
  Counters* counters;
  TransportView view;
};

// Runs one accepted connection to its end: HELLO/AUTH, then requests until EOF, a malformed frame,
// an idle timeout or shutdown. Never throws.
void serve_stream_connection(Fd fd, const PeerInfo& peer, const ServeContext& ctx);

// The client half of the handshake on a fresh socket; returns the server's name. `wanted`: the
// least protection accepted (tcp); *prot, when given, gets the session's keys.
std::string client_handshake(int fd, const Secret& secret, Deadline d,
                             Protection wanted = Protection::None,
                             FrameProtector* prot = nullptr,
                             const ClientIdentity* id = nullptr);

// Sends one frame (header + payload, then its tag when prot is active) on a socket. In Mac mode
// a large payload is MACed in place and then sent: it must not change during the call (a live
// region is copied first: ReplyBatch in stream_transport.cc).
void send_frame(int fd, const wire::Header& h, std::span<const uint8_t> payload, Deadline d,
                FrameProtector* prot = nullptr);
// Appends one frame (sealed when prot is active) to `out`. Frames must be sent in the order
// they were sealed.
void append_sealed_frame(std::vector<uint8_t>& out, const wire::Header& h,
                         std::span<const uint8_t> payload, FrameProtector* prot);

class StreamConnection : public Connection {
 public:
  StreamConnection(Address addr, const ClientOptions& opts);
  Transport transport() const override { return addr_.transport; }
  Capabilities capabilities() const override { return capabilities_of(addr_.transport); }
  const std::string& peer_uri() const override { return uri_; }
  const std::string& peer_name() const override { return peer_name_; }
  RemoteRegion lookup(std::string_view region_name) override;
  void post(std::span<OneSidedOp> ops) override;
  void wait(std::span<OneSidedOp> ops) override;
  std::vector<uint8_t> call(std::string_view service, std::span<const uint8_t> body) override;
  void send(std::string_view service, std::span<const uint8_t> body) override;
  std::unique_ptr<Stream> open_stream(std::string_view service) override;
  void ping() override;
  void set_op_timeout(Millis t) override { opts_.op_timeout = t; }

 protected:
  Fd open_socket(Deadline d) const;
  // Sends one request and reads its reply (payload into *payload). Throws on transport errors;
  // the reply's status is left for the caller.
  wire::Header round_trip(const wire::Header& req, std::span<const uint8_t> payload,
                          std::vector<uint8_t>* reply_payload, int* fd_out = nullptr);
  void check_usable() const;
  [[noreturn]] void fail(const FabricError& e);

  Address addr_;
  std::string uri_;
  ClientOptions opts_;
  Fd fd_;
  std::string peer_name_;
  uint64_t next_id_ = 1;
  size_t pending_ = 0;   // ops posted and not yet waited for
  bool broken_ = false;  // a transport error desynchronised the stream: reconnect
  std::string broken_why_;
  std::vector<uint8_t> sendbuf_;
  FrameProtector prot_;  // tcp: the session's frame protection (inactive on shm)
  std::unique_ptr<FrameReader> reader_;
  std::vector<uint8_t> sent_;  // per posted op: 1 if it went to the server, 0 if refused locally
};

// shm: control channel as above; one-sided ops go straight to the mapped segment.
class ShmConnection final : public StreamConnection {
 public:
  ShmConnection(Address addr, const ClientOptions& opts)
      : StreamConnection(std::move(addr), opts) {}
  void post(std::span<OneSidedOp> ops) override;
  void wait(std::span<OneSidedOp> ops) override;

 protected:
  void run_one(OneSidedOp& op) override {  // the hot path: no batch bookkeeping
    if ((op.status = run(op)) != Errc::Ok) throw_op_error(op, uri_);
  }

 private:
  struct Mapping {
    uint64_t key = 0;
    SharedSegment seg;
  };
  // The local address of [off, off+len) in r's segment, or an error status.
  Errc locate(const RemoteRegion& r, uint64_t off, uint64_t len, bool atomic, bool writes,
              uint8_t** p, const SegmentHeader** hdr);
  // After the op: the exporter must still vouch for the segment (lease), else the op failed.
  static Errc check_lease(const SegmentHeader* h, uint64_t key);
  Errc run(OneSidedOp& op);

  std::unordered_map<uint32_t, Mapping> maps_;
};

}  // namespace tierce::fabric
