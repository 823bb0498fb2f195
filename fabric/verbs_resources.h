// fabric/verbs_resources.h — RAII owners of rdma-core objects and the setup helpers the verbs
// backend shares (internal to the fabric library).
//
// One owner per verbs object (STYLE.md, after rc_pingpong): its destructor releases exactly that
// object. A class holding several declares them in creation order, so C++ releases them in
// reverse: QP before the MRs and CQ it uses, those before their PD and completion channel, the
// rdma_cm_id after its QP, the event channel after every id on it.
//
// Private data of rdma_connect / rdma_accept (both directions; 24 bytes, little-endian). Each side
// tells the other how many receive buffers it keeps posted and how large they are, so neither ever
// sends a message the other cannot take (no RNR, no local length error at the receiver); the server
// adds what its HCA's atomics are worth and its lease:
//
//   offset  size  field
//   0       4     magic "TVRB" (0x42525654 read little-endian)
//   4       2     layout version (1)
//   6       2     receive buffers kept posted (depth)
//   8       4     receive buffer size in bytes (largest SEND the peer may post to us)
//   12      2     flags: bit 0 kPeerAtomicsGlob, bit 1 kPeerAtomicsHca (server; 0 from clients)
//   14      2     reserved (0)
//   16      4     lease in ms (server: ServerOptions::lease; 0 from clients)
//   20      4     reserved (0)
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "fabric/errors.h"
#include "fabric/socket.h"

namespace tierce::fabric::verbs {

// ---------------------------------------------------------------------------------------------
// Owners. Destructors cannot report failure; a verbs destroy call fails only when a dependent
// object is still alive (EBUSY), i.e. a declaration-order bug, and the object is then leaked.

struct EventChannelDeleter {
  void operator()(rdma_event_channel* c) const noexcept { rdma_destroy_event_channel(c); }
};
// Prereq of destruction: every rdma_cm_id on the channel destroyed.
using EventChannel = std::unique_ptr<rdma_event_channel, EventChannelDeleter>;

struct CmIdDeleter {
  void operator()(rdma_cm_id* id) const noexcept { (void)rdma_destroy_id(id); }
};
// Prereq of destruction: its QP destroyed; every event of the id that was retrieved acknowledged
// (rdma_destroy_id blocks until then — never destroy an id while holding one of its events).
using CmId = std::unique_ptr<rdma_cm_id, CmIdDeleter>;

struct PdDeleter {
  void operator()(ibv_pd* p) const noexcept { (void)ibv_dealloc_pd(p); }
};
using Pd = std::unique_ptr<ibv_pd, PdDeleter>;

struct CompChannelDeleter {
  void operator()(ibv_comp_channel* c) const noexcept { (void)ibv_destroy_comp_channel(c); }
};
using CompChannel = std::unique_ptr<ibv_comp_channel, CompChannelDeleter>;

struct MrDeleter {
  void operator()(ibv_mr* m) const noexcept { (void)ibv_dereg_mr(m); }
};
using Mr = std::unique_ptr<ibv_mr, MrDeleter>;

// A CQ and the count of completion events taken from its channel: ibv_destroy_cq waits until every
// event returned by ibv_get_cq_event was acknowledged, so the owner acknowledges the rest first.
class Cq {
 public:
  Cq() = default;
  explicit Cq(ibv_cq* cq) : cq_(cq) {}
  Cq(const Cq&) = delete;
  Cq& operator=(const Cq&) = delete;
  ~Cq() { reset(); }
  // Destroys the CQ held (acknowledging its events first) and takes `cq`.
  void reset(ibv_cq* cq = nullptr) noexcept;
  ibv_cq* get() const { return cq_; }
  // Counts one event from ibv_get_cq_event; acknowledges in batches (ibv_ack_cq_events takes a
  // mutex, so per-event acks would cost on the datapath).
  void note_event();

 private:
  static constexpr unsigned kAckBatch = 16;
  ibv_cq* cq_ = nullptr;
  unsigned unacked_ = 0;
};

// The QP that rdma_create_qp attached to an rdma_cm_id; rdma_destroy_qp releases it. The id must
// outlive this owner (declare the CmId first).
class Qp {
 public:
  Qp() = default;
  explicit Qp(rdma_cm_id* id) : id_(id) {}
  Qp(const Qp&) = delete;
  Qp& operator=(const Qp&) = delete;
  ~Qp() { reset(); }
  // Destroys the QP held and takes the one rdma_create_qp attached to `id`.
  void reset(rdma_cm_id* id = nullptr) noexcept {
    if (id_ && id_->qp) rdma_destroy_qp(id_);
    id_ = id;
  }
  ibv_qp* get() const { return id_ ? id_->qp : nullptr; }

 private:
  rdma_cm_id* id_ = nullptr;
};

// One retrieved rdma_cm event, acknowledged on destruction (releasing its private data).
class CmEvent {
 public:
  CmEvent() = default;
  explicit CmEvent(rdma_cm_event* e) : e_(e) {}
  CmEvent(CmEvent&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
  CmEvent& operator=(CmEvent&& o) noexcept;
  CmEvent(const CmEvent&) = delete;
  CmEvent& operator=(const CmEvent&) = delete;
  ~CmEvent() { reset(); }
  void reset() noexcept;
  explicit operator bool() const { return e_ != nullptr; }
  rdma_cm_event* operator->() const { return e_; }
  rdma_cm_event* get() const { return e_; }

 private:
  rdma_cm_event* e_ = nullptr;
};

// Page-aligned heap memory to register (an MR pins whole pages anyway). Zero-filled.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes);  // throws FabricError{System} when out of memory
  AlignedBuffer(AlignedBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();
  uint8_t* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
};

// Access flags as int: rdma-core's ibv_reg_mr macro ANDs its argument with an enumerator of
// another enum, which clang flags (-Wdeprecated-enum-enum-conversion) when given an enumerator.
inline constexpr int kAccessLocalWrite = IBV_ACCESS_LOCAL_WRITE;

// ---------------------------------------------------------------------------------------------
// Device facts the setup code sizes things by.
struct DeviceLimits {
  std::string name;                  // e.g. "mlx5_0"
  uint8_t port = 0;                  // the port rdma_cm bound the id to
  bool ethernet = false;             // RoCE (link layer Ethernet) rather than InfiniBand
  uint32_t max_qp_wr = 0;            // work requests per queue
  uint32_t max_cqe = 0;              // entries per CQ
  uint32_t max_qp_rd_atom = 0;       // RDMA READ/atomics this side answers at once (responder)
  uint32_t max_qp_init_rd_atom = 0;  // RDMA READ/atomics this side issues at once (initiator)
  uint64_t max_mr_size = 0;
  uint32_t max_msg_sz = 0;  // largest single transfer on the port
  ibv_atomic_cap atomic_cap = IBV_ATOMIC_NONE;
};
// Throws FabricError{System} when the device cannot be queried.
DeviceLimits query_device(ibv_context* ctx, uint8_t port);
// "host-endian, atomic among this HCA's operations" etc., for logs.
std::string describe_atomics(ibv_atomic_cap cap);

// ---------------------------------------------------------------------------------------------
// What each side of a connection tells the other (see the header comment).
struct PeerParams {
  uint32_t recv_depth = 0;
  uint32_t buf_size = 0;
  uint16_t flags = 0;
  uint32_t lease_ms = 0;
};
// The server's HCA executes RDMA atomics atomically with respect to its CPU's atomics too
// (IBV_ATOMIC_GLOB): remote cas64/faa64 may then meet the owner's CPU atomics on the same words.
inline constexpr uint16_t kPeerAtomicsGlob = 1;
// The server grants RDMA atomics although its HCA makes them atomic only among RDMA operations
// (its Tunables::kNicAtomicsWithoutGlob): a client built the same way may then use them.
inline constexpr uint16_t kPeerAtomicsHca = 2;
inline constexpr size_t kPeerParamsSize = 24;
void encode_peer_params(const PeerParams& p, uint8_t out[kPeerParamsSize]);
// nullopt when absent, of another layout, or out of sane bounds (not a Tierce peer).
std::optional<PeerParams> decode_peer_params(const void* data, size_t len);

// ---------------------------------------------------------------------------------------------
// Helpers.

// FabricError{code} "<what>: <strerror(err)>[; <hint>]".
[[noreturn]] void throw_verbs(Errc code, const std::string& what, int err,
                              const std::string& hint = {});
// "<strerror(err)>" for verbs calls that return an errno value instead of setting errno.
std::string err_text(int err);

void set_nonblocking(int fd, const char* what);

// A non-blocking rdma_cm event channel. `who` prefixes errors ("verbs://h:p", "cannot listen on
// ..."). No device or no rdma_ucm module → FabricError{NoDevice}; anything else → {System}.
EventChannel open_event_channel(const std::string& who);

// Milliseconds until d for librdmacm's int timeouts and poll(): at least 1 while d is in the
// future, 0 once it passed, capped at `cap_ms`.
int ms_until(Deadline d, int cap_ms = 1 << 30);

// The next event on a channel whose fd is non-blocking; an empty CmEvent once d passed.
// Throws FabricError{System} when the channel itself fails.
CmEvent next_cm_event(rdma_event_channel* ch, Deadline d);

// getaddrinfo for rdma_bind_addr / rdma_resolve_addr (numeric service). Throws FabricError{Config}.
sockaddr_storage resolve_host(const std::string& host, uint16_t port, bool passive, socklen_t* len);
// "192.0.2.7:18515" / "[fe80::1]:18515"; "?" when unknown.
std::string format_sockaddr(const sockaddr* sa);

// A reject reason of the IB CM (status of RDMA_CM_EVENT_REJECTED) in words.
std::string describe_reject(int status);

// ibv_wc_status → the fabric's per-op status, and a sentence saying what it means and what to do.
Errc map_wc_status(ibv_wc_status s);
std::string describe_wc(ibv_wc_status s, uint32_t vendor_err);

}  // namespace tierce::fabric::verbs
