// coherence/agent_client.h — the app tier's side of the writer agent's local socket
// (agent_wire.h): what mod_appversion and the PHP extension use instead of a ClusterClient, so
// that the processes running app code hold no fabric credential and do not map the node's writer
// counter (issue 32 point 3; docs/coherence.md "The agent socket").
//
// Reads and registrations fail fast (op timeout): a page that cannot be registered is only not
// cached. An invalidation keeps THE RULE (client.h) across the agent's faults:
//   - the agent answers: it numbered the invalidation and ran the rule; its outcome is returned;
//   - the agent is alive but slow or frozen: keep waiting (the update does not return; the
//     invalidation is queued in the agent's socket and numbered when it runs), up to `cap`;
//   - the agent is gone (connect refused, the connection closed before the answer): the request
//     may be lost. From the agent's death on no home reads this node's counter (they read it at
//     the agent), so within the fence bound none vouches; a restarted agent numbers once before
//     it exports the counter, so every home catches up before it vouches again. The invalidation
//     returns after the fence bound from the moment the loss was seen, outcome `lost`.
// One connection per process, made on first use and again after fork or a failure. Not
// thread-safe (one httpd child or PHP process, one request at a time): one AgentClient per
// thread if ever needed.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/fd.h"
#include "base/status.h"
#include "coherence/agent_wire.h"
#include "coherence/client.h"

namespace tierce::coherence {

struct AgentTimeouts {
  std::chrono::milliseconds op{200};       // a read or a registration: answered within this
  std::chrono::milliseconds connect{200};  // the socket accepts within this
  // An invalidation waits at most this long for a LIVE agent's answer (then it returns with
  // `stuck`: the agent may still number it; logged as critical by the callers).
  std::chrono::milliseconds cap{60'000};
  // The cluster's fence bound (Topology::coherence.fence_bound_ms()): how long an invalidation
  // whose request may be lost waits before it returns.
  std::chrono::milliseconds fence_bound{1'000};
};

// An invalidation as the agent socket reports it.
struct AgentInvalidation {
  enum class Kind {
    Answered,  // the agent numbered it and ran the rule: `outcome` says how it went
    Lost,      // the agent died or was unreachable: returned after the fence bound (the homes'
               // fences and the restarted agent's catch-up cover it)
    Stuck,     // a live agent did not answer within `cap`: NOT covered until it numbers it
    Refused,   // the agent answered BadRequest (a bug or a version mismatch): NOT sent
    GaveUp,    // with give_up_after (a Pend): no answer by then; nothing was committed on it
  };
  Kind kind = Kind::Lost;
  InvalidateOutcome outcome;  // Answered
  std::string why;            // otherwise: what happened, in words
  std::chrono::nanoseconds elapsed{0};
  bool answered() const { return kind == Kind::Answered; }
};
std::string_view to_string(AgentInvalidation::Kind k);

class AgentClient {
 public:
  AgentClient(std::string socket_path, AgentTimeouts t);
  ~AgentClient();
  AgentClient(const AgentClient&) = delete;
  AgentClient& operator=(const AgentClient&) = delete;

  const std::string& path() const { return path_; }

  // The invalidation sequence of `key`'s home (the agent picks the home from its topology).
  base::Result<uint64_t> read_seq(uint64_t key);
  // Registers a rendered page at `key`'s home (the agent picks the home). A failure to reach the
  // agent is a RegisterResult with refusal Unreachable and the reason.
  RegisterResult register_page(uint64_t key, uint64_t seq_start, std::span<const uint64_t> deps);
  // Sends an invalidation through the agent (see the header comment for what each outcome
  // promises). `give_up_after` only with a mark (a Pend, or the Release of a Pend whose COMMIT
  // was not sent): returns GaveUp at that time without an answer.
  AgentInvalidation invalidate(std::span<const uint64_t> deps, Scheme scheme,
                               const PendingMark& mark = {},
                               std::chrono::milliseconds give_up_after = {});

 private:
  enum class Wait { Answer, Closed, Timeout, Failed };
  struct Exchange {
    Wait wait = Wait::Failed;
    agentwire::Reply reply;
    std::string why;
  };
  // Sends `req` and waits for its reply until `deadline`. Connects first when needed.
  Exchange exchange(agentwire::Request req, std::chrono::steady_clock::time_point deadline);
  base::Status connect();
  void drop();

  std::string path_;
  AgentTimeouts t_;
  base::Fd fd_;
  int pid_ = 0;  // the process fd_ belongs to
  uint64_t next_id_ = 1;
  std::vector<uint8_t> in_;  // the receive buffer (one message), kept across requests
};

}  // namespace tierce::coherence
