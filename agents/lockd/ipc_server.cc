// agents/lockd/ipc_server.cc — the local IPC server: socket setup, the epoll loop, and the
// connection state shared with the service's threads.
//
// Threads and ownership:
// - The epoll thread accepts, reads every request, calls the service, and is the only thread
//   that closes a connection or removes it from `owners`.
// - Any thread may send to a connection (a grant's `done`, a revocation): under Conn::mu, and
//   only while !Conn::closed. The epoll thread closes the fd under Conn::mu, so a sender never
//   writes to a closed (or reused) descriptor.
// - Callbacks handed to the service hold a shared_ptr to their Conn and a weak_ptr to the State:
//   a late grant for a closed connection, or after the server is gone, is harmless.
// - No IpcServer lock is ever held while calling into the service (its callbacks take ours).
#include "agents/lockd/ipc_server.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <span>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/unix_socket.h"
#include "dlm/ipc.h"
#include "fabric/socket.h"

namespace tierce::lockd {

namespace ipc = dlm::ipc;
using fabric::LogLevel;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kMaxEvents = 64;
// Frames read from one client per readiness event. One: epoll is level-triggered and reports the
// client again if more wait (round-robin between busy clients), and the usual single request
// costs no extra recv() that would only say EAGAIN (0.6 us on a VM: ~10% of a round trip).
constexpr int kFramesPerTurn = 1;
// Malformed frames logged per connection (a broken client must not flood the log).
constexpr unsigned kMalformedLogged = 5;

std::string errno_text(int e) {
  return std::strerror(e);
}

uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// One peer uid's use, shared by its connections (IpcOptions::max_locks_per_uid,
// max_clients_per_uid). `locks` is the sum of its connections' holds.size() + pending, kept by
// every place that changes those; `conns` changes on the epoll thread only, under State::mu.
struct UidUse {
  std::atomic<size_t> locks{0};
  size_t conns = 0;
};

struct Conn : std::enable_shared_from_this<Conn> {
  dlm::OwnerId owner = 0;
  pid_t pid = -1;
  uid_t uid = uid_t(-1);
  unsigned malformed = 0;  // epoll thread only

  std::mutex mu;  // guards everything below
  int fd = -1;    // closed (and set to -1) by the epoll thread, under mu
  bool closed = false;
  bool overflowed = false;                  // did not read its replies: being disconnected
  std::deque<std::vector<uint8_t>> outbox;  // frames waiting for room in the socket buffer
  size_t outbox_bytes = 0;
  std::unordered_set<dlm::HoldId> holds;
  size_t pending = 0;  // acquisitions whose `done` has not run
  std::shared_ptr<UidUse> uid_use;  // set before the connection is served; never null then

  void uid_locks_down(size_t n = 1) {
    if (uid_use && n) uid_use->locks.fetch_sub(n);
  }

  std::string who() const {
    return "client pid " + std::to_string(pid) + " uid " + std::to_string(uid) + " (owner " +
           std::to_string(owner) + ")";
  }
};

}  // namespace

struct IpcServer::State : std::enable_shared_from_this<IpcServer::State> {
  State(dlm::LocalLockService& s, fabric::LogSink l, IpcOptions o)
      : svc(s),
        log_sink(std::move(l)),
        opts(o),
        quota_holds_per_client(o.max_holds_per_client),
        quota_locks_per_uid(o.max_locks_per_uid),
        quota_clients_per_uid(o.max_clients_per_uid) {}

  dlm::LocalLockService& svc;
  fabric::LogSink log_sink;
  IpcOptions opts;
  // The quotas of opts, changeable while serving (IpcServer::set_quotas): read once per check.
  std::atomic<size_t> quota_holds_per_client, quota_locks_per_uid, quota_clients_per_uid;
  fabric::Fd listen_fd, ep, wake;
  std::string path;
  dev_t dev = 0;
  ino_t ino = 0;
  int listen_tag = 0;  // its address marks the listener in epoll events (nullptr: `wake`)

  std::atomic<bool> stopping{false};
  std::atomic<size_t> nclients{0};
  dlm::OwnerId next_owner = 1;  // epoll thread only

  std::mutex mu;  // guards owners, deferred
  std::unordered_map<dlm::OwnerId, std::shared_ptr<Conn>> owners;
  // One small entry per peer uid ever seen (kept: the accounts of a host are few).
  std::unordered_map<uid_t, std::shared_ptr<UidUse>> uids;
  std::vector<std::pair<dlm::OwnerId, dlm::HoldId>> deferred;  // late grants to release

  std::vector<std::shared_ptr<Conn>> graveyard;  // closed during this epoll batch (epoll thread)

  struct {
    std::atomic<uint64_t> accepted{0}, refused{0}, requests{0}, malformed{0}, revoked_sent{0},
        late_grants{0}, slow_clients{0}, over_client_quota{0}, over_uid_quota{0},
        uid_refused{0};
  } n;

  void log(LogLevel l, const std::string& s) {
    if (log_sink) log_sink(l, s);
  }

  void bind_socket();
  void run();
  void accept_all();
  void read_frames(Conn& c);
  void handle(Conn& c, std::span<const uint8_t> frame, size_t real_len);
  void malformed(Conn& c, const ipc::DecodeError& e);
  void close_conn(Conn& c, const std::string& why);
  void flush(Conn& c);
  void run_deferred();
  void wake_up();

  // Sends one frame to `c` (any thread). Prereq for send_locked: c.mu held.
  bool send(Conn& c, const ipc::Frame& f) {
    std::lock_guard g(c.mu);
    return send_locked(c, f);
  }
  bool send_locked(Conn& c, const ipc::Frame& f);
  void reply(Conn& c, uint64_t req_id, dlm::Status s, std::string message = {}) {
    ipc::Reply r;
    r.req_id = req_id;
    r.status = s;
    r.message = std::move(message);
    ipc::Frame f;
    ipc::encode(r, &f);
    send(c, f);
  }

  static void on_grant(const std::weak_ptr<State>& w, const std::shared_ptr<Conn>& c,
                       uint64_t req_id, const dlm::Grant& g);
  void on_revoked(dlm::OwnerId owner, dlm::HoldId hold, const std::string& why);
};

// ---------------------------------------------------------------------------------------------
// Setup

void IpcServer::State::bind_socket() {
  // Never steals a live lockd's socket, removes a dead one's, sets the mode before listen()
  // (base/unix_socket.h, shared with the writer agent's socket).
  base::UnixListenOptions lo;
  lo.mode = opts.socket_mode;
  lo.who = "tierce-lockd";
  bool stale = false;
  auto fd = base::listen_unix_seqpacket(path, lo, &stale);
  if (!fd) throw std::runtime_error("LOCKD0200 " + fd.message());
  if (stale) log(LogLevel::Info, "LOCKD0207 removed the stale socket " + path + " of a dead lockd");
  listen_fd.reset(std::move(fd).value().release());
  struct stat sb;
  if (::stat(path.c_str(), &sb) == 0) {
    dev = sb.st_dev;
    ino = sb.st_ino;
  }
}

IpcServer::IpcServer(std::string socket_path, dlm::LocalLockService& svc, fabric::LogSink log,
                     IpcOptions opts)
    : path_(std::move(socket_path)), st_(std::make_shared<State>(svc, std::move(log), opts)) {
  st_->path = path_;
  st_->bind_socket();
  st_->ep.reset(::epoll_create1(EPOLL_CLOEXEC));
  st_->wake.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!st_->ep || !st_->wake) {
    int e = errno;
    ::unlink(path_.c_str());
    throw std::runtime_error("LOCKD0200 epoll/eventfd: " + errno_text(e));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &st_->listen_tag;
  ::epoll_ctl(st_->ep.get(), EPOLL_CTL_ADD, st_->listen_fd.get(), &ev);
  ev.data.ptr = nullptr;
  ::epoll_ctl(st_->ep.get(), EPOLL_CTL_ADD, st_->wake.get(), &ev);

  std::weak_ptr<State> w = st_;
  svc.set_revoked_callback([w](dlm::OwnerId o, dlm::HoldId h, const std::string& why) {
    if (auto st = w.lock()) st->on_revoked(o, h, why);
  });
  thread_ = std::thread([st = st_] { st->run(); });
  st_->log(LogLevel::Info, "LOCKD0206 serving local clients on " + path_);
}

IpcServer::~IpcServer() {
  stop();
}

void IpcServer::stop() {
  if (stopped_) return;
  if (thread_.joinable() && thread_.get_id() == std::this_thread::get_id())
    throw std::logic_error("IpcServer::stop() called from the IPC thread");
  stopped_ = true;
  State& st = *st_;
  st.stopping = true;
  st.wake_up();
  if (thread_.joinable()) thread_.join();

  // The epoll thread is gone: this thread now owns the connections.
  std::vector<std::shared_ptr<Conn>> all;
  {
    std::lock_guard g(st.mu);
    for (auto& [o, c] : st.owners) all.push_back(c);
  }
  ipc::Reply bye;
  bye.req_id = 0;
  bye.status = dlm::Status::ShuttingDown;
  bye.message = "tierce-lockd is stopping: every hold of this client is released";
  ipc::Frame f;
  ipc::encode(bye, &f);
  for (auto& c : all) {
    st.send(*c, f);
    st.close_conn(*c, "lockd is stopping");
  }
  st.graveyard.clear();
  st.run_deferred();
  st.listen_fd.reset();
  // Remove the socket file only if it is still ours (a successor may have replaced it).
  struct stat sb;
  if (::stat(path_.c_str(), &sb) == 0 && sb.st_dev == st.dev && sb.st_ino == st.ino)
    ::unlink(path_.c_str());
  st.log(LogLevel::Info, "LOCKD0217 stopped serving local clients on " + path_);
}

void IpcServer::set_quotas(size_t max_holds_per_client, size_t max_locks_per_uid,
                           size_t max_clients_per_uid) {
  st_->quota_holds_per_client.store(max_holds_per_client);
  st_->quota_locks_per_uid.store(max_locks_per_uid);
  st_->quota_clients_per_uid.store(max_clients_per_uid);
}

size_t IpcServer::clients() const {
  return st_->nclients.load();
}

IpcCounters IpcServer::counters() const {
  IpcCounters c;
  c.accepted = st_->n.accepted;
  c.refused = st_->n.refused;
  c.requests = st_->n.requests;
  c.malformed = st_->n.malformed;
  c.revoked_sent = st_->n.revoked_sent;
  c.late_grants = st_->n.late_grants;
  c.slow_clients = st_->n.slow_clients;
  c.over_client_quota = st_->n.over_client_quota;
  c.over_uid_quota = st_->n.over_uid_quota;
  c.uid_refused = st_->n.uid_refused;
  return c;
}

// ---------------------------------------------------------------------------------------------
// The epoll loop

void IpcServer::State::wake_up() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake.get(), &one, sizeof one);
}

void IpcServer::State::run() {
  epoll_event evs[kMaxEvents];
  // Spin (poll without sleeping, yielding the CPU between polls) for a while after activity:
  // the next request of a client in a lock/unlock loop usually comes within a few microseconds;
  // sleeping costs ~35 us of wakeup.
  // Adaptive, as fabric's FrameReader: a spin that ends with nothing (the clients are busy
  // elsewhere, or share this CPU and cannot run while we poll) makes the next batches sleep at
  // once, for a doubling number of batches (up to 64); a spin that finds work resets that.
  Clock::time_point spin_until{};
  bool spinning = false;
  unsigned backoff = 0, skip = 0;
  const bool spin = opts.spin.count() > 0;
  while (!stopping.load(std::memory_order_relaxed)) {
    if (spinning && Clock::now() >= spin_until) {
      spinning = false;
      backoff = std::min(backoff * 2 + 1, 64u);
      skip = backoff;
    }
    int n = ::epoll_wait(ep.get(), evs, kMaxEvents, spinning ? 0 : -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      log(LogLevel::Error, "LOCKD0208 epoll_wait: " + errno_text(errno));
      ::usleep(10000);
      continue;
    }
    if (n == 0) {
      // Yield, not just pause: this VM packs runnable threads onto one vCPU (sched_vcpu_pack), so
      // the client we wait for may be runnable on this very CPU; with nothing else runnable the
      // yield returns at once and this is a plain spin.
      ::sched_yield();
      continue;
    }
    if (spinning) backoff = 0;  // the spin paid off
    for (int i = 0; i < n; ++i) {
      void* p = evs[i].data.ptr;
      if (p == nullptr) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(wake.get(), &v, sizeof v);
        run_deferred();
      } else if (p == &listen_tag) {
        accept_all();
      } else {
        Conn& c = *static_cast<Conn*>(p);
        if (evs[i].events & EPOLLOUT) flush(c);
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) read_frames(c);
      }
    }
    graveyard.clear();  // epoll events of this batch may still have pointed at them
    if (spin && skip == 0) {
      spinning = true;
      spin_until = Clock::now() + opts.spin;
    } else {
      spinning = false;
      if (skip) --skip;
    }
  }
}

void IpcServer::State::accept_all() {
  for (;;) {
    int fd = ::accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      log(LogLevel::Error,
          "LOCKD0208 accept on " + path + ": " + errno_text(errno) +
              (errno == EMFILE || errno == ENFILE ? " (raise the descriptor limit of tierce-lockd)"
                                                  : ""));
      ::usleep(10000);  // out of descriptors: back off instead of spinning on the listener
      return;
    }
    auto c = std::make_shared<Conn>();
    c->fd = fd;
    ucred cr{};
    socklen_t cl = sizeof cr;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0) {
      c->pid = cr.pid;
      c->uid = cr.uid;
    }
    if (nclients.load() >= opts.max_clients) {
      ++n.refused;
      ipc::Reply r;
      r.req_id = 0;
      r.status = dlm::Status::TooMany;
      r.message = "tierce-lockd serves " + std::to_string(opts.max_clients) +
                  " clients already (max_clients): retry later, or raise the limit";
      ipc::Frame f;
      ipc::encode(r, &f);
      [[maybe_unused]] ssize_t s = ::send(fd, f.bytes, f.size, MSG_DONTWAIT | MSG_NOSIGNAL);
      ::close(fd);
      log(LogLevel::Warn, "LOCKD0204 refused client pid " + std::to_string(c->pid) + ": " +
                              std::to_string(opts.max_clients) +
                              " clients connected (max_clients)");
      continue;
    }
    std::shared_ptr<UidUse> use;
    const size_t max_clients_per_uid = quota_clients_per_uid.load(std::memory_order_relaxed);
    {
      std::lock_guard g(mu);
      auto& slot = uids[c->uid];
      if (!slot) slot = std::make_shared<UidUse>();
      if (slot->conns < max_clients_per_uid) {
        ++slot->conns;
        use = slot;
      }
    }
    if (!use) {
      ++n.refused;
      ++n.uid_refused;
      ipc::Reply r;
      r.req_id = 0;
      r.status = dlm::Status::TooMany;
      r.message = "uid " + std::to_string(c->uid) + " has " +
                  std::to_string(max_clients_per_uid) +
                  " connections to tierce-lockd already (max_clients_per_uid): close some";
      ipc::Frame f;
      ipc::encode(r, &f);
      [[maybe_unused]] ssize_t s = ::send(fd, f.bytes, f.size, MSG_DONTWAIT | MSG_NOSIGNAL);
      ::close(fd);
      log(LogLevel::Warn, "LOCKD0220 refused client pid " + std::to_string(c->pid) + " uid " +
                              std::to_string(c->uid) + ": " +
                              std::to_string(max_clients_per_uid) +
                              " connections of that uid (max_clients_per_uid)");
      continue;
    }
    c->uid_use = std::move(use);
    c->owner = next_owner++;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.ptr = c.get();
    if (::epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      log(LogLevel::Error, "LOCKD0208 epoll_ctl: " + errno_text(errno));
      ::close(fd);
      std::lock_guard g(mu);
      --c->uid_use->conns;
      continue;
    }
    {
      std::lock_guard g(mu);
      owners.emplace(c->owner, c);
    }
    ++nclients;
    ++n.accepted;
    log(LogLevel::Debug, "LOCKD0202 " + c->who() + " connected");
  }
}

void IpcServer::State::read_frames(Conn& c) {
  uint8_t buf[ipc::kMaxFrame + 1];
  for (int i = 0; i < kFramesPerTurn; ++i) {
    // Only this thread closes c.fd: reading it without c.mu is safe.
    // MSG_TRUNC: the real size of an oversize message (its tail is discarded by the kernel).
    ssize_t r = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
    if (r > 0) {
      handle(c, std::span<const uint8_t>(buf, std::min(size_t(r), sizeof buf)), size_t(r));
      continue;
    }
    // A zero-length message cannot be told from end of file on SEQPACKET: both end the session.
    if (r == 0) return close_conn(c, "closed by the client");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    return close_conn(c, "read error: " + errno_text(errno));
  }
}

void IpcServer::State::close_conn(Conn& c, const std::string& why) {
  {
    std::lock_guard g(c.mu);
    if (c.closed) return;
    c.closed = true;
    ::epoll_ctl(ep.get(), EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    c.fd = -1;
    c.outbox.clear();
    c.outbox_bytes = 0;
    c.uid_locks_down(c.holds.size());  // the pending ones: when their `done` runs (on_grant)
    c.holds.clear();
  }
  {
    std::lock_guard g(mu);
    if (c.uid_use) --c.uid_use->conns;
    auto it = owners.find(c.owner);
    if (it != owners.end()) {
      graveyard.push_back(std::move(it->second));
      owners.erase(it);
    }
  }
  --nclients;
  log(LogLevel::Debug, "LOCKD0203 " + c.who() + " disconnected: " + why);
  try {
    svc.owner_gone(c.owner);
  } catch (const std::exception& e) {
    log(LogLevel::Error,
        "LOCKD0216 owner_gone(" + std::to_string(c.owner) + ") threw: " + e.what());
  }
}

// ---------------------------------------------------------------------------------------------
// Requests

void IpcServer::State::malformed(Conn& c, const ipc::DecodeError& e) {
  ++n.malformed;
  if (e.req_id) reply(c, *e.req_id, e.status, e.why);
  if (++c.malformed <= kMalformedLogged) {
    std::string what = e.req_id ? std::string("answered ") + std::string(dlm::to_string(e.status))
                                : std::string("dropped (no request id)");
    log(LogLevel::Warn, "LOCKD0201 " + c.who() + " sent a malformed frame: " + e.why + "; " + what +
                            (c.malformed == kMalformedLogged
                                 ? " (further malformed frames of this client not logged)"
                                 : ""));
  }
}

void IpcServer::State::handle(Conn& c, std::span<const uint8_t> frame, size_t real_len) {
  if (real_len > ipc::kMaxFrame) {
    ipc::DecodeError e;
    e.why = "frame of " + std::to_string(real_len) + " bytes (max " +
            std::to_string(ipc::kMaxFrame) + ")";
    // The first 12 bytes of any request carry its id, in every version.
    if (frame[0] == ipc::kMagic && (frame[2] & 0x80) == 0) e.req_id = le64(frame.data() + 4);
    return malformed(c, e);
  }
  ipc::DecodeError err;
  auto req = ipc::decode_request(frame, &err);
  if (!req) return malformed(c, err);
  ++n.requests;

  if (auto* r = std::get_if<ipc::LockRequest>(&*req)) {
    bool over, uid_over = false;
    size_t have, uid_have = 0;
    const size_t max_holds_per_client = quota_holds_per_client.load(std::memory_order_relaxed);
    const size_t max_locks_per_uid = quota_locks_per_uid.load(std::memory_order_relaxed);
    {
      std::lock_guard g(c.mu);
      have = c.holds.size() + c.pending;
      over = have >= max_holds_per_client;
      if (!over) {
        // Taken before the check, given back if over: two connections of one uid racing for the
        // last unit cannot both get it.
        uid_have = c.uid_use->locks.fetch_add(1);
        uid_over = uid_have >= max_locks_per_uid;
        if (uid_over)
          c.uid_locks_down();
        else
          ++c.pending;
      }
    }
    if (over) ++n.over_client_quota;
    if (uid_over) ++n.over_uid_quota;
    if (over)
      return reply(c, r->req_id, dlm::Status::TooMany,
                   "this client has " + std::to_string(have) +
                       " holds and pending requests (max_holds_per_client " +
                       std::to_string(max_holds_per_client) + "): unlock some first");
    if (uid_over) {
      log(LogLevel::Debug, "LOCKD0221 " + c.who() + ": LOCK refused: max_locks_per_uid");
      return reply(c, r->req_id, dlm::Status::TooMany,
                   "uid " + std::to_string(c.uid) + " has " + std::to_string(uid_have) +
                       " holds and pending requests over its connections (max_locks_per_uid " +
                       std::to_string(max_locks_per_uid) + "): unlock some first");
    }
    auto timeout = std::chrono::milliseconds(r->timeout_ms < 0 ? -1 : r->timeout_ms);
    std::weak_ptr<State> w = weak_from_this();
    auto cp = c.shared_from_this();
    const uint64_t id = r->req_id;
    try {
      svc.acquire(c.owner, r->name, r->mode, timeout,
                  [w, cp, id](const dlm::Grant& g) { on_grant(w, cp, id, g); });
    } catch (const std::exception& e) {
      // A service bug: answer, so the client does not wait for a `done` that may never come.
      log(LogLevel::Error, "LOCKD0216 acquire threw: " + std::string(e.what()));
      {
        std::lock_guard g(c.mu);
        if (c.pending) {
          --c.pending;
          c.uid_locks_down();
        }
      }
      reply(c, id, dlm::Status::Internal, std::string("lockd: acquire failed: ") + e.what());
    }
    return;
  }
  if (auto* r = std::get_if<ipc::UnlockRequest>(&*req)) {
    dlm::Status s;
    std::string msg;
    try {
      s = svc.release(c.owner, r->hold);
    } catch (const std::exception& e) {
      log(LogLevel::Error, "LOCKD0216 release threw: " + std::string(e.what()));
      s = dlm::Status::Internal;
      msg = std::string("lockd: release failed: ") + e.what();
    }
    if (s == dlm::Status::Ok) {
      std::lock_guard g(c.mu);
      if (c.holds.erase(r->hold)) c.uid_locks_down();
    } else if (s == dlm::Status::NotHeld) {
      msg = "hold " + std::to_string(r->hold) +
            " is not held by this client (unlocked already, or revoked)";
    }
    if (!r->no_reply) return reply(c, r->req_id, s, std::move(msg));
    // One-way: nobody waits. NotHeld here is a revocation that crossed the unlock (the client
    // was told by REVOKED); anything else is worth a line.
    if (s != dlm::Status::Ok)
      log(s == dlm::Status::NotHeld ? LogLevel::Debug : LogLevel::Warn,
          "LOCKD0213 one-way unlock from " + c.who() + ": " + std::string(dlm::to_string(s)) +
              (msg.empty() ? "" : ": " + msg));
    return;
  }
  if (auto* r = std::get_if<ipc::StatusRequest>(&*req)) {
    std::string text;
    if (r->metrics && !opts.metrics)
      return reply(c, r->req_id, dlm::Status::BadRequest, "this lockd serves no metrics");
    try {
      text = r->metrics ? opts.metrics() : svc.status_text();
    } catch (const std::exception& e) {
      return reply(c, r->req_id, dlm::Status::Internal,
                   std::string(r->metrics ? "lockd: metrics failed: " : "lockd: status failed: ") +
                       e.what());
    }
    if (text.size() > ipc::kMaxStatusText) {
      static const std::string cut = "\n[status text cut at 1 MiB]\n";
      text.resize(ipc::kMaxStatusText - cut.size());
      text += cut;
    }
    // Split into frames of at most kMaxReplyMessage bytes, all but the last flagged MORE.
    size_t off = 0;
    ipc::Frame f;
    do {
      size_t len = std::min(ipc::kMaxReplyMessage, text.size() - off);
      ipc::Reply rep;
      rep.req_id = r->req_id;
      rep.status = dlm::Status::Ok;
      rep.message.assign(text, off, len);
      off += len;
      rep.more = off < text.size();
      ipc::encode(rep, &f);
      if (!send(c, f)) break;
    } while (off < text.size());
  }
}

void IpcServer::State::on_grant(const std::weak_ptr<State>& w, const std::shared_ptr<Conn>& c,
                                uint64_t req_id, const dlm::Grant& g) {
  ipc::Reply r;
  r.req_id = req_id;
  r.status = g.status;
  r.hold = g.status == dlm::Status::Ok ? g.hold : 0;
  r.token = g.status == dlm::Status::Ok ? g.token : 0;
  r.valid_until = g.status == dlm::Status::Ok ? g.valid_until_ns : 0;
  r.message = g.message;
  ipc::Frame f;
  ipc::encode(r, &f);
  // Taken before c->mu: if this is the last reference (the server is gone), the State is
  // destroyed on return, never under the connection's mutex.
  std::shared_ptr<State> st = w.lock();
  bool late;
  {
    std::lock_guard lk(c->mu);
    // The pending unit counted in the uid's use becomes a hold, or goes.
    bool counted = c->pending > 0;
    if (c->pending) --c->pending;
    late = c->closed || !st;
    bool kept = false;
    if (!late) {
      if (g.status == dlm::Status::Ok) kept = c->holds.insert(g.hold).second;
      st->send_locked(*c, f);
    }
    if (counted && !kept) c->uid_locks_down();
  }
  if (late && g.status == dlm::Status::Ok) {
    // Granted after the client left (owner_gone may have run before the grant): release it on
    // the epoll thread (`done` must not call back into the service).
    if (st) {
      ++st->n.late_grants;
      {
        std::lock_guard lk(st->mu);
        st->deferred.emplace_back(c->owner, g.hold);
      }
      st->wake_up();
    }
  }
}

void IpcServer::State::run_deferred() {
  std::vector<std::pair<dlm::OwnerId, dlm::HoldId>> todo;
  {
    std::lock_guard g(mu);
    todo.swap(deferred);
  }
  for (auto [owner, hold] : todo) {
    dlm::Status s = dlm::Status::Internal;
    try {
      s = svc.release(owner, hold);
    } catch (const std::exception& e) {
      log(LogLevel::Error, "LOCKD0216 release threw: " + std::string(e.what()));
    }
    log(LogLevel::Info, "LOCKD0205 hold " + std::to_string(hold) + " was granted after owner " +
                            std::to_string(owner) + " disconnected: released (" +
                            std::string(dlm::to_string(s)) + ")");
  }
}

void IpcServer::State::on_revoked(dlm::OwnerId owner, dlm::HoldId hold, const std::string& why) {
  std::shared_ptr<Conn> c;
  {
    std::lock_guard g(mu);
    auto it = owners.find(owner);
    if (it != owners.end()) c = it->second;
  }
  if (!c) {
    log(LogLevel::Debug, "LOCKD0210 hold " + std::to_string(hold) + " of owner " +
                             std::to_string(owner) + " revoked after its client left: " + why);
    return;
  }
  ipc::RevokedEvent e{hold, why};
  ipc::Frame f;
  ipc::encode(e, &f);
  bool sent;
  {
    std::lock_guard g(c->mu);
    if (c->holds.erase(hold)) c->uid_locks_down();
    sent = send_locked(*c, f);
  }
  if (sent) ++n.revoked_sent;
  log(LogLevel::Warn, "LOCKD0209 hold " + std::to_string(hold) + " of " + c->who() +
                          " revoked: " + why + (sent ? "" : " (the client could not be told)"));
}

// ---------------------------------------------------------------------------------------------
// Sending

bool IpcServer::State::send_locked(Conn& c, const ipc::Frame& f) {
  if (c.closed || c.overflowed) return false;
  if (c.outbox.empty()) {
    for (;;) {
      ssize_t r = ::send(c.fd, f.bytes, f.size, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (r >= 0) return true;
      if (errno != EINTR) break;
    }
    // The peer is gone (EPIPE, ECONNRESET): the epoll thread sees the hang-up and closes.
    if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
    // The client's socket buffer is full: queue, and let the epoll thread flush on EPOLLOUT.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLOUT;
    ev.data.ptr = &c;
    ::epoll_ctl(ep.get(), EPOLL_CTL_MOD, c.fd, &ev);
  }
  if (c.outbox_bytes + f.size > opts.max_outbox_bytes) {
    c.overflowed = true;
    ++n.slow_clients;
    ::shutdown(c.fd, SHUT_RDWR);  // the epoll thread sees the hang-up and closes
    log(LogLevel::Warn, "LOCKD0212 " + c.who() + " does not read its replies (" +
                            std::to_string(c.outbox_bytes) + " bytes waiting): disconnected");
    return false;
  }
  c.outbox.emplace_back(f.bytes, f.bytes + f.size);
  c.outbox_bytes += f.size;
  return true;
}

void IpcServer::State::flush(Conn& c) {
  std::lock_guard g(c.mu);
  if (c.closed) return;
  while (!c.outbox.empty()) {
    auto& b = c.outbox.front();
    ssize_t r = ::send(c.fd, b.data(), b.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // still full: wait for EPOLLOUT
      return;                                               // gone: the hang-up closes it
    }
    c.outbox_bytes -= b.size();
    c.outbox.pop_front();
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.ptr = &c;
  ::epoll_ctl(ep.get(), EPOLL_CTL_MOD, c.fd, &ev);
}

}  // namespace tierce::lockd
