// dlm/engine.h — one lockd's share of the lock manager: the protocol state machine of N-CoSED
// (and DQNL, which is N-CoSED with every request exclusive) and of SRSL, the home's table and
// name directory, and the local requests and holds. The protocol is docs/dlm.md.
//
// Threads: every entry point takes the engine's mutex. Remote atomics run under it (the target's
// fabric responder or NIC performs them: no lockd mutex is needed on the other side, so no
// cycle); messages and client completions are collected under it and delivered after it is
// released, so a slow peer never holds the engine. Messages to this node itself are processed in
// the same step (an inbox drained before the mutex is released).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cluster/topology.h"
#include "dlm/messages.h"
#include "dlm/service.h"
#include "dlm/word.h"
#include "fabric/fabric.h"

namespace tierce::dlm {

// Thrown by Network::table_ops when it refused before posting anything (lockd: its lease on the
// home lapsed): none of the operations executed, so nothing is uncertain at the home.
struct OpNotSent : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// How the engine reaches the other lockds (lockd implements it over the fabric; tests may too).
class Network {
 public:
  virtual ~Network() = default;
  // One-sided operations on `home`'s lock table (`home` may be this node). Offsets are table
  // offsets (slot * kSlotBytes + 0 for W, + 8 for K). Throws on failure (the message says why):
  // OpNotSent when nothing was posted, anything else when the operations may have executed.
  virtual void table_ops(uint32_t home, std::span<fabric::OneSidedOp> ops) = 0;
  // One-way message to a member's dlm.msg service. Best effort: a failure is logged; the
  // recovery after the peer is declared dead repairs what was lost.
  virtual void send(uint32_t rank, const std::vector<uint8_t>& msg) = 0;
  // A call to a member's service (dlm.resolve, dlm.recover). Throws on failure or timeout.
  virtual std::vector<uint8_t> call(uint32_t rank, std::string_view service,
                                    std::span<const uint8_t> body) = 0;
};

struct EngineOptions {
  cluster::LockAlgorithm algorithm = cluster::LockAlgorithm::NCoSED;
  uint32_t self_rank = 0;
  uint32_t members = 0;   // ranks 1..members
  uint32_t lock_slots = 65536;
  // This incarnation's persisted epoch, 1..2^16-1: tokens start at epoch << 48, request ids at
  // epoch << 47, tickets are numbered in block epoch % 4 (dlm/word.h): none of them repeats one
  // of a previous incarnation that messages in flight or other members' records may still name.
  uint64_t epoch = 1;
  uint64_t incarnation = 0;
  // Which member is the home of a lock name (rendezvous over the topology).
  std::function<uint32_t(const std::string&)> home_of;
  std::chrono::milliseconds retry_interval{1};  // back-off while a lock is fenced
  // After a release batch got no answer (it may still execute), the hand-off waits this long
  // (lockd: lease_ms — a home that sits on a request longer is declared dead anyway).
  std::chrono::milliseconds uncertain_release_delay{1000};
  // A hold this node revokes on its own (member_down: its lease on the home lapsed, or the home
  // stopped answering) is reported to the home as held — by a census, and by nothing that says
  // it is free (SRSL: no release, the floor held back) — until its client acknowledges the
  // revocation (an UNLOCK of the hold), leaves, or this long has passed (lockd: lease_ms; a
  // client frozen longer is protected by its token only). 0: released at the revocation.
  std::chrono::milliseconds revoke_wait{1000};
  size_t max_requests = 1u << 20;               // local requests + holds
  // Until when this node holds a lease on `home`'s locks, in nanoseconds of the steady clock
  // (CLOCK_MONOTONIC; lockd: the last answered heartbeat's sending time + lease_ms - lease_ms/4).
  // Asked at every grant on a lock homed elsewhere: a grant computed from a completion or message
  // that waited while this lockd was frozen or cut off (the deadline has passed) is not handed to
  // the client (LeaseLost), as that home may have given the lock away meanwhile; a grant that is
  // handed out carries the deadline (Grant::valid_until_ns), which the client checks when it
  // reads the grant. Unset: always valid, no deadline (tests of the engine alone).
  std::function<uint64_t(uint32_t home)> lease_until;
  // N-CoSED / DQNL: a member says it gave this home up (SRSL_PURGE: it dropped its queue entries
  // on this home's locks, member_down) while this home did not declare it dead: the home must run
  // recover_all() (lockd: wakes its recovery thread). Called without the engine's mutex, from the
  // thread that handled the message.
  std::function<void()> request_recovery;
  fabric::LogSink log;
};

struct EngineCounters {
  uint64_t acquires = 0, grants = 0, immediate_grants = 0, releases = 0, timeouts = 0,
           would_block = 0, home_down = 0, revoked = 0, cas_retries = 0, messages_in = 0,
           messages_out = 0, stale_messages = 0, bad_messages = 0, recoveries = 0,
           renormalisations = 0;
  // One-sided operations at a home that missed their deadline (the request waits for the home's
  // recovery and starts again: LockEngine::start).
  uint64_t unanswered_ops = 0;
  // One-sided operations refused before they were posted (OpNotSent: the lease on the home
  // lapsed); the request tries again without a recovery.
  uint64_t not_sent_ops = 0;
  // ask_recovery() calls: messages about a home's locks queued for a member taken for down.
  uint64_t recoveries_asked = 0;
  // Revoked holds that ended (released to the home): acknowledged by their client (or the
  // client left), and those whose client did not acknowledge within revoke_wait.
  uint64_t revocations_acknowledged = 0, revocations_unacknowledged = 0;
};

// What status_text() reports besides the counters, as numbers (lockd's metrics).
struct EngineGauges {
  size_t home_locks = 0;  // slots of this home's table in use
  size_t lock_slots = 0;  // of lock_slots
  size_t held = 0;        // this node's clients' holds
  size_t revoked = 0;     // holds revoked, their client's acknowledgement awaited (Revoked)
  size_t waiting = 0;     // this node's requests not granted yet (or withdrawn, not finished)
  size_t records = 0;     // queue records kept for this node's requests
  uint32_t members = 0, members_alive = 0;  // this node included
};

class LockEngine final : public LocalLockService {
 public:
  LockEngine(EngineOptions opts, std::span<uint8_t> table, Network& net);
  ~LockEngine() override;
  LockEngine(const LockEngine&) = delete;
  LockEngine& operator=(const LockEngine&) = delete;

  // LocalLockService
  void acquire(OwnerId owner, const std::string& name, Mode mode, std::chrono::milliseconds timeout,
               std::function<void(const Grant&)> done) override;
  Status release(OwnerId owner, HoldId hold) override;
  void owner_gone(OwnerId owner) override;
  void set_revoked_callback(RevokedFn fn) override;
  std::string status_text() override;

  // From the fabric services.
  void on_message(std::span<const uint8_t> body);
  std::vector<uint8_t> on_resolve(std::span<const uint8_t> body);
  std::vector<uint8_t> on_recover(std::span<const uint8_t> body);

  // From the heartbeat logic. A member that went down, or came back as a new incarnation
  // (`restarted`):
  // - its locks (this node's requests on locks homed there) fail: holds revoked (LeaseLost),
  //   waiters HomeDown, cached resolutions dropped. A revoked hold stays reported to the home
  //   until its client acknowledged (EngineOptions::revoke_wait) — unless the home restarted:
  //   its new incarnation knows none of the old one's holds;
  // - as a home, this node recovers every lock of its table that may involve the member
  //   (run by recover_all() on the caller's thread: it makes calls to the members).
  void member_down(uint32_t rank, const std::string& why, bool restarted = false);
  // The member is dead (not heard from for a whole lease), or restarted (a new incarnation): its
  // holds on this home's locks may be given away, and its queue records are gone (or may be).
  // SRSL forgets its holders and waiters here (and those a live member dropped when it gave
  // this home up, when its floor arrives: member_up); N-CoSED's recover_all() does it for the members
  // its `alive` callback calls dead, and the next recover_all() does not take a lock whose tail
  // is a ticket of this member for idle (a restarted member is alive, but the record of that
  // ticket went with its old incarnation). member_down() alone (the member's answers are late,
  // lease_ms - lease_ms/4) never gives its holds away: it revokes its own on that member's.
  void member_dead(uint32_t rank);
  // The member answers again. SRSL: if this node gave it up since it last started (member_down
  // dropped this node's requests on its locks), tells it so (SRSL_PURGE): the home may not have
  // declared this node dead (a silence between lease - guard and lease), or a request this node
  // dropped may have reached it after it did (held by the network), and it must not keep them.
  void member_up(uint32_t rank);
  // N-CoSED / DQNL: a message about a lock of `home` (a third node) was queued for a member
  // this node took for down (lockd keeps it until the member answers — perhaps never, while the
  // link between the two stays cut though both reach the home). A hand-off, grant or SUCCESSOR
  // in it is what the lock's queue waits for: the home is asked to recover its locks
  // (SRSL_PURGE), which rebuilds the queue from what the members hold. deliver() does the same
  // for messages to a member already down. This node's own locks: lockd recovers them when a
  // member goes down.
  void ask_recovery(uint32_t home);
  bool member_alive(uint32_t rank) const;
  // Recovers every allocated slot of this home (docs/dlm.md "Recovery") that is not idle. Calls
  // the live members; `alive` says whether to keep waiting for a member's answer. Idle: released,
  // count 0, the tail's member alive and not dead or restarted (member_dead) since the previous
  // recover_all() started.
  void recover_all(const std::function<bool(uint32_t)>& alive);
  // The lockd is stopping: new acquires fail (ShuttingDown), the timer stops, and a
  // recover_all() that waits for a member's answer gives up (its slot stays fenced: this home is
  // going away). Call before joining the thread that runs recover_all(): the liveness it waits
  // on (lockd's heartbeat thread) may already be stopped, so `alive` would never turn false.
  void stop();

  EngineCounters counters() const;
  EngineGauges gauges() const;  // takes the engine's mutex once, like status_text()
  const EngineOptions& options() const { return opts_; }

  struct Request;
  struct Record;
  struct Slot;

 private:
  // The private functions run with mu_ held, unless their comment says how they lock.
  // Definitions by concern: engine.cc (steps, requests, dispatch, timer), engine_ncosed.cc,
  // engine_srsl.cc, engine_recovery.cc, engine_resolve.cc.
  struct Step;  // what one locked step produced: messages, completions, revocations
  // lk holds mu_ on entry and not on return: delivers the step's messages and completions.
  void finish(std::unique_lock<std::mutex>& lk, Step& st);
  bool stopping() const;  // takes mu_
  void timer_loop();      // takes mu_ (the timer thread)

  // N-CoSED / DQNL
  void start(Step& st, Request& r);
  void start_exclusive(Step& st, Request& r);
  void start_shared(Step& st, Request& r);
  void granted(Step& st, Request& r, Token token);
  void release_request(Step& st, Request& r);
  void release_record(Step& st, Record& rec);
  void try_handoff(Step& st, Record& rec);
  void publish_release(Step& st, Record& rec);
  void handle(Step& st, const Msg& m);  // checks the header, then one of the handlers below
  void handle_shared_req(Step& st, const Msg& m);
  void handle_shared_grant(Step& st, const Msg& m);
  void handle_shared_rel(Step& st, const Msg& m);
  void handle_successor(Step& st, const Msg& m);
  void handle_excl_grant(Step& st, const Msg& m);
  void count_stale() { ++counters_.stale_messages; }
  void deliver(Step& st, uint32_t rank, const Msg& m);
  Ticket new_ticket();
  Record* record(uint32_t home, uint32_t slot, Ticket t);
  void erase_record(uint32_t home, uint32_t slot, Ticket t);
  uint64_t atomic_op(uint32_t home, fabric::OpKind kind, uint64_t off, uint64_t a0, uint64_t a1,
                     uint64_t* k_out);

  // SRSL
  void srsl_home(Step& st, const Msg& m);
  void srsl_grant_waiters(Step& st, uint32_t slot);
  // Queues an SRSL_PURGE to `home` with a floor above every one sent before (the home acts only
  // on a higher floor than the last it saw). Under mu_.
  void purge_at(uint32_t home);
  void srsl_purge(Step& st, uint32_t rank, uint64_t floor);
  Msg srsl_msg(MsgType t, uint32_t home, uint32_t slot, uint64_t gen, uint64_t request) const;
  void handle_srsl_grant(Step& st, const Msg& m);

  // Failures and recovery
  void take_floor(Step& st, const Msg& m);  // an SRSL message to this home: the sender's floor
  void handle_recovered_rel(Step& st, const Msg& m, uint64_t gen);
  void handle_resume(const Msg& m);
  // recover_all()'s steps for one slot. fence_slot and rebuild_queue take mu_; ask_members runs
  // without it (it calls the members, and on_recover takes it).
  RecoverRequest fence_slot(uint32_t s);
  // `who`: the holds kept, as "member:token ..." for DLM0304 (which member reported what).
  std::optional<std::vector<ReportedHold>> ask_members(const RecoverRequest& q,
                                                       const std::function<bool(uint32_t)>& alive,
                                                       std::string* who);
  void rebuild_queue(const RecoverRequest& q, const std::vector<ReportedHold>& holds,
                     const std::string& who);

  void fail(Step& st, Request& r, Status s, const std::string& why);
  // A Revoked hold ends (acknowledged, its client gone, or revoke_wait passed): the home is
  // told (N-CoSED / DQNL: RecoveredRel if a census adopted it, else the recovery that
  // member_up asks for; SRSL: SRSL_REL, and the floor held back for it).
  void end_revoked(Step& st, Request& r, bool acknowledged);
  void drop_request(Request& r);
  uint64_t home_gen(uint32_t slot) const;
  Msg msg(MsgType t, const Request& r) const;

  EngineOptions opts_;
  std::span<uint8_t> table_;  // this home's W/K words (exported as dlm.table)
  Network& net_;
  RevokedFn revoked_;

  mutable std::mutex mu_;
  std::condition_variable timer_cv_;
  bool stopping_ = false;
  uint32_t next_seq_ = 1;      // the next ticket number n in this incarnation's block
  bool seq_wrapped_ = false;
  uint64_t next_id_ = 1;       // set from the epoch by the constructor
  // Ranks that died or restarted (member_dead) since recover_all() last started: a tail ticket
  // of theirs does not make a lock idle.
  std::vector<bool> records_lost_;
  // SRSL, as a member, by home rank: next_id_ when this node last gave that home up
  // (member_down): every request of this node on its locks with a lower id is gone. Sent to the
  // home in every SRSL message (y) and in SRSL_PURGE when the home is up again (member_up).
  std::vector<uint64_t> srsl_floor_;
  std::vector<bool> srsl_purge_due_;  // SRSL_PURGE to send (member_up; the timer thread sends)
  // SRSL, by home rank: the floor of a give-up that Revoked holds on that home's locks held
  // back (it would drop them at the home); taken into srsl_floor_ when the last one ends.
  std::vector<uint64_t> srsl_held_floor_;
  // N-CoSED / DQNL, as a member, by home rank: member_down dropped requests or queue records of
  // this node on that home's locks. The home's queues may still name them (a SUCCESSOR or
  // EXCL_GRANT to a record that is gone is dropped, a SHARED_REL never comes): unless the home
  // recovers those locks they wedge. A home that declared this node dead recovers them anyway;
  // one that did not (this node's lease lapsed one way: its heartbeats to the home were late,
  // the home's to it were not) is told by SRSL_PURGE at member_up.
  std::vector<bool> gave_up_;
  // SRSL, as a home, by member rank: the highest floor the member sent. Its holders and waiters
  // below it are dropped, and a request below it that arrives late (the network held it) is not
  // queued: the member dropped it, and would never release it.
  std::vector<uint64_t> srsl_purged_;
  // (home << 32 | slot) -> the highest generation a recovery told this node (on_recover), also
  // for locks it has neither cached nor requested: acquire() starts no request below it, though
  // the generation it read (cache or dlm.resolve) may predate that recovery.
  std::unordered_map<uint64_t, uint64_t> recovered_gen_;
  std::unordered_map<uint64_t, std::unique_ptr<Request>> requests_;  // by request id
  std::map<std::tuple<uint32_t, uint32_t, Ticket>, std::unique_ptr<Record>> records_;
  // Resolution cache: name -> (home, slot, gen).
  struct Cached {
    uint32_t home = 0;
    uint32_t slot = 0;
    uint64_t gen = 0;
  };
  std::unordered_map<std::string, Cached> resolved_;
  std::unordered_map<uint64_t, uint64_t> last_word_;  // (home << 32 | slot) -> last W seen
  // Home side.
  std::vector<std::unique_ptr<Slot>> slots_;
  std::unordered_map<std::string, uint32_t> directory_;
  std::vector<bool> alive_;      // by rank
  EngineCounters counters_;
  std::thread timer_;
};

}  // namespace tierce::dlm
