// dlm/engine.cc — the lock manager's protocol state machine (engine.h; protocol in docs/dlm.md).
#include "dlm/engine.h"

#include "base/check.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <sstream>
#include <utility>

#include "fabric/errors.h"

namespace tierce::dlm {

using Clock = std::chrono::steady_clock;

// A local request: from acquire() until its release (HoldId == id).
struct LockEngine::Request {
  enum class State {
    Starting,  // not in the queue (yet, or again after a fence/recovery): the timer (re)starts it
    Waiting,   // in the queue, waiting for a grant
    Held,      // granted to the client
    Ghost,     // withdrawn (timeout, client gone, internal) while in the queue: released on grant
  };
  uint64_t id = 0;
  OwnerId owner = 0;
  std::string name;
  Mode mode = Mode::Exclusive;  // as the client asked
  bool exclusive = true;        // as the protocol runs it (DQNL: always)
  uint32_t home = 0, slot = 0;
  uint64_t gen = 0;
  State state = State::Starting;
  Ticket ticket = 0;        // exclusive: its queue entry
  Ticket group_owner = 0;   // shared: T of G(T)
  uint32_t k = 0;           // shared: member index
  bool recovered = false;   // a hold adopted by a recovery: releases with RecoveredRel
  Token token = 0;
  bool try_only = false;
  bool has_deadline = false;
  Clock::time_point deadline{};
  Clock::time_point retry_at{};
  std::function<void(const Grant&)> done;
};

// An exclusive queue entry owned by this node (or a home ticket: R0, recovery tickets).
struct LockEngine::Record {
  uint32_t home = 0, slot = 0;
  Ticket ticket = 0;
  uint64_t gen = 0;
  uint64_t request = 0;  // the local request; 0 for a home ticket
  bool granted = false, released = false;
  Token token = 0;
  struct Waiter {
    uint32_t rank;
    uint64_t request;
    uint32_t k;
  };
  std::vector<Waiter> waiting;  // SHARED_REQs of G(ticket) before the release
  uint32_t rels = 0;            // SHARED_RELs of G(ticket) received
  uint32_t count_hint = 0;      // highest k + 1 seen in SHARED_REQs: W's count is at least this
  bool has_succ = false, succ_pre = false;
  Ticket succ = 0;
  uint32_t succ_count = 0;
  uint32_t holders_outstanding = 0;  // recovery ticket: reported holders still holding
  // The release batch (WRITE K; CAS) failed without an answer: it may still execute at the home.
  // Handing off before it can no longer land would let its WRITE K overwrite a successor's newer
  // K (found by the spin model, dlm/model/README.md), so the hand-off waits until then.
  Clock::time_point uncertain_until{};
  // Released, but `released` not yet published in W (done after this step's messages are out):
  // no hand-off until it is (the model's early hand-off).
  bool publish_pending = false;
};

// A lock of this home.
struct LockEngine::Slot {
  std::string name;
  uint64_t gen = 0;
  uint32_t early_recovered_rels = 0;  // RecoveredRel that beat the recovery record
  // The token of the last recovery ticket of this slot. K in the table is only written when a
  // release is published, so after a recovery it may still be older than the recovery's token
  // (handed on by messages since): the next recovery starts above this one, not above K.
  Token last_recovery_token = 0;
  // SRSL state.
  struct Holder {
    uint32_t rank;
    uint64_t request;
    bool exclusive;
  };
  std::vector<Holder> holders;
  std::deque<Holder> queue;
  Token next_token = 0;
};

struct LockEngine::Step {
  std::map<uint32_t, std::vector<uint8_t>> out;  // by rank: messages batched into one body
  std::vector<std::tuple<uint32_t, uint32_t, Ticket>> publish;  // releases to publish in W
  std::deque<Msg> inbox;
  std::vector<std::pair<std::function<void(const Grant&)>, Grant>> completions;
  std::vector<std::tuple<OwnerId, HoldId, std::string>> revocations;
  bool recover = false;  // opts_.request_recovery() once the mutex is released
};

namespace {
constexpr unsigned kRequestIdShift = 47;
uint64_t key_of(uint32_t home, uint32_t slot) { return (uint64_t(home) << 32) | slot; }
std::atomic_ref<uint64_t> word_at(std::span<uint8_t> table, uint64_t off) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(table.data() + off));
}
// A grant (or SRSL answer) for `request` on lock (home, slot, gen).
Msg grant_msg(MsgType t, uint32_t home, uint32_t slot, uint64_t gen, uint64_t request, Token token,
              Status status = Status::Ok) {
  Msg g;
  g.type = t;
  g.home = home;
  g.slot = slot;
  g.gen = gen;
  g.a = uint32_t(status);
  g.x = request;
  g.y = token;
  return g;
}
void log_line(const fabric::LogSink& log, fabric::LogLevel lv, const std::string& s) {
  if (log) log(lv, s);
}
}  // namespace

LockEngine::LockEngine(EngineOptions opts, std::span<uint8_t> table, Network& net)
    : opts_(std::move(opts)), table_(table), net_(net), records_lost_(opts_.members + 1, false),
      srsl_floor_(opts_.members + 1, 0), srsl_purge_due_(opts_.members + 1, false),
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

// An SRSL message to the home of (home, slot): from this node (c), with this node's floor (y).
Msg LockEngine::srsl_msg(MsgType t, uint32_t home, uint32_t slot, uint64_t gen,
                         uint64_t request) const {
  Msg m;
  m.type = t;
  m.home = home;
  m.slot = slot;
  m.gen = gen;
  m.c = opts_.self_rank;
  m.x = request;
  m.y = home < srsl_floor_.size() ? srsl_floor_[home] : 0;
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
  if (it == requests_.end() || it->second->owner != owner ||
      it->second->state != Request::State::Held)
    return Status::NotHeld;
  Step st;
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
    m.a = uint32_t(r.exclusive ? Mode::Exclusive : Mode::Shared);
    m.b = r.try_only ? 1 : 0;
    deliver(st, r.home, m);
    return;
  }
  try {
    if (r.exclusive) start_exclusive(st, r);
    else start_shared(st, r);
  } catch (const std::exception& e) {
    // No answer from the home: fail the request; the heartbeat declares the home down if it is.
    // The operation may have executed at the home all the same (its answer lost or late, on a
    // loaded machine): a CAS that made this ticket the tail, an FAA that counted this request
    // into a group — and then the queue waits for a SUCCESSOR or a SHARED_REL nobody will send,
    // the lock wedged for good (dlm_stress_dqnl_tcp in CI: a member's enqueue CAS went
    // unanswered; its predecessor released and waited for its SUCCESSOR for ever, and every
    // later request queued behind it). So the home is asked to recover its locks, as after a
    // one-way lapse (SRSL_PURGE): the recovery rebuilds each queue from what the members hold.
    if (r.exclusive && r.ticket) erase_record(r.home, r.slot, r.ticket);
    r.ticket = 0;
    if (opts_.algorithm != cluster::LockAlgorithm::SRSL && r.home != opts_.self_rank &&
        r.home < srsl_floor_.size()) {
      srsl_floor_[r.home] = std::max(srsl_floor_[r.home], next_id_);
      srsl_purge_due_[r.home] = true;
      timer_cv_.notify_one();
    }
    ++counters_.home_down;
    fail(st, r, Status::HomeDown,
         "lock \"" + r.name + "\": the home (member " + std::to_string(r.home) +
             ") did not answer: " + e.what());
    drop_request(r);
  }
}

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
    m.a = prev.tail;
    m.b = t;
    m.c = prev.count;
    if (prev.released && prev.count == 0) {
      m.x = 1;  // granted at once: the predecessor's record may go
      deliver(st, rank_of(prev.tail), m);
      me->granted = true;
      me->token = k + 1;
      ++counters_.immediate_grants;
      granted(st, r, k + 1);
    } else {
      m.x = 0;
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
    start_exclusive(st, ref);  // may grant and release it at once (then it is gone)
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
  m.a = prev.tail;
  m.b = prev.count;
  m.c = opts_.self_rank;
  m.x = r.id;
  deliver(st, rank_of(prev.tail), m);
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
    m.a = r.group_owner;
    deliver(st, rank_of(r.group_owner), m);
  }
  requests_.erase(r.id);
}

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
    rec.uncertain_until = Clock::now() + opts_.uncertain_release_delay;
    timer_cv_.notify_one();
    log_line(opts_.log, fabric::LogLevel::Warn,
             "DLM0301 cannot publish the release of a lock of member " + std::to_string(home) +
                 " slot " + std::to_string(slot) + ": " + e.what() +
                 " (the lock passes on by messages; the next holder waits " +
                 std::to_string(opts_.uncertain_release_delay.count()) +
                 " ms so that the unanswered write cannot land after its own)");
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
    g.a = rec.succ;
    g.y = rec.token + rec.succ_count + 1;
    deliver(st, rank_of(rec.succ), g);
  }
  erase_record(rec.home, rec.slot, rec.ticket);
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

void LockEngine::handle(Step& st, const Msg& m) {
  ++counters_.messages_in;
  // Generation check: the lock's current generation as this node knows it.
  auto stale = [&] { ++counters_.stale_messages; };
  if (m.home == 0 || m.home > opts_.members) return stale();
  uint64_t gen = m.gen;  // members check through the record/request below
  if (m.home == opts_.self_rank &&
      (m.type == MsgType::SrslReq || m.type == MsgType::SrslRel ||
       m.type == MsgType::SrslCancel || m.type == MsgType::SrslPurge)) {
    // The sender's floor first, also from a message that is stale otherwise: what the sender
    // dropped when it gave this home up goes, whatever the message. Only a floor that is a
    // request id of the sending incarnation (ids start at epoch << 47, incarnations are
    // epoch << 32 | random): garbage must not make the home refuse a member's requests for good.
    const bool floor_valid = m.c != opts_.self_rank && m.sender == m.c && m.from != 0 &&
                             (m.y >> kRequestIdShift) == (m.from >> 32);
    if (opts_.algorithm == cluster::LockAlgorithm::SRSL && floor_valid) srsl_purge(st, m.c, m.y);
    // N-CoSED / DQNL: member c gave this home up and dropped its entries in this home's queues,
    // though this home may never have declared it dead (its lease lapsed one way, under load: a
    // heartbeat thread that did not run for lease - guard). The queues that named its entries
    // wait for messages it will never send (the lock passed on to a record that is gone, a
    // SHARED_REL of a revoked hold): only a recovery rebuilds them (it asks every member what
    // it holds; c holds nothing of them any more), and the locks whose tail is c's released
    // record are not idle (records_lost_). Without this the lock stayed wedged for good and every
    // later waiter hung (test_cluster.cc a_one_way_lapse_does_not_wedge_the_home_queue).
    if (opts_.algorithm != cluster::LockAlgorithm::SRSL && m.type == MsgType::SrslPurge &&
        floor_valid && m.c < srsl_purged_.size() && m.y > srsl_purged_[m.c]) {
      srsl_purged_[m.c] = m.y;
      records_lost_[m.c] = true;
      st.recover = true;
    }
    if (m.type == MsgType::SrslPurge) return;
  }
  if (m.home == opts_.self_rank) {
    if (m.slot >= slots_.size()) return stale();
    gen = home_gen(m.slot);
  }
  switch (m.type) {
    case MsgType::SharedReq: {
      Record* rec = record(m.home, m.slot, m.a);
      if (!rec || rec->gen != m.gen) return stale();
      if (rec->released) {
        deliver(st, m.c, grant_msg(MsgType::SharedGrant, m.home, m.slot, m.gen, m.x,
                                   rec->token + 1 + m.b));
      } else {
        rec->waiting.push_back({m.c, m.x, m.b});
      }
      rec->count_hint = std::max(rec->count_hint, m.b + 1);
      return;
    }
    case MsgType::SharedGrant: {
      auto it = requests_.find(m.x);
      if (it == requests_.end() || it->second->gen != m.gen || it->second->exclusive ||
          (it->second->state != Request::State::Waiting &&
           it->second->state != Request::State::Ghost))
        return stale();
      granted(st, *it->second, m.y);
      return;
    }
    case MsgType::SharedRel: {
      Record* rec = record(m.home, m.slot, m.a);
      if (!rec || rec->gen != m.gen) return stale();
      ++rec->rels;
      try_handoff(st, *rec);
      return;
    }
    case MsgType::Successor: {
      Record* rec = record(m.home, m.slot, m.a);
      if (!rec || rec->gen != m.gen) return stale();
      rec->has_succ = true;
      rec->succ = m.b;
      rec->succ_count = m.c;
      rec->succ_pre = m.x != 0;
      if (rec->succ_pre) {
        erase_record(m.home, m.slot, m.a);
        return;
      }
      try_handoff(st, *rec);
      return;
    }
    case MsgType::ExclGrant: {
      Record* rec = record(m.home, m.slot, m.a);
      if (!rec || rec->gen != m.gen) return stale();
      rec->granted = true;
      rec->token = m.y;
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
      granted(st, *it->second, m.y);
      return;
    }
    case MsgType::RecoveredRel: {
      if (m.home != opts_.self_rank || gen != m.gen) return stale();
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
      return;
    }
    case MsgType::Resume: {
      auto now = Clock::now();
      for (auto& [id, r] : requests_)
        if (r->home == m.home && r->slot == m.slot && r->state == Request::State::Starting)
          r->retry_at = now;
      timer_cv_.notify_one();
      return;
    }
    case MsgType::SrslReq:
    case MsgType::SrslRel:
    case MsgType::SrslCancel:
      if (m.home != opts_.self_rank || gen != m.gen) return stale();
      return srsl_home(st, m);
    case MsgType::SrslPurge:
      return stale();  // not to this node as a home (handled above when it is)
    case MsgType::SrslGrant: {
      auto it = requests_.find(m.x);
      if (it == requests_.end() || it->second->gen != m.gen) {
        // A grant for a request this node dropped (its lease on the home lapsed, or it gave the
        // home up for dead, and the home granted a request sent before): the home counts it as
        // held. Released at once, or the lock stays held by nobody.
        if (Status(m.a) == Status::Ok)
          deliver(st, m.home, srsl_msg(MsgType::SrslRel, m.home, m.slot, m.gen, m.x));
        return stale();
      }
      Request& r = *it->second;
      if (Status(m.a) == Status::Ok) {
        granted(st, r, m.y);
      } else if (r.state == Request::State::Ghost) {
        requests_.erase(it);  // the home confirmed the withdrawal
      } else {
        ++counters_.would_block;
        fail(st, r, Status::WouldBlock, "lock \"" + r.name + "\" is held or has waiters");
        requests_.erase(it);
      }
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// SRSL: the home's central queue

void LockEngine::srsl_home(Step& st, const Msg& m) {
  Slot& s = *slots_[m.slot];
  auto answer = [&](uint32_t rank, uint64_t request, Status status, Token token = 0) {
    deliver(st, rank, grant_msg(MsgType::SrslGrant, m.home, m.slot, s.gen, request, token, status));
  };
  switch (m.type) {
    case MsgType::SrslReq: {
      // A request its sender dropped before it sent its floor (it gave this home up), which the
      // network delivers only now: the sender would never release it, nor hear of its grant.
      if (m.c < srsl_purged_.size() && m.x < srsl_purged_[m.c]) {
        ++counters_.stale_messages;
        return;
      }
      Slot::Holder h{m.c, m.x, Mode(m.a) == Mode::Exclusive};
      bool excl_held = std::any_of(s.holders.begin(), s.holders.end(),
                                   [](const Slot::Holder& x) { return x.exclusive; });
      bool ok = s.queue.empty() && (h.exclusive ? s.holders.empty() : !excl_held);
      if (ok) {
        s.holders.push_back(h);
        answer(h.rank, h.request, Status::Ok, ++s.next_token);
      } else if (m.b) {
        answer(m.c, m.x, Status::WouldBlock);
      } else {
        s.queue.push_back(h);
      }
      return;
    }
    case MsgType::SrslRel:
      std::erase_if(s.holders,
                    [&](const Slot::Holder& x) { return x.rank == m.c && x.request == m.x; });
      return srsl_grant_waiters(st, m.slot);
    case MsgType::SrslCancel: {
      // Waiting, or granted: the grant may be on its way (the requester releases it when it
      // comes: a withdrawn request is never handed to a client), or lost (a send that failed:
      // nobody would release it). Either way the requester does not hold it: released here.
      auto match = [&](const Slot::Holder& x) { return x.rank == m.c && x.request == m.x; };
      const auto erased = std::erase_if(s.queue, match) + std::erase_if(s.holders, match);
      if (erased) {
        answer(m.c, m.x, Status::Timeout);  // confirms the withdrawal
        srsl_grant_waiters(st, m.slot);
      }
      return;
    }
    default:
      return;
  }
}

void LockEngine::srsl_grant_waiters(Step& st, uint32_t slot) {
  Slot& s = *slots_[slot];
  while (!s.queue.empty()) {
    Slot::Holder h = s.queue.front();
    bool excl_held = std::any_of(s.holders.begin(), s.holders.end(),
                                 [](const Slot::Holder& x) { return x.exclusive; });
    if (h.exclusive ? !s.holders.empty() : excl_held) return;
    s.queue.pop_front();
    s.holders.push_back(h);
    deliver(st, h.rank, grant_msg(MsgType::SrslGrant, opts_.self_rank, slot, s.gen, h.request,
                                  ++s.next_token));
  }
}

// Member `rank` dropped every request on this home's locks with an id below `floor` (it gave
// this home up: member_down). Whatever of them the home still keeps goes: a member that was not
// declared dead here (silent for less than a lease), or a late request of one that was.
void LockEngine::srsl_purge(Step& st, uint32_t rank, uint64_t floor) {
  if (rank == 0 || rank >= srsl_purged_.size() || floor <= srsl_purged_[rank]) return;
  srsl_purged_[rank] = floor;
  auto dropped = [&](const Slot::Holder& h) { return h.rank == rank && h.request < floor; };
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    const auto erased = std::erase_if(slots_[s]->holders, dropped) +
                        std::erase_if(slots_[s]->queue, dropped);
    if (erased) srsl_grant_waiters(st, s);
  }
}

// ---------------------------------------------------------------------------------------------
// The home: name directory

std::vector<uint8_t> LockEngine::on_resolve(std::span<const uint8_t> body) {
  std::string name(body.begin(), body.end());
  Resolution res;
  if (name.empty() || name.size() > kMaxNameBytes || name.find('\0') != std::string::npos) {
    res.status = Status::BadName;
    res.message = "lock names are 1.." + std::to_string(kMaxNameBytes) + " bytes without NUL";
    return res.encode();
  }
  std::lock_guard lk(mu_);
  auto it = directory_.find(name);
  if (it == directory_.end()) {
    if (slots_.size() >= opts_.lock_slots) {
      res.status = Status::TooMany;
      res.message = "the home's lock table is full (" + std::to_string(opts_.lock_slots) +
                    " locks): raise [dlm] lock_slots";
      return res.encode();
    }
    uint32_t s = uint32_t(slots_.size());
    auto slot = std::make_unique<Slot>();
    slot->name = name;
    slot->gen = opts_.epoch << 32;
    const Token k0 = opts_.epoch << kEpochShift;
    slot->next_token = k0;
    // The home's virtual ticket R0: granted and released before anyone asked.
    Ticket r0 = new_ticket();
    auto rec = std::make_unique<Record>();
    rec->home = opts_.self_rank;
    rec->slot = s;
    rec->ticket = r0;
    rec->gen = slot->gen;
    rec->granted = rec->released = true;
    rec->token = k0;
    records_[{opts_.self_rank, s, r0}] = std::move(rec);
    const uint64_t off = uint64_t(s) * kSlotBytes;
    word_at(table_, off + 8).store(k0, std::memory_order_release);
    word_at(table_, off).store(Word{true, r0, 0}.encode(), std::memory_order_release);
    slots_.push_back(std::move(slot));
    it = directory_.emplace(name, s).first;
  }
  res.status = Status::Ok;
  res.slot = it->second;
  res.gen = slots_[it->second]->gen;
  return res.encode();
}

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

void LockEngine::member_down(uint32_t rank, const std::string& why) {
  std::unique_lock lk(mu_);
  if (rank >= alive_.size() || rank == opts_.self_rank) return;
  alive_[rank] = false;
  Step st;
  // This node's requests on locks homed at the dead member.
  std::vector<uint64_t> ids;
  for (auto& [id, r] : requests_)
    if (r->home == rank) ids.push_back(id);
  for (uint64_t id : ids) {
    Request& r = *requests_[id];
    if (r.state == Request::State::Held && r.owner != 0) {
      ++counters_.revoked;
      st.revocations.emplace_back(r.owner, r.id,
                                  "the home of lock \"" + r.name + "\" (member " +
                                      std::to_string(rank) + ") is gone: " + why);
    } else if (r.state != Request::State::Ghost && r.owner != 0) {
      ++counters_.home_down;
      fail(st, r, Status::HomeDown,
           "the home of lock \"" + r.name + "\" (member " + std::to_string(rank) + ") is gone: " + why);
    }
    requests_.erase(id);
  }
  // Every request of this node on the member's locks is gone (below next_id_): SRSL tells the
  // home so, or it would keep the holds and waits it has of them (member_up).
  srsl_floor_[rank] = next_id_;
  const auto dropped_records =
      std::erase_if(records_, [&](const auto& kv) { return std::get<0>(kv.first) == rank; });
  if (!ids.empty() || dropped_records) gave_up_[rank] = true;
  std::erase_if(resolved_, [&](const auto& kv) { return kv.second.home == rank; });
  std::erase_if(last_word_, [&](const auto& kv) { return uint32_t(kv.first >> 32) == rank; });
  finish(lk, st);
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
        if (r.recovered && r.gen == q->new_gen) break;  // a repeated call: already adopted
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
    // 1. Fence: nobody may enqueue until the queue is rebuilt.
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
    // 2. Ask every live member (this node too) what it holds; their waiters step back.
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
          return;
        }
        try {
          auto body = q.encode();
          auto reply = rank == opts_.self_rank ? on_recover(body)
                                               : net_.call(rank, "dlm.recover", body);
          auto rep = decode_report(reply);
          if (!rep) throw std::runtime_error("malformed dlm.recover reply");
          holds.insert(holds.end(), rep->begin(), rep->end());
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
      continue;
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
                 "): " + std::to_string(holds.size()) + " holder(s) kept, tokens continue above " +
                 std::to_string(top + kRecoveryTokenJump));
    finish(lk, st);
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
      m.c = opts_.self_rank;
      m.y = srsl_floor_[rank];
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
  size_t held = 0, waiting = 0;
  for (auto& [id, r] : requests_) {
    if (r->state == Request::State::Held) ++held;
    else ++waiting;
  }
  o << "local holds: " << held << ", waiting/withdrawn: " << waiting
    << ", queue records: " << records_.size() << "\n";
  const auto& c = counters_;
  o << "counters: acquires " << c.acquires << ", grants " << c.grants << " (immediate "
    << c.immediate_grants << "), releases " << c.releases << ", timeouts " << c.timeouts
    << ", would_block " << c.would_block << ", home_down " << c.home_down << ", revoked "
    << c.revoked << ", cas_retries " << c.cas_retries << ", messages in/out " << c.messages_in
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
    static const char* const kState[] = {"starting", "waiting", "held", "ghost"};
    if (!room()) continue;
    o << "request " << id << " \"" << r->name << "\" home " << r->home << "/" << r->slot
      << " gen " << r->gen << " " << kState[int(r->state)] << (r->exclusive ? " X" : " S")
      << " ticket " << ticket(r->ticket) << (r->recovered ? " recovered" : "") << "\n";
  }
  if (more) o << "(" << more << " more lock, record and request lines not shown)\n";
  return o.str();
}

}  // namespace tierce::dlm
