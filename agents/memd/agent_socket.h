// agents/memd/agent_socket.h — the writer agent's local socket (coherence/agent_wire.h): the
// unix socket through which the app node's httpd children (mod_appversion, the PHP extension)
// read sequences, register pages and send invalidations without holding the cluster secret
// (issue 32 point 3; docs/coherence.md "The agent socket").
//
// One thread accepts; each connection gets its own thread (an invalidation may wait up to the
// fence bound, and one httpd child holds one connection), at most max_clients at once. Requests of
// a connection are answered in order, also after its client closed (a request queued before the
// close is still carried out: it may be the invalidation of a committed write).
//
// A connection this socket cannot serve (over max_clients, or still queued when the agent stops)
// may have carried an invalidation: `on_unserved` is called for it (the writer role numbers once,
// bare, so the homes catch up: a miss at worst, never a stale page).
//
// Log ids: MEMD0160..MEMD0169.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/fd.h"
#include "base/metrics.h"
#include "coherence/agent_wire.h"
#include "fabric/log.h"

namespace tierce::memd {

struct AgentSocketOptions {
  std::string path;
  mode_t mode = 0660;
  gid_t group = gid_t(-1);  // chgrp of the socket: who may connect (the httpd children's group)
  size_t max_clients = 512;
};

struct AgentSocketCounters {
  std::atomic<uint64_t> accepted{0}, refused{0}, requests{0}, malformed{0}, read_seq{0},
      registered{0}, invalidations{0}, failed{0}, unserved{0};
};

class AgentSocket {
 public:
  using Handler = std::function<coherence::agentwire::Reply(const coherence::agentwire::Request&)>;
  // Binds the socket (base::listen_unix_seqpacket) and starts accepting. Throws
  // std::runtime_error (MEMD0160) naming the path and what to change.
  AgentSocket(AgentSocketOptions o, Handler handle, std::function<void()> on_unserved,
              fabric::LogSink log);
  // Stops accepting, closes every connection (after the request each is carrying out), removes
  // the socket file.
  ~AgentSocket();
  AgentSocket(const AgentSocket&) = delete;
  AgentSocket& operator=(const AgentSocket&) = delete;

  const std::string& path() const { return o_.path; }
  const AgentSocketCounters& counters() const { return counters_; }
  size_t connections() const;
  // "agent_socket_* value" lines for memd.status.
  std::string status_text() const;
  void metrics(base::Metrics& m) const;  // tierce_agent_socket_* families

 private:
  struct Conn {
    base::Fd fd;
    std::thread thread;
    std::atomic<bool> done{false};
    uid_t uid = uid_t(-1);
    pid_t pid = 0;
  };
  void accept_loop();
  void serve(Conn& c);
  bool send_reply(Conn& c, const coherence::agentwire::Reply& r);
  void reap_locked();

  AgentSocketOptions o_;
  Handler handle_;
  std::function<void()> on_unserved_;
  fabric::LogSink log_;
  base::Fd listen_fd_;
  base::Fd stop_fd_;  // eventfd: readable once stopping
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::list<std::unique_ptr<Conn>> conns_;
  std::thread acceptor_;
  AgentSocketCounters counters_;
};

}  // namespace tierce::memd
