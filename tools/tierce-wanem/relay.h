// tools/tierce-wanem/relay.h — the relay of tierce-wanem: one thread, one epoll set, a timerfd for
// release times. Each accepted connection gets a connection to its target and two Directions
// (client->target, target->client), each a delay line:
//
//   read from src ──► ring buffer (window bytes) ──► written to dst when due and paced
//                     release marks: (end offset, due = read time + D)
//                     credits:       (bytes, back = write time + D)
//
// * Delay: bytes read at t are written no earlier than t + D (steady clock, microseconds; the
//   thread's timer slack is set to 1 ns so a 10 us delay is not rounded up to 50 us).
// * Window: bytes count against the window from the read until D after they are written — the
//   moment the receiver's ACK would be back at the sender on a real link. The relay stops
//   reading while the window is full, which is backpressure into the sender's TCP. A single
//   stream therefore gets at most window / (2D), as docs/ftp.md says.
// * Rate: a token bucket per direction (empty at start, holding at most 10 ms of tokens), so N
//   bytes never take less than N / rate.
// * FIN: the source's EOF is passed on (shutdown(SHUT_WR)) D after it was seen, once every queued
//   byte is out. A reset or error on one side: what is queued for the other side is still
//   delivered, then the other side is shut down too; the connection is closed when both
//   directions are finished.
// * Control (--control, control.h): a direction can be cut (held: read but not written, FIN
//   included) and healed, and the delay changed, while connections run. Release marks stay in
//   order when the delay shrinks (a byte is never due before one read earlier).
// * Namespaces: a listener or a target written NETNS/host:port gets its socket in that network
//   namespace (the thread enters it for socket() only): one relay can be the wire between hosts
//   emulated by namespaces.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <set>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tools/tierce-wanem/control.h"
#include "tools/tierce-wanem/options.h"

namespace tierce::wanem {

using Clock = std::chrono::steady_clock;

// A failure to start (bind/listen); main() exits 1 with the message.
class StartError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RelayStats {
  uint64_t accepted = 0;
  uint64_t connect_failures = 0;
  uint64_t bytes_to_target = 0;   // client -> target
  uint64_t bytes_to_client = 0;   // target -> client
};

class Relay {
 public:
  // Binds and listens on every port of every --forward (and the --control socket); throws
  // StartError.
  explicit Relay(const Options& opts);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // Runs until `stop_fd` (a signalfd, or any fd) becomes readable.
  void run(int stop_fd);
  const RelayStats& stats() const { return stats_; }
  size_t listener_count() const { return listeners_.size(); }

  struct Conn;
  struct Listener;
  struct ControlClient;

 private:
  void accept_from(Listener& l);
  // Starts the connection to the target; false (the client is reset, the Conn dead) on failure.
  bool start_connect(Conn& c);
  void service(Conn& c, Clock::time_point now, Clock::time_point& next, bool& busy);
  void arm_timer(Clock::time_point when);
  void wake_all();  // every connection is serviced on the next loop turn (a control command)
  void schedule(Conn& c);  // c is serviced on the next loop turn (once, however often asked)
  // A non-blocking stream socket in network namespace `netns` ("" = the relay's own): the
  // thread enters it for the socket() call only (a socket stays in the namespace it was made
  // in). -1 with errno set on failure. Prereq: `netns` was opened by open_netns().
  int socket_in(const std::string& netns, int family);
  void open_netns(const std::string& netns);  // throws StartError
  void open_control();
  void accept_control();
  void read_control(ControlClient& cc);
  std::string execute(const std::string& line);  // one command line -> its answer (no newline)
  size_t reset_all();  // every live connection closed with an RST to both sides; how many

  Options opts_;
  uint64_t delay_us_ = 0;    // the one-way delay of bytes read from now on (control: delay)
  unsigned cut_ = kCutNone;  // directions held (control: cut/heal)
  std::optional<Endpoint> redirect_;  // control: redirect: where new connections go instead
  int control_fd_ = -1;
  std::list<std::unique_ptr<ControlClient>> control_clients_;
  int epfd_ = -1;
  int timerfd_ = -1;
  int spare_fd_ = -1;  // closed to accept-and-drop a connection when out of descriptors
  int home_ns_ = -1;   // the relay's own network namespace, while any --forward names another
  std::map<std::string, int> netns_fds_;  // NETNS -> open /run/netns/NETNS
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::list<std::unique_ptr<Conn>> conns_;
  // What the loop services on its next turn: connections with an event, a spent turn budget or a
  // control command (pending_), and those whose wake time came (timers_, by time). A relay that
  // carries every link of an emulated cluster holds hundreds of idle connections: a turn costs
  // what its active ones need, not a walk over all of them.
  std::vector<Conn*> pending_;
  std::vector<Conn*> working_;  // the turn's share of pending_ (run())
  std::set<std::pair<Clock::time_point, Conn*>> timers_;
  Clock::time_point armed_{};
  RelayStats stats_;
};

}  // namespace tierce::wanem
