// ftp_adts/adts/verbs_session.cc — the verbs channel (seed 000 §9.2.1: channel semantics,
// send/recv, over an RC queue pair): rdma_cm connection on the listener's port (RDMA_PS_TCP),
// one RC QP whose receives come from a shared receive queue (SRQ) fed with pre-registered pool
// buffers, receiver-side credits, and the disk/network pipeline on both sides.
//
// Connection private data (little-endian):
//   client -> server (32 bytes): the 24-byte HELLO of docs/ftp.md (cookie checked), then
//                                u32 receive depth, u32 receive buffer size
//   server -> client (16 bytes): u32 'TADA', u32 status (0), u32 receive depth, u32 buffer size
//   A wrong HELLO gets rdma_reject with {u32 'TADA', u32 status}; the listener keeps listening.
//
// Messages: each is an IBV_WR_SEND_WITH_IMM; the 32-bit immediate (network order on the wire) is
//   bits 31..24  kind: 1 BLOCK  (payload: a 32-byte ADTS block header, then DATA bytes)
//                      2 CREDIT (no payload)
//   bits 23..0   credits returned to the peer (its messages we consumed and reposted)
// Flow control (no RNR ever): a side may have at most window = peer depth - kReserve BLOCK messages
// unconsumed at its peer; it spends a credit per BLOCK and gets it back in an immediate. CREDIT
// messages are not counted in the window — they land in the kReserve buffers, and one is sent only
// when the owed credits reach half a window, so at most two are ever in flight.
//
// Accounting: DATA bytes of a file count as zero_copy_bytes (the HCA DMAs straight from/to the
// registered buffer that the disk thread preads/pwrites — no socket-buffer copy); memory sources
// and sinks are copied into/out of the buffers and count as copied_bytes.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ftp_adts/adts/buffer_pool.h"
#include "ftp_adts/adts/pipeline.h"
#include "ftp_adts/adts/session_common.h"
#include "ftp_adts/adts/wire.h"

namespace tierce::adts {

base::Result<std::string> verbs_probe() {
  std::string found;  // the devices, or why there is none
  auto say = [&](std::string s) { found = std::move(s); };
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) {
    int e = errno;
    say(e == ENOSYS ? "no RDMA support in this kernel (ibv_get_device_list: ENOSYS; load "
                      "ib_uverbs and the HCA's driver, or set up soft-RoCE with `rdma link add`)"
                    : "ibv_get_device_list failed: " + wire::errno_text(e) +
                          " (is /dev/infiniband accessible?)");
    return base::Status(base::Code::Unavailable, found);
  }
  std::string names;
  for (int i = 0; i < n; ++i) {
    const char* nm = ibv_get_device_name(list[i]);
    names += std::string(i ? ", " : "") + (nm ? nm : "?");
  }
  ibv_free_device_list(list);
  if (n <= 0) {
    say("no RDMA device found (ibv_get_device_list returned an empty list; see `ibv_devices`)");
    return base::Status(base::Code::Unavailable, found);
  }
  say("RDMA devices: " + names);
  return found;
}

bool verbs_available() {
  return verbs_probe().ok();
}

namespace {

using Code = AdtsError::Code;
using wire::BlockType;

// Tunables.
constexpr uint32_t kDepth = 32;    // receive buffers each session posts to its SRQ
constexpr uint32_t kReserve = 4;   // of which hold CREDIT messages (outside the window)
static_assert(kReserve >= 2 && kDepth > 2 * kReserve, "window must be positive; 2 CREDITs fit");
constexpr uint32_t kImmBlock = 1u << 24;
constexpr uint32_t kImmCredit = 2u << 24;
constexpr uint32_t kImmCreditMask = (1u << 24) - 1;
constexpr uint64_t kSendTag = uint64_t(1) << 63;  // wr_id of sends; receives use the buffer index
constexpr int kCmTimeoutMs = 5000;                 // rdma_resolve_addr/route
// Access flags as int: rdma-core's ibv_reg_mr macro ANDs its argument with an enumerator of
// another enum, which clang flags (-Wdeprecated-enum-enum-conversion) when given an enumerator.
constexpr int kAccessLocalWrite = IBV_ACCESS_LOCAL_WRITE;

[[noreturn]] void fail(Code c, const std::string& what, int e) {
  throw AdtsError(c, "verbs: " + what + ": " + wire::errno_text(e));
}

void require_device() {
  if (auto probe = verbs_probe(); !probe.ok())
    throw AdtsError(Code::NoDevice, "verbs channel: no RDMA device: " + probe.message());
}

// ---- owners (created in this order, released in reverse) -------------------------------------

struct ChannelDel {
  void operator()(rdma_event_channel* c) const noexcept { rdma_destroy_event_channel(c); }
};
struct IdDel {
  void operator()(rdma_cm_id* id) const noexcept {
    if (id->qp) rdma_destroy_qp(id);
    (void)rdma_destroy_id(id);
  }
};
struct CompDel {
  void operator()(ibv_comp_channel* c) const noexcept { (void)ibv_destroy_comp_channel(c); }
};
struct CqDel {
  void operator()(ibv_cq* c) const noexcept { (void)ibv_destroy_cq(c); }
};
struct SrqDel {
  void operator()(ibv_srq* s) const noexcept { (void)ibv_destroy_srq(s); }
};
using EventChannel = std::unique_ptr<rdma_event_channel, ChannelDel>;
using CmId = std::unique_ptr<rdma_cm_id, IdDel>;
using CompChannel = std::unique_ptr<ibv_comp_channel, CompDel>;
using Cq = std::unique_ptr<ibv_cq, CqDel>;
using Srq = std::unique_ptr<ibv_srq, SrqDel>;

// One protection domain and registration cache per device context, for the whole process: pool
// buffers registered once stay registered for every later session (the registration cache of
// §9.2.2). Never freed — the pools they cover live as long as the process too.
struct Domain {
  ibv_pd* pd = nullptr;
  std::unique_ptr<RegistrationCache> cache;
};
Domain& domain_for(ibv_context* ctx) {
  static std::mutex mu;
  static std::map<ibv_context*, Domain> domains;
  std::lock_guard g(mu);
  Domain& d = domains[ctx];
  if (!d.pd) {
    d.pd = ibv_alloc_pd(ctx);
    if (!d.pd) fail(Code::LocalIo, "ibv_alloc_pd", errno);
    ibv_pd* pd = d.pd;
    d.cache = std::make_unique<RegistrationCache>([pd](void* addr, size_t len) {
      ibv_mr* mr = ibv_reg_mr(pd, addr, len, kAccessLocalWrite);
      if (!mr) fail(Code::LocalIo, "ibv_reg_mr of a transfer buffer", errno);
      return std::shared_ptr<void>(mr, [](void* m) { (void)ibv_dereg_mr(static_cast<ibv_mr*>(m)); });
    });
  }
  return d;
}

// A pool buffer with its lkey; on-demand buffers carry their own short-lived registration.
struct RegBuf {
  BufferPool::Lease lease;
  uint32_t lkey = 0;
  std::shared_ptr<void> transient;
};

// Waits for the next event on `ch` (deadline-bounded); returns it (caller acks).
rdma_cm_event* wait_cm_event(rdma_event_channel* ch, Millis timeout, const char* what) {
  wire::wait_fd(ch->fd, POLLIN, timeout, what);
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev) != 0) fail(Code::PeerClosed, "rdma_get_cm_event", errno);
  return ev;
}

void expect_event(rdma_event_channel* ch, rdma_cm_event_type want, Millis timeout,
                  const char* what, std::vector<uint8_t>* private_data = nullptr) {
  rdma_cm_event* ev = wait_cm_event(ch, timeout, what);
  rdma_cm_event_type got = ev->event;
  int status = ev->status;
  if (private_data && ev->param.conn.private_data)
    private_data->assign(static_cast<const uint8_t*>(ev->param.conn.private_data),
                         static_cast<const uint8_t*>(ev->param.conn.private_data) +
                             ev->param.conn.private_data_len);
  rdma_ack_cm_event(ev);
  if (got == want) return;
  if (got == RDMA_CM_EVENT_REJECTED && private_data && private_data->size() >= 8 &&
      wire::get_u32(private_data->data()) == wire::kAckMagic)
    throw AdtsError(Code::Protocol,
                    "server refused the verbs session: " +
                        wire::to_string(wire::HelloStatus(wire::get_u32(private_data->data() + 4))));
  throw AdtsError(Code::PeerClosed, std::string("verbs: ") + what + ": got " +
                                        rdma_event_str(got) + " (status " +
                                        std::to_string(status) + ")");
}

// ---- the session ------------------------------------------------------------------------------

class VerbsSession final : public Session {
 public:
  // Builds CQ, SRQ and QP on `id` (whose device rdma_cm chose) and posts the receive buffers.
  VerbsSession(EventChannel ch, CmId id, const SessionParams& p)
      : ch_(std::move(ch)), p_(p), id_(std::move(id)) {
    dom_ = &domain_for(id_->verbs);
    pool_ = BufferPool::shared(p_.block + wire::kHeaderSize);
    comp_.reset(ibv_create_comp_channel(id_->verbs));
    if (!comp_) fail(Code::LocalIo, "ibv_create_comp_channel", errno);
    wire::set_nonblocking(comp_->fd);
    const int cqe = int(2 * kDepth + 16);
    cq_.reset(ibv_create_cq(id_->verbs, cqe, nullptr, comp_.get(), 0));
    if (!cq_) fail(Code::LocalIo, "ibv_create_cq", errno);
    if (ibv_req_notify_cq(cq_.get(), 0) != 0) fail(Code::LocalIo, "ibv_req_notify_cq", errno);
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = kDepth;
    sa.attr.max_sge = 1;
    srq_.reset(ibv_create_srq(dom_->pd, &sa));
    if (!srq_) fail(Code::LocalIo, "ibv_create_srq", errno);
    ibv_qp_init_attr qa{};
    qa.send_cq = cq_.get();
    qa.recv_cq = cq_.get();
    qa.srq = srq_.get();
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = kDepth + 8;  // window + CREDITs + header-only messages
    qa.cap.max_send_sge = 1;
    qa.sq_sig_all = 1;  // every send completes: that is when its buffer goes back to the pool
    if (rdma_create_qp(id_.get(), dom_->pd, &qa) != 0) fail(Code::LocalIo, "rdma_create_qp", errno);
    recv_.resize(kDepth);
    for (uint32_t i = 0; i < kDepth; ++i) {
      recv_[i] = take_buffer();
      post_recv(i);
    }
  }

  ~VerbsSession() override { close(); }

  // The peer's receive depth and buffer size, from the connection private data.
  void set_peer(uint32_t depth, uint32_t buf_size) {
    if (depth <= kReserve + 1 || buf_size <= wire::kHeaderSize)
      throw AdtsError(Code::Protocol, "verbs peer announced depth " + std::to_string(depth) +
                                          " and buffers of " + std::to_string(buf_size) + " bytes");
    window_ = depth - kReserve;
    credits_ = window_;
    threshold_ = std::max<uint32_t>(1, window_ / 2);
    max_payload_ = std::min<uint64_t>(p_.block, buf_size - wire::kHeaderSize);
  }
  uint32_t depth() const { return kDepth; }

  // Server: rdma_accept with our private data, then ESTABLISHED.
  void accept_and_wait(const uint8_t* priv, size_t len, Millis timeout) {
    rdma_conn_param cp{};
    cp.private_data = priv;
    cp.private_data_len = uint8_t(len);
    cp.responder_resources = 1;
    cp.initiator_depth = 1;
    cp.rnr_retry_count = 7;  // never needed (credits), but harmless if a peer misbehaves
    if (rdma_accept(id_.get(), &cp) != 0) fail(Code::PeerClosed, "rdma_accept", errno);
    expect_event(ch_.get(), RDMA_CM_EVENT_ESTABLISHED, timeout, "establishing the verbs session");
  }
  // Client: rdma_connect with the HELLO, then ESTABLISHED with the server's depth and size.
  void connect_and_wait(const uint8_t* priv, size_t len, Millis timeout) {
    rdma_conn_param cp{};
    cp.private_data = priv;
    cp.private_data_len = uint8_t(len);
    cp.responder_resources = 1;
    cp.initiator_depth = 1;
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;
    if (rdma_connect(id_.get(), &cp) != 0) fail(Code::PeerClosed, "rdma_connect", errno);
    std::vector<uint8_t> reply;
    expect_event(ch_.get(), RDMA_CM_EVENT_ESTABLISHED, timeout, "connecting the verbs session",
                 &reply);
    if (reply.size() < 16 || wire::get_u32(reply.data()) != wire::kAckMagic)
      throw AdtsError(Code::Protocol, "verbs: server accepted without a valid HELLO-ACK");
    set_peer(wire::get_u32(reply.data() + 8), wire::get_u32(reply.data() + 12));
  }
  uint32_t buffer_size() const { return uint32_t(pool_->buffer_size()); }

  ChannelKind kind() const override { return ChannelKind::Verbs; }
  unsigned streams() const override { return 1; }
  bool broken() const override { return broken_; }
  SessionStats stats() const override {
    std::lock_guard g(stats_mu_);
    return stats_;
  }
  void close() override {
    if (closed_) return;
    closed_ = true;
    if (id_ && id_->qp) (void)rdma_disconnect(id_.get());
    // Order: QP (inside id_) before SRQ and CQ, those before the completion channel; the buffers
    // posted to the SRQ only after the QP and SRQ are gone (the HCA may still write to them).
    if (id_ && id_->qp) rdma_destroy_qp(id_.get());
    srq_.reset();
    cq_.reset();
    comp_.reset();
    id_.reset();
    ch_.reset();
    recv_.clear();
    inflight_.clear();
  }

  uint64_t send(const Source& src, const Progress& progress) override;
  uint64_t receive(const Sink& sink, const Progress& progress) override;

 private:
  struct Inbound {
    uint32_t index;  // receive buffer
    uint32_t len;
  };

  void usable() const {
    if (closed_) throw AdtsError(Code::PeerClosed, "session is closed");
    if (broken_) throw AdtsError(Code::PeerClosed, "session is broken by an earlier error");
  }

  RegBuf take_buffer() {
    RegBuf b;
    b.lease = pool_->acquire(p_.timeout);
    if (b.lease.pooled()) {
      uint64_t h0 = dom_->cache->hits();
      b.lkey = static_cast<ibv_mr*>(dom_->cache->get(b.lease.data(), b.lease.size()))->lkey;
      (dom_->cache->hits() > h0 ? reg_hits_ : reg_misses_)++;
    } else {
      // On-demand buffer (pool exhausted): registered for this use only, as in the paper.
      Registrar r = [this](void* a, size_t l) {
        ibv_mr* mr = ibv_reg_mr(dom_->pd, a, l, kAccessLocalWrite);
        if (!mr) fail(Code::LocalIo, "ibv_reg_mr", errno);
        return std::shared_ptr<void>(mr, [](void* m) { (void)ibv_dereg_mr(static_cast<ibv_mr*>(m)); });
      };
      b.transient = r(b.lease.data(), b.lease.size());
      b.lkey = static_cast<ibv_mr*>(b.transient.get())->lkey;
    }
    return b;
  }

  void post_recv(uint32_t i) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(recv_[i].lease.data()),
                uint32_t(recv_[i].lease.size()), recv_[i].lkey};
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    int e = ibv_post_srq_recv(srq_.get(), &wr, &bad);
    if (e) fail(Code::PeerClosed, "ibv_post_srq_recv", e);
  }

  // Sends a message from `b` (len bytes, 0 = CREDIT without payload). BLOCK messages spend a
  // credit, which the caller made sure of. The buffer is held until the send completes.
  void post_send(RegBuf b, uint32_t len, uint32_t kind) {
    uint32_t give = owed_.exchange(0);
    if (give > kImmCreditMask) {  // cannot happen with kDepth < 2^24; keep the rest owed
      owed_ += give - kImmCreditMask;
      give = kImmCreditMask;
    }
    uint64_t slot = next_slot_++;
    ibv_sge sge{reinterpret_cast<uintptr_t>(b.lease.data()), len, b.lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = kSendTag | slot;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.imm_data = htonl(kind | give);
    wr.sg_list = len ? &sge : nullptr;
    wr.num_sge = len ? 1 : 0;
    wr.send_flags = IBV_SEND_SIGNALED;
    int e = ibv_post_send(id_->qp, &wr, &bad);
    if (e) {
      owed_ += give;
      fail(Code::PeerClosed, "ibv_post_send", e);
    }
    if (kind == kImmBlock) --credits_;
    inflight_.emplace(slot, std::move(b));
  }

  void send_header(BlockType t, uint64_t id, uint64_t off, uint64_t len) {
    wait_for([&] { return credits_ > 0; }, "waiting for a receive credit");
    RegBuf b = take_buffer();
    wire::encode(wire::Header{wire::kBlockMagic, t, id, off, len}, b.lease.data());
    post_send(std::move(b), wire::kHeaderSize, kImmBlock);
  }

  // Sends owed credits in a CREDIT message once they reach the threshold (receiving side).
  void settle_credits() {
    if (owed_.load() < threshold_) return;
    RegBuf none;
    post_send(std::move(none), 0, kImmCredit);
  }

  // Reaps completions and connection events. false when nothing happened within `wait`.
  bool pump(Millis wait) {
    ibv_wc wc[16];
    int n = ibv_poll_cq(cq_.get(), 16, wc);
    if (n < 0) throw AdtsError(Code::PeerClosed, "verbs: ibv_poll_cq failed");
    if (n == 0) {
      pollfd pf[2] = {{comp_->fd, POLLIN, 0}, {ch_->fd, POLLIN, 0}};
      int r = ::poll(pf, 2, int(wait.count()));
      if (r < 0 && errno != EINTR) fail(Code::LocalIo, "poll", errno);
      if (pf[1].revents & POLLIN) {
        rdma_cm_event* ev = nullptr;
        if (rdma_get_cm_event(ch_.get(), &ev) == 0) {
          auto t = ev->event;
          rdma_ack_cm_event(ev);
          if (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_DEVICE_REMOVAL ||
              t == RDMA_CM_EVENT_TIMEWAIT_EXIT)
            throw AdtsError(Code::PeerClosed, std::string("verbs: peer disconnected (") +
                                                  rdma_event_str(t) + ")");
        }
      }
      if (pf[0].revents & POLLIN) {
        ibv_cq* cq = nullptr;
        void* ctx = nullptr;
        if (ibv_get_cq_event(comp_.get(), &cq, &ctx) == 0) {
          ibv_ack_cq_events(cq, 1);
          if (ibv_req_notify_cq(cq_.get(), 0) != 0) fail(Code::LocalIo, "ibv_req_notify_cq", errno);
        }
      }
      n = ibv_poll_cq(cq_.get(), 16, wc);  // catch what arrived before the re-arm
      if (n <= 0) return false;
    }
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS)
        throw AdtsError(Code::PeerClosed, std::string("verbs: completion failed: ") +
                                              ibv_wc_status_str(wc[i].status));
      if (wc[i].wr_id & kSendTag) {
        inflight_.erase(wc[i].wr_id & ~kSendTag);  // the buffer goes back to the pool
        continue;
      }
      uint32_t idx = uint32_t(wc[i].wr_id);
      if (idx >= recv_.size() || !(wc[i].wc_flags & IBV_WC_WITH_IMM))
        throw AdtsError(Code::Protocol, "verbs: message without immediate data");
      uint32_t imm = ntohl(wc[i].imm_data);
      credits_ += imm & kImmCreditMask;
      if (credits_ > window_)
        throw AdtsError(Code::Protocol, "verbs: peer returned more credits than it was given");
      uint32_t kind = imm & ~kImmCreditMask;
      if (kind == kImmCredit) {
        post_recv(idx);  // a reserve buffer: straight back
      } else if (kind == kImmBlock) {
        inbox_.push_back({idx, wc[i].byte_len});
      } else {
        throw AdtsError(Code::Protocol, "verbs: unknown message kind " + std::to_string(kind >> 24));
      }
    }
    return true;
  }

  // Pumps until cond() holds; no progress for the data timeout is Timeout.
  template <class F>
  void wait_for(F&& cond, const char* what) {
    auto last = std::chrono::steady_clock::now();
    while (!cond()) {
      if (pump(Millis(5))) {
        last = std::chrono::steady_clock::now();
        continue;
      }
      settle_credits();
      if (std::chrono::steady_clock::now() - last > p_.timeout)
        throw AdtsError(Code::Timeout, std::string("verbs: no progress ") + what + " within " +
                                           std::to_string(p_.timeout.count()) + " ms");
    }
  }

  // A consumed BLOCK message: its buffer is reposted and one credit is owed to the sender.
  void consume(uint32_t idx) {
    post_recv(idx);
    owed_++;
  }

  void add_stats(bool sent, uint64_t bytes, uint64_t zc, uint64_t cp) {
    std::lock_guard g(stats_mu_);
    stats_.transfers++;
    (sent ? stats_.bytes_sent : stats_.bytes_received) += bytes;
    stats_.zero_copy_bytes += zc;
    stats_.copied_bytes += cp;
    stats_.registration_hits += reg_hits_.exchange(0);
    stats_.registration_misses += reg_misses_.exchange(0);
  }

  // Declared so that the implicit destruction order (reverse) is the safe one even when the
  // constructor throws: the QP (inside id_) first, then the buffers it may DMA into, the SRQ,
  // the CQ, its channel, and the event channel last.
  EventChannel ch_;
  Domain* dom_ = nullptr;
  SessionParams p_;
  std::shared_ptr<BufferPool> pool_;
  CompChannel comp_;
  Cq cq_;
  Srq srq_;
  std::vector<RegBuf> recv_;               // posted to the SRQ, by index (= wr_id)
  std::map<uint64_t, RegBuf> inflight_;    // sends not yet completed
  CmId id_;
  uint64_t next_slot_ = 0;
  std::deque<Inbound> inbox_;              // BLOCK messages not yet handled
  uint32_t window_ = 0, credits_ = 0, threshold_ = 1;
  std::atomic<uint32_t> owed_{0};          // bumped by the disk thread, taken by the network one
  std::atomic<uint64_t> reg_hits_{0}, reg_misses_{0};
  uint64_t max_payload_ = 0;
  uint64_t last_id_ = 0;
  bool broken_ = false, closed_ = false;
  mutable std::mutex stats_mu_;
  SessionStats stats_;
};

uint64_t VerbsSession::send(const Source& src, const Progress& progress) {
  usable();
  const bool from_memory = !src.memory.empty() || src.fd < 0;
  const uint64_t total = from_memory ? src.memory.size() : src.length;
  std::optional<AdtsError> early;
  if (!from_memory) early = source_region_error(src, total);
  const uint64_t id = ++last_id_;
  const uint64_t chunk = max_payload_;
  const uint64_t nblocks = (total + chunk - 1) / chunk;
  BoundedQueue<std::pair<Chunk, RegBuf>> queue(4);
  std::atomic<bool> stop{false}, local_fail{false};
  ErrorSlot local_err;
  std::thread disk;
  try {
    send_header(BlockType::Begin, id, 0, total);
    if (early) {
      send_header(BlockType::Abort, id, 0, 0);
      wait_for([&] { return inflight_.empty(); }, "waiting for the ABORT to complete");
      throw *early;
    }
    // Disk thread: fills buffers (header room first) while the network thread posts earlier ones.
    disk = std::thread([&] {
      try {
        for (uint64_t b = 0; b < nblocks && !stop; ++b) {
          Chunk c;
          c.offset = b * chunk;
          c.length = std::min<uint64_t>(chunk, total - c.offset);
          RegBuf rb = take_buffer();
          uint8_t* dst = rb.lease.data() + wire::kHeaderSize;
          if (from_memory) {
            std::memcpy(dst, src.memory.data() + c.offset, size_t(c.length));
          } else {
            for (uint64_t got = 0; got < c.length;) {
              ssize_t r = ::pread(src.fd, dst + got, size_t(c.length - got),
                                  off_t(src.offset + c.offset + got));
              if (r < 0 && errno == EINTR) continue;
              if (r < 0)
                throw AdtsError(Code::LocalIo, "reading the source file: " + wire::errno_text(errno));
              if (r == 0)
                throw AdtsError(Code::LocalIo, "source file ended at offset " +
                                                   std::to_string(src.offset + c.offset + got));
              got += uint64_t(r);
            }
          }
          if (!queue.push({std::move(c), std::move(rb)}, p_.timeout)) break;
        }
      } catch (const AdtsError& e) {
        local_err.set(e);
        local_fail = true;
      }
      queue.close();
    });
    uint64_t done = 0;
    while (auto item = queue.pop(p_.timeout)) {
      auto& [c, rb] = *item;
      wait_for([&] { return credits_ > 0; }, "waiting for a receive credit");
      wire::encode(wire::Header{wire::kBlockMagic, BlockType::Data, id, c.offset, c.length},
                   rb.lease.data());
      post_send(std::move(rb), uint32_t(wire::kHeaderSize + c.length), kImmBlock);
      done += c.length;
      if (progress) progress(done, total);
    }
    disk.join();
    send_header(local_fail ? BlockType::Abort : BlockType::End, id, 0, 0);
    wait_for([&] { return inflight_.empty(); }, "waiting for sends to complete");
  } catch (const AdtsError& e) {
    stop = true;
    queue.cancel();
    if (disk.joinable()) disk.join();
    if (e.code() != Code::LocalIo) broken_ = true;
    throw;
  }
  add_stats(true, local_fail ? 0 : total, from_memory ? 0 : total, from_memory ? total : 0);
  if (local_fail) throw *local_err.get();
  return total;
}

uint64_t VerbsSession::receive(const Sink& sink, const Progress& progress) {
  usable();
  // Items for the disk thread: a receive buffer holding a DATA block.
  struct Write {
    uint32_t index;
    uint64_t offset, length;
  };
  BoundedQueue<Write> queue(kDepth);
  std::atomic<bool> local_fail{false};
  ErrorSlot local_err;
  std::thread disk;
  size_t mem_base = sink.memory ? sink.memory->size() : 0;
  bool aborted = false;
  uint64_t total = 0;
  try {
    wait_for([&] { return !inbox_.empty(); }, "waiting for BEGIN");
    Inbound m = inbox_.front();
    inbox_.pop_front();
    if (m.len < wire::kHeaderSize) throw AdtsError(Code::Protocol, "verbs: short message");
    wire::Header begin = wire::decode_header(recv_[m.index].lease.data());
    consume(m.index);
    if (begin.type != BlockType::Begin)
      throw AdtsError(Code::Protocol, "expected BEGIN, got block type " +
                                          std::to_string(int(begin.type)));
    if (begin.transfer_id != last_id_ + 1)
      throw AdtsError(Code::Protocol, "BEGIN of transfer " + std::to_string(begin.transfer_id) +
                                          ", expected transfer " + std::to_string(last_id_ + 1) +
                                          " (ids increase by one per session, from 1)");
    if (begin.length > sink.max_length ||
        (sink.fd < 0 && begin.length > kMaxMemoryTransfer))
      throw AdtsError(begin.length > sink.max_length ? Code::TooLarge : Code::Protocol,
                      "transfer of " + std::to_string(begin.length) +
                                          " bytes exceeds the sink's limit");
    last_id_ = begin.transfer_id;
    total = begin.length;
    const uint64_t id = begin.transfer_id;
    // A memory sink grows block by block as they arrive (in order, each at most one message
    // buffer), never to the announced total up front.
    Coverage cov(total);
    if (sink.fd >= 0)
      disk = std::thread([&] {
        // Disk thread: pwrites straight from the receive buffer, then gives it back to the SRQ.
        try {
          while (auto w = queue.pop(p_.timeout)) {
            const uint8_t* data = recv_[w->index].lease.data() + wire::kHeaderSize;
            for (uint64_t k = 0; !local_fail && k < w->length;) {
              ssize_t r = ::pwrite(sink.fd, data + k, size_t(w->length - k),
                                   off_t(sink.offset + w->offset + k));
              if (r < 0 && errno == EINTR) continue;
              if (r <= 0) {
                local_err.set(AdtsError(Code::LocalIo, "writing the file: " +
                                                           wire::errno_text(r < 0 ? errno : EIO)));
                local_fail = true;
                break;
              }
              k += uint64_t(r);
            }
            consume(w->index);
          }
        } catch (const AdtsError& e) {
          local_err.set(e);
          local_fail = true;
        }
      });
    uint64_t done = 0;
    for (bool end = false; !end;) {
      settle_credits();  // the disk thread gave buffers back: let the sender have them
      wait_for([&] { return !inbox_.empty(); }, "waiting for DATA");
      Inbound in = inbox_.front();
      inbox_.pop_front();
      if (in.len < wire::kHeaderSize) throw AdtsError(Code::Protocol, "verbs: short message");
      wire::Header h = wire::decode_header(recv_[in.index].lease.data());
      if (h.transfer_id != id)
        throw AdtsError(Code::Protocol, "block of transfer " + std::to_string(h.transfer_id) +
                                            " inside transfer " + std::to_string(id));
      if (h.type == BlockType::Begin)
        throw AdtsError(Code::Protocol, "second BEGIN inside transfer " + std::to_string(id));
      if (h.type != BlockType::Data) {
        aborted = h.type == BlockType::Abort;
        consume(in.index);
        end = true;
        continue;
      }
      if (h.length != in.len - wire::kHeaderSize)
        throw AdtsError(Code::Protocol, "DATA header says " + std::to_string(h.length) +
                                            " bytes, message carries " +
                                            std::to_string(in.len - wire::kHeaderSize));
      // One stream: its blocks come in increasing offset order, and with exactly-once cover that
      // means each starts where the previous ended. The disk thread writes in queue order, so
      // the file always holds exactly a prefix of the transfer.
      if (h.offset != done)
        throw AdtsError(Code::Protocol, "blocks out of order on stream 0: DATA at offset " +
                                            std::to_string(h.offset) + ", expected offset " +
                                            std::to_string(done));
      cov.claim(h.offset, h.length);
      if (sink.fd >= 0) {
        if (!queue.push(Write{in.index, h.offset, h.length}, p_.timeout))
          throw AdtsError(Code::LocalIo, "disk pipeline cancelled");
      } else {
        if (sink.memory) sink.memory->resize(mem_base + size_t(h.offset + h.length));
        if (sink.memory)
          std::memcpy(sink.memory->data() + mem_base + h.offset,
                      recv_[in.index].lease.data() + wire::kHeaderSize, size_t(h.length));
        consume(in.index);
      }
      done += h.length;
      if (progress) progress(done, total);
    }
    queue.close();
    if (disk.joinable()) disk.join();
    if (!aborted && cov.covered() != total)
      throw AdtsError(Code::Protocol, "transfer " + std::to_string(id) + " ended with " +
                                          std::to_string(cov.covered()) + " of " +
                                          std::to_string(total) + " bytes");
  } catch (const AdtsError&) {
    queue.cancel();
    if (disk.joinable()) disk.join();
    broken_ = true;
    if (sink.fd < 0 && sink.memory) sink.memory->resize(mem_base);
    throw;
  }
  if (aborted) {
    if (sink.fd < 0 && sink.memory) sink.memory->resize(mem_base);
    throw AdtsError(Code::Aborted, "the sender aborted transfer " + std::to_string(last_id_));
  }
  add_stats(false, total, sink.fd >= 0 ? total : 0, sink.fd >= 0 ? 0 : total);
  if (local_fail) throw *local_err.get();
  return total;
}

// ---- listener and connector -------------------------------------------------------------------

sockaddr_storage resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  std::string ps = std::to_string(port);
  int g = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), ps.c_str(), &hints, &res);
  if (g != 0) throw AdtsError(Code::Config, "cannot resolve " + host + ": " + gai_strerror(g));
  sockaddr_storage ss{};
  std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return ss;
}

class VerbsListener final : public ListenerImplBase {
 public:
  VerbsListener(const std::string& host, uint16_t lo, uint16_t hi, const SessionParams& p)
      : p_(p), cancel_([this] { close_port(); }) {
    if (lo == 0) hi = 0;
    std::string last;
    for (uint32_t port = lo; port <= hi; ++port) {
      EventChannel ch(rdma_create_event_channel());
      if (!ch) fail(Code::NoDevice, "rdma_create_event_channel", errno);
      rdma_cm_id* raw = nullptr;
      if (rdma_create_id(ch.get(), &raw, nullptr, RDMA_PS_TCP) != 0)
        fail(Code::NoDevice, "rdma_create_id", errno);
      CmId id(raw);
      sockaddr_storage ss = resolve(host, uint16_t(port), true);
      if (rdma_bind_addr(id.get(), reinterpret_cast<sockaddr*>(&ss)) != 0 ||
          rdma_listen(id.get(), 16) != 0) {
        last = wire::errno_text(errno);
        continue;
      }
      port_ = ntohs(rdma_get_src_port(id.get()));
      ch_ = std::move(ch);
      id_ = std::move(id);
      return;
    }
    throw AdtsError(Code::Config, "no free verbs data port on " + host + " in " +
                                      std::to_string(lo) + "-" + std::to_string(hi) + " (" + last +
                                      ")");
  }
  ~VerbsListener() override { close_port(); }
  uint16_t port() const override { return port_; }

  void cancel() override { cancel_.cancel(); }

  // Polls the listener's event channel together with the cancel eventfd. After cancel() the wait
  // for a client ends at once; a client already past its CONNECT_REQUEST is waited for (within
  // the data timeout) and then closed.
  std::unique_ptr<Session> accept(const std::function<void(const std::string&)>& log) override {
    AcceptCanceller::Running run(cancel_);
    auto deadline = std::chrono::steady_clock::now() + p_.timeout;
    for (;;) {
      run.check();
      auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0)
        throw AdtsError(Code::Timeout, "verbs data session: no client within " +
                                           std::to_string(p_.timeout.count()) + " ms");
      pollfd pf[2] = {{ch_->fd, POLLIN, 0}, {cancel_.fd(), POLLIN, 0}};
      int r = ::poll(pf, 2, int(std::min<int64_t>(left.count() + 1, INT32_MAX)));
      if (r < 0 && errno != EINTR) fail(Code::LocalIo, "poll", errno);
      run.check();
      if (r <= 0 || !pf[0].revents) continue;
      rdma_cm_event* ev = nullptr;
      if (rdma_get_cm_event(ch_.get(), &ev) != 0) fail(Code::PeerClosed, "rdma_get_cm_event", errno);
      if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
        rdma_ack_cm_event(ev);
        continue;
      }
      rdma_cm_id* child = ev->id;
      std::vector<uint8_t> pd(static_cast<const uint8_t*>(ev->param.conn.private_data),
                              static_cast<const uint8_t*>(ev->param.conn.private_data) +
                                  ev->param.conn.private_data_len);
      rdma_ack_cm_event(ev);
      if (!p_.allowed_peer.empty()) {
        // Not the control connection's peer (a stranger racing for the port): refused before
        // its cookie is even looked at, as on tcp.
        const std::string from = wire::numeric_host(rdma_get_peer_addr(child));
        if (from != p_.allowed_peer) {
          (void)rdma_reject(child, nullptr, 0);
          (void)rdma_destroy_id(child);
          if (log)
            log("ADT0105 verbs data session from " + (from.empty() ? "?" : from) +
                " dropped: not the control peer " + p_.allowed_peer);
          continue;
        }
      }
      wire::HelloStatus st = wire::HelloStatus::Ok;
      wire::Hello h;
      if (pd.size() < wire::kHelloSize + 8) {
        st = wire::HelloStatus::BadMagic;
      } else {
        h = wire::decode_hello(pd.data());
        if (h.magic != wire::kHelloMagic) st = wire::HelloStatus::BadMagic;
        else if (h.version != wire::kVersion) st = wire::HelloStatus::BadVersion;
        else if (h.cookie != p_.cookie) st = wire::HelloStatus::BadCookie;
        else if (h.streams != 1) st = wire::HelloStatus::BadStreamCount;
        else if (h.index != 0) st = wire::HelloStatus::BadIndex;
      }
      if (st != wire::HelloStatus::Ok) {
        uint8_t rej[8];
        wire::put_u32(rej, wire::kAckMagic);
        wire::put_u32(rej + 4, uint32_t(st));
        (void)rdma_reject(child, rej, sizeof rej);
        (void)rdma_destroy_id(child);
        if (log) log("ADT0101 refused verbs data session: " + wire::to_string(st));
        continue;
      }
      // The session gets an event channel of its own, so the listener can go away first.
      EventChannel sch(rdma_create_event_channel());
      if (!sch || rdma_migrate_id(child, sch.get()) != 0) {
        int e = errno;
        (void)rdma_reject(child, nullptr, 0);
        (void)rdma_destroy_id(child);
        fail(Code::LocalIo, "rdma_migrate_id", e);
      }
      CmId cid(child);
      auto s = std::make_unique<VerbsSession>(std::move(sch), std::move(cid), p_);
      s->set_peer(wire::get_u32(pd.data() + wire::kHelloSize),
                  wire::get_u32(pd.data() + wire::kHelloSize + 4));
      uint8_t acc[16];
      wire::put_u32(acc, wire::kAckMagic);
      wire::put_u32(acc + 4, 0);
      wire::put_u32(acc + 8, s->depth());
      wire::put_u32(acc + 12, s->buffer_size());
      s->accept_and_wait(acc, sizeof acc, left);
      run.finish();
      return s;
    }
  }

 private:
  void close_port() {
    id_.reset();  // before its channel
    ch_.reset();
  }

  SessionParams p_;
  EventChannel ch_;
  CmId id_;
  uint16_t port_ = 0;
  AcceptCanceller cancel_;  // closes id_ and ch_ (declared after them: destroyed first)
};

}  // namespace

std::unique_ptr<ListenerImplBase> make_verbs_listener(const std::string& host, uint16_t lo,
                                                      uint16_t hi, const SessionParams& p) {
  require_device();
  return std::make_unique<VerbsListener>(host, lo, hi, p);
}

std::unique_ptr<Session> connect_verbs_session(const std::string& host, uint16_t port,
                                               const SessionParams& p) {
  require_device();
  EventChannel ch(rdma_create_event_channel());
  if (!ch) fail(Code::NoDevice, "rdma_create_event_channel", errno);
  rdma_cm_id* raw = nullptr;
  if (rdma_create_id(ch.get(), &raw, nullptr, RDMA_PS_TCP) != 0)
    fail(Code::NoDevice, "rdma_create_id", errno);
  CmId id(raw);
  sockaddr_storage dst = resolve(host, port, false);
  int to = int(std::min<int64_t>(p.timeout.count(), kCmTimeoutMs));
  if (rdma_resolve_addr(id.get(), nullptr, reinterpret_cast<sockaddr*>(&dst), to) != 0)
    fail(Code::PeerClosed, "rdma_resolve_addr " + host, errno);
  expect_event(ch.get(), RDMA_CM_EVENT_ADDR_RESOLVED, p.timeout, "resolving the address");
  if (rdma_resolve_route(id.get(), to) != 0) fail(Code::PeerClosed, "rdma_resolve_route", errno);
  expect_event(ch.get(), RDMA_CM_EVENT_ROUTE_RESOLVED, p.timeout, "resolving the route");
  auto s = std::make_unique<VerbsSession>(std::move(ch), std::move(id), p);
  uint8_t priv[wire::kHelloSize + 8];
  wire::Hello h;
  h.cookie = p.cookie;
  wire::encode(h, priv);
  wire::put_u32(priv + wire::kHelloSize, s->depth());
  wire::put_u32(priv + wire::kHelloSize + 4, s->buffer_size());
  s->connect_and_wait(priv, sizeof priv, p.timeout);
  return s;
}

}  // namespace tierce::adts
