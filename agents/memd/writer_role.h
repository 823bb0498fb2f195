// agents/memd/writer_role.h — memd's [writer] role: the app node's WRITER AGENT. It maps the
// node's writer segment (<prefix>.writer, coherence/writer.h), exports it as region "writer" for
// the homes' fence renewals, and lifts the node's skip marks once the marked homes answer
// (coherence/skip_keeper.h). Nothing else.
//
// Why a role of its own: the homes must read every app node's writer counter to vouch for their
// tables. When the node's memd (the home) exports it, one memd crash makes every home in the
// cluster stop vouching. Run as a SECOND memd process of the app node, with only [writer]
// (conf/writer.toml), it outlives the home's crashes, restarts and upgrades: a dead memd then costs
// only the pages homed there (docs/coherence.md "The writer agent"). The topology names its
// address per app node: writer = ["tcp://...", "shm://..."].
//
// With [writer] socket it is also the node's AGENT SOCKET (agent_socket.h): the httpd children
// send it their sequence reads, registrations and invalidations, and it numbers and sends them
// (they hold no secret, and do not map the counter). Then, before it exports the counter, it
// numbers once bare: an invalidation queued in the socket of an agent that died is lost, and
// this number makes every home catch up before it vouches on this counter again.
//
// Threads: one keeper thread (every lease/4); the server's threads serve the region; the agent
// socket's threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agents/memd/config.h"
#include "base/metrics.h"
#include "coherence/topology.h"
#include "fabric/fabric.h"

namespace tierce::coherence {
class ClusterClient;
class SkipMarkKeeper;
class WriterLog;
namespace agentwire {
struct Request;
struct Reply;
}  // namespace agentwire
}  // namespace tierce::coherence

namespace tierce::memd {

class AgentSocket;

class WriterRole {
 public:
  // Loads the topology, maps and exports the writer segment of `node` (an app node), starts the
  // keeper. Throws coherence::TopologyError / fabric::FabricError saying what to change.
  // `key`: the node's key ([memd] node_key): the agent socket's registrations and invalidations
  // are signed with it (a member's, at homes that know the cluster's keys).
  WriterRole(fabric::Server& server, const std::string& node, const WriterConfig& cfg,
             fabric::Secret secret, fabric::LogSink log, fabric::NodeKey key = {});
  // Stops the keeper and unexports the region. The segment stays: the node's httpd numbers in it.
  ~WriterRole();
  WriterRole(const WriterRole&) = delete;
  WriterRole& operator=(const WriterRole&) = delete;

  const std::string& segment_name() const;
  // The agent socket's path (empty without [writer] socket).
  std::string socket_path() const;
  // "key value" lines: segment, incarnation, issued, digest, skip_marks_held, skip_marks_cleared,
  // and "skip_mark HOME SINCE_MS" per mark held.
  std::string status_text() const;
  void metrics(base::Metrics& m) const;  // tierce_writer_* families

 private:
  void loop();
  coherence::agentwire::Reply handle(const coherence::agentwire::Request& q);
  void number_bare(const std::string& why);
  fabric::Server& server_;
  std::string node_;
  fabric::LogSink log_;
  std::unique_ptr<coherence::WriterLog> writer_;
  std::unique_ptr<coherence::ClusterClient> client_;
  std::unique_ptr<coherence::SkipMarkKeeper> keeper_;
  std::unique_ptr<coherence::Topology> topo_;
  // The agent socket's requests: its own client (more connections per home than the keeper's).
  std::unique_ptr<coherence::ClusterClient> agent_client_;
  std::unique_ptr<AgentSocket> socket_;  // destroyed first (its threads use the above)
  std::chrono::milliseconds period_{250};
  mutable std::mutex mu_;  // keeper_ (its pass and its stats)
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tierce::memd
