// coherence/topology.h — the cluster topology file, shared by both Apache modules and the agents.
//
//   [cluster]
//   name = "demo"                       # used in log lines and segment names
//   secret_file = "/etc/tierce/secret"  # the fabric secret (>= 16 bytes, not world-readable)
//   transport = "shm"                   # auto | tcp | shm | verbs: how peers reach memd
//   version_slots = 262144              # slots of each app node's version table
//   op_timeout_ms = 50                  # default deadline of one version read (modules may override)
//
//   [[node]]                            # one per node, any order; names unique
//   name = "app1"
//   role = "app"                        # app (has a version table: a home) | proxy
//   memd = ["tcp://127.0.0.1:7101", "shm:///run/tierce/app1-memd.sock"]
//   segment_prefix = "/tierce.demo.app1"
//
// A key's home is chosen among the app nodes by rendezvous hashing on (key hash, node name):
// every reader of the same file picks the same home, and adding a node moves only its share.
// Unknown keys are errors (with the file and line).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fabric/fabric.h"

namespace tierce::coherence {

enum class Role : uint8_t { App, Proxy };

struct NodeInfo {
  std::string name;
  Role role = Role::App;
  std::vector<std::string> memd;  // URIs of its memd
  std::string segment_prefix;     // "/tierce.demo.app1"
};

struct Topology {
  std::string path;  // the file it was loaded from
  std::string name;
  std::string secret_file;
  fabric::Transport transport = fabric::Transport::Auto;
  uint64_t version_slots = 262144;
  uint32_t op_timeout_ms = 50;
  std::vector<NodeInfo> nodes;

  // Throws TopologyError naming file:line and the key.
  static Topology load(const std::string& path);
  static Topology parse(std::string_view toml_text, const std::string& origin);

  const NodeInfo* find(std::string_view node) const;
  const NodeInfo& node(std::string_view name) const;  // throws TopologyError
  std::vector<const NodeInfo*> app_nodes() const;
  const NodeInfo& home_of(uint64_t key_hash) const;  // Prereq: at least one app node
  // The memd URI of `n` to use under the cluster's transport (auto: shm when it has one and
  // verbs is absent, else tcp). Throws TopologyError when the node has none of that kind.
  std::string uri_of(const NodeInfo& n) const;
  fabric::Secret secret() const;  // reads secret_file
};

class TopologyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tierce::coherence
