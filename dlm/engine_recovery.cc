// dlm/engine_recovery.cc — failures and recovery in LockEngine: members going down, dead, up
// again (what this node drops, what it tells the homes), the members' floors at the home, and
// the home's recovery of its locks (docs/dlm.md "Recovery"): fence, ask every member what it
// holds (dlm.recover, on_recover), rebuild the queue behind a recovery ticket, resume.
#include <algorithm>
#include <memory>
#include <thread>
#include <utility>

#include "base/check.h"
#include "dlm/engine.h"
#include "dlm/engine_internal.h"

namespace tierce::dlm {

// ---------------------------------------------------------------------------------------------
// Failures

void LockEngine::member_up(uint32_t rank) {
  std::lock_guard lk(mu_);
  if (rank >= alive_.size()) return;
  alive_[rank] = true;
  // SRSL: tell the home which of this node's requests are gone (the timer thread sends it: the
  // caller may hold locks of its own that a send should not wait under).
  if (opts_.algorithm == cluster::LockAlgorithm::SRSL && rank != opts_.self_rank &&
      srsl_floor_[rank] > 0) {
    srsl_purge_due_[rank] = true;
    timer_cv_.notify_one();
  }
  // N-CoSED / DQNL: the home recovers the locks whose queues named what member_down dropped
  // (gave_up_).
  if (opts_.algorithm != cluster::LockAlgorithm::SRSL && rank != opts_.self_rank &&
      gave_up_[rank]) {
    gave_up_[rank] = false;
    srsl_purge_due_[rank] = true;
    timer_cv_.notify_one();
  }
}

void LockEngine::member_down(uint32_t rank, const std::string& why, bool restarted) {
  std::unique_lock lk(mu_);
  if (rank >= alive_.size() || rank == opts_.self_rank) return;
  alive_[rank] = false;
  Step st;
  // This node's requests on locks homed at the dead member.
  std::vector<uint64_t> ids;
  for (auto& [id, r] : requests_)
    if (r->home == rank) ids.push_back(id);
  bool kept = false;  // Revoked holds left on the member's locks
  for (uint64_t id : ids) {
    Request& r = *requests_[id];
    if (r.state == Request::State::Held && r.owner != 0) {
      ++counters_.revoked;
      st.revocations.emplace_back(r.owner, r.id,
                                  "the home of lock \"" + r.name + "\" (member " +
                                      std::to_string(rank) + ") is gone: " + why);
      // The client reads the revocation when it reads it: until then it may use the hold, so
      // the home must not give the lock on — which it would if this node said the hold is
      // free (a census answer without it, SRSL's release or floor) while the home merely was
      // slow (found by the nemesis, issue 33: a new holder granted 6-70 ms before the old one
      // read its LeaseLost). Kept, reported held, until the client acknowledges. A restarted
      // home knows none of its old holds: nothing to keep.
      if (!restarted && opts_.revoke_wait.count() > 0) {
        r.state = Request::State::Revoked;
        r.revoked_until = Clock::now() + opts_.revoke_wait;
        r.done = nullptr;
        kept = true;
        continue;
      }
    } else if (r.state == Request::State::Revoked && !restarted) {
      kept = true;  // a second give-up: still awaiting its client
      continue;
    } else if (r.state != Request::State::Ghost && r.state != Request::State::Revoked &&
               r.owner != 0) {
      ++counters_.home_down;
      fail(st, r, Status::HomeDown,
           "the home of lock \"" + r.name + "\" (member " + std::to_string(rank) + ") is gone: " + why);
    }
    requests_.erase(id);
  }
  // Every request of this node on the member's locks is gone (below next_id_): SRSL tells the
  // home so, or it would keep the holds and waits it has of them (member_up).
  // A floor of its own (next_id_ taken): a second give-up without a request in between used
  // to send the same floor, which the home ignores (it acts on a higher one only) — and the
  // records dropped the second time were never recovered.
  // SRSL: a floor would drop the Revoked holds at the home too, so it waits for the last of
  // them to end (end_revoked); grants of dropped requests meanwhile are released on arrival.
  if (kept && opts_.algorithm == cluster::LockAlgorithm::SRSL) srsl_held_floor_[rank] = next_id_++;
  else srsl_floor_[rank] = next_id_++;
  const auto dropped_records =
      std::erase_if(records_, [&](const auto& kv) { return std::get<0>(kv.first) == rank; });
  if (!ids.empty() || dropped_records) gave_up_[rank] = true;
  std::erase_if(resolved_, [&](const auto& kv) { return kv.second.home == rank; });
  std::erase_if(last_word_, [&](const auto& kv) { return uint32_t(kv.first >> 32) == rank; });
  finish(lk, st);
}

void LockEngine::end_revoked(Step& st, Request& r, bool acknowledged) {
  const uint32_t home = r.home;
  if (acknowledged) {
    ++counters_.revocations_acknowledged;
  } else {
    ++counters_.revocations_unacknowledged;
    log_line(opts_.log, fabric::LogLevel::Warn,
             "DLM0308 lock \"" + r.name + "\" (member " + std::to_string(home) + "'s): hold " +
                 std::to_string(r.id) + " was revoked " + std::to_string(opts_.revoke_wait.count()) +
                 " ms ago and its client has not acknowledged it (frozen, or not reading its "
                 "revocations?): released to the home; only its token (" +
                 std::to_string(r.token) + ") protects a resource from it now");
  }
  if (opts_.algorithm == cluster::LockAlgorithm::SRSL) {
    deliver(st, home, srsl_msg(MsgType::SrslRel, home, r.slot, r.gen, r.id));
  } else if (r.recovered) {
    deliver(st, home, msg(MsgType::RecoveredRel, r));
  }
  // N-CoSED / DQNL, not adopted by a census: member_down dropped its queue record and set
  // gave_up_, so the home recovers the lock at member_up, and that census no longer finds it.
  requests_.erase(r.id);
  if (opts_.algorithm != cluster::LockAlgorithm::SRSL || srsl_held_floor_[home] == 0) return;
  for (auto& [id, q] : requests_)
    if (q->home == home && q->state == Request::State::Revoked) return;
  srsl_floor_[home] = std::max(srsl_floor_[home], std::exchange(srsl_held_floor_[home], 0));
  srsl_purge_due_[home] = true;
  timer_cv_.notify_one();
}

void LockEngine::purge_at(uint32_t home) {
  if (home == 0 || home >= srsl_floor_.size() || home == opts_.self_rank) return;
  srsl_floor_[home] = std::max(srsl_floor_[home], next_id_++);
  srsl_purge_due_[home] = true;
  timer_cv_.notify_one();
}

void LockEngine::ask_recovery(uint32_t home) {
  if (opts_.algorithm == cluster::LockAlgorithm::SRSL) return;  // grants go home -> member only
  std::lock_guard lk(mu_);
  if (home == 0 || home > opts_.members || home == opts_.self_rank) return;
  purge_at(home);
  ++counters_.recoveries_asked;
}

void LockEngine::member_dead(uint32_t rank) {
  std::unique_lock lk(mu_);
  if (rank >= alive_.size() || rank == opts_.self_rank) return;
  records_lost_[rank] = true;  // for recover_all's idle test
  Step st;
  // SRSL homes forget the dead member's holders and waiters.
  if (opts_.algorithm == cluster::LockAlgorithm::SRSL) {
    for (uint32_t s = 0; s < slots_.size(); ++s) {
      std::erase_if(slots_[s]->holders, [&](const Slot::Holder& h) { return h.rank == rank; });
      std::erase_if(slots_[s]->queue, [&](const Slot::Holder& h) { return h.rank == rank; });
      srsl_grant_waiters(st, s);
    }
  }
  finish(lk, st);
}

std::vector<uint8_t> LockEngine::on_recover(std::span<const uint8_t> body) {
  auto q = RecoverRequest::decode(body);
  if (!q) throw std::runtime_error("malformed dlm.recover request");
  std::unique_lock lk(mu_);
  Step st;
  std::vector<ReportedHold> holds;
  std::vector<uint64_t> ids;
  for (auto& [id, r] : requests_)
    if (r->home == q->home && r->slot == q->slot) ids.push_back(id);
  for (uint64_t id : ids) {
    Request& r = *requests_[id];
    switch (r.state) {
      case Request::State::Held:
      case Request::State::Revoked:  // its client may still use it (member_down)
        // Reported at every call, a repeated one of the same recovery too: the home counts one
        // answer per member (ask_members), and a repeated call means it did not get the first
        // — an answer lost to the call's deadline on a loaded machine. This used to skip a hold
        // already "adopted" by that lost answer: the home rebuilt the queue without it and
        // granted the lock to another client (the nemesis, issue 33: N-CoSED tcp seed 41, a
        // restarted home's census timing out on a starved member).
        holds.push_back({r.exclusive ? Mode::Exclusive : Mode::Shared, r.token});
        r.recovered = true;
        r.gen = q->new_gen;
        break;
      case Request::State::Waiting:
        r.state = Request::State::Starting;  // re-requested after the recovery
        r.ticket = 0;
        r.gen = q->new_gen;
        r.retry_at = Clock::now() + opts_.retry_interval;
        break;
      case Request::State::Starting:
        r.gen = q->new_gen;
        break;
      case Request::State::Ghost:
        requests_.erase(id);
        break;
    }
  }
  std::erase_if(records_, [&](const auto& kv) {
    return std::get<0>(kv.first) == q->home && std::get<1>(kv.first) == q->slot;
  });
  for (auto& [name, c] : resolved_)
    if (c.home == q->home && c.slot == q->slot) c.gen = std::max(c.gen, q->new_gen);
  // Also when nothing is cached or requested: an acquire() that read the old generation before
  // this call creates its request after it (see acquire()).
  uint64_t& rg = recovered_gen_[key_of(q->home, q->slot)];
  rg = std::max(rg, q->new_gen);
  last_word_.erase(key_of(q->home, q->slot));
  finish(lk, st);
  return encode_report(holds);
}

void LockEngine::recover_all(const std::function<bool(uint32_t)>& alive) {
  // SRSL: member_dead forgets a dead member's holders and waiters, a live member's floor what it
  // dropped (member_up, srsl_purge).
  if (opts_.algorithm == cluster::LockAlgorithm::SRSL) return;
  size_t n;
  std::vector<bool> lost;
  {
    std::lock_guard lk(mu_);
    n = slots_.size();
    // Members that died or restarted since the last run: taken now, so one that does so during
    // this run is seen by the next (lockd asks for one).
    lost = std::exchange(records_lost_, std::vector<bool>(records_lost_.size(), false));
  }
  for (uint32_t s = 0; s < n; ++s) {
    const uint64_t off = uint64_t(s) * kSlotBytes;
    auto w = word_at(table_, off);
    // A quiescent lock (released, no shared member, tail on a live node) needs nothing. A tail of
    // a member that restarted is not quiescent: that member is alive, but the record of the tail
    // went with its old incarnation, so the next SHARED_REL and SUCCESSOR to it would be dropped
    // and the lock would wedge (found by the spin model, -DENGINE_SKIP_IDLE).
    Word cur = Word::decode(w.load());
    const uint32_t tail_rank = rank_of(cur.tail);
    if (cur.tail != kFence && cur.released && cur.count == 0 &&
        !(tail_rank < lost.size() && lost[tail_rank]) && alive(tail_rank))
      continue;
    // 1. Fence, 2. ask the members what they hold, 3. a recovery ticket becomes the tail,
    // 4. the members' waiters resume.
    const RecoverRequest q = fence_slot(s);
    std::string who;
    auto holds = ask_members(q, alive, &who);
    if (!holds) return;  // lockd is stopping
    rebuild_queue(q, *holds, who);
  }
}

// 1. Fence: nobody may enqueue until the queue is rebuilt. Then the slot's generation goes up
// (under mu_, taken here): what the members send for the old one is stale from now on.
RecoverRequest LockEngine::fence_slot(uint32_t s) {
  auto w = word_at(table_, uint64_t(s) * kSlotBytes);
  uint64_t old = w.load();
  while (!w.compare_exchange_weak(old, Word{false, kFence, 0}.encode())) {
  }
  RecoverRequest q;
  q.home = opts_.self_rank;
  q.slot = s;
  q.incarnation = opts_.incarnation;
  {
    std::lock_guard lk(mu_);
    q.old_gen = slots_[s]->gen;
    q.new_gen = q.old_gen + 1;
    slots_[s]->gen = q.new_gen;
    slots_[s]->early_recovered_rels = 0;
    ++counters_.recoveries;
  }
  return q;
}

// 2. Ask every live member (this node too) what it holds; their waiters step back. Runs without
// mu_ (the calls wait on the members; on_recover and stopping() take it). nullopt: lockd is
// stopping, the recovery is abandoned.
std::optional<std::vector<ReportedHold>> LockEngine::ask_members(
    const RecoverRequest& q, const std::function<bool(uint32_t)>& alive, std::string* who) {
  const uint32_t s = q.slot;
  std::vector<ReportedHold> holds;
  std::vector<bool> warned(opts_.members + 1, false);
  for (uint32_t rank = 1; rank <= opts_.members; ++rank) {
    for (;;) {
      if (rank != opts_.self_rank && !alive(rank)) break;
      // Stopping: give up. This loop waits for `alive` to turn false, and lockd's stop() ends
      // the heartbeat thread that would turn it false before it joins the thread running this:
      // a lockd stopped while a member was down but not yet dead (e.g. in the test cluster's
      // destructor, when stopping the previous node took over lease - guard under load) waited
      // here for ever (test_cluster.cc stop_while_recovery_waits_for_a_down_member). The slot
      // stays fenced with its generation bumped: nobody can enqueue on a home that is going
      // away, and the members fail its locks with HomeDown once they see it down.
      if (stopping()) {
        log_line(opts_.log, fabric::LogLevel::Warn,
                 "DLM0306 recovery of slot " + std::to_string(s) +
                     " abandoned: lockd is stopping (the lock stays fenced)");
        return std::nullopt;
      }
      try {
        auto body = q.encode();
        auto reply = rank == opts_.self_rank ? on_recover(body)
                                             : net_.call(rank, "dlm.recover", body);
        auto rep = decode_report(reply);
        if (!rep) throw std::runtime_error("malformed dlm.recover reply");
        holds.insert(holds.end(), rep->begin(), rep->end());
        for (const auto& h : *rep)
          *who += (who->empty() ? "" : " ") + std::to_string(rank) + ":" + std::to_string(h.token);
        break;
      } catch (const std::exception& e) {
        // Said once per member and recovery: it is asked again every 10 ms.
        if (!warned[rank]) {
          warned[rank] = true;
          log_line(opts_.log, fabric::LogLevel::Warn,
                   "DLM0303 recovery of slot " + std::to_string(s) + ": member " +
                       std::to_string(rank) + " did not answer (" + e.what() +
                       "); asking again until it answers or is declared dead (silent for "
                       "a lease)");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
  return holds;
}

// 3. and 4. Takes mu_: a recovery ticket becomes the tail, the members' waiters resume.
void LockEngine::rebuild_queue(const RecoverRequest& q, const std::vector<ReportedHold>& holds,
                               const std::string& who) {
  const uint32_t s = q.slot;
  const uint64_t off = uint64_t(s) * kSlotBytes;
  auto w = word_at(table_, off);
  // 3. A home ticket R becomes the tail; it counts as held until every reported holder released.
  std::unique_lock lk(mu_);
  Step st;
  // Every token granted since K was published, or since the last recovery, is less than
  // either plus the jump (2^32 grants apart): above the highest of them and of the holds.
  Token top = std::max(word_at(table_, off + 8).load(), slots_[s]->last_recovery_token);
  for (const auto& h : holds) top = std::max(top, h.token);
  Ticket r;
  try {
    r = new_ticket();
  } catch (const std::exception& e) {
    // Over 500 000 queue entries at this lockd: the lock stays fenced until the next recovery.
    log_line(opts_.log, fabric::LogLevel::Error,
             "DLM0305 recovery of slot " + std::to_string(s) + " failed: " + e.what());
    finish(lk, st);
    return;
  }
  auto rec = std::make_unique<Record>();
  rec->home = opts_.self_rank;
  rec->slot = s;
  rec->ticket = r;
  rec->gen = q.new_gen;
  rec->granted = true;
  rec->token = top + kRecoveryTokenJump;
  slots_[s]->last_recovery_token = rec->token;
  uint32_t early = slots_[s]->early_recovered_rels;
  rec->holders_outstanding = holds.size() > early ? uint32_t(holds.size() - early) : 0;
  TIERCE_CHECK(!records_.count({opts_.self_rank, s, r}), "a recovery ticket names no live record");
  bool free_now = rec->holders_outstanding == 0;
  rec->released = free_now;
  if (free_now) word_at(table_, off + 8).store(rec->token, std::memory_order_release);
  records_[{opts_.self_rank, s, r}] = std::move(rec);
  uint64_t fenced = w.load();
  while (!w.compare_exchange_weak(fenced, Word{free_now, r, 0}.encode())) {
  }
  last_word_[key_of(opts_.self_rank, s)] = Word{free_now, r, 0}.encode();
  // 4. Resume the members' waiters.
  Msg m;
  m.type = MsgType::Resume;
  m.home = opts_.self_rank;
  m.slot = s;
  m.gen = q.new_gen;
  for (uint32_t rank = 1; rank <= opts_.members; ++rank)
    if (rank == opts_.self_rank || alive_[rank]) deliver(st, rank, m);
  log_line(opts_.log, fabric::LogLevel::Info,
           "DLM0304 recovered lock \"" + slots_[s]->name + "\" (slot " + std::to_string(s) +
               "): " + std::to_string(holds.size()) + " holder(s) kept" +
               (who.empty() ? "" : " (member:token " + who + ")") +
               ", tokens continue above " + std::to_string(top + kRecoveryTokenJump));
  finish(lk, st);
}

// ---------------------------------------------------------------------------------------------
// Messages of the recovery and of the members' floors (handle(), under mu_)

// The sender's floor of an SRSL message to this home (SRSL_PURGE under N-CoSED / DQNL too).
void LockEngine::take_floor(Step& st, const Msg& m) {
  const SrslToHomeView from{m};
  // The sender's floor first, also from a message that is stale otherwise: what the sender
  // dropped when it gave this home up goes, whatever the message. Only a floor that is a
  // request id of the sending incarnation (ids start at epoch << 47, incarnations are
  // epoch << 32 | random): garbage must not make the home refuse a member's requests for good.
  const bool floor_valid = from.rank() != opts_.self_rank && m.sender == from.rank() &&
                           m.from != 0 && (from.floor() >> kRequestIdShift) == (m.from >> 32);
  if (opts_.algorithm == cluster::LockAlgorithm::SRSL && floor_valid)
    srsl_purge(st, from.rank(), from.floor());
  // N-CoSED / DQNL: member c gave this home up and dropped its entries in this home's queues,
  // though this home may never have declared it dead (its lease lapsed one way, under load: a
  // heartbeat thread that did not run for lease - guard). The queues that named its entries
  // wait for messages it will never send (the lock passed on to a record that is gone, a
  // SHARED_REL of a revoked hold): only a recovery rebuilds them (it asks every member what
  // it holds; c holds nothing of them any more), and the locks whose tail is c's released
  // record are not idle (records_lost_). Without this the lock stayed wedged for good and every
  // later waiter hung (test_cluster.cc a_one_way_lapse_does_not_wedge_the_home_queue).
  if (opts_.algorithm != cluster::LockAlgorithm::SRSL && m.type == MsgType::SrslPurge &&
      floor_valid && from.rank() < srsl_purged_.size() &&
      from.floor() > srsl_purged_[from.rank()]) {
    srsl_purged_[from.rank()] = from.floor();
    records_lost_[from.rank()] = true;
    st.recover = true;
  }
}

// RECOVERED_REL, at the home: `gen` is the slot's generation (handle() checked the slot).
void LockEngine::handle_recovered_rel(Step& st, const Msg& m, uint64_t gen) {
  if (m.home != opts_.self_rank || gen != m.gen) return count_stale();
  // Only the recovery ticket of this generation: one of an earlier recovery that still
  // waits (the home's own on_recover has not erased it yet) must not take a release that
  // the new ticket counts (-DENGINE_RREL_ANY_GEN in the spin model): that one counts early.
  Record* rec = nullptr;
  for (auto& [k, r] : records_)
    if (std::get<0>(k) == m.home && std::get<1>(k) == m.slot && r->gen == m.gen &&
        r->holders_outstanding > 0)
      rec = r.get();
  if (!rec) {
    ++slots_[m.slot]->early_recovered_rels;
    return;
  }
  if (--rec->holders_outstanding == 0) release_record(st, *rec);
}

// RESUME, at a member: the requests that stepped back for the recovery start again now.
void LockEngine::handle_resume(const Msg& m) {
  auto now = Clock::now();
  for (auto& [id, r] : requests_)
    if (r->home == m.home && r->slot == m.slot && r->state == Request::State::Starting)
      r->retry_at = now;
  timer_cv_.notify_one();
}

}  // namespace tierce::dlm
