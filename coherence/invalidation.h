// coherence/invalidation.h — one invalidation, from the writer's side: rounds of
// claim -> send -> await -> settle until every home acknowledged or the fence bound passed.
//
//   claim   for each home not settled yet: a fresh random tag and a random ack cell of its
//           "acks" region (layout.h). Nothing is reserved: a cell another writer overwrote
//           meanwhile only costs a resend.
//   send    the invalidation (its number, the tag and cell) to each of them, one-way; round 0
//           over pooled connections, later rounds over fresh ones (a pooled connection may lead to
//           a previous incarnation of the home, where a send "succeeds" and is lost)
//   await   read each home's cell back (one-sided, over the connection the send used: on tcp the
//           read is answered after the message was handled) until it shows the tag, or the
//           round's slice ends (1/8 of the bound, doubling each round)
//   settle  a home whose cell showed the tag has applied the invalidation: done with it
//
// Acknowledgements are idempotent and tagged with their round by construction: a home is
// counted when the writer sees ITS tag in ITS cell — a late, repeated or stray ack cannot count
// for another home or another round, and no slot can leak or run out.
#pragma once
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "coherence/pool.h"
#include "coherence/protocol.h"
#include "coherence/writer.h"

namespace tierce::coherence {

class InvalidationRound {
 public:
  using Clock = std::chrono::steady_clock;
  // The most an invalidation may overshoot its fence bound, all homes together (op_deadline): a
  // floor that a healthy home answers a read within.
  static constexpr fabric::Millis kOvershootFloor{50};

  // `homes`: every app node's pool; `req`: the invalidation (origin, deps, digest) — numbered
  // by number(), the round fills in cells and tags.
  InvalidationRound(std::vector<NodePool*> homes, const PoolContext& ctx, InvalidateRequest req);
  InvalidationRound(const InvalidationRound&) = delete;
  ~InvalidationRound();

  // Takes the idle pooled connections of the first round BEFORE the invalidation is numbered,
  // so that a number is usually in flight for microseconds: a home that reads the counter
  // meanwhile waits for it, or catches up. Never connects (a handshake with a slow or cut-off home
  // must not come before the bound starts): send() connects to the others after numbering.
  void connect();
  // The same with a connection the caller took (borrow_idle) before numbering: it serves the
  // first round to the home of `pool` (returned to the pool when that home is not in this round).
  void adopt(NodePool& pool, std::unique_ptr<NodePool::Conn> conn);
  // No home's fence covers this writer (its own writer segment is not the one its node exports):
  // every home must acknowledge; one that does not is reported unconfirmed, never marked.
  void require_acks() { require_acks_ = true; }
  // The number the writer counter gave it, and the fence bound from then.
  void number(const IssuedNumber& n, Clock::time_point fence_at);
  // Once, at `when` (if the round is still running then): `late` is called with every home not
  // settled yet and not of another topology (the writer marks them: client.h "SKIP MARKS").
  void at_checkpoint(Clock::time_point when, std::function<void(NodePool&)> late);
  // Runs rounds until settled() or the fence bound; returns whether every home acknowledged.
  bool run();

  bool settled() const { return unsettled() == 0; }
  size_t unsettled() const;
  size_t rounds() const { return rounds_; }
  const std::vector<std::string>& acked() const { return acked_; }
  // The homes not settled, each with why (after run()): those whose fence covers this writer
  // (foreign = false: they are fenced after the bound), or those of another topology (true: not
  // covered — their acks header names another digest).
  std::vector<std::string> unsettled_homes(bool foreign = false) const;

  void claim();
  void send();
  void await(Clock::time_point until);
  void settle();

 private:
  struct Home;
  void release(Home& h);        // returns its connection to the pool (or drops a failed one)
  fabric::Millis left() const;  // until the fence bound
  fabric::Millis op_deadline() const;  // for one send or read now
  bool out_of_time() const;            // the bound and its overshoot floor have passed
  std::vector<Home> homes_;
  const PoolContext& ctx_;
  InvalidateRequest req_;
  void checkpoint();
  Clock::time_point fence_at_;
  std::optional<Clock::time_point> checkpoint_at_;
  std::function<void(NodePool&)> late_;
  bool require_acks_ = false;
  size_t rounds_ = 0;
  std::vector<std::string> acked_;
};

}  // namespace tierce::coherence
