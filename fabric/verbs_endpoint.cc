// fabric/verbs_endpoint.cc — setting up an Endpoint: completion channel, CQ, registered buffer
// pools, the RC queue pair, the initial receives. The datapath is in verbs_datapath.cc.
#include "fabric/verbs_endpoint.h"

#include <algorithm>
#include <cerrno>

namespace tierce::fabric::verbs {

const char* const kMemlockHint =
    "registered memory is pinned: raise the locked-memory limit of this process (`ulimit -l "
    "unlimited`, "
    "LimitMEMLOCK=infinity in its systemd unit, or memlock in /etc/security/limits.conf)";

namespace {

std::string reg_hint(int err) {
  if (err == ENOMEM || err == EPERM || err == EAGAIN) return kMemlockHint;
  return "see `ibv_devinfo` for the device's state";
}

}  // namespace

Endpoint::Endpoint(rdma_cm_id* id, ibv_pd* pd, const DeviceLimits& dev, const EndpointConfig& cfg)
    : pd_(pd) {
  if (!id || !id->verbs || !pd)
    throw FabricError(Errc::System, "verbs endpoint: rdma_cm_id not bound to a device");
  const std::string where = " on " + dev.name;

  // Sizes, clamped to what the device supports. Every send WR is signaled and each receive
  // completes once, so the CQ must hold send_depth + recv_depth entries.
  uint32_t max_wr = std::max<uint32_t>(dev.max_qp_wr, 1);
  recv_depth_ = std::clamp<uint32_t>(cfg.recv_depth, 1, max_wr);
  send_depth_ = std::clamp<uint32_t>(cfg.send_depth, 1, max_wr);
  if (dev.max_cqe > 0 && send_depth_ + recv_depth_ > dev.max_cqe) {
    if (dev.max_cqe <= recv_depth_ + 1)
      throw FabricError(Errc::System, "device " + dev.name + " allows only " +
                                          std::to_string(dev.max_cqe) +
                                          " CQ entries; the verbs backend needs more than " +
                                          std::to_string(recv_depth_ + 1));
    send_depth_ = dev.max_cqe - recv_depth_;
  }
  buf_size_ = uint32_t(Tunables::kMsgBufSize);
  eager_limit_ = buf_size_;  // until set_peer() says the peer's buffers are smaller
  uint32_t send_buffers = std::clamp<uint32_t>(cfg.send_buffers, 1, send_depth_);

  // 1. Completion channel, non-blocking: waiters poll() its fd with a deadline.
  errno = 0;
  chan_.reset(ibv_create_comp_channel(id->verbs));
  if (!chan_)
    throw_verbs(Errc::System, "ibv_create_comp_channel" + where, errno,
                "out of file descriptors? (`ulimit -n`)");
  set_nonblocking(chan_->fd, "completion channel");

  // 2. One CQ for both queues: a single thread drives the endpoint.
  errno = 0;
  ibv_cq* cq = ibv_create_cq(id->verbs, int(send_depth_ + recv_depth_), nullptr, chan_.get(), 0);
  if (!cq)
    throw_verbs(Errc::System,
                "ibv_create_cq(" + std::to_string(send_depth_ + recv_depth_) + ")" + where, errno);
  cq_.reset(cq);

  // 3. Receive pool: recv_depth buffers of buf_size, one MR; the HCA writes into it.
  recv_buf_ = AlignedBuffer(size_t(recv_depth_) * buf_size_);
  errno = 0;
  recv_mr_.reset(ibv_reg_mr(pd, recv_buf_.data(), recv_buf_.size(), kAccessLocalWrite));
  if (!recv_mr_)
    throw_verbs(
        Errc::System,
        "ibv_reg_mr(receive buffers, " + std::to_string(recv_buf_.size()) + " bytes)" + where,
        errno, reg_hint(errno));

  // 4. Send buffers: the HCA only reads them (access 0 = local read).
  send_buf_ = AlignedBuffer(size_t(send_buffers) * buf_size_);
  errno = 0;
  send_mr_.reset(ibv_reg_mr(pd, send_buf_.data(), send_buf_.size(), 0));
  if (!send_mr_)
    throw_verbs(Errc::System,
                "ibv_reg_mr(send buffers, " + std::to_string(send_buf_.size()) + " bytes)" + where,
                errno, reg_hint(errno));
  free_send_.reserve(send_buffers);
  for (uint32_t i = send_buffers; i-- > 0;) free_send_.push_back(i);

  // 5. The RC QP. rdma_create_qp moves it to INIT (receives may be posted); rdma_accept /
  //    rdma_connect take it through RTR and RTS with the path rdma_cm resolved.
  ibv_qp_init_attr qa{};
  qa.qp_context = nullptr;
  qa.send_cq = cq_.get();
  qa.recv_cq = cq_.get();
  qa.srq = nullptr;                  // receive buffers sized per connection
  qa.cap.max_send_wr = send_depth_;  // one-sided ops + messages in flight
  qa.cap.max_recv_wr = recv_depth_;  // receives kept posted
  qa.cap.max_send_sge = 1;           // every WR moves one contiguous buffer
  qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = Tunables::kMaxInlineData;  // small frames/WRITEs copied into the WQE
  qa.qp_type = IBV_QPT_RC;                            // reliable connected: READ, atomics, ordering
  qa.sq_sig_all = 0;                                  // each WR sets IBV_SEND_SIGNALED itself
  errno = 0;
  if (rdma_create_qp(id, pd, &qa) != 0) {
    int err = errno;
    // Some providers support less inline data than asked (or none): retry without it.
    qa.cap.max_inline_data = 0;
    errno = 0;
    if (rdma_create_qp(id, pd, &qa) != 0)
      throw_verbs(Errc::System,
                  "rdma_create_qp(RC, " + std::to_string(send_depth_) + " send / " +
                      std::to_string(recv_depth_) + " receive WRs)" + where,
                  errno ? errno : err,
                  "the device may be out of QPs or memory; see `ibv_devinfo -v` for its limits");
  }
  qp_.reset(id);
  // The provider reports what it granted (possibly more than asked); we never inline more than
  // we asked for, which also bounds the stack copy in send().
  max_inline_ = std::min<uint32_t>(qa.cap.max_inline_data, Tunables::kMaxInlineData);
  if (qa.cap.max_send_wr < send_depth_ || qa.cap.max_recv_wr < recv_depth_)
    throw FabricError(Errc::System,
                      "rdma_create_qp granted fewer work requests than asked" + where);

  // 6. Every receive buffer goes to the HCA before the peer can send.
  for (uint32_t slot = 0; slot < recv_depth_; ++slot) {
    repost(slot);
    if (failed())
      throw FabricError(Errc::System, "posting receive buffers" + where + ": " + fail_why_);
  }
}

void Endpoint::set_peer(const PeerParams& peer) {
  eager_limit_ = std::min<size_t>(buf_size_, peer.buf_size);
}

void Endpoint::ensure_long_buffer(bool send_side) {
  AlignedBuffer& buf = send_side ? long_send_ : long_recv_;
  Mr& mr = send_side ? long_send_mr_ : long_recv_mr_;
  if (mr) return;
  buf = AlignedBuffer(Tunables::kMaxLongFrame);
  // The peer reads our long frames; the HCA writes the peer's into long_recv_.
  const int access = send_side ? int(IBV_ACCESS_REMOTE_READ) : kAccessLocalWrite;
  errno = 0;
  mr.reset(ibv_reg_mr(pd_, buf.data(), buf.size(), access));
  if (!mr) {
    int e = errno;
    buf = AlignedBuffer();
    throw_verbs(Errc::System,
                std::string("ibv_reg_mr(") + (send_side ? "long-send" : "long-receive") +
                    " buffer, " + std::to_string(Tunables::kMaxLongFrame) + " bytes)",
                e, reg_hint(e));
  }
}

void Endpoint::set_watch(int fd, std::function<void()> on_readable) {
  watch_fd_ = fd;
  on_watch_ = std::move(on_readable);
}

void Endpoint::fail(Errc code, const std::string& why) {
  if (fail_code_ != Errc::Ok) return;  // the first cause is the interesting one
  fail_code_ = code == Errc::Ok ? Errc::System : code;
  fail_why_ = why;
}

void Endpoint::throw_failed() const {
  throw FabricError(fail_code_ == Errc::Ok ? Errc::System : fail_code_,
                    fail_why_.empty() ? "connection failed" : fail_why_);
}

}  // namespace tierce::fabric::verbs
