// fabric/verbs_endpoint.h — one connected RC queue pair with its completion queue, receive pool and
// send buffers: what both sides of a verbs connection (and a verbs stream) are built on. Internal.
//
// Messages. A wire.h frame (48-byte header + payload) that fits the peer's receive buffer travels
// eagerly as one SEND into one receive buffer (bodies up to Tunables::kMaxEagerBody = 64 KiB).
// A larger frame — CALL/SEND bodies up to wire::kMaxMessage (1 MiB) and their replies — goes by
// rendezvous: the sender copies it into its registered long-send buffer (remote-read only) and
// SENDs a 16-byte descriptor with immediate data kLongFrameImm; the receiver RDMA-READs the frame
// into its long-receive buffer and handles it like any other. Descriptor, little-endian:
//   0  8  virtual address of the frame in the sender's long-send buffer
//   8  4  rkey of that buffer
//   12 4  frame length (48 .. Tunables::kMaxLongFrame)
// The sender reuses its long-send buffer only once the peer has certainly read it: a client after
// the reply to its request (after a one-way SEND it pings), a server at the next request.
// Larger bodies fail locally with TooLarge before anything is sent; a reply too large for
// rendezvous is answered TooLarge by the server. Each side learns the other's buffer size and
// count from the rdma_cm private data (verbs_resources.h) and never posts more SENDs than the peer
// has receives: no RNR in normal use.
//
// Work request ids: the top 8 bits say what completed (WrTag), the low 56 bits which buffer or op.
// Every send-queue WR is signaled, so each one yields exactly one completion (also when flushed),
// which is what lets the owner know when a buffer may be reused or an op has ended.
//
// Threading: an Endpoint is driven by one thread at a time (the client's caller, or the server
// connection's thread). Other threads may only call rdma_disconnect on its rdma_cm_id, which moves
// the QP to the error state and so wakes the driving thread with flushed completions.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fabric/fabric.h"
#include "fabric/verbs_resources.h"
#include "fabric/wire.h"

namespace tierce::fabric::verbs {

// The knobs of the verbs backend. Memory per connection (all of it registered, i.e. pinned: the
// locked-memory limit must allow it — `ulimit -l`, systemd LimitMEMLOCK=):
//   server connection  (kServerRecvDepth + kServerSendBuffers) × kMsgBufSize      ≈ 816 KiB
//   client connection  (kClientRecvDepth + kClientSendBuffers) × kMsgBufSize
//                      + kBounceBytes                                            ≈ 1.03 MiB
//   client stream      (kStreamRecvDepth + kStreamSendBuffers) × kMsgBufSize      ≈ 1.06 MiB
//   and up to 2 × kMaxLongFrame (≈ 2 MiB) more on a connection that sends or receives frames
//   larger than kMsgBufSize (allocated on first use).
// A server of N connections thus pins about N × 0.8 MiB: size the locked-memory limit for the
// connections you allow (ServerOptions::max_connections), or lower the depths here.
struct Tunables {
  // ---- messages --------------------------------------------------------------------------------
  // Largest CALL/SEND body sent eagerly (one SEND into one receive buffer). Larger bodies, up to
  // wire::kMaxMessage (capabilities().max_message), go by rendezvous (see the header comment).
  static constexpr size_t kMaxEagerBody = size_t(64) << 10;
  // One receive/send buffer: the eager body plus the frame header, the u16 service-name length and
  // the longest service name, rounded up to whole pages.
  static constexpr size_t kMsgBufSize = size_t(68) << 10;
  // Largest frame by rendezvous: a wire::kMaxMessage body plus header and service name, in pages.
  // Each side's long-send and long-receive buffers have this size, allocated on first use.
  static constexpr size_t kMaxLongFrame = wire::kMaxMessage + (size_t(4) << 10);
  // Deadline of the RDMA READ that fetches a long frame on the server (the client's is op_timeout).
  static constexpr Millis kLongFetchTimeout{5000};
  // HELLO carries the server's name; longer names are cut so HELLO always fits one buffer.
  static constexpr size_t kMaxNameInHello = 256;

  // ---- queue depths ----------------------------------------------------------------------------
  // Receives a server connection keeps posted: bounds the client's one-way SENDs and CAS/FAA
  // messages in flight, and a client stream's window (kServerRecvDepth - kStreamCtrlReserve).
  static constexpr uint32_t kServerRecvDepth = 8;
  // Server send queue: replies (one per request) and stream chunks.
  static constexpr uint32_t kServerSendDepth = 32;
  // Registered send buffers of a server connection (sends larger than kMaxInlineData use one
  // until their completion).
  static constexpr uint32_t kServerSendBuffers = 4;
  // Receives a client connection keeps posted: HELLO, AUTH_OK, then one reply per request, or up
  // to this many replies to a batch's CAS/FAA messages in flight.
  static constexpr uint32_t kClientRecvDepth = 4;
  // Client send queue: one-sided ops in flight per connection (post() splits larger batches).
  static constexpr uint32_t kClientSendDepth = 256;
  static constexpr uint32_t kClientSendBuffers = 4;
  // A client stream's receives: the server's window towards it is kStreamRecvDepth -
  // kStreamCtrlReserve.
  static constexpr uint32_t kStreamRecvDepth = 8;
  static constexpr uint32_t kStreamSendDepth = 32;
  // Chunks in flight from a client stream (each holds a buffer until acknowledged).
  static constexpr uint32_t kStreamSendBuffers = 8;
  // Bytes the HCA copies into the work request itself: small frames and small RDMA WRITEs skip the
  // send buffer and the lkey. Providers may support less; QP creation then retries with none.
  static constexpr uint32_t kMaxInlineData = 128;
  // RDMA READ/atomics in flight per QP (rdma_cm's initiator_depth / responder_resources), clamped
  // to the device's max_qp_init_rd_atom / max_qp_rd_atom. Further ones queue in the HCA.
  static constexpr uint8_t kRdAtomicDepth = 16;
  // cas64/faa64 become RDMA atomics only when the target's HCA declares them atomic against its
  // CPU's atomics too (IBV_ATOMIC_GLOB). Tierce's owners update exported words with CPU atomics
  // while peers update them remotely (version table, locks); with IBV_ATOMIC_HCA, which is what
  // ConnectX HCAs report, the two would race and lose updates. Otherwise cas64/faa64 travel as
  // CAS/FAA messages that the target's connection thread performs with CPU atomics: exact, but the
  // target's CPU is involved (Capabilities::native_atomics is then false). Set true only where
  // remote atomics never meet local CPU atomics on the same words.
  static constexpr bool kNicAtomicsWithoutGlob = false;

  // ---- one-sided operations -----------------------------------------------------------------
  // Registered bounce memory per client connection: READ results, WRITE sources and atomic results
  // of a batch are staged here (one copy, no registration on the datapath).
  static constexpr size_t kBounceBytes = size_t(512) << 10;
  // Larger transfers (or what no longer fits the bounce memory) register the caller's buffer for
  // the batch and deregister it in wait(): zero-copy, but ~tens of µs per registration. The
  // registration cache (reg_cache.h) is opt-in (ClientOptions::registration_cache_bytes): without
  // memory-release hooks a cached MR can outlive free()+malloc() of the same address and silently
  // move bytes to/from the old pages, so only callers that invalidate before freeing may use it.
  static constexpr size_t kBounceMaxOp = size_t(64) << 10;
  // Unused registrations a link's cache keeps at most (the byte budget is the caller's).
  static constexpr size_t kRegCacheMaxUnused = 64;

  // ---- reliability: a dead peer must surface within seconds ------------------------------------
  // Local ACK timeout exponent: 4.096 µs × 2^16 ≈ 268 ms before a retransmission (rdma_cm would
  // derive it from the packet lifetime, often ~1 s on InfiniBand).
  static constexpr uint8_t kAckTimeoutExp = 16;
  // Transport retries before IBV_WC_RETRY_EXC_ERR: (6 + 1) × 268 ms ≈ 1.9 s to declare the peer
  // dead. 3-bit field.
  static constexpr uint8_t kRetryCount = 6;
  // RNR retries (rdma_cm's RNR timer is ~655 ms): ≈ 4 s. Never 7, which means "forever". With the
  // flow control above RNR does not happen unless the peer is stuck.
  static constexpr uint8_t kRnrRetry = 6;

  // ---- waiting ---------------------------------------------------------------------------------
  // Busy-poll this long before sleeping on the completion channel: a reply on the same fabric
  // usually arrives within microseconds; a sleep costs a context switch.
  static constexpr std::chrono::microseconds kSpin{20};
  // Longest sleep of a server thread (connection or rdma_cm) before it re-checks stop().
  static constexpr Millis kPollSlice{100};
  // Work completions taken per ibv_poll_cq call.
  static constexpr int kCqPollBatch = 16;

  // ---- streams ---------------------------------------------------------------------------------
  // Receives of the peer a stream keeps out of its data window: standalone CREDIT messages (each
  // returns at least half a window, so at most two are unprocessed at once) and, right after
  // STREAM_OPEN, the reply's buffer that the client has not reposted yet.
  static constexpr uint32_t kStreamCtrlReserve = 3;
  // A server-side stream's I/O deadline (the tcp backend's SocketStream gets the same).
  static constexpr Millis kServerStreamTimeout{30000};
  // How long a stream's destructor waits for its end-of-stream marker to be acknowledged.
  static constexpr Millis kStreamCloseLinger{1000};

  // ---- listener --------------------------------------------------------------------------------
  static constexpr int kListenBacklog = 128;
  // How often the rdma_cm thread deregisters MRs of regions no longer exported (after that, peers
  // holding the old descriptor get BadKey) and drops connection requests that never completed.
  // Until then an RDMA WRITE/atomic through an old descriptor still lands, like an shm peer's op
  // on a stale mapping, and reports Revoked (the batch's lease check sees the new export key).
  static constexpr Millis kMrSweepInterval{100};
  // Deadline of a server's SEND when its send queue is full (the client is not acknowledging).
  static constexpr Millis kReplySendTimeout{5000};
};

static_assert(Tunables::kMaxEagerBody + wire::kHeaderSize + 2 + wire::kMaxServiceName <=
                  Tunables::kMsgBufSize,
              "an eager CALL of the largest body and service name must fit one receive buffer");
static_assert(wire::kMaxMessage + wire::kHeaderSize + 2 + wire::kMaxServiceName <=
                  Tunables::kMaxLongFrame,
              "a CALL of wire::kMaxMessage must fit the rendezvous buffers");
static_assert(Tunables::kMaxLongFrame <= UINT32_MAX, "the descriptor carries a 32-bit length");
static_assert(Tunables::kMsgBufSize % 4096 == 0, "buffers are carved from page-aligned memory");
static_assert(Tunables::kMaxEagerBody <= wire::kMaxMessage);
static_assert(wire::kHeaderSize + wire::kNonceSize + Tunables::kMaxNameInHello <=
              Tunables::kMsgBufSize);
static_assert(Tunables::kServerRecvDepth > Tunables::kStreamCtrlReserve + 1 &&
                  Tunables::kStreamRecvDepth > Tunables::kStreamCtrlReserve + 1,
              "a stream needs a data window of at least two chunks");
static_assert(Tunables::kClientRecvDepth >= 2, "HELLO and AUTH_OK may both be in flight");
static_assert(Tunables::kRetryCount <= 7 && Tunables::kRnrRetry < 7,
              "3-bit fields; RNR 7 would retry forever");
static_assert(Tunables::kAckTimeoutExp <= 31, "5-bit field");
static_assert(Tunables::kBounceMaxOp <= Tunables::kBounceBytes);
static_assert(Tunables::kClientSendBuffers >= 1 && Tunables::kServerSendBuffers >= 1 &&
              Tunables::kStreamSendBuffers >= 1);

// ---------------------------------------------------------------------------------------------
enum class WrTag : uint8_t { Recv = 1, Send = 2, Op = 3, LongRead = 4 };
inline constexpr unsigned kWrTagShift = 56;
inline constexpr uint64_t kWrIndexMask = (uint64_t(1) << kWrTagShift) - 1;
inline constexpr uint64_t make_wr_id(WrTag t, uint64_t index) {
  return uint64_t(t) << kWrTagShift | (index & kWrIndexMask);
}
// Send WRs that used no send buffer (inline or empty).
inline constexpr uint64_t kNoSendBuffer = kWrIndexMask;
// Immediate data of a long frame's descriptor (top byte 'L'; stream kinds use 1..3 there).
inline constexpr uint32_t kLongFrameImm = 0x4C000000;
inline constexpr size_t kLongDescriptorSize = 16;

struct EndpointConfig {
  uint32_t recv_depth = 0;    // receives kept posted
  uint32_t send_depth = 0;    // send queue size (max_send_wr)
  uint32_t send_buffers = 0;  // registered buffers for non-inline SENDs
};

// One completion of a one-sided work request (WrTag::Op); `index` is the caller's low bits.
struct OpCompletion {
  uint64_t index = 0;
  ibv_wc_status status = IBV_WC_SUCCESS;
  uint32_t vendor_err = 0;
};

// Inbound::slot of a long frame (its bytes live in the endpoint's long-receive buffer, valid until
// the next long frame is received; repost(kNoSlot) does nothing).
inline constexpr uint32_t kNoSlot = UINT32_MAX;

// A received message. `bytes` points into the receive buffer `slot`: valid until repost(slot).
struct Inbound {
  uint32_t slot = 0;
  std::span<const uint8_t> bytes;
  bool has_imm = false;
  uint32_t imm = 0;  // host byte order
};

class Endpoint {
 public:
  // Creates the completion channel, CQ, registered buffers and the RC QP on `id` (which must be
  // bound to a device: after ROUTE_RESOLVED, or a CONNECT_REQUEST's new id) and posts every
  // receive. Throws FabricError{System} with what to do.
  Endpoint(rdma_cm_id* id, ibv_pd* pd, const DeviceLimits& dev, const EndpointConfig& cfg);
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  ibv_qp* qp() const { return qp_.get(); }
  ibv_pd* pd() const { return pd_; }
  uint32_t recv_depth() const { return recv_depth_; }
  uint32_t buf_size() const { return buf_size_; }
  uint32_t max_inline() const { return max_inline_; }
  PeerParams local_params() const { return PeerParams{recv_depth_, buf_size_, 0, 0}; }
  // What the peer announced: frames up to its buffer size go eagerly, larger ones by rendezvous.
  void set_peer(const PeerParams& peer);
  // Largest message sent as one SEND.
  size_t eager_limit() const { return eager_limit_; }
  // Long frames (rendezvous) from the peer are refused as malformed until this is called: a server
  // calls it once the peer authenticated, a client after the handshake.
  void allow_long_frames() { long_frames_allowed_ = true; }

  // Also waits for `fd` (the client's rdma_cm channel) and calls `on_readable` when it is.
  void set_watch(int fd, std::function<void()> on_readable);

  // Failure: the first recorded cause wins. Once failed the QP is (or is about to be) in the error
  // state: sends throw, messages already reaped can still be taken.
  bool failed() const { return fail_code_ != Errc::Ok; }
  Errc fail_code() const { return fail_code_; }
  const std::string& fail_why() const { return fail_why_; }
  void fail(Errc code, const std::string& why);
  [[noreturn]] void throw_failed() const;

  // ---- datapath (verbs_datapath.cc) ------------------------------------------------------------
  // Sends a || b as one message, with immediate data if given; a message over eager_limit() (no
  // immediate data then) goes by rendezvous. Waits for send-queue room and a send buffer until d
  // (Timeout). Throws when failed, TooLarge over Tunables::kMaxLongFrame.
  void send(std::span<const uint8_t> a, std::span<const uint8_t> b, std::optional<uint32_t> imm,
            Deadline d);
  // The next received message in arrival order (a long frame already fetched, the fetch bounded by
  // fetch_d, or by d when that is kNoDeadline), or nullopt once d passed. Throws when failed and
  // nothing is queued, or when a long frame cannot be fetched.
  std::optional<Inbound> receive(Deadline d, Deadline fetch_d = kNoDeadline);
  // A message already reaped, without waiting or throwing (streams: no long frames there).
  std::optional<Inbound> take_ready();
  // Hands receive buffer `slot` back to the HCA. Prereq: no view into it is used any more.
  void repost(uint32_t slot);

  // Free send-queue entries for one-sided WRs.
  uint32_t sq_room() const { return send_depth_ - sq_used_; }
  // Posts a chain of prepared one-sided WRs (wr_id tagged WrTag::Op, all signaled) with one
  // ibv_post_send. Prereq: count <= sq_room(). Returns how many the HCA took; on a shortfall the
  // endpoint has failed (System) and the rest were not posted.
  size_t post_chain(ibv_send_wr* first, size_t count);
  // Completions of one-sided WRs reaped so far; the caller consumes and clears it.
  std::vector<OpCompletion>& op_completions() { return ops_done_; }

  // Reaps ready completions without blocking; returns how many.
  int poll_now();
  // Reaps completions, sleeping on the completion channel (and the watch fd) when there are none.
  // Returns true once something happened (completions reaped, or the endpoint failed), false when
  // d passed first.
  bool progress(Deadline d);
  // Waits until every posted send-queue WR completed, or d. For a lingering close.
  bool drain_sends(Deadline d);

 private:
  void on_completion(const ibv_wc& wc);
  // Rendezvous: the frame a descriptor message points to, read into long_recv_.
  Inbound fetch_long(const Inbound& descriptor, Deadline d);
  // Allocates and registers the long-send (remote read) or long-receive (local write) buffer.
  void ensure_long_buffer(bool send_side);

  uint32_t recv_depth_ = 0;
  uint32_t send_depth_ = 0;
  uint32_t buf_size_ = 0;
  uint32_t max_inline_ = 0;
  size_t eager_limit_ = 0;
  ibv_pd* pd_ = nullptr;  // not owned: the connection's (client) or the device's (server)

  // Verbs objects in creation order; destroyed in reverse (completion channel last). The QP goes
  // before the receive and send pools it uses; the rendezvous buffers, created later on demand,
  // go first (an HCA access to a deregistered MR fails, it never touches freed memory).
  CompChannel chan_;
  Cq cq_;
  AlignedBuffer recv_buf_;
  Mr recv_mr_;
  AlignedBuffer send_buf_;
  Mr send_mr_;
  Qp qp_;
  AlignedBuffer long_send_;  // our long frames, read by the peer (remote read only)
  Mr long_send_mr_;
  AlignedBuffer long_recv_;  // the peer's long frames, fetched by RDMA READ
  Mr long_recv_mr_;

  std::deque<Inbound> ready_;        // reaped receives not yet taken
  std::vector<uint32_t> free_send_;  // send buffers not in flight
  std::vector<OpCompletion> ops_done_;
  uint32_t sq_used_ = 0;  // posted send-queue WRs not yet completed
  bool armed_ = false;    // ibv_req_notify_cq requested and its event not yet taken
  bool long_read_pending_ = false;
  bool long_frames_allowed_ = false;
  int watch_fd_ = -1;
  std::function<void()> on_watch_;
  Errc fail_code_ = Errc::Ok;
  std::string fail_why_;
};

// Frames over an endpoint (the same frames as wire.h).
// Sends header h (its length set from payload) and payload as one message.
void send_frame(Endpoint& ep, const wire::Header& h, std::span<const uint8_t> payload, Deadline d);
// Splits a received message into header and payload; nullopt (and *why) when malformed: bad
// header, or a length field that disagrees with the message size.
std::optional<wire::Header> parse_frame(std::span<const uint8_t> msg,
                                        std::span<const uint8_t>* payload, std::string* why);
// Receives one frame, copies its payload out and reposts the buffer. false when d passed.
// Throws FabricError{Protocol} on a malformed frame, or the endpoint's failure.
bool recv_frame(Endpoint& ep, wire::Header* h, std::vector<uint8_t>* payload, Deadline d);

// The locked-memory advice every registration failure carries.
extern const char* const kMemlockHint;

}  // namespace tierce::fabric::verbs
