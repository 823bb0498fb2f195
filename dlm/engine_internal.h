// dlm/engine_internal.h — what the files of LockEngine share and nobody else sees: the engine's
// records (a local request, a queue entry, a home lock, one locked step) and small helpers.
// Included by dlm/engine*.cc only.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "dlm/engine.h"

namespace tierce::dlm {

namespace engine_internal {

using Clock = std::chrono::steady_clock;

// Request ids of an incarnation start at epoch << kRequestIdShift (the constructor).
inline constexpr unsigned kRequestIdShift = 47;
inline uint64_t key_of(uint32_t home, uint32_t slot) { return (uint64_t(home) << 32) | slot; }
inline std::atomic_ref<uint64_t> word_at(std::span<uint8_t> table, uint64_t off) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(table.data() + off));
}
// A grant (or SRSL answer) for `request` on lock (home, slot, gen).
inline Msg grant_msg(MsgType t, uint32_t home, uint32_t slot, uint64_t gen, uint64_t request,
                     Token token, Status status = Status::Ok) {
  Msg g;
  g.type = t;
  g.home = home;
  g.slot = slot;
  g.gen = gen;
  GrantView grant{g};
  grant.set_status(status);
  grant.set_request(request);
  grant.set_token(token);
  return g;
}
inline void log_line(const fabric::LogSink& log, fabric::LogLevel lv, const std::string& s) {
  if (log) log(lv, s);
}

}  // namespace engine_internal

using engine_internal::Clock;
using engine_internal::grant_msg;
using engine_internal::key_of;
using engine_internal::kRequestIdShift;
using engine_internal::log_line;
using engine_internal::word_at;

// A local request: from acquire() until its release (HoldId == id).
struct LockEngine::Request {
  enum class State {
    Starting,  // not in the queue (yet, or again after a fence/recovery): the timer (re)starts it
    Waiting,   // in the queue, waiting for a grant
    Held,      // granted to the client
    Ghost,     // withdrawn (timeout, client gone, internal) while in the queue: released on grant
    // Held, and revoked by this node (member_down: its lease on the home lapsed, or the home is
    // down), the client told LeaseLost — but the home may not know. Until the client
    // acknowledges (UNLOCK of the hold), leaves, or revoke_wait passes, a census reports it held
    // and nothing tells the home it is free: the home hands the lock on only once the client
    // stopped using it (issue 33: a new holder granted before the old one read its revocation).
    Revoked,
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
  Clock::time_point revoked_until{};  // Revoked: released to the home at the latest then
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

}  // namespace tierce::dlm
