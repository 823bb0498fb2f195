// coherence/invalidation.cc — one invalidation's rounds (see invalidation.h).
#include "coherence/invalidation.h"

#include <algorithm>
#include <thread>

#include "coherence/layout.h"
#include "fabric/random.h"

namespace tierce::coherence {

struct InvalidationRound::Home {
  NodePool* pool = nullptr;
  bool done = false;
  // This round:
  uint64_t tag = 0;
  uint32_t cell = 0;
  std::unique_ptr<NodePool::Conn> conn;  // the connection the send went over (await reads on it)
  bool conn_ok = false;
  // Its acks header names another topology: it may not read this writer's counter, so its fence
  // does not cover this invalidation; only its acknowledgement does.
  bool foreign = false;
  bool answered = false;  // a read of its ack cell returned in this invalidation (it is not silent)
  std::string why = "not sent";  // why it is not settled (for the outcome and logs)
};

InvalidationRound::InvalidationRound(std::vector<NodePool*> homes, const PoolContext& ctx,
                                     InvalidateRequest req)
    : homes_(homes.size()), ctx_(ctx), req_(std::move(req)) {
  for (size_t i = 0; i < homes.size(); ++i) homes_[i].pool = homes[i];
}

void InvalidationRound::connect() {
  for (auto& h : homes_) {
    if (h.conn) continue;
    h.conn = borrow_idle(*h.pool);
    h.conn_ok = h.conn != nullptr;
  }
}

void InvalidationRound::adopt(NodePool& pool, std::unique_ptr<NodePool::Conn> conn) {
  for (auto& h : homes_) {
    if (h.pool != &pool || h.conn) continue;
    h.conn = std::move(conn);
    h.conn_ok = h.conn != nullptr;
    return;
  }
  if (conn) Borrowed(pool, std::move(conn), ctx_.tuning.retry_after).done();
}

void InvalidationRound::number(const IssuedNumber& n, Clock::time_point fence_at) {
  req_.writer_incarnation = n.incarnation;
  req_.number = n.number;
  fence_at_ = fence_at;
}

InvalidationRound::~InvalidationRound() {
  for (auto& h : homes_) release(h);
}

void InvalidationRound::release(Home& h) {
  if (!h.conn) return;
  if (h.conn_ok) {
    try {
      h.conn->c->set_op_timeout(ctx_.tuning.op_timeout);  // back to the pool's own deadline
    } catch (const std::exception&) {
      h.conn_ok = false;
    }
  }
  Borrowed b(*h.pool, std::move(h.conn), ctx_.tuning.retry_after);
  if (h.conn_ok) b.done();
}

fabric::Millis InvalidationRound::op_deadline() const {
  // What is left of the bound, but never below a floor that a healthy home answers within: a
  // read of an ack that is already there must not fail for want of a millisecond.
  //
  // The floor is ONE budget shared by every home and every op of this invalidation, not one per
  // op: past the bound an op gets only what is left of [fence_at, fence_at + floor]. Ops run one
  // after another (a silent home's read blocks until its deadline), so a per-op floor let k
  // silent homes each add a floor in turn (issue 29, path 8: k x 50 ms past the bound). Now an op
  // started before the bound ends by max(fence_at, start + floor) <= fence_at + floor, an op
  // started after it ends by fence_at + floor, and no op starts once that has passed
  // (out_of_time(): send and await skip the home). So the update overshoots the bound by at most
  // one floor, whatever the number of silent homes. Reads of the homes that answer come first
  // in each pass of await (their reads return in microseconds), so a silent home spends the
  // shared floor after them, not before.
  const auto floor = std::min(ctx_.tuning.op_timeout, kOvershootFloor);
  const auto until_hard_end =
      std::chrono::duration_cast<fabric::Millis>(fence_at_ + kOvershootFloor - Clock::now());
  return std::min(ctx_.tuning.op_timeout,
                  std::max(left(), std::min(floor, std::max(until_hard_end, fabric::Millis(0)))));
}

bool InvalidationRound::out_of_time() const {
  return op_deadline().count() <= 0;
}

fabric::Millis InvalidationRound::left() const {
  auto d = std::chrono::duration_cast<fabric::Millis>(fence_at_ - Clock::now());
  return std::max(d, fabric::Millis(0));
}

size_t InvalidationRound::unsettled() const {
  size_t n = 0;
  for (const auto& h : homes_) n += !h.done;
  return n;
}

std::vector<std::string> InvalidationRound::unsettled_homes(bool foreign) const {
  std::vector<std::string> v;
  for (const auto& h : homes_)
    if (!h.done && (h.foreign || require_acks_) == foreign)
      v.push_back(h.pool->info->name + " (" + h.why + ")");
  return v;
}

void InvalidationRound::claim() {
  for (auto& h : homes_) {
    if (h.done) continue;
    h.tag = fabric::random_u64() | 1;  // never 0: a fresh cell holds 0
    h.cell = 0;                         // chosen at send, once the region's size is known
  }
}

void InvalidationRound::send() {
  // Homes with a connection in hand first: a connect to a slow or cut-off home (up to what is
  // left of the bound) must not keep the invalidation from the healthy ones.
  std::vector<Home*> order;
  for (auto& h : homes_)
    if (!h.done && h.conn && h.conn_ok && rounds_ == 0) order.push_back(&h);
  for (auto& h : homes_)
    if (!h.done && !(h.conn && h.conn_ok && rounds_ == 0)) order.push_back(&h);
  for (Home* hp : order) {
    Home& h = *hp;
    if (out_of_time()) {  // an earlier home used up the overshoot floor: no op may start now
      release(h);         // a pooled connection not used yet goes back; a failed one is dropped
      h.conn_ok = false;
      h.why = "not sent: the fence bound passed";
      continue;
    }
    if (rounds_ == 0 && h.conn && h.conn_ok) {
      // taken by connect()
    } else {
      release(h);  // left from the previous round: returned (healthy) or dropped
      h.conn_ok = false;
      // Nothing started here may outlast the bound: a connect gets what is left of it.
      PoolContext c = ctx_;
      c.tuning.connect_timeout = std::min(c.tuning.connect_timeout, left());
      c.tuning.op_timeout = op_deadline();
      if (c.tuning.connect_timeout.count() <= 0) {
        h.why = "unreachable";
        continue;
      }
      h.conn = rounds_ == 0 ? borrow(*h.pool, c) : borrow_fresh(*h.pool, c);
    }
    h.conn_ok = false;
    if (!h.conn) {
      h.why = "unreachable";
      continue;
    }
    try {
      h.conn->c->set_op_timeout(op_deadline());
      const fabric::RemoteRegion& acks = region(*h.conn, RegionKind::Acks, ctx_);
      h.foreign = require_acks_ || h.conn->acks_digest != ctx_.digest;
      uint64_t cells = ack_cells_in(acks.len);
      if (cells == 0) throw std::runtime_error("its acks region has no cells");
      h.cell = uint32_t(fabric::random_u64() % cells);
      req_.ack_cell = h.cell;
      req_.ack_tag = h.tag;
      h.conn->c->set_op_timeout(op_deadline());  // the lookup above may have used some of it
      h.conn->c->send(kInvalidateService, encode(req_));
      h.conn_ok = true;
      h.why = "sent, not acknowledged";
    } catch (const std::exception& e) {
      h.why = std::string("send failed: ") + e.what();
      if (ctx_.log)
        ctx_.log(fabric::LogLevel::Warn,
                 "COH0103 invalidation to " + h.pool->info->name + " not sent: " + e.what());
    }
  }
  ++rounds_;
}

void InvalidationRound::await(Clock::time_point until) {
  // When the slice is over, one more pass: a read of a frozen home may have used it up (it
  // fails, and is skipped from then on) while a healthy home's ack arrived meanwhile.
  // In each pass the homes that answered a read before go first: a silent home's read blocks
  // until its deadline, and past the bound that deadline is the floor they all share.
  std::vector<Home*> order;
  for (auto& h : homes_) order.push_back(&h);
  bool last_pass = false;
  for (int spins = 0;; ++spins) {
    std::stable_partition(order.begin(), order.end(), [](const Home* h) { return h->answered; });
    bool waiting = false;
    for (Home* hp : order) {
      Home& h = *hp;
      if (h.done || !h.conn || !h.conn_ok) continue;
      if (out_of_time()) {
        h.why = "sent, not acknowledged within the fence bound";
        return;
      }
      try {
        const fabric::RemoteRegion& acks = region(*h.conn, RegionKind::Acks, ctx_);
        uint64_t v = 0;
        h.conn->c->set_op_timeout(op_deadline());
        h.conn->c->read(acks, ack_cell_offset(h.cell), &v, 8);
        h.answered = true;
        if (v == h.tag) {
          h.done = true;
          acked_.push_back(h.pool->info->name);
        } else {
          waiting = true;
        }
      } catch (const std::exception& e) {
        h.conn_ok = false;  // dropped when the next round replaces it
        h.why = std::string("ack not readable: ") + e.what();
      }
    }
    if (!waiting || last_pass) return;
    if (Clock::now() >= until) {
      last_pass = true;
      continue;
    }
    if (spins > 50)
      std::this_thread::sleep_for(std::chrono::microseconds(spins > 500 ? 1000 : 50));
  }
}

void InvalidationRound::settle() {
  for (auto& h : homes_)
    if (h.done) release(h);
}

void InvalidationRound::at_checkpoint(Clock::time_point when, std::function<void(NodePool&)> late) {
  checkpoint_at_ = when;
  late_ = std::move(late);
}

void InvalidationRound::checkpoint() {
  if (!checkpoint_at_ || Clock::now() < *checkpoint_at_) return;
  checkpoint_at_.reset();
  for (auto& h : homes_)
    if (!h.done && !h.foreign && !require_acks_ && late_) late_(*h.pool);
}

bool InvalidationRound::run() {
  const auto bound = fence_at_ - Clock::now();
  auto slice = std::max<Clock::duration>(bound / 8, std::chrono::milliseconds(10));
  while (!settled() && Clock::now() < fence_at_) {
    checkpoint();
    claim();
    send();
    const size_t sent = [&] {
      size_t n = 0;
      for (const auto& h : homes_) n += !h.done && h.conn_ok;
      return n;
    }();
    auto round_end = std::min(fence_at_, Clock::now() + slice);
    if (checkpoint_at_) round_end = std::min(round_end, std::max(*checkpoint_at_, Clock::now()));
    slice = std::min<Clock::duration>(slice * 2, bound);
    if (sent > 0) await(round_end);
    settle();
    if (settled()) break;
    // A home we could not send to is retried after a short pause, not in a tight connect loop.
    if (sent < unsettled())
      std::this_thread::sleep_until(std::min(fence_at_, Clock::now() + std::chrono::milliseconds(10)));
  }
  if (!settled()) checkpoint();  // a bound shorter than the checkpoint: still mark the late
  return settled();
}

}  // namespace tierce::coherence
