// dlm/engine_ncosed.cc — N-CoSED (and DQNL: the same with every request exclusive, acquire()) in
// LockEngine: enqueueing on the home's lock word W by remote atomics, the releases and hand-offs,
// and the messages between queue entries (SHARED_REQ/GRANT/REL, SUCCESSOR, EXCL_GRANT). Every
// function here runs with the engine's mutex held (docs/dlm.md; engine.h "Threads").
#include <algorithm>
#include <memory>

#include "base/check.h"
#include "dlm/engine.h"
#include "dlm/engine_internal.h"

namespace tierce::dlm {

// One atomic on W of (home, slot-offset), batched with a read of K when k_out is given.
uint64_t LockEngine::atomic_op(uint32_t home, fabric::OpKind kind, uint64_t off, uint64_t a0,
                               uint64_t a1, uint64_t* k_out) {
  if (home == opts_.self_rank) {
    auto w = word_at(table_, off);
    uint64_t old;
    if (kind == fabric::OpKind::Cas) {
      old = a0;
      w.compare_exchange_strong(old, a1, std::memory_order_acq_rel);
    } else {
      old = w.fetch_add(a0, std::memory_order_acq_rel);
    }
    if (k_out) *k_out = word_at(table_, off + 8).load(std::memory_order_acquire);
    return old;
  }
  fabric::OneSidedOp ops[2];
  ops[0].kind = kind;
  ops[0].offset = off;
  ops[0].arg0 = a0;
  ops[0].arg1 = a1;
  uint64_t k = 0;
  ops[1].kind = fabric::OpKind::Read;
  ops[1].offset = off + 8;
  ops[1].dst = &k;
  ops[1].len = 8;
  net_.table_ops(home, std::span(ops, k_out ? 2 : 1));
  if (k_out) *k_out = k;
  return ops[0].result;
}

// ---------------------------------------------------------------------------------------------
// Enqueueing

void LockEngine::start_exclusive(Step& st, Request& r) {
  const uint64_t off = uint64_t(r.slot) * kSlotBytes;
  const uint64_t key = key_of(r.home, r.slot);
  Ticket t = new_ticket();
  auto rec = std::make_unique<Record>();
  rec->home = r.home;
  rec->slot = r.slot;
  rec->ticket = t;
  rec->gen = r.gen;
  rec->request = r.id;
  // new_ticket() skips the numbers live records hold (after a wrap), and a record names only
  // tickets of this incarnation's block: an entry replaced here would orphan its queue.
  TIERCE_CHECK(!records_.count({r.home, r.slot, t}), "a new ticket names no live record");
  // The record exists before the CAS publishes the ticket: messages for it may come at once.
  records_[{r.home, r.slot, t}] = std::move(rec);
  r.ticket = t;
  uint64_t expected = last_word_.count(key) ? last_word_[key] : Word{true, 0, 0}.encode();
  const uint64_t desired = Word{false, t, 0}.encode();
  for (int attempt = 0;; ++attempt) {
    Word cur = Word::decode(expected);
    // A try-lock gives up when the word shows holders or waiters, or when it keeps losing races.
    const bool give_up =
        r.try_only && attempt > 0 && (!(cur.released && cur.count == 0) || attempt >= 64);
    if (cur.tail == kFence || give_up) {
      erase_record(r.home, r.slot, t);
      r.ticket = 0;
      if (r.try_only) {
        ++counters_.would_block;
        fail(st, r, Status::WouldBlock, "lock \"" + r.name + "\" is held or has waiters");
        drop_request(r);
      } else {
        r.state = Request::State::Starting;  // fenced: the home is recovering it
        r.retry_at = Clock::now() + opts_.retry_interval;
      }
      return;
    }
    uint64_t k = 0;
    uint64_t old = atomic_op(r.home, fabric::OpKind::Cas, off, expected, desired, &k);
    if (old != expected) {
      ++counters_.cas_retries;
      expected = old;
      continue;
    }
    last_word_[key] = desired;
    Word prev = Word::decode(old);
    Record* me = record(r.home, r.slot, t);
    Msg m = msg(MsgType::Successor, r);
    SuccessorView succ{m};
    succ.set_predecessor(prev.tail);
    succ.set_successor(t);
    succ.set_count(prev.count);
    if (prev.released && prev.count == 0) {
      succ.set_pre_granted(true);  // granted at once: the predecessor's record may go
      deliver(st, rank_of(prev.tail), m);
      me->granted = true;
      me->token = k + 1;
      ++counters_.immediate_grants;
      granted(st, r, k + 1);
    } else {
      succ.set_pre_granted(false);
      deliver(st, rank_of(prev.tail), m);
    }
    return;
  }
}

void LockEngine::start_shared(Step& st, Request& r) {
  const uint64_t off = uint64_t(r.slot) * kSlotBytes;
  if (r.try_only) {
    // Join only when no exclusive is queued or holding (a race with one joining after this read
    // is resolved below: the request then waits as a ghost and the client hears WouldBlock).
    uint64_t k = 0;
    uint64_t now = atomic_op(r.home, fabric::OpKind::Faa, off, 0, 0, &k);
    if (!Word::decode(now).released) {
      ++counters_.would_block;
      fail(st, r, Status::WouldBlock, "lock \"" + r.name + "\" is held exclusively or has waiters");
      drop_request(r);
      return;
    }
  }
  uint64_t k = 0;
  uint64_t old = atomic_op(r.home, fabric::OpKind::Faa, off, 1, 0, &k);
  Word prev = Word::decode(old);
  if (prev.tail == kFence) {
    r.state = Request::State::Starting;
    r.retry_at = Clock::now() + opts_.retry_interval;
    return;
  }
  r.group_owner = prev.tail;
  r.k = prev.count;
  if (prev.count >= kRenormaliseAt) {
    // An internal exclusive lock + unlock resets the count (docs/dlm.md).
    ++counters_.renormalisations;
    auto n = std::make_unique<Request>();
    n->id = next_id_++;
    n->name = r.name;
    n->exclusive = true;
    n->home = r.home;
    n->slot = r.slot;
    n->gen = r.gen;
    const uint64_t nid = n->id;
    n->state = Request::State::Ghost;  // released as soon as it is granted
    Request& ref = *n;
    requests_.emplace(nid, std::move(n));
    // The FAA above executed: an operation refused now is not "nothing posted" for this
    // request (start() must take the recovery path), whatever the inner one says.
    try {
      start_exclusive(st, ref);  // may grant and release it at once (then it is gone)
    } catch (const OpNotSent& e) {
      throw std::runtime_error(e.what());
    }
    auto it = requests_.find(nid);
    if (it != requests_.end() && it->second->state == Request::State::Waiting)
      it->second->state = Request::State::Ghost;
  }
  if (prev.released) {
    ++counters_.immediate_grants;
    granted(st, r, k + 1 + prev.count);
    return;
  }
  if (r.try_only) {
    ++counters_.would_block;
    fail(st, r, Status::WouldBlock, "lock \"" + r.name + "\" is held exclusively or has waiters");
    r.state = Request::State::Ghost;
  }
  Msg m = msg(MsgType::SharedReq, r);
  SharedReqView req{m};
  req.set_group_owner(prev.tail);
  req.set_member(prev.count);
  req.set_rank(opts_.self_rank);
  req.set_request(r.id);
  deliver(st, rank_of(prev.tail), m);
}

// ---------------------------------------------------------------------------------------------
// Releases and hand-offs

void LockEngine::release_record(Step& st, Record& rec) {
  rec.released = true;
  for (const auto& w : rec.waiting)
    deliver(st, w.rank, grant_msg(MsgType::SharedGrant, rec.home, rec.slot, rec.gen, w.request,
                                  rec.token + 1 + w.k));
  rec.waiting.clear();
  if (rec.has_succ) return try_handoff(st, rec);
  // No successor known: publish `released` in W once this step's grants are out (finish()).
  rec.publish_pending = true;
  st.publish.emplace_back(rec.home, rec.slot, rec.ticket);
}

// Publishes a release: K first, then the released bit, in one ordered batch.
void LockEngine::publish_release(Step& st, Record& rec) {
  rec.publish_pending = false;
  const uint64_t off = uint64_t(rec.slot) * kSlotBytes;
  // The count is at least the group members already heard of: start the CAS from there.
  uint64_t expected = Word{false, rec.ticket, rec.count_hint}.encode();
  const uint32_t home = rec.home, slot = rec.slot;
  const Ticket t = rec.ticket;
  const Token token = rec.token;
  try {
    if (home == opts_.self_rank) {
      word_at(table_, off + 8).store(token, std::memory_order_release);
    }
    bool k_written = home == opts_.self_rank;
    for (;;) {
      Word cur = Word::decode(expected);
      uint64_t desired = Word{true, t, cur.count}.encode();
      uint64_t old;
      if (!k_written) {
        fabric::OneSidedOp ops[2];
        ops[0].kind = fabric::OpKind::Write;
        ops[0].offset = off + 8;
        ops[0].src = &token;
        ops[0].len = 8;
        ops[1].kind = fabric::OpKind::Cas;
        ops[1].offset = off;
        ops[1].arg0 = expected;
        ops[1].arg1 = desired;
        net_.table_ops(home, ops);
        old = ops[1].result;
        k_written = true;
      } else {
        old = atomic_op(home, fabric::OpKind::Cas, off, expected, desired, nullptr);
      }
      if (old == expected) {
        last_word_[key_of(home, slot)] = desired;
        break;  // released; the record waits for SHARED_RELs / a successor
      }
      Word now = Word::decode(old);
      if (now.tail != t || now.released) break;  // a successor enqueued: SUCCESSOR is coming
      ++counters_.cas_retries;
      expected = old;  // only the count changed
    }
  } catch (const std::exception& e) {
    // An operation that may still land holds the hand-off back; one refused before it was
    // posted (OpNotSent) cannot land: the lock passes on by messages at once.
    const bool not_sent = dynamic_cast<const OpNotSent*>(&e) != nullptr;
    if (!not_sent) {
      rec.uncertain_until = Clock::now() + opts_.uncertain_release_delay;
      timer_cv_.notify_one();
    }
    log_line(opts_.log, fabric::LogLevel::Warn,
             "DLM0301 cannot publish the release of a lock of member " + std::to_string(home) +
                 " slot " + std::to_string(slot) + ": " + e.what() +
                 (not_sent ? std::string(" (the lock passes on by messages; nothing was posted)")
                           : " (the lock passes on by messages; the next holder waits " +
                                 std::to_string(opts_.uncertain_release_delay.count()) +
                                 " ms so that the unanswered write cannot land after its own)"));
  }
  try_handoff(st, rec);  // a SUCCESSOR may have come while the publication was pending
}

void LockEngine::try_handoff(Step& st, Record& rec) {
  if (!rec.released || !rec.has_succ || rec.rels < rec.succ_count) return;
  if (rec.publish_pending) return;                   // after the publication (finish())
  if (Clock::now() < rec.uncertain_until) return;  // the timer tries again
  if (!rec.succ_pre) {
    Msg g;
    g.type = MsgType::ExclGrant;
    g.home = rec.home;
    g.slot = rec.slot;
    g.gen = rec.gen;
    ExclGrantView grant{g};
    grant.set_ticket(rec.succ);
    grant.set_token(rec.token + rec.succ_count + 1);
    deliver(st, rank_of(rec.succ), g);
  }
  erase_record(rec.home, rec.slot, rec.ticket);
}

// ---------------------------------------------------------------------------------------------
// Messages between queue entries (handle() checked the home's rank)

void LockEngine::handle_shared_req(Step& st, const Msg& m) {
  const SharedReqView req{m};
  Record* rec = record(m.home, m.slot, req.group_owner());
  if (!rec || rec->gen != m.gen) return count_stale();
  if (rec->released) {
    deliver(st, req.rank(),
            grant_msg(MsgType::SharedGrant, m.home, m.slot, m.gen, req.request(),
                      rec->token + 1 + req.member()));
  } else {
    rec->waiting.push_back({req.rank(), req.request(), req.member()});
  }
  rec->count_hint = std::max(rec->count_hint, req.member() + 1);
}

void LockEngine::handle_shared_grant(Step& st, const Msg& m) {
  const GrantView grant{m};
  auto it = requests_.find(grant.request());
  if (it == requests_.end() || it->second->gen != m.gen || it->second->exclusive ||
      (it->second->state != Request::State::Waiting &&
       it->second->state != Request::State::Ghost))
    return count_stale();
  granted(st, *it->second, grant.token());
}

void LockEngine::handle_shared_rel(Step& st, const Msg& m) {
  Record* rec = record(m.home, m.slot, SharedRelView{m}.group_owner());
  if (!rec || rec->gen != m.gen) return count_stale();
  ++rec->rels;
  try_handoff(st, *rec);
}

void LockEngine::handle_successor(Step& st, const Msg& m) {
  const SuccessorView succ{m};
  Record* rec = record(m.home, m.slot, succ.predecessor());
  if (!rec || rec->gen != m.gen) return count_stale();
  rec->has_succ = true;
  rec->succ = succ.successor();
  rec->succ_count = succ.count();
  rec->succ_pre = succ.pre_granted();
  if (rec->succ_pre) {
    erase_record(m.home, m.slot, succ.predecessor());
    return;
  }
  try_handoff(st, *rec);
}

void LockEngine::handle_excl_grant(Step& st, const Msg& m) {
  const ExclGrantView grant{m};
  Record* rec = record(m.home, m.slot, grant.ticket());
  if (!rec || rec->gen != m.gen) return count_stale();
  rec->granted = true;
  rec->token = grant.token();
  if (rec->request == 0) {  // its request is gone: pass the lock on
    release_record(st, *rec);
    return;
  }
  auto it = requests_.find(rec->request);
  if (it == requests_.end()) {
    rec->request = 0;
    release_record(st, *rec);
    return;
  }
  granted(st, *it->second, grant.token());
}

}  // namespace tierce::dlm
