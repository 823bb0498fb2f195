// dlm/engine_srsl.cc — SRSL in LockEngine: the home's central FIFO queue of each lock, the
// messages to it (SRSL_REQ/REL/CANCEL, the members' floors) and its answers (SRSL_GRANT). Every
// function here runs with the engine's mutex held.
#include <algorithm>

#include "dlm/engine.h"
#include "dlm/engine_internal.h"

namespace tierce::dlm {

// An SRSL message to the home of (home, slot): from this node (c), with this node's floor (y).
Msg LockEngine::srsl_msg(MsgType t, uint32_t home, uint32_t slot, uint64_t gen,
                         uint64_t request) const {
  Msg m;
  m.type = t;
  m.home = home;
  m.slot = slot;
  m.gen = gen;
  SrslToHomeView to_home{m};
  to_home.set_rank(opts_.self_rank);
  to_home.set_request(request);
  to_home.set_floor(home < srsl_floor_.size() ? srsl_floor_[home] : 0);
  return m;
}

// ---------------------------------------------------------------------------------------------
// SRSL: the home's central queue

void LockEngine::srsl_home(Step& st, const Msg& m) {
  Slot& s = *slots_[m.slot];
  const SrslToHomeView from{m};
  auto answer = [&](uint32_t rank, uint64_t request, Status status, Token token = 0) {
    deliver(st, rank, grant_msg(MsgType::SrslGrant, m.home, m.slot, s.gen, request, token, status));
  };
  switch (m.type) {
    case MsgType::SrslReq: {
      // A request its sender dropped before it sent its floor (it gave this home up), which the
      // network delivers only now: the sender would never release it, nor hear of its grant.
      if (from.rank() < srsl_purged_.size() && from.request() < srsl_purged_[from.rank()]) {
        ++counters_.stale_messages;
        return;
      }
      Slot::Holder h{from.rank(), from.request(), from.mode() == Mode::Exclusive};
      bool excl_held = std::any_of(s.holders.begin(), s.holders.end(),
                                   [](const Slot::Holder& x) { return x.exclusive; });
      bool ok = s.queue.empty() && (h.exclusive ? s.holders.empty() : !excl_held);
      if (ok) {
        s.holders.push_back(h);
        answer(h.rank, h.request, Status::Ok, ++s.next_token);
      } else if (from.try_only()) {
        answer(from.rank(), from.request(), Status::WouldBlock);
      } else {
        s.queue.push_back(h);
      }
      return;
    }
    case MsgType::SrslRel:
      std::erase_if(s.holders, [&](const Slot::Holder& x) {
        return x.rank == from.rank() && x.request == from.request();
      });
      return srsl_grant_waiters(st, m.slot);
    case MsgType::SrslCancel: {
      // Waiting, or granted: the grant may be on its way (the requester releases it when it
      // comes: a withdrawn request is never handed to a client), or lost (a send that failed:
      // nobody would release it). Either way the requester does not hold it: released here.
      auto match = [&](const Slot::Holder& x) {
        return x.rank == from.rank() && x.request == from.request();
      };
      const auto erased = std::erase_if(s.queue, match) + std::erase_if(s.holders, match);
      if (erased) {
        answer(from.rank(), from.request(), Status::Timeout);  // confirms the withdrawal
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

// SRSL_GRANT, at the requester (handle() checked the home's rank).
void LockEngine::handle_srsl_grant(Step& st, const Msg& m) {
  const GrantView grant{m};
  auto it = requests_.find(grant.request());
  if (it == requests_.end() || it->second->gen != m.gen) {
    // A grant for a request this node dropped (its lease on the home lapsed, or it gave the
    // home up for dead, and the home granted a request sent before): the home counts it as
    // held. Released at once, or the lock stays held by nobody.
    if (grant.status() == Status::Ok)
      deliver(st, m.home, srsl_msg(MsgType::SrslRel, m.home, m.slot, m.gen, grant.request()));
    return count_stale();
  }
  Request& r = *it->second;
  if (grant.status() == Status::Ok) {
    granted(st, r, grant.token());
  } else if (r.state == Request::State::Ghost) {
    requests_.erase(it);  // the home confirmed the withdrawal
  } else {
    ++counters_.would_block;
    fail(st, r, Status::WouldBlock, "lock \"" + r.name + "\" is held or has waiters");
    requests_.erase(it);
  }
}

}  // namespace tierce::dlm
