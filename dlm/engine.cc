// dlm/engine.cc — the lock manager's protocol state machine (engine.h; protocol in docs/dlm.md):
// construction, the state every algorithm shares (steps, requests, tickets and records), the
// local API, message dispatch, deadlines and the status text. By concern, the rest is in
// engine_ncosed.cc (N-CoSED and DQNL), engine_srsl.cc, engine_recovery.cc (failures and the
// home's recovery) and engine_resolve.cc (the home's name directory).
#include "dlm/engine.h"

#include "base/check.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "dlm/engine_internal.h"

namespace tierce::dlm {

LockEngine::LockEngine(EngineOptions opts, std::span<uint8_t> table, Network& net)
    : opts_(std::move(opts)), table_(table), net_(net), records_lost_(opts_.members + 1, false),
      srsl_floor_(opts_.members + 1, 0), srsl_purge_due_(opts_.members + 1, false),
      srsl_held_floor_(opts_.members + 1, 0),
      gave_up_(opts_.members + 1, false),
      srsl_purged_(opts_.members + 1, 0),
      alive_(opts_.members + 1, true) {
  if (opts_.self_rank == 0 || opts_.self_rank > opts_.members)
    throw std::invalid_argument("LockEngine: self_rank must be 1..members");
  if (opts_.epoch == 0 || opts_.epoch >= (1ull << (64 - kEpochShift)))
    throw std::invalid_argument("LockEngine: epoch must be 1..2^16-1");
  // Request ids (HoldIds, and the `request` of SHARED_REQ/SHARED_GRANT/SRSL messages) are unique
  // across incarnations: an incarnation numbers them from epoch << 47, and a grant meant for the
  // previous incarnation's request cannot match one of this incarnation's (2^47 requests per
  // incarnation before its ids would reach the next epoch's: not in this universe's lifetime).
  next_id_ = (opts_.epoch << kRequestIdShift) + 1;
  if (table_.size() < uint64_t(opts_.lock_slots) * kSlotBytes)
    throw std::invalid_argument("LockEngine: the table is smaller than lock_slots slots");
  if (!opts_.home_of) throw std::invalid_argument("LockEngine: home_of is required");
  timer_ = std::thread([this] { timer_loop(); });
}

LockEngine::~LockEngine() {
  stop();
  if (timer_.joinable()) timer_.join();
}

void LockEngine::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  timer_cv_.notify_all();
}

void LockEngine::set_revoked_callback(RevokedFn fn) {
  std::lock_guard lk(mu_);
  revoked_ = std::move(fn);
}

EngineCounters LockEngine::counters() const {
  std::lock_guard lk(mu_);
  return counters_;
}

EngineGauges LockEngine::gauges() const {
  std::lock_guard lk(mu_);
  EngineGauges g;
  g.home_locks = slots_.size();
  g.lock_slots = opts_.lock_slots;
  for (auto& [id, r] : requests_) {
    if (r->state == Request::State::Held) ++g.held;
    else if (r->state == Request::State::Revoked) ++g.revoked;
    else ++g.waiting;
  }
  g.records = records_.size();
  g.members = opts_.members;
  for (uint32_t r = 1; r <= opts_.members; ++r) g.members_alive += alive_[r] ? 1 : 0;
  return g;
}

bool LockEngine::stopping() const {
  std::lock_guard lk(mu_);
  return stopping_;
}

bool LockEngine::member_alive(uint32_t rank) const {
  std::lock_guard lk(mu_);
  return rank < alive_.size() && alive_[rank];
}

// ---------------------------------------------------------------------------------------------
// Steps

void LockEngine::deliver(Step& st, uint32_t rank, const Msg& m) {
  if (rank == 0 || rank > opts_.members) {
    ++counters_.bad_messages;  // a rank from a corrupt ticket or message: nobody to send to
    return;
  }
  if (rank == opts_.self_rank) {
    st.inbox.push_back(m);
  } else {
    // To a member taken for down: lockd keeps the message until it answers, but the link may
    // stay cut while both reach the lock's home, whose queue waits for this message: that home
    // recovers the lock (ask_recovery; lockd does the same for what was queued at the down).
    if (opts_.algorithm != cluster::LockAlgorithm::SRSL && rank < alive_.size() && !alive_[rank] &&
        m.home != rank && m.home != opts_.self_rank) {
      purge_at(m.home);
      ++counters_.recoveries_asked;
    }
    Msg copy = m;
    copy.from = opts_.incarnation;
    copy.sender = uint16_t(opts_.self_rank);
    auto bytes = copy.encode();
    auto& body = st.out[rank];
    body.insert(body.end(), bytes.begin(), bytes.end());
    ++counters_.messages_out;
  }
}

void LockEngine::finish(std::unique_lock<std::mutex>& lk, Step& st) {
  for (;;) {
    while (!st.inbox.empty()) {
      Msg m = st.inbox.front();
      st.inbox.pop_front();
      handle(st, m);
    }
    RevokedFn revoked = revoked_;
    auto out = std::move(st.out);
    auto completions = std::move(st.completions);
    auto revocations = std::move(st.revocations);
    auto publish = std::move(st.publish);
    const bool recover = st.recover;
    st = Step{};
    lk.unlock();
    if (recover && opts_.request_recovery) opts_.request_recovery();
    // Grants first: waiters hear of their grant before the releaser's remote CAS.
    for (auto& [rank, body] : out) net_.send(rank, body);
    for (auto& [fn, g] : completions)
      if (fn) fn(g);
    if (revoked)
      for (auto& [owner, hold, why] : revocations) revoked(owner, hold, why);
    if (publish.empty()) return;
    lk.lock();
    for (auto& [home, slot, t] : publish)
      if (Record* rec = record(home, slot, t); rec && rec->publish_pending) publish_release(st, *rec);
  }
}

Msg LockEngine::msg(MsgType t, const Request& r) const {
  Msg m;
  m.type = t;
  m.home = r.home;
  m.slot = r.slot;
  m.gen = r.gen;
  return m;
}

void LockEngine::fail(Step& st, Request& r, Status s, const std::string& why) {
  Grant g;
  g.status = s;
  g.message = why;
  if (r.done) st.completions.emplace_back(std::move(r.done), std::move(g));
  r.done = nullptr;
}

void LockEngine::drop_request(Request& r) {
  if (r.exclusive && r.ticket) {
    if (Record* rec = record(r.home, r.slot, r.ticket)) rec->request = 0;
  }
  requests_.erase(r.id);
}

// Tickets are numbered 1..kSeqPerBlock in the block of this incarnation's epoch (dlm/word.h), so
// they differ from the tickets of the three previous incarnations of this member, which other
// members' records, W and messages in flight may still name until the homes have recovered the
// locks involved (docs/dlm.md "Tickets"). Within the incarnation the number wraps after 2^19-2
// tickets; from then on a number that a record of this node still holds is skipped. A record
// that was dropped is named by no message any more (a record goes when its successor is known
// and its group's releases have all arrived, or at a recovery, which bumps the generation), so
// a wrapped ticket cannot match a stale message of this incarnation either.
Ticket LockEngine::new_ticket() {
  for (uint32_t tries = 0; tries <= kSeqPerBlock; ++tries) {
    uint32_t n = next_seq_++;
    if (next_seq_ > kSeqPerBlock) {
      next_seq_ = 1;
      seq_wrapped_ = true;
    }
    Ticket t = make_ticket(opts_.self_rank, block_seq(opts_.epoch, n));
    TIERCE_DCHECK(rank_of(t) == opts_.self_rank && t != kFence, "a ticket of this member");
    if (!seq_wrapped_) return t;
    bool used = false;
    for (auto it = records_.begin(); it != records_.end() && !used; ++it)
      used = std::get<2>(it->first) == t;
    if (!used) return t;
  }
  // Every number of the block is held by a live record (over 500 000 queue entries at once).
  throw std::runtime_error("no free ticket: this lockd has " + std::to_string(records_.size()) +
                           " queue entries");
}

LockEngine::Record* LockEngine::record(uint32_t home, uint32_t slot, Ticket t) {
  auto it = records_.find({home, slot, t});
  return it == records_.end() ? nullptr : it->second.get();
}

void LockEngine::erase_record(uint32_t home, uint32_t slot, Ticket t) {
  records_.erase({home, slot, t});
}

uint64_t LockEngine::home_gen(uint32_t slot) const {
  return slot < slots_.size() ? slots_[slot]->gen : 0;
}

// ---------------------------------------------------------------------------------------------
// Local API

void LockEngine::acquire(OwnerId owner, const std::string& name, Mode mode,
                         std::chrono::milliseconds timeout, std::function<void(const Grant&)> done) {
  auto reply = [&](Status s, const std::string& why) {
    Grant g;
    g.status = s;
    g.message = why;
    done(g);
  };
  if (name.empty() || name.size() > kMaxNameBytes || name.find('\0') != std::string::npos)
    return reply(Status::BadName, "lock names are 1.." + std::to_string(kMaxNameBytes) +
                                      " bytes without NUL");
  uint32_t home = opts_.home_of(name);
  Cached c;
  {
    std::lock_guard lk(mu_);
    ++counters_.acquires;
    if (stopping_) return reply(Status::ShuttingDown, "lockd is stopping");
    if (!alive_[home]) {
      ++counters_.home_down;
      return reply(Status::HomeDown, "the home of lock \"" + name + "\" (member " +
                                         std::to_string(home) +
                                         ") is not heart-beating; retry when it is back");
    }
    if (requests_.size() >= opts_.max_requests)
      return reply(Status::TooMany, "this lockd has " + std::to_string(requests_.size()) +
                                        " requests and holds (the limit)");
    auto it = resolved_.find(name);
    if (it != resolved_.end()) c = it->second;
  }
  if (c.home == 0) {
    Resolution res;
    try {
      std::vector<uint8_t> req(name.begin(), name.end());
      auto body = home == opts_.self_rank ? on_resolve(req) : net_.call(home, "dlm.resolve", req);
      auto dec = Resolution::decode(body);
      if (!dec) throw std::runtime_error("malformed dlm.resolve reply");
      res = *dec;
    } catch (const std::exception& e) {
      std::lock_guard lk(mu_);
      ++counters_.home_down;
      return reply(Status::HomeDown, "cannot reach the home of lock \"" + name + "\" (member " +
                                         std::to_string(home) + "): " + e.what());
    }
    if (res.status != Status::Ok) return reply(res.status, res.message);
    c = Cached{home, res.slot, res.gen};
    std::lock_guard lk(mu_);
    // A recovery may have raised the generation meanwhile: keep the newest.
    auto& slot = resolved_[name];
    if (slot.home == 0 || slot.gen < c.gen) slot = c;
    c = slot;
  }
  std::unique_lock lk(mu_);
  Step st;
  // The generation was read in an earlier critical section (or by dlm.resolve, in none): a
  // recovery's on_recover may have run since, with no request of this one to update. Its record
  // is taken here, in the section that creates the request, so no recovery falls in between: a
  // request of an older generation would have its messages to the recovery ticket dropped as
  // stale, and wait for ever (found by the spin model, -DENGINE_STALE_GEN).
  if (auto g = recovered_gen_.find(key_of(c.home, c.slot)); g != recovered_gen_.end())
    c.gen = std::max(c.gen, g->second);
  auto r = std::make_unique<Request>();
  r->id = next_id_++;
  r->owner = owner;
  r->name = name;
  r->mode = mode;
  r->exclusive = mode == Mode::Exclusive || opts_.algorithm == cluster::LockAlgorithm::DQNL;
  r->home = c.home;
  r->slot = c.slot;
  r->gen = c.gen;
  r->try_only = timeout.count() == 0;
  r->has_deadline = timeout.count() > 0;
  r->deadline = Clock::now() + timeout;
  r->done = std::move(done);
  Request& ref = *r;
  requests_.emplace(r->id, std::move(r));
  start(st, ref);
  finish(lk, st);
  timer_cv_.notify_one();
}

Status LockEngine::release(OwnerId owner, HoldId hold) {
  std::unique_lock lk(mu_);
  auto it = requests_.find(hold);
  if (it == requests_.end() || it->second->owner != owner) return Status::NotHeld;
  Step st;
  if (it->second->state == Request::State::Revoked) {
    // The client read the revocation (the library acknowledges it with this UNLOCK): it no
    // longer uses the hold, the home may hand the lock on. Still NotHeld to the caller.
    end_revoked(st, *it->second, true);
    finish(lk, st);
    return Status::NotHeld;
  }
  if (it->second->state != Request::State::Held) return Status::NotHeld;
  ++counters_.releases;
  release_request(st, *it->second);
  finish(lk, st);
  return Status::Ok;
}

void LockEngine::owner_gone(OwnerId owner) {
  std::unique_lock lk(mu_);
  Step st;
  std::vector<uint64_t> ids;
  for (auto& [id, r] : requests_)
    if (r->owner == owner) ids.push_back(id);
  for (uint64_t id : ids) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    Request& r = *it->second;
    r.done = nullptr;
    switch (r.state) {
      case Request::State::Held: release_request(st, r); break;
      case Request::State::Waiting: r.state = Request::State::Ghost; break;
      case Request::State::Starting: drop_request(r); break;
      case Request::State::Ghost: break;
      case Request::State::Revoked: end_revoked(st, r, true); break;
    }
  }
  finish(lk, st);
}

// ---------------------------------------------------------------------------------------------
// N-CoSED / DQNL / SRSL: starting a request

void LockEngine::start(Step& st, Request& r) {
  r.state = Request::State::Waiting;
  if (opts_.algorithm == cluster::LockAlgorithm::SRSL) {
    Msg m = srsl_msg(MsgType::SrslReq, r.home, r.slot, r.gen, r.id);
    SrslToHomeView req{m};
    req.set_mode(r.exclusive ? Mode::Exclusive : Mode::Shared);
    req.set_try_only(r.try_only);
    deliver(st, r.home, m);
    return;
  }
  try {
    if (r.exclusive) start_exclusive(st, r);
    else start_shared(st, r);
  } catch (const OpNotSent&) {
    // Refused before anything was posted (this lockd's lease on the home lapsed): nothing
    // executed at the home, there is nothing to recover. The request steps back and tries
    // again shortly: the lease is renewed by the next answered heartbeat, or the home is
    // declared down and the request fails with HomeDown (member_down). Asking the home to
    // recover here, as below, made a storm: every RESUME retried at once, failed the same way
    // and asked again — ~170 recoveries of one lock in a second (the nemesis, issue 33).
    if (r.exclusive && r.ticket) erase_record(r.home, r.slot, r.ticket);
    r.ticket = 0;
    ++counters_.not_sent_ops;
    r.state = Request::State::Starting;
    r.retry_at = Clock::now() + 10 * opts_.retry_interval;
    timer_cv_.notify_one();
  } catch (const std::exception& e) {
    // No answer from the home within the operation's deadline. The operation may have executed
    // there all the same (its answer lost or late, on a loaded machine): a CAS that made this
    // ticket the tail, an FAA that counted this request into a group — and then the queue waits
    // for a SUCCESSOR or a SHARED_REL nobody will send, the lock wedged for good
    // (dlm_stress_dqnl_tcp in CI). Retrying the operation blindly could not tell. So the home is
    // asked to recover its locks, as after a one-way lapse (SRSL_PURGE): the recovery fences the
    // word and rebuilds each queue from what the members hold — an orphan ticket or count is
    // gone, a hold is never given twice. A slow home is not a dead home (issue 33): the request
    // is kept, steps back as a request that was fenced, and starts again when the recovery
    // resumes the members (RESUME), or after uncertain_release_delay (a lease in lockd) if no
    // RESUME came. It fails with HomeDown only when the heartbeats declare the home down
    // (member_down), and with Timeout at its own deadline, as any request.
    if (r.exclusive && r.ticket) erase_record(r.home, r.slot, r.ticket);
    r.ticket = 0;
    if (opts_.algorithm != cluster::LockAlgorithm::SRSL) purge_at(r.home);
    if (counters_.unanswered_ops++ % 100 == 0)
      log_line(opts_.log, fabric::LogLevel::Warn,
               "DLM0307 lock \"" + r.name + "\": the home (member " + std::to_string(r.home) +
                   ") did not answer an atomic operation (" + e.what() +
                   "); it is asked to recover its locks and the request starts again after "
                   "that (it fails with HomeDown only if the home is declared down)");
    r.state = Request::State::Starting;
    r.retry_at = Clock::now() + opts_.uncertain_release_delay;
    timer_cv_.notify_one();
  }
}

void LockEngine::granted(Step& st, Request& r, Token token) {
  r.token = token;
  ++counters_.grants;
  if (r.state == Request::State::Ghost || r.owner == 0) {
    r.state = Request::State::Held;
    release_request(st, r);
    return;
  }
  r.state = Request::State::Held;
  uint64_t until = 0;
  if (r.home != opts_.self_rank && opts_.lease_until) {
    until = opts_.lease_until(r.home);
    const auto now = Clock::now().time_since_epoch();
    if (until <= uint64_t(std::chrono::nanoseconds(now).count())) {
      // This node's lease on the home lapsed (it was frozen or cut off): the home may have given
      // the lock away since this grant was computed. Not handed out; released like a ghost.
      ++counters_.revoked;
      fail(st, r, Status::LeaseLost,
           "granted, but this lockd's lease on the home of lock '" + r.name + "' (member " +
               std::to_string(r.home) + ") had lapsed (was this lockd frozen or cut off?): retry");
      release_request(st, r);
      return;
    }
  }
  Grant g;
  g.status = Status::Ok;
  g.hold = r.id;
  g.token = token;
  g.valid_until_ns = until;
  if (r.done) st.completions.emplace_back(std::move(r.done), std::move(g));
  r.done = nullptr;
}

// ---------------------------------------------------------------------------------------------
// Releases

void LockEngine::release_request(Step& st, Request& r) {
  if (opts_.algorithm == cluster::LockAlgorithm::SRSL) {
    deliver(st, r.home, srsl_msg(MsgType::SrslRel, r.home, r.slot, r.gen, r.id));
  } else if (r.recovered) {
    Msg m = msg(MsgType::RecoveredRel, r);
    deliver(st, r.home, m);
  } else if (r.exclusive) {
    Record* rec = record(r.home, r.slot, r.ticket);
    if (rec) {
      rec->request = 0;
      release_record(st, *rec);
    }
  } else {
    Msg m = msg(MsgType::SharedRel, r);
    SharedRelView{m}.set_group_owner(r.group_owner);
    deliver(st, rank_of(r.group_owner), m);
  }
  requests_.erase(r.id);
}

// ---------------------------------------------------------------------------------------------
// Messages

void LockEngine::on_message(std::span<const uint8_t> body) {
  // One body carries one or more 56-byte messages (a step's messages to one member).
  std::vector<Msg> msgs;
  bool ok = !body.empty() && body.size() % kMsgBytes == 0;
  for (size_t off = 0; ok && off < body.size(); off += kMsgBytes) {
    auto m = Msg::decode(body.subspan(off, kMsgBytes));
    if (!m) ok = false;
    else msgs.push_back(*m);
  }
  std::unique_lock lk(mu_);
  if (!ok) {
    ++counters_.bad_messages;
    lk.unlock();
    log_line(opts_.log, fabric::LogLevel::Warn,
             "DLM0302 dropped a malformed dlm.msg of " + std::to_string(body.size()) +
                 " bytes (a peer of another version, or not a lockd)");
    return;
  }
  Step st;
  for (const Msg& m : msgs) handle(st, m);
  finish(lk, st);
}

// Runs with mu_ held (on_message, finish). Checks what every message has (the home's rank, at
// the home the slot), then the handler of its type checks the generation.
void LockEngine::handle(Step& st, const Msg& m) {
  ++counters_.messages_in;
  if (m.home == 0 || m.home > opts_.members) return count_stale();
  // Generation check: the lock's current generation as this node knows it.
  uint64_t gen = m.gen;  // members check through the record/request below
  if (m.home == opts_.self_rank &&
      (m.type == MsgType::SrslReq || m.type == MsgType::SrslRel ||
       m.type == MsgType::SrslCancel || m.type == MsgType::SrslPurge)) {
    take_floor(st, m);  // also from a message that is stale otherwise
    if (m.type == MsgType::SrslPurge) return;
  }
  if (m.home == opts_.self_rank) {
    if (m.slot >= slots_.size()) return count_stale();
    gen = home_gen(m.slot);
  }
  switch (m.type) {
    case MsgType::SharedReq:
      return handle_shared_req(st, m);
    case MsgType::SharedGrant:
      return handle_shared_grant(st, m);
    case MsgType::SharedRel:
      return handle_shared_rel(st, m);
    case MsgType::Successor:
      return handle_successor(st, m);
    case MsgType::ExclGrant:
      return handle_excl_grant(st, m);
    case MsgType::RecoveredRel:
      return handle_recovered_rel(st, m, gen);
    case MsgType::Resume:
      return handle_resume(m);
    case MsgType::SrslReq:
    case MsgType::SrslRel:
    case MsgType::SrslCancel:
      if (m.home != opts_.self_rank || gen != m.gen) return count_stale();
      return srsl_home(st, m);
    case MsgType::SrslPurge:
      return count_stale();  // not to this node as a home (handled above when it is)
    case MsgType::SrslGrant:
      return handle_srsl_grant(st, m);
  }
}

// ---------------------------------------------------------------------------------------------
// Deadlines and retries

void LockEngine::timer_loop() {
  std::unique_lock lk(mu_);
  while (!stopping_) {
    auto now = Clock::now();
    Step st;
    bool retrying = false;
    std::vector<uint64_t> ids;
    for (auto& [id, r] : requests_) ids.push_back(id);
    for (uint64_t id : ids) {
      auto it = requests_.find(id);
      if (it == requests_.end()) continue;
      Request& r = *it->second;
      bool expired = r.has_deadline && now >= r.deadline && r.owner != 0;
      if (r.state == Request::State::Revoked) {
        if (now >= r.revoked_until) end_revoked(st, r, false);
        continue;
      }
      if (r.state == Request::State::Waiting && expired) {
        ++counters_.timeouts;
        fail(st, r, Status::Timeout,
             "lock \"" + r.name + "\" was not granted within the timeout");
        r.state = Request::State::Ghost;
        if (opts_.algorithm == cluster::LockAlgorithm::SRSL)
          deliver(st, r.home, srsl_msg(MsgType::SrslCancel, r.home, r.slot, r.gen, r.id));
      } else if (r.state == Request::State::Starting) {
        if (expired) {
          ++counters_.timeouts;
          fail(st, r, Status::Timeout, "lock \"" + r.name + "\" was not granted within the timeout");
          drop_request(r);
        } else if (now >= r.retry_at) {
          start(st, r);
        } else {
          retrying = true;
        }
        if (requests_.count(id) && requests_[id]->state == Request::State::Starting)
          retrying = true;
      }
    }
    for (uint32_t rank = 1; rank < srsl_purge_due_.size(); ++rank) {
      if (!srsl_purge_due_[rank]) continue;
      srsl_purge_due_[rank] = false;
      Msg m;
      m.type = MsgType::SrslPurge;
      m.home = rank;
      SrslToHomeView purge{m};
      purge.set_rank(opts_.self_rank);
      purge.set_floor(srsl_floor_[rank]);
      deliver(st, rank, m);
    }
    std::vector<Record*> late;
    for (auto& [k, rec] : records_)
      if (rec->uncertain_until != Clock::time_point{}) {
        if (now >= rec->uncertain_until) late.push_back(rec.get());
        else retrying = true;
      }
    for (Record* rec : late) {
      rec->uncertain_until = {};
      try_handoff(st, *rec);  // may erase it
    }
    // finish() unlocks; take the lock again for the wait.
    finish(lk, st);
    lk.lock();
    if (stopping_) break;
    timer_cv_.wait_for(lk, retrying ? opts_.retry_interval : std::chrono::milliseconds(5));
  }
}

// ---------------------------------------------------------------------------------------------

std::string LockEngine::status_text() {
  std::lock_guard lk(mu_);
  std::ostringstream o;
  o << "algorithm " << cluster::to_string(opts_.algorithm) << ", member " << opts_.self_rank
    << " of " << opts_.members << ", epoch " << opts_.epoch << "\n";
  o << "members:";
  for (uint32_t r = 1; r <= opts_.members; ++r) o << " " << r << (alive_[r] ? "(up)" : "(DOWN)");
  o << "\n";
  o << "home locks: " << slots_.size() << " of " << opts_.lock_slots << " slots\n";
  size_t held = 0, revoked = 0, waiting = 0;
  for (auto& [id, r] : requests_) {
    if (r->state == Request::State::Held) ++held;
    else if (r->state == Request::State::Revoked) ++revoked;
    else ++waiting;
  }
  // The first two fields are read by tierce-dlm-bench: keep their place.
  o << "local holds: " << held << ", waiting/withdrawn: " << waiting
    << ", revoked (awaiting the client): " << revoked
    << ", queue records: " << records_.size() << "\n";
  const auto& c = counters_;
  o << "counters: acquires " << c.acquires << ", grants " << c.grants << " (immediate "
    << c.immediate_grants << "), releases " << c.releases << ", timeouts " << c.timeouts
    << ", would_block " << c.would_block << ", home_down " << c.home_down << ", unanswered_ops "
    << c.unanswered_ops << ", not_sent_ops " << c.not_sent_ops << ", recoveries_asked " << c.recoveries_asked << ", revoked "
    << c.revoked << " (acknowledged " << c.revocations_acknowledged << ", not within "
    << opts_.revoke_wait.count() << " ms " << c.revocations_unacknowledged << "), cas_retries "
    << c.cas_retries << ", messages in/out " << c.messages_in
    << "/" << c.messages_out << ", stale " << c.stale_messages << ", malformed "
    << c.bad_messages << ", recoveries " << c.recoveries << ", renormalisations "
    << c.renormalisations << "\n";
  // What a wedged lock needs to be understood from outside (a stress run dumps this when a
  // worker hangs): every home lock that is not idle, every queue record, every local request
  // (the first kDetail of each: a busy lockd has many).
  constexpr size_t kDetail = 200;
  size_t shown = 0, more = 0;
  auto room = [&] { return ++shown <= kDetail || (++more, false); };
  auto ticket = [](Ticket t) {
    if (t == kFence) return std::string("FENCE");
    return std::to_string(rank_of(t)) + ":" + std::to_string(t & ((1u << kSeqBits) - 1));
  };
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    const Word w = Word::decode(word_at(table_, uint64_t(s) * kSlotBytes).load());
    if ((w.released && w.count == 0) || !room()) continue;
    o << "lock \"" << slots_[s]->name << "\" slot " << s << " gen " << slots_[s]->gen
      << ": tail " << ticket(w.tail) << (w.released ? " released" : " held") << " count "
      << w.count << ", early recovered releases " << slots_[s]->early_recovered_rels << "\n";
  }
  shown = 0;
  for (const auto& [key, rec] : records_)
    if (room())
      o << "record " << std::get<0>(key) << "/" << std::get<1>(key) << " ticket "
      << ticket(rec->ticket) << " gen " << rec->gen << " request " << rec->request
      << (rec->granted ? " granted" : "") << (rec->released ? " released" : "")
      << (rec->publish_pending ? " publish-pending" : "") << " waiting " << rec->waiting.size()
      << " rels " << rec->rels << (rec->has_succ ? " succ " + ticket(rec->succ) : "")
      << " holders-outstanding " << rec->holders_outstanding << "\n";
  shown = 0;
  for (const auto& [id, r] : requests_) {
    static const char* const kState[] = {"starting", "waiting", "held", "ghost", "revoked"};
    if (!room()) continue;
    o << "request " << id << " \"" << r->name << "\" home " << r->home << "/" << r->slot
      << " gen " << r->gen << " " << kState[int(r->state)] << (r->exclusive ? " X" : " S")
      << " ticket " << ticket(r->ticket) << (r->recovered ? " recovered" : "") << "\n";
  }
  if (more) o << "(" << more << " more lock, record and request lines not shown)\n";
  return o.str();
}

}  // namespace tierce::dlm
