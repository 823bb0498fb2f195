// agents/lockd/ipc_server.h — tierce-lockd's side of the local IPC: the unix socket local clients
// (dlm/client.h, the C API, tierce-lock) connect to, served by one epoll thread, in front of a
// dlm::LocalLockService (frames: dlm/ipc.h).
//
// Each connection is one owner (dlm::OwnerId): LOCK -> svc.acquire, UNLOCK -> svc.release,
// STATUS -> svc.status_text, close -> svc.owner_gone; revocations (svc's revoked callback) go
// to the owner's connection as REVOKED frames. Replies may be sent from any thread (the `done`
// of an acquire runs wherever the service grants); a connection's sends are serialised by its
// own mutex, and a connection that closed ignores late replies (a late grant is released).
//
// Limits (IpcOptions): per connection (max_holds_per_client) and per peer uid over all its
// connections (max_locks_per_uid, max_clients_per_uid); both answer TooMany with a message naming
// the limit, which the client library and tierce-lock print.
//
// Log ids: LOCKD0200..LOCKD0219.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "dlm/service.h"
#include "fabric/log.h"

namespace tierce::lockd {

struct IpcOptions {
  // Permissions of the socket file: who may lock (group = the lockd group).
  mode_t socket_mode = 0660;
  // Connections beyond this are told TooMany and closed.
  size_t max_clients = 4096;
  // Holds plus pending acquisitions per connection; a LOCK beyond it is answered TooMany.
  size_t max_holds_per_client = 4096;
  // The same summed over every connection of one peer uid (SO_PEERCRED): a user cannot fill the
  // lock table by opening more connections. A LOCK beyond it is answered TooMany.
  size_t max_locks_per_uid = 16384;
  // Connections of one peer uid at once; beyond it the connection is told TooMany and closed, so
  // one user cannot take every one of the max_clients slots.
  size_t max_clients_per_uid = 1024;
  // After handling activity the epoll thread polls (epoll_wait with timeout 0, yielding the CPU
  // between polls) this long before sleeping: waking a sleeping thread costs ~35 us on a VM, more
  // than a whole lock round trip. Adaptive: spins that find nothing make the next ones sleep at
  // once for a while. Costs at most this much CPU per burst of requests. 0 = never spin.
  std::chrono::microseconds spin{50};
  // Frames waiting for a client that does not read (its socket buffer is full) beyond this many
  // bytes: the client is disconnected (its holds are released).
  size_t max_outbox_bytes = size_t(4) << 20;
  // Answers a STATUS with flag METRICS (Prometheus text; lockd: Lockd::metrics_text). Called on
  // the epoll thread, holding no lock of the IpcServer. Unset: such a STATUS is answered
  // BadRequest.
  std::function<std::string()> metrics;
};

struct IpcCounters {
  uint64_t accepted = 0;      // connections accepted (and served)
  uint64_t refused = 0;       // connections refused: max_clients or max_clients_per_uid
  uint64_t requests = 0;      // well-formed requests
  uint64_t malformed = 0;     // frames answered BadRequest/BadName or dropped
  uint64_t revoked_sent = 0;  // REVOKED frames sent
  uint64_t late_grants = 0;   // grants that arrived after their connection closed (released)
  uint64_t slow_clients = 0;  // clients disconnected because they did not read their replies
  uint64_t over_client_quota = 0;  // LOCKs answered TooMany: max_holds_per_client
  uint64_t over_uid_quota = 0;     // LOCKs answered TooMany: max_locks_per_uid
  uint64_t uid_refused = 0;        // of `refused`: max_clients_per_uid
};

class IpcServer {
 public:
  // Binds `socket_path` (SOCK_SEQPACKET), sets the service's revoked callback and starts the epoll
  // thread. Refuses (throws std::runtime_error) when a live server answers on that path; removes a
  // stale socket file left by a dead one. Prereq: `svc` outlives the IpcServer; nothing else sets
  // its revoked callback.
  IpcServer(std::string socket_path, dlm::LocalLockService& svc, fabric::LogSink log,
            IpcOptions opts = {});
  ~IpcServer();  // stop()
  IpcServer(const IpcServer&) = delete;
  IpcServer& operator=(const IpcServer&) = delete;

  // Stops accepting, tells every client ShuttingDown, closes the connections (svc.owner_gone for
  // each) and removes the socket file. Idempotent. Prereq: not called from a `done` callback or
  // the revoked callback (it joins the epoll thread).
  void stop();

  // Replaces the quotas of IpcOptions (a reload, SIGHUP): they apply to the next LOCK and the next
  // connection; what a client or uid holds already beyond a lowered quota is kept (its further
  // LOCKs are answered TooMany until it is back under). Thread-safe.
  void set_quotas(size_t max_holds_per_client, size_t max_locks_per_uid,
                  size_t max_clients_per_uid);

  // Connected clients now.
  size_t clients() const;
  IpcCounters counters() const;
  const std::string& socket_path() const { return path_; }

  struct State;  // shared with callbacks that may outlive this object (ipc_server.cc)

 private:
  std::string path_;
  std::shared_ptr<State> st_;
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace tierce::lockd
