// tools/tierce-wanem/relay.cc — the event loop of tierce-wanem (design in relay.h).
#include "tools/tierce-wanem/relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>

namespace tierce::wanem {

namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::nanoseconds;

// Largest single read or write: big enough that a fast local link costs few system calls, small
// enough that one direction does not hold the loop for long.
constexpr size_t kMaxIo = 1 << 20;
// Bytes one direction may move per loop turn before the others get theirs (fairness between the
// streams of a parallel transfer).
constexpr uint64_t kTurnBudget = 4 << 20;
// Token bucket: at most this much time's worth of tokens is saved up while idle...
constexpr double kBurstSeconds = 0.010;
constexpr double kMinBurst = 1500;  // ...but never less than one Ethernet frame
// A rate-limited direction waits for this many tokens (or what is due, if less) before writing,
// so a slow rate does not turn into one system call per byte.
constexpr double kRateQuantum = 16 << 10;
static_assert(kRateQuantum <= kMaxIo);

std::string errno_text(int e) { return std::strerror(e); }

void log_line(const std::string& msg) {
  std::string line = "tierce-wanem: " + msg + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

std::string addr_text(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
  ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
  port = ntohs(a->sin6_port);
  return "[" + std::string(host) + "]:" + std::to_string(port);
}

void set_port(sockaddr_storage& ss, uint16_t port) {
  if (ss.ss_family == AF_INET)
    reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port);
  else
    reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port);
}

void set_nodelay(int fd) {
  // The relay writes whatever is due at once; Nagle would hold small tails back for an ACK and
  // add delay that is not the configured one.
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Closes with an RST instead of a FIN: how a relay says "your connection is gone".
void close_with_reset(int fd) {
  linger lg{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  ::close(fd);
}

}  // namespace

// What an epoll event points at.
struct Pollable {
  enum class Kind { Listener, Side, Timer, Stop, ControlListener, ControlClient };
  explicit Pollable(Kind k) : kind(k) {}
  Kind kind;
};

struct Relay::Listener : Pollable {
  Listener() : Pollable(Kind::Listener) {}
  ~Listener() {
    if (fd >= 0) ::close(fd);
  }
  int fd = -1;
  sockaddr_storage target{};
  socklen_t target_len = 0;
  std::string target_netns;  // where the connection to the target is made ("" = here)
  std::string desc;          // "LISTEN -> TARGET", for messages
};

// A connection to the --control socket: bytes in until a newline, one answer line out.
struct Relay::ControlClient : Pollable {
  ControlClient() : Pollable(Kind::ControlClient) {}
  ~ControlClient() {
    if (fd >= 0) ::close(fd);
  }
  int fd = -1;
  std::string in;
  bool dead = false;
};

namespace {

// One socket of a relayed connection. Readiness is edge-triggered: a flag is set by an epoll
// event and cleared only when a system call says EAGAIN.
struct Side : Pollable {
  Side() : Pollable(Kind::Side) {}
  Relay::Conn* conn = nullptr;
  int fd = -1;
  bool readable = false;
  bool writable = false;
  bool connected = false;
  bool broken = false;  // reset or error: nothing more can be sent to it
};

// Bytes [.., end) become due at `due`.
struct Mark {
  uint64_t end;
  Clock::time_point due;
};
// `bytes` stop counting against the window at `back` (when their ACK would reach the sender).
struct Credit {
  Clock::time_point back;
  uint64_t bytes;
};

// One direction of a connection: a delay line from `from` to `to` (see relay.h).
struct Direction {
  Side* from = nullptr;
  Side* to = nullptr;
  uint64_t* counter = nullptr;  // RelayStats field this direction adds its bytes to

  std::unique_ptr<uint8_t[]> ring;  // allocated on the first read; capacity = window
  size_t cap = 0;
  // Invariant: write_seq <= released_end <= read_seq, read_seq - write_seq <= in_flight <= window.
  uint64_t read_seq = 0;      // bytes read from `from` so far
  uint64_t write_seq = 0;     // bytes written to `to` so far
  uint64_t released_end = 0;  // bytes before this offset are due
  uint64_t in_flight = 0;     // bytes counted against the window
  std::deque<Mark> marks;
  std::deque<Credit> credits;

  double tokens = 0;  // rate limiting; starts empty so N bytes take at least N / rate
  Clock::time_point refilled;

  bool src_eof = false;  // EOF or error seen on `from`
  Clock::time_point eof_due;
  bool dst_shut = false;  // FIN passed on to `to`
  bool dst_err = false;   // `to` is broken: what is queued is dropped

  bool finished() const { return dst_shut || dst_err; }

  void drop_queue() {
    write_seq = released_end = read_seq;
    in_flight = 0;
    marks.clear();
    credits.clear();
  }
};

}  // namespace

struct Relay::Conn {
  Conn() {
    client.conn = server.conn = this;
    up.from = &client;
    up.to = &server;
    down.from = &server;
    down.to = &client;
  }
  ~Conn() {
    for (Side* s : {&client, &server})
      if (s->fd >= 0) ::close(s->fd);
  }
  Side client, server;
  Direction up, down;  // client -> target, target -> client
  std::string target_desc;
  sockaddr_storage target{};
  socklen_t target_len = 0;
  std::string target_netns;
  bool connect_pending = false;  // accepted while to-target was cut: connect on heal
  bool dead = false;             // removed when the loop services it next (schedule())
  // When the loop must service it again (run()): an event on one of its sockets, a control
  // command or its turn budget ran out (`busy`): it is in Relay::pending_ (`queued`); or `wake`
  // came (a release, a credit, a FIN, the pacing): Relay::timers_ holds (wake, this) while
  // wake is finite.
  bool queued = false;
  bool busy = false;
  Clock::time_point wake = Clock::time_point::max();
  std::list<std::unique_ptr<Conn>>::iterator self;  // its place in Relay::conns_
};

namespace {

// Moves what it can in one direction; says when it next needs attention (`next`) or that it
// stopped only because its turn budget ran out (`busy`). A `cut` direction still reads (its bytes
// are held, up to the window) but writes nothing, not even the FIN.
void pump(Direction& d, const Options& o, uint64_t delay_us, bool cut, Clock::time_point now,
          Clock::time_point& next, bool& busy) {
  const auto delay = microseconds(delay_us);
  Side& from = *d.from;
  Side& to = *d.to;

  if (to.broken && !d.dst_shut && !d.dst_err) {
    d.dst_err = true;
    d.drop_queue();
  }
  while (!d.credits.empty() && d.credits.front().back <= now) {
    d.in_flight -= d.credits.front().bytes;
    d.credits.pop_front();
  }
  if (o.rate) {
    double dt = std::chrono::duration<double>(now - d.refilled).count();
    double burst = std::max(kMinBurst, double(o.rate) * kBurstSeconds);
    d.tokens = std::min(burst, d.tokens + dt * double(o.rate));
    d.refilled = now;
  }

  uint64_t moved_in = 0, moved_out = 0;
  for (bool progress = true; progress;) {
    progress = false;

    // Read into the ring while the window has room.
    if (!d.src_eof && from.connected && from.readable && d.in_flight < o.window &&
        moved_in < kTurnBudget) {
      if (!d.ring) {
        d.cap = o.window;
        d.ring.reset(new uint8_t[d.cap]);  // not zeroed: pages are touched only when used
      }
      size_t queued = d.read_seq - d.write_seq;
      size_t room = std::min<uint64_t>({o.window - d.in_flight, d.cap - queued, kMaxIo});
      size_t pos = d.read_seq % d.cap;
      iovec iov[2];
      iov[0] = {d.ring.get() + pos, std::min(room, d.cap - pos)};
      iov[1] = {d.ring.get(), room - iov[0].iov_len};
      ssize_t n = ::readv(from.fd, iov, iov[1].iov_len ? 2 : 1);
      if (n > 0) {
        d.read_seq += n;
        d.in_flight += n;
        moved_in += n;
        auto due = now + delay;
        // After the delay shrank, bytes read now are still not due before earlier ones.
        if (!d.marks.empty() && d.marks.back().due > due) due = d.marks.back().due;
        if (!d.marks.empty() && d.marks.back().due == due)
          d.marks.back().end = d.read_seq;
        else
          d.marks.push_back({d.read_seq, due});
        if (d.dst_err) d.drop_queue();  // nobody to deliver to: discard
        progress = true;
      } else if (n == 0) {
        d.src_eof = true;
        d.eof_due = now + delay;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        from.readable = false;
      } else if (errno != EINTR) {
        // A reset: deliver what is queued, then end the other side as well. But not what a cut
        // holds: over a silent network those bytes were still in the sender's retransmission
        // queue, which its reset discarded; they would never arrive.
        d.src_eof = true;
        d.eof_due = now + delay;
        from.broken = true;
        if (cut) d.drop_queue();
      }
    }

    if (!to.connected || d.dst_err || d.dst_shut || cut) continue;

    // Release what is due, then write it (paced by the token bucket).
    while (!d.marks.empty() && d.marks.front().due <= now) {
      d.released_end = d.marks.front().end;
      d.marks.pop_front();
    }
    uint64_t allow = d.released_end - d.write_seq;
    if (o.rate) allow = std::min<uint64_t>(allow, uint64_t(d.tokens));
    allow = std::min<uint64_t>(allow, kMaxIo);
    if (allow > 0 && to.writable && moved_out < kTurnBudget) {
      size_t pos = d.write_seq % d.cap;
      iovec iov[2];
      iov[0] = {d.ring.get() + pos, std::min<size_t>(allow, d.cap - pos)};
      iov[1] = {d.ring.get(), allow - iov[0].iov_len};
      ssize_t n = ::writev(to.fd, iov, iov[1].iov_len ? 2 : 1);
      if (n > 0) {
        d.write_seq += n;
        moved_out += n;
        *d.counter += n;
        if (o.rate) d.tokens -= double(n);
        if (delay_us == 0) {
          d.in_flight -= n;
        } else {
          auto back = now + delay;
          if (!d.credits.empty() && d.credits.back().back == back)
            d.credits.back().bytes += n;
          else
            d.credits.push_back({back, uint64_t(n)});
        }
        progress = true;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        to.writable = false;
      } else if (n < 0 && errno != EINTR) {
        to.broken = true;
        d.dst_err = true;
        d.drop_queue();
        continue;
      }
    }

    // Pass the FIN on once everything before it is out and it has been delayed as well.
    if (d.src_eof && d.write_seq == d.read_seq && now >= d.eof_due) {
      if (::shutdown(to.fd, SHUT_WR) == 0) {
        d.dst_shut = true;
      } else {
        to.broken = true;
        d.dst_err = true;
      }
    }
  }

  // When does this direction need the loop again?
  if (!d.src_eof && from.connected && from.readable) {
    if (d.in_flight < o.window)
      busy = true;  // stopped by the turn budget
    else if (!d.credits.empty())
      next = std::min(next, d.credits.front().back);
  }
  if (to.connected && !d.dst_err && !d.dst_shut && !cut) {
    uint64_t due = d.released_end - d.write_seq;
    if (due > 0 && to.writable) {
      if (o.rate && d.tokens < 1) {
        double want = std::min<double>(double(due), kRateQuantum) - d.tokens;
        next = std::min(next, now + duration_cast<Clock::duration>(nanoseconds(
                                        int64_t(want * 1e9 / double(o.rate)) + 1)));
      } else {
        busy = true;
      }
    }
    if (!d.marks.empty()) next = std::min(next, d.marks.front().due);
    if (d.src_eof && d.write_seq == d.read_seq) next = std::min(next, d.eof_due);
  }
}

}  // namespace

Relay::Relay(const Options& opts) : opts_(opts), delay_us_(opts.delay_us) {
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  timerfd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (epfd_ < 0 || timerfd_ < 0) throw StartError("epoll/timerfd: " + errno_text(errno));
  // Release times are microseconds apart; the default 50 us timer slack would blur them.
  ::prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

  static Pollable timer_tag(Pollable::Kind::Timer);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &timer_tag;
  ::epoll_ctl(epfd_, EPOLL_CTL_ADD, timerfd_, &ev);

  for (const Forward& f : opts_.forwards) {
    open_netns(f.listen.netns);
    open_netns(f.target.netns);
    auto in = [](const std::string& ns) { return ns.empty() ? std::string() : ns + "/"; };
    for (unsigned i = 0; i < f.listen.count(); ++i) {
      auto l = std::make_unique<Listener>();
      sockaddr_storage la = f.listen.addr;
      set_port(la, uint16_t(f.listen.port_lo + i));
      l->target = f.target.addr;
      l->target_len = f.target.addr_len;
      l->target_netns = f.target.netns;
      set_port(l->target, uint16_t(f.target.port_lo + i));
      l->desc =
          in(f.listen.netns) + addr_text(la) + " -> " + in(f.target.netns) + addr_text(l->target);
      l->fd = socket_in(f.listen.netns, la.ss_family);
      if (l->fd < 0) throw StartError("socket for " + l->desc + ": " + errno_text(errno));
      int one = 1;
      ::setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(l->fd, reinterpret_cast<sockaddr*>(&la), f.listen.addr_len) != 0)
        throw StartError("cannot bind " + addr_text(la) + ": " + errno_text(errno));
      if (::listen(l->fd, SOMAXCONN) != 0)
        throw StartError("cannot listen on " + addr_text(la) + ": " + errno_text(errno));
      epoll_event lev{};
      lev.events = EPOLLIN;  // level-triggered: accept_from() may stop early
      lev.data.ptr = l.get();
      if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, l->fd, &lev) != 0)
        throw StartError("epoll_ctl: " + errno_text(errno));
      listeners_.push_back(std::move(l));
    }
  }
  if (!opts_.control.empty()) open_control();
}

void Relay::open_netns(const std::string& netns) {
  if (netns.empty() || netns_fds_.count(netns)) return;
  if (home_ns_ < 0) {
    home_ns_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home_ns_ < 0)
      throw StartError("cannot open our own network namespace: " + errno_text(errno));
  }
  const std::string path = "/run/netns/" + netns;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw StartError("network namespace '" + netns + "' (" + path + "): " + errno_text(errno) +
                     " (create it with ip netns add " + netns + ")");
  netns_fds_[netns] = fd;
  // Try it now: entering another namespace needs CAP_SYS_ADMIN, and a relay that cannot should
  // say so at start, not at its first connection.
  int probe = socket_in(netns, AF_INET);
  if (probe < 0)
    throw StartError("cannot make a socket in network namespace '" + netns + "': " +
                     errno_text(errno) + " (entering a namespace needs root / CAP_SYS_ADMIN)");
  ::close(probe);
}

int Relay::socket_in(const std::string& netns, int family) {
  if (netns.empty()) return ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  auto it = netns_fds_.find(netns);
  if (it == netns_fds_.end() || ::setns(it->second, CLONE_NEWNET) != 0) {
    if (it == netns_fds_.end()) errno = ENOENT;
    return -1;
  }
  int fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int e = errno;
  if (::setns(home_ns_, CLONE_NEWNET) != 0) {
    // Every later socket would be made in the wrong namespace: stop rather than misroute.
    std::fprintf(stderr, "tierce-wanem: cannot return to our own network namespace: %s\n",
                 errno_text(errno).c_str());
    std::abort();
  }
  errno = e;
  return fd;
}

Relay::~Relay() {
  conns_.clear();
  listeners_.clear();
  control_clients_.clear();
  if (control_fd_ >= 0) {
    ::close(control_fd_);
    ::unlink(opts_.control.c_str());
  }
  for (int fd : {epfd_, timerfd_, spare_fd_, home_ns_})
    if (fd >= 0) ::close(fd);
  for (auto& [name, fd] : netns_fds_) ::close(fd);
}

void Relay::open_control() {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, opts_.control.c_str(), opts_.control.size() + 1);
  // A socket file left by a relay that was killed is removed; one a live relay answers on is not.
  struct stat st{};
  if (::lstat(opts_.control.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      throw StartError("--control " + opts_.control + " exists and is not a socket");
    int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool live = probe >= 0 && ::connect(probe, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (probe >= 0) ::close(probe);
    if (live) throw StartError("--control " + opts_.control + ": another relay answers there");
    ::unlink(opts_.control.c_str());
  }
  control_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (control_fd_ < 0) throw StartError("control socket: " + errno_text(errno));
  if (::bind(control_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    int e = errno;
    ::close(control_fd_);
    control_fd_ = -1;
    throw StartError("cannot bind --control " + opts_.control + ": " + errno_text(e));
  }
  if (::listen(control_fd_, 16) != 0)
    throw StartError("cannot listen on --control " + opts_.control + ": " + errno_text(errno));
  static Pollable control_tag(Pollable::Kind::ControlListener);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &control_tag;
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, control_fd_, &ev) != 0)
    throw StartError("epoll_ctl: " + errno_text(errno));
}

void Relay::accept_control() {
  for (;;) {
    int fd = ::accept4(control_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        log_line("accept on --control: " + errno_text(errno));
      return;
    }
    auto cc = std::make_unique<ControlClient>();
    cc->fd = fd;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;  // level-triggered: read_control() reads until EAGAIN
    ev.data.ptr = cc.get();
    ::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
    control_clients_.push_back(std::move(cc));
  }
}

void Relay::read_control(ControlClient& cc) {
  // Commands are short; a client that sends more than this without a newline is not one of ours.
  constexpr size_t kMaxLine = 256;
  for (;;) {
    char buf[512];
    ssize_t n = ::recv(cc.fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      cc.dead = true;
      break;
    }
    cc.in.append(buf, size_t(n));
  }
  for (size_t nl; (nl = cc.in.find('\n')) != std::string::npos;) {
    std::string line = cc.in.substr(0, nl);
    cc.in.erase(0, nl + 1);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::string answer = execute(line) + "\n";
    // Answers are one short line: the socket buffer takes it whole, or the client is gone.
    if (::send(cc.fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
        ssize_t(answer.size()))
      cc.dead = true;
  }
  if (cc.in.size() > kMaxLine) {
    std::string answer = "error: line too long\n";
    (void)!::send(cc.fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    cc.dead = true;
  }
}

size_t Relay::reset_all() {
  size_t reset = 0;
  linger lg{1, 0};
  for (auto& c : conns_) {
    if (c->dead) continue;
    for (Side* s : {&c->client, &c->server})
      if (s->fd >= 0) ::setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    c->dead = true;
    schedule(*c);
    ++reset;
  }
  return reset;
}

std::string Relay::execute(const std::string& line) {
  Command cmd;
  std::string error;
  if (!parse_command(line, cmd, error)) {
    log_line("control: '" + line + "': " + error);
    return "error: " + error;
  }
  switch (cmd.kind) {
    case Command::Kind::Cut:
      wake_all();
      cut_ |= cmd.dirs;
      log_line("control: cut " + std::string(cut_name(cmd.dirs)) + " (now cut: " + cut_name(cut_) +
               ")");
      return std::string("ok cut=") + cut_name(cut_);
    case Command::Kind::Heal:
      wake_all();
      cut_ &= ~cmd.dirs;
      log_line("control: heal " + std::string(cut_name(cmd.dirs)) +
               " (still cut: " + cut_name(cut_) + ")");
      return std::string("ok cut=") + cut_name(cut_);
    case Command::Kind::Delay:
      wake_all();
      delay_us_ = cmd.delay_us;
      log_line("control: delay " + std::to_string(delay_us_) + " us");
      return "ok delay_us=" + std::to_string(delay_us_);
    case Command::Kind::Redirect: {
      // An on-path attacker's move (or a wrong address): from now on every accepted connection
      // goes to another target, and the existing ones are reset so that their clients dial again.
      if (cmd.target == "off") {
        redirect_.reset();
      } else {
        Endpoint e = parse_endpoint(cmd.target, "redirect");  // checked by parse_command
        try {
          if (!e.netns.empty()) open_netns(e.netns);
        } catch (const std::exception& x) {
          log_line("control: redirect " + e.text + ": " + x.what());
          return std::string("error: ") + x.what();
        }
        redirect_ = e;
      }
      const size_t reset = reset_all();
      const std::string to = redirect_ ? redirect_->text : std::string("off");
      log_line("control: redirect " + to + " (" + std::to_string(reset) +
               " connection(s) reset; new ones go " +
               (redirect_ ? "to " + to : std::string("to their own target")) + ")");
      return "ok redirect=" + to + " reset=" + std::to_string(reset);
    }
    case Command::Kind::Reset: {
      // A connection reset on the path (a middlebox, a restarted NAT): both peers get an RST.
      const size_t n = reset_all();
      log_line("control: reset (" + std::to_string(n) + " connection(s) reset)");
      return "ok reset=" + std::to_string(n);
    }
    case Command::Kind::Status: {
      uint64_t held_up = 0, held_down = 0, pending = 0;
      for (const auto& c : conns_) {
        if (c->dead) continue;
        held_up += c->up.read_seq - c->up.write_seq;
        held_down += c->down.read_seq - c->down.write_seq;
        pending += c->connect_pending;
      }
      return std::string("ok cut=") + cut_name(cut_) + " delay_us=" + std::to_string(delay_us_) +
             " connections=" + std::to_string(conns_.size()) +
             " pending_connects=" + std::to_string(pending) +
             " accepted=" + std::to_string(stats_.accepted) +
             " held_to_target=" + std::to_string(held_up) +
             " held_to_client=" + std::to_string(held_down) +
             " bytes_to_target=" + std::to_string(stats_.bytes_to_target) +
             " bytes_to_client=" + std::to_string(stats_.bytes_to_client) +
             " redirect=" + (redirect_ ? redirect_->text : std::string("off"));
    }
  }
  return "error: internal: unhandled command";
}

void Relay::accept_from(Listener& l) {
  for (int i = 0; i < 64; ++i) {
    int fd = ::accept4(l.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if ((errno == EMFILE || errno == ENFILE) && spare_fd_ >= 0) {
        // Out of descriptors: take the connection off the queue and refuse it, or a
        // level-triggered listener would spin.
        ::close(spare_fd_);
        int victim = ::accept4(l.fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (victim >= 0) close_with_reset(victim);
        spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        log_line("out of file descriptors: refused a connection on " + l.desc);
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        log_line("accept on " + l.desc + ": " + errno_text(errno));
      return;
    }
    ++stats_.accepted;
    auto c = std::make_unique<Conn>();
    c->target_desc = (l.target_netns.empty() ? "" : l.target_netns + "/") + addr_text(l.target);
    c->target = l.target;
    c->target_len = l.target_len;
    c->target_netns = l.target_netns;
    if (redirect_) {  // control: redirect
      c->target = redirect_->addr;
      c->target_len = redirect_->addr_len;
      set_port(c->target, redirect_->port_lo);
      c->target_netns = redirect_->netns;
      c->target_desc = redirect_->text + " (redirected)";
    }
    c->client.fd = fd;
    c->client.connected = true;
    c->client.writable = true;
    set_nodelay(fd);
    auto now = Clock::now();
    c->up.refilled = c->down.refilled = now;
    c->up.counter = &stats_.bytes_to_target;
    c->down.counter = &stats_.bytes_to_client;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.ptr = &c->client;
    ::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
    // While to-target is cut the target must not even see the connection (a silent network
    // delivers no SYN): connect once it flows again (service()).
    if (cut_ & kCutToTarget)
      c->connect_pending = true;
    else if (!start_connect(*c))
      continue;  // c (and its client socket, already reset) go away here
    Conn& added = *c;
    conns_.push_back(std::move(c));
    added.self = std::prev(conns_.end());
    schedule(added);
  }
}

bool Relay::start_connect(Conn& c) {
  c.connect_pending = false;
  auto fail = [&](const std::string& what) {
    log_line(what);
    ++stats_.connect_failures;
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, c.client.fd, nullptr);
    close_with_reset(c.client.fd);
    c.client.fd = -1;
    c.dead = true;
    return false;
  };
  int sfd = socket_in(c.target_netns, c.target.ss_family);
  if (sfd < 0)
    return fail("socket" +
                (c.target_netns.empty() ? "" : " in network namespace " + c.target_netns) + ": " +
                errno_text(errno));
  c.server.fd = sfd;
  set_nodelay(sfd);
  int rc = ::connect(sfd, reinterpret_cast<const sockaddr*>(&c.target), c.target_len);
  if (rc == 0) {
    c.server.connected = c.server.writable = true;
  } else if (errno != EINPROGRESS) {
    return fail("connect to " + c.target_desc + " failed: " + errno_text(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.ptr = &c.server;
  ::epoll_ctl(epfd_, EPOLL_CTL_ADD, sfd, &ev);
  return true;
}

void Relay::wake_all() {
  for (auto& c : conns_) schedule(*c);
}

void Relay::schedule(Conn& c) {
  if (c.queued) return;
  c.queued = true;
  pending_.push_back(&c);
}

void Relay::arm_timer(Clock::time_point when) {
  if (when == armed_) return;
  armed_ = when;
  auto ns = duration_cast<nanoseconds>(when.time_since_epoch()).count();
  itimerspec its{};
  its.it_value.tv_sec = ns / 1000000000;
  its.it_value.tv_nsec = ns % 1000000000;
  if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
  ::timerfd_settime(timerfd_, TFD_TIMER_ABSTIME, &its, nullptr);
}

void Relay::service(Conn& c, Clock::time_point now, Clock::time_point& next, bool& busy) {
  const bool cut_up = cut_ & kCutToTarget, cut_down = cut_ & kCutToClient;
  if (c.connect_pending && !cut_up && !start_connect(c)) return;
  bool was_broken = c.client.broken || c.server.broken;
  pump(c.up, opts_, delay_us_, cut_up, now, next, busy);
  pump(c.down, opts_, delay_us_, cut_down, now, next, busy);
  if (!was_broken && (c.client.broken || c.server.broken)) {
    // A side broke during this turn: let the other direction see it now rather than wait for an
    // event that may never come (an idle peer).
    pump(c.up, opts_, delay_us_, cut_up, now, next, busy);
    pump(c.down, opts_, delay_us_, cut_down, now, next, busy);
  }
  // A direction whose destination broke does not end the connection by itself: the other one
  // first delivers what it holds. Once both are finished, close both sockets (an RST for a side
  // that still sends, so it learns the connection is gone).
  if (c.up.finished() && c.down.finished()) c.dead = true;
}

void Relay::run(int stop_fd) {
  static Pollable stop_tag(Pollable::Kind::Stop);
  epoll_event sev{};
  sev.events = EPOLLIN;
  sev.data.ptr = &stop_tag;
  ::epoll_ctl(epfd_, EPOLL_CTL_ADD, stop_fd, &sev);

  constexpr int kMaxEvents = 256;
  epoll_event events[kMaxEvents];
  int timeout = -1;
  for (;;) {
    int n = ::epoll_wait(epfd_, events, kMaxEvents, timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("epoll_wait: " + errno_text(errno));
    }
    for (int i = 0; i < n; ++i) {
      auto* p = static_cast<Pollable*>(events[i].data.ptr);
      uint32_t ev = events[i].events;
      switch (p->kind) {
        case Pollable::Kind::Stop:
          return;
        case Pollable::Kind::Timer: {
          uint64_t ticks;
          (void)!::read(timerfd_, &ticks, sizeof ticks);
          armed_ = {};
          break;
        }
        case Pollable::Kind::Listener:
          accept_from(*static_cast<Listener*>(p));
          break;
        case Pollable::Kind::ControlListener:
          accept_control();
          break;
        case Pollable::Kind::ControlClient:
          read_control(*static_cast<ControlClient*>(p));
          break;
        case Pollable::Kind::Side: {
          auto* s = static_cast<Side*>(p);
          if (s->conn->dead) break;
          if (!s->connected) {
            if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) break;  // still connecting
            // The connect to the target finished, one way or the other.
            int err = 0;
            socklen_t len = sizeof err;
            ::getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len);
            if (err == 0 && !(ev & (EPOLLERR | EPOLLHUP))) {
              s->connected = true;
            } else {
              log_line("connect to " + s->conn->target_desc + " failed: " +
                       errno_text(err ? err : ECONNREFUSED));
              ++stats_.connect_failures;
              close_with_reset(s->conn->client.fd);
              s->conn->client.fd = -1;
              s->conn->dead = true;
              schedule(*s->conn);  // removed on this turn
              break;
            }
          }
          schedule(*s->conn);
          if (ev & (EPOLLIN | EPOLLRDHUP)) s->readable = true;
          if (ev & EPOLLOUT) s->writable = true;
          if (ev & (EPOLLERR | EPOLLHUP)) {
            s->broken = true;
            s->readable = true;  // read what is left, then the EOF or the error
          }
          break;
        }
      }
    }

    control_clients_.remove_if([](const std::unique_ptr<ControlClient>& cc) { return cc->dead; });

    auto now = Clock::now();
    while (!timers_.empty() && timers_.begin()->first <= now) {
      Conn* c = timers_.begin()->second;
      timers_.erase(timers_.begin());
      c->wake = Clock::time_point::max();
      schedule(*c);
    }
    working_.swap(pending_);  // both keep their capacity: no allocation per turn
    for (Conn* c : working_) {
      c->queued = false;
      if (c->wake != Clock::time_point::max()) timers_.erase({c->wake, c});
      c->wake = Clock::time_point::max();
      if (!c->dead) {
        c->busy = false;
        service(*c, now, c->wake, c->busy);
      }
      if (c->dead) {
        // Close (not shut down) both: a side with unread bytes gets an RST.
        conns_.erase(c->self);
        continue;
      }
      if (c->busy) schedule(*c);
      if (c->wake != Clock::time_point::max()) timers_.insert({c->wake, c});
    }
    working_.clear();
    const auto next = timers_.empty() ? Clock::time_point::max() : timers_.begin()->first;
    if (!pending_.empty() || next <= Clock::now()) {
      timeout = 0;
    } else {
      timeout = -1;
      if (next != Clock::time_point::max()) arm_timer(next);
    }
  }
}

}  // namespace tierce::wanem
