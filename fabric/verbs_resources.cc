// fabric/verbs_resources.cc — rdma-core owners and setup helpers (see verbs_resources.h).
#include "fabric/verbs_resources.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "fabric/wire.h"

namespace tierce::fabric::verbs {

// ---------------------------------------------------------------------------------------------
// Owners

void Cq::reset(ibv_cq* cq) noexcept {
  if (cq_) {
    if (unacked_) ibv_ack_cq_events(cq_, unacked_);
    (void)ibv_destroy_cq(cq_);
  }
  cq_ = cq;
  unacked_ = 0;
}

void Cq::note_event() {
  if (++unacked_ >= kAckBatch) {
    ibv_ack_cq_events(cq_, unacked_);
    unacked_ = 0;
  }
}

CmEvent& CmEvent::operator=(CmEvent&& o) noexcept {
  if (this != &o) {
    reset();
    e_ = o.e_;
    o.e_ = nullptr;
  }
  return *this;
}

void CmEvent::reset() noexcept {
  if (e_) (void)rdma_ack_cm_event(e_);
  e_ = nullptr;
}

AlignedBuffer::AlignedBuffer(size_t bytes) {
  constexpr size_t kPage = 4096;
  size_t n = (bytes + kPage - 1) / kPage * kPage;
  void* p = nullptr;
  if (int rc = posix_memalign(&p, kPage, n); rc != 0)
    throw_verbs(Errc::System, "allocating " + std::to_string(n) + " bytes of RDMA buffers", rc);
  std::memset(p, 0, n);
  p_ = static_cast<uint8_t*>(p);
  n_ = n;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(p_);
    p_ = o.p_;
    n_ = o.n_;
    o.p_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() {
  std::free(p_);
}

// ---------------------------------------------------------------------------------------------
// Device facts

DeviceLimits query_device(ibv_context* ctx, uint8_t port) {
  DeviceLimits d;
  d.name = ibv_get_device_name(ctx->device) ? ibv_get_device_name(ctx->device) : "?";
  d.port = port;
  ibv_device_attr attr{};
  if (int rc = ibv_query_device(ctx, &attr); rc != 0)
    throw_verbs(Errc::System, "ibv_query_device(" + d.name + ")", rc,
                "is the device still present? see `ibv_devinfo`");
  ibv_port_attr pa{};
  if (int rc = ibv_query_port(ctx, port, &pa); rc != 0)
    throw_verbs(Errc::System, "ibv_query_port(" + d.name + " port " + std::to_string(port) + ")",
                rc, "see `ibv_devinfo -v`");
  d.ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
  d.max_qp_wr = uint32_t(std::max(attr.max_qp_wr, 0));
  d.max_cqe = uint32_t(std::max(attr.max_cqe, 0));
  d.max_qp_rd_atom = uint32_t(std::max(attr.max_qp_rd_atom, 0));
  d.max_qp_init_rd_atom = uint32_t(std::max(attr.max_qp_init_rd_atom, 0));
  d.max_mr_size = attr.max_mr_size;
  d.max_msg_sz = pa.max_msg_sz;
  d.atomic_cap = attr.atomic_cap;
  return d;
}

std::string describe_atomics(ibv_atomic_cap cap) {
  switch (cap) {
    case IBV_ATOMIC_NONE:
      return "no RDMA atomics (or only in the wrong byte order; the kernel then reports none)";
    case IBV_ATOMIC_HCA:
      return "RDMA atomics atomic among this HCA's operations only, not against CPU atomics";
    case IBV_ATOMIC_GLOB:
      return "RDMA atomics atomic against CPU atomics too";
  }
  return "unknown atomic capability";
}

// ---------------------------------------------------------------------------------------------
// Connection parameters

namespace {
constexpr uint32_t kParamsMagic = 0x42525654;  // "TVRB"
constexpr uint16_t kParamsLayout = 1;
// Bounds a sane peer stays within; anything else is not a Tierce verbs peer of this layout.
constexpr uint32_t kMaxPeerDepth = 4096;
constexpr uint32_t kMinPeerBuf = 4096;
constexpr uint32_t kMaxPeerBuf = 16u << 20;

void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint32_t get32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
}  // namespace

void encode_peer_params(const PeerParams& p, uint8_t out[kPeerParamsSize]) {
  std::memset(out, 0, kPeerParamsSize);
  put32(out, kParamsMagic);
  out[4] = uint8_t(kParamsLayout);
  out[5] = uint8_t(kParamsLayout >> 8);
  out[6] = uint8_t(p.recv_depth);
  out[7] = uint8_t(p.recv_depth >> 8);
  put32(out + 8, p.buf_size);
  out[12] = uint8_t(p.flags);
  out[13] = uint8_t(p.flags >> 8);
  put32(out + 16, p.lease_ms);
}

std::optional<PeerParams> decode_peer_params(const void* data, size_t len) {
  if (!data || len < kPeerParamsSize) return std::nullopt;
  const auto* b = static_cast<const uint8_t*>(data);
  if (get32(b) != kParamsMagic) return std::nullopt;
  if (uint16_t(b[4] | b[5] << 8) != kParamsLayout) return std::nullopt;
  PeerParams p;
  p.recv_depth = uint32_t(b[6] | b[7] << 8);
  p.buf_size = get32(b + 8);
  p.flags = uint16_t(b[12] | b[13] << 8);
  p.lease_ms = get32(b + 16);
  if (p.recv_depth < 1 || p.recv_depth > kMaxPeerDepth) return std::nullopt;
  if (p.buf_size < kMinPeerBuf || p.buf_size > kMaxPeerBuf) return std::nullopt;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Helpers

std::string err_text(int err) {
  return std::strerror(err);
}

void throw_verbs(Errc code, const std::string& what, int err, const std::string& hint) {
  std::string msg = what + ": " + (err ? err_text(err) : std::string("failed"));
  if (!hint.empty()) msg += "; " + hint;
  throw FabricError(code, msg);
}

EventChannel open_event_channel(const std::string& who) {
  errno = 0;
  EventChannel ch(rdma_create_event_channel());
  if (!ch) {
    int e = errno;
    if (e == ENODEV || e == ENOENT || e == ENOSYS)
      throw FabricError(Errc::NoDevice,
                        who + ": rdma_create_event_channel: " + err_text(e) +
                            " (no RDMA device, or the rdma_ucm module is not loaded); use tcp://");
    throw_verbs(Errc::System, who + ": rdma_create_event_channel", e,
                "is the rdma_ucm module loaded?");
  }
  set_nonblocking(ch->fd, "rdma_cm event channel");
  return ch;
}

void set_nonblocking(int fd, const char* what) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw_verbs(Errc::System, std::string("making the ") + what + " non-blocking", errno);
}

int ms_until(Deadline d, int cap_ms) {
  if (d == kNoDeadline) return cap_ms;
  auto left = d - std::chrono::steady_clock::now();
  if (left <= left.zero()) return 0;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1;  // round up
  return int(std::min<long long>(ms, cap_ms));
}

CmEvent next_cm_event(rdma_event_channel* ch, Deadline d) {
  for (;;) {
    rdma_cm_event* e = nullptr;
    if (rdma_get_cm_event(ch, &e) == 0) return CmEvent(e);
    int err = errno;
    if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR)
      throw_verbs(Errc::System, "rdma_get_cm_event", err,
                  "the rdma_cm channel failed (device removed?)");
    int ms = ms_until(d);
    if (ms == 0) return CmEvent();
    pollfd p{ch->fd, POLLIN, 0};
    if (::poll(&p, 1, ms) < 0 && errno != EINTR)
      throw_verbs(Errc::System, "poll on the rdma_cm channel", errno);
  }
}

sockaddr_storage resolve_host(const std::string& host, uint16_t port, bool passive,
                              socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  std::string ps = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), ps.c_str(), &hints, &res);
  if (rc != 0 || !res)
    throw FabricError(Errc::Config,
                      "cannot resolve '" + host + "': " + gai_strerror(rc) +
                          " (verbs addresses name the IP of an IPoIB or RoCE interface)");
  sockaddr_storage ss{};
  std::memcpy(&ss, res->ai_addr, std::min<size_t>(res->ai_addrlen, sizeof ss));
  *len = socklen_t(res->ai_addrlen);
  freeaddrinfo(res);
  return ss;
}

std::string format_sockaddr(const sockaddr* sa) {
  if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)) return "?";
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  socklen_t len = sa->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) !=
      0)
    return "?";
  if (sa->sa_family == AF_INET6) return "[" + std::string(host) + "]:" + serv;
  return std::string(host) + ":" + serv;
}

std::string describe_reject(int status) {
  if (status < 0) return err_text(-status);  // iWARP reports an errno
  switch (status) {
    case 8:  // IB_CM_REJ_INVALID_SERVICE_ID
      return "nothing listens on that port (is the Tierce server up, with a verbs:// listen "
             "address on this port?)";
    case 28:  // IB_CM_REJ_CONSUMER_DEFINED: the server called rdma_reject
      return "the server refused the connection (max_connections reached, shutting down, or it "
             "could not set up "
             "the queue pair: see its log, FAB04xx)";
    case 4:  // IB_CM_REJ_TIMEOUT
      return "the connection manager timed out";
    case 26:  // IB_CM_REJ_INVALID_MTU
      return "path MTU mismatch between the ports (check `ibv_devinfo` active_mtu on both hosts)";
    case 27:  // IB_CM_REJ_INSUFFICIENT_RESP_RESOURCES
      return "the server's HCA lacks responder resources for RDMA READ/atomics";
    default:
      return "IB CM reject reason " + std::to_string(status);
  }
}

Errc map_wc_status(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS:
      return Errc::Ok;
    case IBV_WC_REM_ACCESS_ERR:
      return Errc::BadKey;        // stale/forged rkey, or outside the MR
    case IBV_WC_REM_INV_REQ_ERR:  // responder refused (e.g. no atomics)
    case IBV_WC_REM_INV_RD_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
      return Errc::BadRequest;
    case IBV_WC_RETRY_EXC_ERR:  // no ACK within the retry budget: dead
    case IBV_WC_REM_ABORT_ERR:
    case IBV_WC_WR_FLUSH_ERR:
      return Errc::PeerClosed;  // not executed: the QP had failed
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return Errc::Timeout;  // peer alive but stopped receiving
    case IBV_WC_RESP_TIMEOUT_ERR:
      return Errc::Timeout;
    default:
      return Errc::System;  // local protection/length/QP errors
  }
}

std::string describe_wc(ibv_wc_status s, uint32_t vendor_err) {
  std::string base = std::string(ibv_wc_status_str(s)) + " (vendor error 0x" + [&] {
    char b[16];
    std::snprintf(b, sizeof b, "%x", vendor_err);
    return std::string(b);
  }() + ")";
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
      return base +
             ": the peer stopped acknowledging (dead, rebooted or unreachable; check the link with "
             "`ibstat`)";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return base + ": the peer stopped posting receive buffers (stuck?)";
    case IBV_WC_REM_ACCESS_ERR:
      return base +
             ": the remote key is stale (region unexported or re-exported) or the range lies "
             "outside it; "
             "look the region up again";
    case IBV_WC_REM_INV_REQ_ERR:
      return base +
             ": the peer's HCA refused the request (atomics unsupported there, or a message larger "
             "than "
             "its receive buffers)";
    case IBV_WC_WR_FLUSH_ERR:
      return base + ": not executed, the connection had already failed or was closed";
    case IBV_WC_LOC_LEN_ERR:
      return base +
             ": a message larger than our receive buffer arrived (peer built with other limits?)";
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
      return base +
             ": a local buffer was not registered for this access (a bug in the verbs backend)";
    default:
      return base;
  }
}

static_assert(kPeerParamsSize <= 56,
              "rdma_connect private data is limited to 56 bytes on RDMA_PS_TCP");
static_assert(kMinPeerBuf >= wire::kHeaderSize + wire::kNonceSize + wire::kMacSize,
              "every handshake frame must fit a peer's smallest acceptable buffer");

}  // namespace tierce::fabric::verbs
