// agents/lockd/lockd.h — one node's lock manager agent, as a class that runs without a process
// around it (main.cc adds the daemon: options, pid file, signals, logging). docs/dlm.md is the
// protocol and the user's reference.
//
//   fabric::Server     listens on this node's `lockd = [...]` URIs; exports `dlm.table` (the
//                      lock words this node is home of) and the services dlm.msg (one-way
//                      protocol messages), dlm.resolve, dlm.recover, dlm.heartbeat, dlm.status,
//                      dlm.metrics
//   dlm::LockEngine    the protocol (N-CoSED / DQNL / SRSL, from [dlm] algorithm)
//   IpcServer          local clients on a unix socket
//   heartbeat thread   calls every member's dlm.heartbeat each heartbeat_ms; decides who is up
//   recovery thread    runs the home's recovery after a member went down or restarted
//
// Liveness (docs/dlm.md "Failures"): member P is up while (a) P called our dlm.heartbeat within
// lease_ms (P sees us) and (b) a heartbeat we sent to P was answered, counted from when we sent
// it, within lease_ms - guard (we see P; guard = lease_ms / 4). When (b) lapses we revoke our
// holds on P's locks before P, which stops hearing from us at the same time or later, can give
// them away at (a)'s lapse.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agents/lockd/ipc_server.h"
#include "cluster/topology.h"
#include "dlm/engine.h"
#include "fabric/fabric.h"

namespace tierce::lockd {

struct LockdOptions {
  std::string socket_path;  // the local IPC socket
  std::string state_dir;    // holds `epoch` (persisted, +1 per start)
  IpcOptions ipc;
  // The fabric server's (and this node's client connections') settings: fabric::ServerOptions.
  fabric::Protection protection = fabric::Protection::Mac;
  // This node's key (fabric/identity.h; lockd.toml node_key): its server proves the node with it
  // and its connections to the other lockds sign with it. Empty: the secret alone.
  fabric::NodeKey node_key;
  size_t max_preauth_frame = 256;
  size_t max_connections = 4096;
  size_t max_connections_per_ip = 1024;
  // The fabric server's and client connections' spin (ServerOptions/ClientOptions::spin); the
  // IPC server's is ipc.spin.
  std::chrono::microseconds spin{50};
  fabric::LogSink log;
  // Tests only: asked before each write of a dlm.msg body to a member (unset in the daemon).
  enum class Loss { None, FailWrite, Vanish };
  // FailWrite: the write fails (a send that missed its deadline); Vanish: it seems to succeed
  // but never arrives (written into a connection that then broke).
  std::function<Loss(uint32_t rank)> lose_message;
  // Tests only: asked before each heartbeat to a member. Skip: not sent (the member stops
  // hearing this node); DropAnswer: sent, its answer discarded (a link that carries this node's
  // requests but not the member's answers).
  enum class HeartbeatFault { None, Skip, DropAnswer };
  std::function<HeartbeatFault(uint32_t rank)> heartbeat_fault;
};

class Lockd final : public dlm::Network {
 public:
  // Starts everything. Throws std::runtime_error / fabric::FabricError with a message that says
  // what to fix (node not a member, address in use, state dir not writable, ...).
  Lockd(cluster::Topology topo, std::string node, fabric::Secret secret, LockdOptions opts);
  ~Lockd() override;
  Lockd(const Lockd&) = delete;
  Lockd& operator=(const Lockd&) = delete;

  void stop();
  std::string status_text();
  // The numbers of status_text() (and of the IPC server and the fabric server) in Prometheus
  // text format, every sample labelled node= (docs/dlm.md "Metrics"): what dlm.metrics, a STATUS
  // with flag METRICS (tierce-lock --metrics) and [lockd] metrics_file give.
  std::string metrics_text();
  // The daemon's reload counters (main.cc's Reloader), for metrics_text().
  void note_reloads(uint64_t applied, uint64_t failed) {
    reloads_.store(applied);
    failed_reloads_.store(failed);
  }
  // The local clients' quotas, changed while serving (SIGHUP): IpcServer::set_quotas.
  void set_quotas(size_t max_holds_per_client, size_t max_locks_per_uid,
                  size_t max_clients_per_uid);
  std::vector<std::string> bound_uris() const;
  uint64_t epoch() const { return epoch_; }
  uint32_t rank() const { return rank_; }
  dlm::LockEngine& engine() { return *engine_; }
  // Members currently up (this node included).
  size_t members_up() const;
  // Silent for a whole lease (also counted from this lockd's start): its holds here may go.
  bool member_dead(uint32_t rank) const;
  // Until when this node's lease on `home`'s locks holds, in steady-clock (CLOCK_MONOTONIC)
  // nanoseconds: 0 if it never had one; UINT64_MAX for this node itself (docs/dlm.md "Failures").
  uint64_t lease_until(uint32_t home) const;
  bool lease_valid(uint32_t home) const;

  // dlm::Network
  void table_ops(uint32_t home, std::span<fabric::OneSidedOp> ops) override;
  void send(uint32_t rank, const std::vector<uint8_t>& msg) override;
  std::vector<uint8_t> call(uint32_t rank, std::string_view service,
                            std::span<const uint8_t> body) override;

  struct Peer;

 private:
  void heartbeat_loop();
  void recovery_loop();
  std::vector<uint8_t> on_heartbeat(std::span<const uint8_t> body);
  // A member's incarnation as seen in a heartbeat or a message. Incarnations are ordered: the
  // high 32 bits are the member's persisted epoch (+1 per start), the low 32 random. A newer one
  // means it restarted: its old state is dropped (engine.member_down, member_dead) *before*
  // anything of the new one is handled, and the connections to it are replaced (a write to the
  // old one could vanish silently). An older one is a late message of a process that is gone
  // (its kernel may still be sending what it had queued): the caller drops it. Takes mu_.
  enum class Incarnation { Current, Restarted, Old };
  Incarnation note_incarnation(uint32_t rank, uint64_t incarnation);
  // Its connections are replaced at the next use. restarted: its messages not acknowledged are
  // dropped and a new stream begins; else they are kept and sent again, in order.
  void reset_connections(Peer& p, bool restarted);
  // Heard from (it called our heartbeat) within the last lease: not dead. Needs mu_.
  bool heard_within_lease(const Peer& p, std::chrono::steady_clock::time_point now) const;
  // The member answered a heartbeat: opens the connections for messages and one-sided operations
  // if they are not, so that the first lock request or hand-off to it does not pay a connection
  // and its authentication (several round trips; for operations, under the engine's mutex).
  // Skips a connection another thread is using (try_lock): heartbeats never wait behind a lock.
  void warm_connections(Peer& p);
  // Connects p.ops (reset on close) and looks the member's table up. Needs p.ops_mu; throws.
  void open_ops(Peer& p);
  // Writes the member's unsent messages in order (from the first one when resend_all), at most
  // `budget`; stops at the first failure (the rest stay queued). Needs p.msg_mu.
  void flush_locked(Peer& p, bool resend_all, size_t budget);
  // A heartbeat answer's acknowledgement: drops what the member delivered, re-sends the rest
  // when it is overdue.
  void note_ack(Peer& p, uint64_t stream, uint64_t seq);
  Peer& peer(uint32_t rank);
  static uint64_t next_epoch(const std::string& state_dir);

  cluster::Topology topo_;
  std::string node_;
  fabric::Secret secret_;
  LockdOptions opts_;
  uint32_t rank_ = 0;
  uint64_t epoch_ = 0;
  uint64_t incarnation_ = 0;
  uint64_t digest_ = 0;
  std::shared_ptr<fabric::SharedSegment> table_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by rank (index 0 unused)
  std::unique_ptr<fabric::Server> server_;
  std::unique_ptr<dlm::LockEngine> engine_;
  std::unique_ptr<IpcServer> ipc_;
  // ipc_ for metrics_text(), which the IPC server's own thread may call before ipc_ is assigned.
  std::atomic<IpcServer*> ipc_view_{nullptr};
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  // When the heartbeat thread started: a member not heard from yet counts as heard then.
  std::chrono::steady_clock::time_point heartbeats_started_{};
  std::atomic<uint64_t> reloads_{0}, failed_reloads_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool recovery_needed_ = false;
  std::thread heartbeat_, recovery_;
};

}  // namespace tierce::lockd
