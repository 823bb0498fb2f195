// php_ext/engine.h — how the tierce PHP extension reaches the homes of its cluster by itself: the
// pending marks of linearizable mode (docs/php_extension.md) and tierce_invalidate() outside httpd
// (CLI scripts, cron). Inside httpd the ordinary invalidations still go through mod_appversion
// (request notes); this engine only sends what must leave before a COMMIT does.
//
// With tierce.agent (the node's writer agent socket, docs/coherence.md "The agent socket") the
// engine holds no secret and maps no counter: its rounds go through the agent (AgentClient), so
// the PHP processes hold no fabric credential. Without it: one ClusterClient per process,
// created on first use after fork (the PHP module starts in the httpd parent, which reads the
// topology and its secret as root; children inherit them), numbering in the node's writer
// counter, the same shared segment mod_appversion and memd map.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/topology.h"
#include "coherence/agent_client.h"
#include "coherence/client.h"

namespace tierce::php {

// What one round cost and whether every home applied it.
struct RoundResult {
  bool sent = false;       // numbered and sent (false: no cluster configured, or it failed early)
  bool complete = false;   // every home acknowledged (else: fenced after the bound, or given up)
  bool gave_up = false;    // returned at give_up_after, before the bound, without every home
  uint64_t micros = 0;
  std::string error;  // why not sent / which homes were fenced or not reached, in words
};

class Engine {
 public:
  // Loads the topology; without `agent_socket`, also its secret and the node's writer counter.
  // Throws std::runtime_error with a message a user can act on.
  // `node_key`: without the agent, in a keyed cluster, this node's key file (signed rounds).
  Engine(const std::string& topology_path, const std::string& node,
         const std::string& agent_socket = {}, const std::string& node_key = {});
  ~Engine();

  const std::string& node() const { return node_; }
  const cluster::Topology& topology() const { return topo_; }
  // The writer agent's socket, or empty (the engine holds the secret).
  const std::string& agent_socket() const { return agent_path_; }

  // names empty + all: everything. Same names/token/ttl as coherence::PendingMark.
  // pend gives up after `timeout` (ClusterClient::invalidate's give_up_after): a Pend is made
  // before the COMMIT, and a COMMIT whose Pend did not reach every home is not sent.
  RoundResult pend(const std::vector<std::string>& names, bool all, uint64_t token, uint32_t ttl_ms,
                   std::chrono::milliseconds timeout);
  // `give_up_after` zero: the rule (every home, or the bound) — the Release after a commit.
  // Nonzero: the Release of a Pend whose COMMIT was not sent (nothing to wait for).
  RoundResult release(const std::vector<std::string>& names, bool all, uint64_t token,
                      std::chrono::milliseconds give_up_after = {});
  RoundResult invalidate(const std::vector<std::string>& names, bool all);

 private:
  RoundResult round(const std::vector<std::string>& names, bool all,
                    const coherence::PendingMark& mark, std::chrono::milliseconds give_up_after);
  coherence::ClusterClient& client();

  cluster::Topology topo_;
  fabric::Secret secret_;
  fabric::NodeKey node_key_;
  std::string node_;
  std::unique_ptr<coherence::WriterLog> writer_;
  std::unique_ptr<coherence::ClusterClient> client_;
  int client_pid_ = 0;  // the process that created client_ (a child recreates it)
  std::string agent_path_;
  std::unique_ptr<coherence::AgentClient> agent_;  // reconnects by itself after fork
};

}  // namespace tierce::php
