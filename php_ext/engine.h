// php_ext/engine.h — how the tierce PHP extension reaches the homes of its cluster by itself: the
// pending marks of linearizable mode (docs/php_extension.md) and tierce_invalidate() outside httpd
// (CLI scripts, cron). Inside httpd the ordinary invalidations still go through mod_appversion
// (request notes); this engine only sends what must leave before a COMMIT does.
//
// One ClusterClient per process, created on first use after fork (the PHP module starts in the
// httpd parent, which reads the topology and its secret as root; children inherit them). The
// node's writer counter is the same shared segment mod_appversion and memd map.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/topology.h"
#include "coherence/client.h"

namespace tierce::php {

// What one round cost and whether every home applied it.
struct RoundResult {
  bool sent = false;       // numbered and sent (false: no cluster configured, or it failed early)
  bool complete = false;   // every home acknowledged (else: some were relied on as fenced)
  uint64_t micros = 0;
  std::string error;       // why not sent / which homes were fenced, in words
};

class Engine {
 public:
  // Loads the topology and its secret and maps the node's writer counter. Throws
  // std::runtime_error with a message a user can act on.
  Engine(const std::string& topology_path, const std::string& node);
  ~Engine();

  const std::string& node() const { return node_; }
  const cluster::Topology& topology() const { return topo_; }

  // names empty + all: everything. Same names/token/ttl as coherence::PendingMark.
  RoundResult pend(const std::vector<std::string>& names, bool all, uint64_t token,
                   uint32_t ttl_ms);
  RoundResult release(const std::vector<std::string>& names, bool all, uint64_t token);
  RoundResult invalidate(const std::vector<std::string>& names, bool all);

 private:
  RoundResult round(const std::vector<std::string>& names, bool all,
                    const coherence::PendingMark& mark);
  coherence::ClusterClient& client();

  cluster::Topology topo_;
  fabric::Secret secret_;
  std::string node_;
  std::unique_ptr<coherence::WriterLog> writer_;
  std::unique_ptr<coherence::ClusterClient> client_;
  int client_pid_ = 0;  // the process that created client_ (a child recreates it)
};

}  // namespace tierce::php
