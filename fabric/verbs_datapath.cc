// fabric/verbs_datapath.cc — the verbs hot paths: reaping and waiting for completions, messages,
// one-sided batches (VerbsConnection::post/wait) and stream I/O. Setup and teardown live in
// verbs_endpoint.cc, verbs_connection.cc, verbs_transport.cc (client) and verbs_server.cc.
#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "fabric/segment.h"
#include "fabric/verbs_connection.h"
#include "fabric/verbs_endpoint.h"
#include "fabric/verbs_stream.h"

namespace tierce::fabric::verbs {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Endpoint: completions

void Endpoint::on_completion(const ibv_wc& wc) {
  // Only wr_id, status, vendor_err and qp_num are valid in an error completion: the tag in wr_id
  // says what it was, never wc.opcode.
  const auto tag = WrTag(wc.wr_id >> kWrTagShift);
  const uint64_t index = wc.wr_id & kWrIndexMask;
  switch (tag) {
    case WrTag::Recv:
      if (wc.status != IBV_WC_SUCCESS) {
        fail(map_wc_status(wc.status), "receive failed: " + describe_wc(wc.status, wc.vendor_err));
      } else if (index >= recv_depth_ || wc.byte_len > buf_size_) {
        fail(Errc::System, "completion for an unknown receive buffer");
      } else {
        Inbound in;
        in.slot = uint32_t(index);
        in.bytes =
            std::span<const uint8_t>(recv_buf_.data() + size_t(index) * buf_size_, wc.byte_len);
        in.has_imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
        in.imm = in.has_imm ? ntohl(wc.imm_data) : 0;
        ready_.push_back(in);
      }
      return;
    case WrTag::Send:
      if (sq_used_) --sq_used_;
      if (index != kNoSendBuffer) free_send_.push_back(uint32_t(index));
      if (wc.status != IBV_WC_SUCCESS)
        fail(map_wc_status(wc.status),
             "message send failed: " + describe_wc(wc.status, wc.vendor_err));
      return;
    case WrTag::Op:
      if (sq_used_) --sq_used_;
      ops_done_.push_back(OpCompletion{index, wc.status, wc.vendor_err});
      if (wc.status != IBV_WC_SUCCESS)
        fail(map_wc_status(wc.status),
             "RDMA operation failed: " + describe_wc(wc.status, wc.vendor_err));
      return;
    case WrTag::LongRead:
      if (sq_used_) --sq_used_;
      long_read_pending_ = false;
      if (wc.status == IBV_WC_WR_FLUSH_ERR || wc.status == IBV_WC_RETRY_EXC_ERR)
        fail(Errc::PeerClosed, "fetching a long frame from the peer failed: " +
                                   describe_wc(wc.status, wc.vendor_err));
      else if (wc.status != IBV_WC_SUCCESS)
        fail(Errc::Protocol,
             std::string("fetching a long frame from the peer failed: ") +
                 ibv_wc_status_str(wc.status) +
                 ": its HCA refused our read of the frame it announced (a broken or hostile peer)");
      return;
  }
  fail(Errc::System, "completion with an unknown work request id");
}

int Endpoint::poll_now() {
  ibv_wc wc[Tunables::kCqPollBatch];
  int total = 0;
  for (;;) {
    int n = ibv_poll_cq(cq_.get(), Tunables::kCqPollBatch, wc);
    if (n < 0) {
      fail(Errc::System, "ibv_poll_cq failed (CQ overrun or device error; see the kernel log)");
      return total;
    }
    for (int i = 0; i < n; ++i) on_completion(wc[i]);
    total += n;
    if (n < Tunables::kCqPollBatch) return total;
  }
}

bool Endpoint::progress(Deadline d) {
  if (poll_now() > 0 || failed()) return true;
  // Spin briefly: the answer to what we just posted is usually microseconds away.
  const Deadline spin_end = std::min(d, Clock::now() + Tunables::kSpin);
  while (Clock::now() < spin_end)
    if (poll_now() > 0 || failed()) return true;
  for (;;) {
    if (!armed_) {
      if (int rc = ibv_req_notify_cq(cq_.get(), 0); rc != 0) {
        fail(Errc::System, "ibv_req_notify_cq: " + err_text(rc));
        return true;
      }
      armed_ = true;
    }
    // A completion that arrived before the request raises no event: look once more before sleeping.
    if (poll_now() > 0 || failed()) return true;
    int ms = ms_until(d);
    if (ms == 0) return false;
    pollfd fds[2] = {{chan_->fd, POLLIN, 0}, {watch_fd_, POLLIN, 0}};
    const nfds_t nfds = watch_fd_ >= 0 ? 2 : 1;
    if (::poll(fds, nfds, ms) < 0) {
      if (errno == EINTR) continue;
      fail(Errc::System, "poll on the completion channel: " + err_text(errno));
      return true;
    }
    if (fds[0].revents & POLLIN) {
      ibv_cq* ev_cq = nullptr;
      void* ev_ctx = nullptr;
      if (ibv_get_cq_event(chan_.get(), &ev_cq, &ev_ctx) == 0) {
        cq_.note_event();
        armed_ = false;  // notification is one-shot
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        fail(Errc::System, "ibv_get_cq_event: " + err_text(errno));
        return true;
      }
    } else if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
      fail(Errc::System, "the completion channel failed (RDMA device removed?)");
      return true;
    }
    if (nfds == 2 && fds[1].revents) {
      if (fds[1].revents & (POLLERR | POLLHUP | POLLNVAL)) {
        fail(Errc::PeerClosed, "the rdma_cm channel failed (RDMA device removed?)");
        return true;
      }
      if (on_watch_) on_watch_();
      if (failed()) return true;
    }
  }
}

bool Endpoint::drain_sends(Deadline d) {
  while (sq_used_ > 0)
    if (failed() || !progress(d))
      return false;  // nothing sent after a failure is worth waiting for
  return true;
}

// ---------------------------------------------------------------------------------------------
// Endpoint: messages

void Endpoint::send(std::span<const uint8_t> a, std::span<const uint8_t> b,
                    std::optional<uint32_t> imm, Deadline d) {
  const size_t n = a.size() + b.size();
  if (n > eager_limit_) {
    // Rendezvous: stage the frame where the peer can read it, send where it is.
    if (imm || n > Tunables::kMaxLongFrame)
      throw FabricError(Errc::TooLarge,
                        "message of " + std::to_string(n) + " bytes exceeds the verbs bound of " +
                            std::to_string(imm ? eager_limit_ : Tunables::kMaxLongFrame) +
                            " bytes");
    if (failed()) throw_failed();
    ensure_long_buffer(true);
    if (!a.empty()) std::memcpy(long_send_.data(), a.data(), a.size());
    if (!b.empty()) std::memcpy(long_send_.data() + a.size(), b.data(), b.size());
    uint8_t desc[kLongDescriptorSize];
    wire::store_le64(desc, reinterpret_cast<uintptr_t>(long_send_.data()));
    const uint32_t rkey = long_send_mr_->rkey, len = uint32_t(n);
    for (int i = 0; i < 4; ++i)
      desc[8 + i] = uint8_t(rkey >> (8 * i)), desc[12 + i] = uint8_t(len >> (8 * i));
    send(std::span<const uint8_t>(desc, sizeof desc), {}, kLongFrameImm, d);
    return;
  }
  const bool use_inline = n <= max_inline_;
  for (;;) {
    if (failed()) throw_failed();
    if (sq_used_ < send_depth_ && (use_inline || !free_send_.empty())) break;
    if (!progress(d))
      throw FabricError(Errc::Timeout,
                        "the peer did not acknowledge earlier messages in time (send queue full)");
  }
  uint8_t inline_copy[Tunables::kMaxInlineData];
  uint8_t* dst = nullptr;
  uint64_t slot = kNoSendBuffer;
  ibv_sge sge{};
  ibv_send_wr wr{};
  if (n > 0 && use_inline) {
    dst = inline_copy;  // copied into the WQE by ibv_post_send: reusable when it returns
    sge.lkey = 0;
    wr.send_flags = IBV_SEND_INLINE;
  } else if (n > 0) {
    slot = free_send_.back();
    free_send_.pop_back();
    dst = send_buf_.data() + size_t(slot) * buf_size_;
    sge.lkey = send_mr_->lkey;
  }
  if (!a.empty()) std::memcpy(dst, a.data(), a.size());
  if (!b.empty()) std::memcpy(dst + a.size(), b.data(), b.size());
  sge.addr = reinterpret_cast<uintptr_t>(dst);
  sge.length = uint32_t(n);
  wr.wr_id = make_wr_id(WrTag::Send, slot);
  wr.sg_list = n > 0 ? &sge : nullptr;
  wr.num_sge = n > 0 ? 1 : 0;
  wr.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
  if (imm) wr.imm_data = htonl(*imm);
  wr.send_flags |= IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qp_.get(), &wr, &bad); rc != 0) {
    if (slot != kNoSendBuffer) free_send_.push_back(uint32_t(slot));
    fail(Errc::System, "ibv_post_send(SEND, " + std::to_string(n) + " bytes): " + err_text(rc));
    throw_failed();
  }
  ++sq_used_;
}

std::optional<Inbound> Endpoint::take_ready() {
  if (ready_.empty()) return std::nullopt;
  Inbound m = ready_.front();
  ready_.pop_front();
  return m;
}

std::optional<Inbound> Endpoint::receive(Deadline d, Deadline fetch_d) {
  for (;;) {
    std::optional<Inbound> m = take_ready();
    if (!m && failed()) {
      // What arrived before the failure (say, a refusal just ahead of the disconnect) still counts.
      poll_now();
      m = take_ready();
      if (!m) throw_failed();
    }
    if (m) {
      if (!m->has_imm || m->imm != kLongFrameImm) return m;
      if (fetch_d == kNoDeadline)
        fetch_d = d != kNoDeadline ? d : deadline_in(Tunables::kLongFetchTimeout);
      return fetch_long(*m, fetch_d);
    }
    if (!progress(d) && ready_.empty()) return std::nullopt;
  }
}

Inbound Endpoint::fetch_long(const Inbound& m, Deadline d) {
  auto get32 = [](const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  };
  std::string bad;
  uint64_t addr = 0;
  uint32_t rkey = 0, len = 0;
  if (m.bytes.size() != kLongDescriptorSize) {
    bad = "descriptor of " + std::to_string(m.bytes.size()) + " bytes";
  } else {
    addr = wire::load_le64(m.bytes.data());
    rkey = get32(m.bytes.data() + 8);
    len = get32(m.bytes.data() + 12);
    if (!long_frames_allowed_)
      bad = "long frame before authentication";
    else if (len < wire::kHeaderSize || len > Tunables::kMaxLongFrame)
      bad = "length " + std::to_string(len) + " out of range";
    else if (long_read_pending_)
      bad = "a long frame while another is being fetched";
  }
  if (!bad.empty()) {
    repost(m.slot);
    fail(Errc::Protocol, "malformed long frame: " + bad);
    throw_failed();
  }
  try {
    ensure_long_buffer(false);
    while (sq_used_ >= send_depth_ && !failed())
      if (!progress(d))
        throw FabricError(Errc::Timeout, "no send-queue room to fetch a long frame");
  } catch (...) {
    repost(m.slot);
    throw;
  }
  if (failed()) throw_failed();
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(long_recv_.data());
  sge.length = len;
  sge.lkey = long_recv_mr_->lkey;
  ibv_send_wr wr{};
  wr.wr_id = make_wr_id(WrTag::LongRead, 0);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad_wr = nullptr;
  if (int rc = ibv_post_send(qp_.get(), &wr, &bad_wr); rc != 0) {
    fail(Errc::System, "ibv_post_send(RDMA READ of a long frame): " + err_text(rc));
    throw_failed();
  }
  ++sq_used_;
  long_read_pending_ = true;
  while (long_read_pending_) {
    if (!progress(d)) {
      // The READ may still land later: the endpoint is unusable from here (its owner closes it).
      fail(Errc::Timeout,
           "fetching a long frame of " + std::to_string(len) + " bytes did not finish in time");
      throw_failed();
    }
    if (failed() && long_read_pending_) throw_failed();
  }
  if (failed()) throw_failed();  // the READ itself failed (see on_completion)
  repost(m.slot);                // the descriptor's buffer; the frame itself lives in long_recv_
  Inbound out;
  out.slot = kNoSlot;
  out.bytes = std::span<const uint8_t>(long_recv_.data(), len);
  return out;
}

void Endpoint::repost(uint32_t slot) {
  if (slot == kNoSlot) return;  // a long frame: its descriptor's buffer went back already
  if (failed()) return;  // the QP is (going) in error: a buffer posted now would only be flushed
  if (slot >= recv_depth_) {
    fail(Errc::System, "repost of an unknown receive buffer");
    return;
  }
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(recv_buf_.data() + size_t(slot) * buf_size_);
  sge.length = buf_size_;
  sge.lkey = recv_mr_->lkey;
  ibv_recv_wr wr{};
  wr.wr_id = make_wr_id(WrTag::Recv, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(qp_.get(), &wr, &bad); rc != 0)
    fail(Errc::System, "ibv_post_recv: " + err_text(rc));
}

size_t Endpoint::post_chain(ibv_send_wr* first, size_t count) {
  if (failed() || count == 0) return 0;
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(qp_.get(), first, &bad);
  if (rc == 0) {
    sq_used_ += uint32_t(count);
    return count;
  }
  // WRs before `bad` were taken; `bad` and those after it were not.
  size_t posted = 0;
  for (ibv_send_wr* w = first; w && w != bad && posted < count; w = w->next) ++posted;
  sq_used_ += uint32_t(posted);
  fail(Errc::System, "ibv_post_send: " + err_text(rc) + " (" + std::to_string(count - posted) +
                         " of " + std::to_string(count) + " RDMA operations refused)");
  return posted;
}

// ---------------------------------------------------------------------------------------------
// Frames

void send_frame(Endpoint& ep, const wire::Header& h, std::span<const uint8_t> payload, Deadline d) {
  uint8_t hb[wire::kHeaderSize];
  wire::Header c = h;
  c.length = uint32_t(payload.size());
  wire::encode_header(c, hb);
  ep.send(std::span<const uint8_t>(hb, sizeof hb), payload, std::nullopt, d);
}

std::optional<wire::Header> parse_frame(std::span<const uint8_t> msg,
                                        std::span<const uint8_t>* payload, std::string* why) {
  auto h = wire::decode_header(msg);
  if (!h) {
    if (why) *why = h.message();
    return std::nullopt;
  }
  if (size_t(h->length) != msg.size() - wire::kHeaderSize) {
    if (why) *why = "frame length field disagrees with the message size";
    return std::nullopt;
  }
  *payload = msg.subspan(wire::kHeaderSize);
  return *h;
}

bool recv_frame(Endpoint& ep, wire::Header* h, std::vector<uint8_t>* payload, Deadline d) {
  auto m = ep.receive(d);
  if (!m) return false;
  std::span<const uint8_t> p;
  std::string why;
  auto hh = parse_frame(m->bytes, &p, &why);
  if (!hh) {
    ep.repost(m->slot);
    throw FabricError(Errc::Protocol, "malformed frame: " + why);
  }
  *h = *hh;
  payload->assign(p.begin(), p.end());
  ep.repost(m->slot);
  return true;
}

// ---------------------------------------------------------------------------------------------
// VerbsConnection: one-sided batches

namespace {

// wr_id index of a batch entry: batch generation (24 bits) above the entry's index in the batch.
constexpr unsigned kGenShift = 32;
constexpr uint64_t kGenMask = (uint64_t(1) << 24) - 1;
constexpr uint64_t kIndexMask = (uint64_t(1) << kGenShift) - 1;

// A lease check reads the segment header's state, lease deadline, export key, lease cap and
// wall-clock deadline together: 40 bytes at offset 40 of the header, which precedes the data by
// fabric::kHeaderSize bytes (segment.h).
constexpr uint64_t kSegStateOffset = 40;
constexpr uint32_t kLeaseCheckBytes = 40;
static_assert(sizeof(SegmentHeader) == kSegStateOffset + kLeaseCheckBytes,
              "the lease check reads state .. lease_deadline_wall_ns: update it with segment.h");
static_assert(kLeaseCheckBytes % 8 == 0, "check slots stay 8-byte aligned");
static_assert(ClientLink::kLeaseArea >= kLeaseCheckBytes &&
              ClientLink::kLeaseArea < Tunables::kBounceBytes);

}  // namespace

void VerbsConnection::set_status(std::span<OneSidedOp> ops, size_t i, Errc e) {
  if (i < ops.size())
    ops[i].status = e;
  else
    checks_[i - ops.size()].status = e;
}

uint8_t* VerbsConnection::stage(ClientLink& l, size_t len) {
  size_t at =
      (std::max(bounce_used_, ClientLink::kLeaseArea) + 7) & ~size_t(7);  // 8-aligned for atomics
  if (len > Tunables::kBounceMaxOp || at > l.bounce_size() || len > l.bounce_size() - at)
    return nullptr;
  bounce_used_ = at + len;
  return l.bounce() + at;
}

Errc VerbsConnection::prepare(ClientLink& l, OneSidedOp& op, size_t i) {
  OpState& st = states_[i];
  ibv_send_wr& wr = wrs_[i];
  ibv_sge& sge = sges_[i];
  if (!op.region) return Errc::BadRequest;
  const RemoteRegion& r = *op.region;
  const uint32_t rkey = uint32_t(r.key);  // the data MR's; the upper half is the header MR's
  wr.wr_id = make_wr_id(WrTag::Op, (uint64_t(batch_gen_) & kGenMask) << kGenShift | uint64_t(i));
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;  // every op: each gets its own status

  const bool atomic = op.kind == OpKind::Cas || op.kind == OpKind::Faa;
  if (!atomic) {
    const bool is_read = op.kind == OpKind::Read;
    if (op.len > capabilities().max_transfer) return Errc::TooLarge;
    if (op.offset > r.len || op.len > r.len - op.offset) return Errc::OutOfBounds;
    if (op.len == 0) {
      st.done = true;  // nothing to move
      return Errc::Ok;
    }
    void* local = is_read ? op.dst : const_cast<void*>(op.src);
    if (!local) return Errc::BadRequest;
    wr.opcode = is_read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = r.addr + op.offset;
    wr.wr.rdma.rkey = rkey;
    sge.length = uint32_t(op.len);
    if (!is_read && op.len <= l.ep().max_inline()) {
      // Small WRITE: the HCA copies the bytes into the WQE at post time; no lkey, no staging.
      sge.addr = reinterpret_cast<uintptr_t>(op.src);
      sge.lkey = 0;
      wr.send_flags |= IBV_SEND_INLINE;
      return Errc::Ok;
    }
    if (uint8_t* b = stage(l, op.len)) {
      st.staged = b;
      if (!is_read) std::memcpy(b, op.src, op.len);
      sge.addr = reinterpret_cast<uintptr_t>(b);
      sge.lkey = l.bounce_lkey();
      return Errc::Ok;
    }
    // Too large for the bounce memory: the caller's buffer, registered (zero-copy) through the
    // link's registration cache when the caller asked for one (then it stays registered for the
    // next batch that uses it), else for this batch only.
    errno = 0;
    if (RegCache* cache = l.reg_cache()) {
      RegCache::Lease lease =
          cache->acquire(local, op.len, uint32_t(is_read ? kAccessLocalWrite : 0));
      if (!lease) return Errc::System;  // typically the locked-memory limit (ulimit -l)
      sge.addr = reinterpret_cast<uintptr_t>(local);
      sge.lkey = static_cast<ibv_mr*>(lease.handle())->lkey;
      l.batch_leases().push_back(std::move(lease));
      return Errc::Ok;
    }
    ibv_mr* mr = ibv_reg_mr(l.pd(), local, op.len, is_read ? kAccessLocalWrite : 0);
    if (!mr) return Errc::System;  // typically the locked-memory limit (ulimit -l)
    l.batch_mrs().emplace_back(mr);
    sge.addr = reinterpret_cast<uintptr_t>(local);
    sge.lkey = mr->lkey;
    return Errc::Ok;
  }

  // cas64 / faa64: 8 bytes at an 8-aligned remote address, within the region.
  if (r.len < 8 || op.offset > r.len - 8) return Errc::OutOfBounds;
  if (op.offset % 8 != 0 || (r.addr + op.offset) % 8 != 0) return Errc::Misaligned;
  if (!l.nic_atomics()) {
    // The server's CPU performs it (exact against the owner's CPU atomics): a CAS/FAA message.
    st.via_message = true;
    wire::Header& h = requests_[i];
    h.op = op.kind == OpKind::Cas ? wire::Op::Cas : wire::Op::Faa;
    h.a0 = r.addr + op.offset;
    h.a1 = r.key;
    h.a2 = op.arg0;
    h.a3 = op.kind == OpKind::Cas ? op.arg1 : 0;
    return Errc::Ok;
  }
  wr.opcode = op.kind == OpKind::Cas ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.wr.atomic.remote_addr = r.addr + op.offset;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = op.arg0;  // Cas: expected; Faa: addend
  wr.wr.atomic.swap = op.kind == OpKind::Cas ? op.arg1 : 0;
  sge.length = 8;  // where the old value lands
  if (uint8_t* b = stage(l, 8)) {
    st.staged = b;
    sge.addr = reinterpret_cast<uintptr_t>(b);
    sge.lkey = l.bounce_lkey();
    return Errc::Ok;
  }
  errno = 0;
  ibv_mr* mr = ibv_reg_mr(l.pd(), &op.result, sizeof op.result, kAccessLocalWrite);
  if (!mr) return Errc::System;
  l.batch_mrs().emplace_back(mr);
  sge.addr = reinterpret_cast<uintptr_t>(&op.result);
  sge.lkey = mr->lkey;
  return Errc::Ok;
}

void VerbsConnection::add_lease_checks(ClientLink& l, std::span<OneSidedOp> ops) {
  const size_t n = ops.size();
  const size_t max_checks = ClientLink::kLeaseArea / kLeaseCheckBytes;
  for (size_t i = 0; i < n; ++i) {
    OpState& st = states_[i];
    if (st.done || st.via_message) continue;  // nothing the HCA executes
    const RemoteRegion& r = *ops[i].region;
    if ((r.key >> 32) == 0 || r.addr < fabric::kHeaderSize) continue;  // no header MR announced
    size_t k = 0;
    while (k < checks_.size() && (checks_[k].addr != r.addr || checks_[k].key != r.key)) ++k;
    if (k == checks_.size()) {
      if (k == max_checks) continue;  // more regions in one batch than check slots: unchecked
      LeaseCheck c;
      c.addr = r.addr;
      c.key = r.key;
      c.staged = l.bounce() + k * kLeaseCheckBytes;
      checks_.push_back(c);
    }
    st.check = k;
  }
  // One RDMA READ per region, after the data ops in posting order (an RC QP executes in order, so
  // the words read describe the segment as it was after the ops).
  states_.resize(n + checks_.size());
  wrs_.resize(n + checks_.size());
  sges_.resize(n + checks_.size());
  for (size_t k = 0; k < checks_.size(); ++k) {
    const size_t idx = n + k;
    ibv_send_wr& wr = wrs_[idx];
    ibv_sge& sge = sges_[idx];
    wr = ibv_send_wr{};
    wr.wr_id =
        make_wr_id(WrTag::Op, (uint64_t(batch_gen_) & kGenMask) << kGenShift | uint64_t(idx));
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = checks_[k].addr - fabric::kHeaderSize + kSegStateOffset;
    wr.wr.rdma.rkey = uint32_t(checks_[k].key >> 32);
    sge.addr = reinterpret_cast<uintptr_t>(checks_[k].staged);
    sge.length = kLeaseCheckBytes;
    sge.lkey = l.bounce_lkey();
  }
  // The vectors may have moved: point every WR at its own s/g entry now.
  for (size_t j = 0; j < wrs_.size(); ++j) wrs_[j].sg_list = &sges_[j];
}

void VerbsConnection::post_some(ClientLink& l, std::span<OneSidedOp> ops) {
  Endpoint& ep = l.ep();
  const size_t total = states_.size();
  chain_.clear();
  ibv_send_wr* first = nullptr;
  ibv_send_wr* last = nullptr;
  auto flush = [&] {
    if (chain_.empty()) return;
    size_t posted = ep.post_chain(first, chain_.size());
    for (size_t k = 0; k < chain_.size(); ++k) {
      size_t i = chain_[k];
      if (k < posted) {
        states_[i].posted = true;
        ++in_flight_;
      } else {
        states_[i].done = true;
        set_status(ops, i,
                   Errc::System);  // the HCA refused the work request (see the endpoint's failure)
      }
    }
    chain_.clear();
    first = last = nullptr;
  };
  // Our messages the server can hold (its receives) and whose replies we can take (ours).
  const uint32_t server_room =
      l.server().recv_depth - std::min(unacked_sends_, l.server().recv_depth - 1);
  const size_t window = std::min<size_t>(server_room, ep.recv_depth());
  while (next_post_ < total && !ep.failed()) {
    const size_t i = next_post_;
    OpState& st = states_[i];
    if (st.done) {
      ++next_post_;
      continue;
    }
    if (st.via_message) {
      flush();  // the RDMA ops before it go first on the QP: the server sees their effects
      if (ep.failed() || sent_.size() >= window || ep.sq_room() == 0) break;
      wire::Header h = requests_[i];
      h.id = next_id_++;
      ++next_post_;
      try {
        send_frame(ep, h, {}, deadline_in(opts_.op_timeout));
      } catch (const FabricError& e) {
        st.done = true;
        ops[i].status = e.code();
        break;
      }
      st.posted = true;
      ++in_flight_;
      sent_.emplace_back(h.id, i);
      continue;
    }
    if (!sent_.empty()) break;  // an RDMA op after a message waits for that message's reply
    if (chain_.size() >= ep.sq_room()) break;
    ibv_send_wr* w = &wrs_[i];
    w->next = nullptr;
    if (last)
      last->next = w;
    else
      first = w;
    last = w;
    chain_.push_back(i);
    ++next_post_;
  }
  flush();
}

void VerbsConnection::post(std::span<OneSidedOp> ops) {
  ClientLink& l = usable_link();
  if (ops.size() >= kIndexMask / 2)
    throw FabricError(Errc::TooLarge, "batch of " + std::to_string(ops.size()) + " ops");
  const size_t n = ops.size();
  states_.assign(n, OpState{});
  wrs_.assign(n, ibv_send_wr{});
  sges_.assign(n, ibv_sge{});
  requests_.assign(n, wire::Header{});
  checks_.clear();
  sent_.clear();
  l.batch_mrs().clear();
  l.batch_leases().clear();
  l.ep().op_completions().clear();
  bounce_used_ = ClientLink::kLeaseArea;
  next_post_ = 0;
  in_flight_ = 0;
  ++batch_gen_;
  for (size_t i = 0; i < n; ++i) {
    OneSidedOp& op = ops[i];
    op.result = 0;
    op.status = prepare(l, op, i);
    if (op.status != Errc::Ok) states_[i].done = true;  // failed locally: never posted
  }
  add_lease_checks(l, ops);
  pending_ = true;
  post_some(l, ops);  // what the queues take now; wait() posts the rest as room frees up
}

void VerbsConnection::complete(std::span<OneSidedOp> ops, const OpCompletion& c) {
  const uint64_t gen = c.index >> kGenShift;
  const size_t i = size_t(c.index & kIndexMask);
  if (gen != (uint64_t(batch_gen_) & kGenMask) || i >= states_.size() || !states_[i].posted ||
      states_[i].done)
    return;
  OpState& st = states_[i];
  st.done = true;
  --in_flight_;
  const Errc e = map_wc_status(c.status);
  set_status(ops, i, e);
  if (i >= ops.size() || e != Errc::Ok) return;
  OneSidedOp& op = ops[i];
  if (op.kind == OpKind::Read) {
    if (st.staged) std::memcpy(op.dst, st.staged, op.len);
  } else if (op.kind == OpKind::Cas || op.kind == OpKind::Faa) {
    if (st.staged)
      std::memcpy(&op.result, st.staged, sizeof op.result);  // else the HCA wrote op.result
  }
}

void VerbsConnection::take_replies(ClientLink& l, std::span<OneSidedOp> ops) {
  Endpoint& ep = l.ep();
  while (auto m = ep.take_ready()) {
    std::span<const uint8_t> payload;
    std::string why = "a long or stream message";
    std::optional<wire::Header> h;
    if (!m->has_imm) h = parse_frame(m->bytes, &payload, &why);
    ep.repost(m->slot);
    if (!h || !h->reply || sent_.empty() || h->id != sent_.front().first ||
        (h->op != wire::Op::Cas && h->op != wire::Op::Faa) || !payload.empty()) {
      ep.fail(Errc::Protocol, "unexpected message from the server during a batch" +
                                  (h ? std::string() : ": " + why));
      return;
    }
    const size_t i = sent_.front().second;
    sent_.pop_front();
    states_[i].done = true;
    --in_flight_;
    ops[i].status = h->status;
    if (h->status == Errc::Ok) ops[i].result = h->a0;
    unacked_sends_ = 0;  // the server answers in order: everything before was consumed
  }
}

void VerbsConnection::judge_leases(ClientLink& l, std::span<OneSidedOp> ops) {
  (void)l;
  const uint64_t now_wall = realtime_ns();
  const uint64_t skew_ns =
      uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(opts_.clock_skew).count());
  for (size_t k = 0; k < checks_.size(); ++k) {
    const LeaseCheck& c = checks_[k];
    // A check that did not execute (flushed behind a failed op) vouches for nothing either way:
    // the ops keep their own statuses.
    if (!states_[ops.size() + k].done || c.status != Errc::Ok) continue;
    RemoteLeaseWords w;
    std::memcpy(&w.state, c.staged, 8);
    std::memcpy(&w.deadline_ns, c.staged + 8, 8);
    std::memcpy(&w.export_key, c.staged + 16, 8);
    std::memcpy(&w.cap_ns, c.staged + 24, 8);
    std::memcpy(&w.deadline_wall_ns, c.staged + 32, 8);
    // The export key this descriptor was issued under: from LOOKUP, else the one first seen.
    const uint64_t expected =
        export_keys_.try_emplace(DescriptorId{c.addr, c.key}, w.export_key).first->second;
    // Absolute: the deadline is compared with our wall clock (both hosts keep theirs in step
    // within clock_skew), so a frozen exporter's stalled word is refused on a new connection's
    // first read too, and a fenced coherence home (lease cap passed) at once.
    Errc verdict = judge_remote_lease(w, expected, now_wall, skew_ns);
    if (verdict == Errc::Ok) continue;
    for (size_t i = 0; i < ops.size(); ++i)
      if (states_[i].check == k && ops[i].status == Errc::Ok) ops[i].status = verdict;
  }
}

void VerbsConnection::wait(std::span<OneSidedOp> ops) {
  if (!pending_) throw std::logic_error("fabric: wait() without a posted batch");
  if (ops.size() + checks_.size() != states_.size())
    throw std::logic_error("fabric: wait() with other ops than were posted");
  ClientLink& l = *link_;
  Endpoint& ep = l.ep();
  const size_t total = states_.size();
  const Deadline d = deadline_in(opts_.op_timeout);
  for (;;) {
    for (const OpCompletion& c : ep.op_completions()) complete(ops, c);
    ep.op_completions().clear();
    take_replies(l, ops);
    if (ep.failed()) {
      // Nothing more goes out on this QP. Moving it to the error state makes what was posted
      // complete (flushed) at once; replies to sent messages will not come: outcome unknown.
      l.shutdown();
      for (const auto& [id, i] : sent_) {
        states_[i].done = true;
        --in_flight_;
        ops[i].status = Errc::PeerClosed;
      }
      sent_.clear();
      for (; next_post_ < total; ++next_post_) {
        if (states_[next_post_].done) continue;
        states_[next_post_].done = true;
        set_status(ops, next_post_, Errc::PeerClosed);  // not executed
      }
    } else {
      post_some(l, ops);
    }
    if (in_flight_ == 0 && next_post_ >= total) break;
    if (!ep.progress(d) || Clock::now() >= d) {
      for (size_t i = 0; i < ops.size(); ++i)
        if (!states_[i].done) ops[i].status = Errc::Timeout;
      pending_ = false;
      if (ep.failed()) fail(FabricError(ep.fail_code(), ep.fail_why()));
      fail(FabricError(Errc::Timeout,
                       "a batch of " + std::to_string(ops.size()) +
                           " one-sided operations did not complete within op_timeout (" +
                           std::to_string(opts_.op_timeout.count()) +
                           " ms); the connection is marked broken"));
    }
  }
  judge_leases(l, ops);
  pending_ = false;
  l.batch_mrs().clear();
  l.batch_leases().clear();
  if (ep.failed() && ep.fail_code() != Errc::BadKey && ep.fail_code() != Errc::BadRequest)
    fail(FabricError(ep.fail_code(), ep.fail_why()));
  // A refused op (BadKey/BadRequest) leaves the server alive: the next operation reconnects.
}

// ---------------------------------------------------------------------------------------------
// VerbsStream

namespace {

constexpr unsigned kKindShift = 24;
constexpr uint32_t kCreditMask = (uint32_t(1) << kKindShift) - 1;
enum : uint32_t { kData = 1, kCredit = 2, kEof = 3 };

uint32_t make_imm(uint32_t kind, uint32_t credits) {
  return kind << kKindShift | (credits & kCreditMask);
}
uint32_t kind_of(const Inbound& m) {
  return m.imm >> kKindShift;
}

}  // namespace

VerbsStream::VerbsStream(std::shared_ptr<void> owner, Endpoint* ep, PeerParams peer, Millis timeout)
    : owner_(std::move(owner)), ep_(ep), timeout_(timeout) {
  window_ = peer.recv_depth > Tunables::kStreamCtrlReserve
                ? peer.recv_depth - Tunables::kStreamCtrlReserve
                : 0;
  credits_ = window_;
  // The peer's window towards us is our receive depth less the same reserve; return credits once
  // half of it is owed.
  uint32_t peer_window = ep_->recv_depth() > Tunables::kStreamCtrlReserve
                             ? ep_->recv_depth() - Tunables::kStreamCtrlReserve
                             : 1;
  threshold_ = std::max<uint32_t>(1, (peer_window + 1) / 2);
  chunk_ = std::min<size_t>(peer.buf_size, ep_->buf_size());
}

VerbsStream::~VerbsStream() {
  // Best effort, as a socket's close: end the stream cleanly, and let our last messages be
  // acknowledged before the owner disconnects (a disconnect flushes what is still queued).
  try {
    Deadline d = deadline_in(std::min(timeout_, Tunables::kStreamCloseLinger));
    if (!ep_->failed()) {
      if (!eof_out_) {
        pump();
        if (credits_ == 0) wait_for_credit(d);
        ep_->send({}, {}, make_imm(kEof, take_owed()), d);
        --credits_;
        eof_out_ = true;
      }
      ep_->drain_sends(d);
    }
  } catch (const std::exception&) {
    // The peer is gone or slow; the disconnect that follows tells it.
  }
}

void VerbsStream::pump() {
  ep_->poll_now();
  while (auto m = ep_->take_ready()) absorb(*m);
}

void VerbsStream::absorb(const Inbound& m) {
  auto violation = [&](const std::string& why) {
    ep_->repost(m.slot);
    ep_->fail(Errc::Protocol, "verbs stream: " + why + " (peer not speaking the stream protocol)");
  };
  if (!m.has_imm) return violation("message without immediate data");
  credits_ += m.imm & kCreditMask;
  if (credits_ > window_) return violation("peer returned more credits than it was given");
  switch (kind_of(m)) {
    case kCredit:
      if (!m.bytes.empty()) return violation("CREDIT with a payload");
      ep_->repost(m.slot);  // from the reserve: back at once
      return;
    case kData:
      if (m.bytes.empty()) return violation("empty DATA");
      if (eof_queued_) return violation("DATA after EOF");
      inbox_.push_back(m);
      return;
    case kEof:
      if (!m.bytes.empty()) return violation("EOF with a payload");
      if (eof_queued_) return violation("second EOF");
      eof_queued_ = true;
      inbox_.push_back(m);
      return;
    default:
      return violation("unknown message kind");
  }
}

void VerbsStream::consume(const Inbound& m) {
  ep_->repost(m.slot);
  ++owed_;
}

uint32_t VerbsStream::take_owed() {
  uint32_t v = std::min(owed_, kCreditMask);
  owed_ -= v;
  return v;
}

void VerbsStream::settle_credits() {
  if (owed_ < threshold_ || ep_->failed()) return;
  try {
    uint32_t give = take_owed();
    try {
      ep_->send({}, {}, make_imm(kCredit, give), deadline_in(timeout_));
    } catch (...) {
      owed_ += give;  // still owed; a later read or write retries
      throw;
    }
  } catch (const FabricError&) {
    // A dead endpoint shows on the next read or write.
  }
}

void VerbsStream::wait_for_credit(Deadline d) {
  for (;;) {
    pump();
    if (ep_->failed()) ep_->throw_failed();
    if (credits_ > 0) return;
    if (!ep_->progress(d))
      throw FabricError(Errc::Timeout, "verbs stream: the peer did not take our data within " +
                                           std::to_string(timeout_.count()) + " ms");
  }
}

void VerbsStream::write_all(std::span<const uint8_t> bytes) {
  if (eof_out_) throw std::logic_error("fabric: write on a verbs stream after shutdown_write()");
  const Deadline d = deadline_in(timeout_);
  size_t off = 0;
  while (off < bytes.size()) {
    wait_for_credit(d);
    size_t n = std::min(bytes.size() - off, chunk_);
    uint32_t give = take_owed();
    try {
      ep_->send(bytes.subspan(off, n), {}, make_imm(kData, give), d);
    } catch (...) {
      owed_ += give;
      throw;
    }
    --credits_;
    off += n;
  }
}

size_t VerbsStream::read_some(std::span<uint8_t> buf) {
  if (buf.empty()) return 0;
  const Deadline d = deadline_in(timeout_);
  for (;;) {
    pump();
    if (!inbox_.empty()) {
      Inbound m = inbox_.front();
      if (kind_of(m) == kEof) {
        inbox_.pop_front();
        consume(m);
        eof_in_ = true;
        settle_credits();
        return 0;
      }
      size_t n = std::min(buf.size(), m.bytes.size() - head_);
      std::memcpy(buf.data(), m.bytes.data() + head_, n);
      head_ += n;
      if (head_ == m.bytes.size()) {
        inbox_.pop_front();
        head_ = 0;
        consume(m);
        settle_credits();
      }
      return n;
    }
    if (eof_in_) return 0;
    if (ep_->failed()) {
      if (ep_->fail_code() == Errc::PeerClosed)
        throw FabricError(Errc::PeerClosed,
                          "verbs stream ended without its end marker: " + ep_->fail_why());
      ep_->throw_failed();
    }
    if (!ep_->progress(d))
      throw FabricError(Errc::Timeout,
                        "verbs stream: no data within " + std::to_string(timeout_.count()) + " ms");
  }
}

void VerbsStream::shutdown_write() {
  if (eof_out_) return;
  const Deadline d = deadline_in(timeout_);
  wait_for_credit(d);
  uint32_t give = take_owed();
  try {
    ep_->send({}, {}, make_imm(kEof, give), d);
  } catch (...) {
    owed_ += give;
    throw;
  }
  --credits_;
  eof_out_ = true;
}

}  // namespace tierce::fabric::verbs
