// dlm/client.cc — LockClient: a process's connection to its lockd, without a thread of its own.
//
// Leader/follower: a caller registers its request id, sends the frame (send_mu), then waits. One
// waiting caller at a time is the *reader* (`reader_active`): it reads frames from the socket and
// dispatches each under `mu` — its own reply ends its turn, replies of other callers go to their
// slots (and wake them through `cv`), REVOKED events are queued. When the reader leaves, another
// waiter takes over. Nothing reads the socket while nobody waits: revocations then stay in the
// socket buffer until revoked()/next_revoked() drains them (event_fd() is readable meanwhile).
//
// event_fd() is an epoll descriptor watching the socket (any frame pending, or end of
// connection) and an eventfd kept readable while the revocation queue is not empty. Once the
// connection is lost, the socket leaves the set: the descriptor stays readable only while
// revocations (one per hold that was live, synthesised) wait to be taken.
#include "dlm/client.h"

#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "dlm/ipc.h"

namespace tierce::dlm {

namespace {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
using namespace std::chrono_literals;
constexpr Deadline kForever = Deadline::max();

// Poll the socket this long for a reply before sleeping in poll(2) (yielding the CPU between
// polls): on a VM, waking a sleeping thread costs ~35 us, more than a lock round trip. When a spin
// comes back empty and the reply then comes soon after (within kSpinUseful: lockd is slow or shares
// this CPU, so spinning only delays it) the next waits sleep at once, for a doubling number of
// waits (up to 64). A reply that comes much later is a contended lock, not a slow lockd: no
// penalty. $TIERCE_LOCK_SPIN_US overrides kSpin (0: never spin, e.g. on a host with one CPU).
constexpr auto kSpin = 50us;
constexpr auto kSpinUseful = 1000us;

std::chrono::microseconds spin_time() {
  static const std::chrono::microseconds t = [] {
    const char* e = std::getenv("TIERCE_LOCK_SPIN_US");
    if (!e || !*e) return std::chrono::microseconds(kSpin);
    char* end = nullptr;
    long v = std::strtol(e, &end, 10);
    return (*end || v < 0 || v > 100000) ? std::chrono::microseconds(kSpin)
                                         : std::chrono::microseconds(v);
  }();
  return t;
}
// A lock() with timeout T waits for lockd's reply until T + this (lockd enforces T itself; the
// margin covers scheduling and a busy lockd).
constexpr auto kLockReplyMargin = 2000ms;
// UNLOCK and STATUS are answered at once by a live lockd.
constexpr auto kOpTimeout = 10000ms;
// A STATUS reply longer than this (over all its frames) is cut (lockd caps it at 1 MiB anyway).
constexpr size_t kMaxStatusAssembled = 2 * ipc::kMaxStatusText;

class FdOwner {
 public:
  FdOwner() = default;
  ~FdOwner() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdOwner(const FdOwner&) = delete;
  FdOwner& operator=(const FdOwner&) = delete;
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

int ms_until(Deadline d) {
  if (d == kForever) return -1;
  auto now = Clock::now();
  if (d <= now) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(d - now).count();
  return ms > INT_MAX ? INT_MAX : int(ms);
}

Deadline deadline_after(std::chrono::milliseconds t) {
  auto now = Clock::now();
  if (t > std::chrono::duration_cast<std::chrono::milliseconds>(kForever - now) / 2)
    return kForever;
  return now + t;
}

std::string status_message(const std::string& what, Status s, const std::string& detail) {
  std::string m = what + ": " + std::string(to_string(s));
  if (!detail.empty()) m += ": " + detail;
  return m;
}

}  // namespace

struct LockClient::Impl {
  std::string path;
  FdOwner sock, ep, ev;

  std::mutex send_mu;  // one frame on the wire at a time (and one writer waiting for room)

  std::mutex mu;  // guards everything below
  std::condition_variable cv;
  bool reader_active = false;
  struct Slot {
    bool is_lock = false;
    bool done = false;
    bool abandoned = false;  // the caller gave up: a late grant is released (orphans)
    ipc::Reply reply;
    std::string text;  // STATUS: the frames so far
  };
  std::unordered_map<uint64_t, Slot> pending;
  uint64_t next_id = 1;
  std::deque<Revocation> revocations;
  bool ev_signalled = false;
  std::unordered_set<uint64_t> holds;  // live holds: revoked (synthesised) if the connection dies
  // Holds lockd revoked (REVOKED) whose revocation the caller has not taken yet: lockd keeps
  // them held at their home until this library acknowledges (an UNLOCK of the hold, sent when
  // revoked()/next_revoked() hands the revocation over, or unlock() answers NotHeld for it).
  std::unordered_set<uint64_t> unacked;
  std::vector<uint64_t> orphans;       // granted after their caller gave up: to release
  bool dead = false;
  Status dead_status = Status::Internal;
  std::string dead_message;

  // Reader-only state (the thread with reader_active).
  unsigned backoff = 0, skip = 0;

  // --- all under mu -------------------------------------------------------------------------
  void signal_event() {
    if (!ev_signalled && !revocations.empty()) {
      uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(ev.get(), &one, sizeof one);
      ev_signalled = true;
    }
  }
  void clear_event_if_empty() {
    if (ev_signalled && revocations.empty()) {
      uint64_t v;
      [[maybe_unused]] ssize_t n = ::read(ev.get(), &v, sizeof v);
      ev_signalled = false;
    }
  }
  void mark_dead(Status s, std::string message) {
    if (dead) return;
    dead = true;
    dead_status = s;
    dead_message = std::move(message);
    for (uint64_t h : holds)
      revocations.push_back({h, "the connection to lockd is lost: " + dead_message});
    holds.clear();
    unacked.clear();  // lockd releases what the connection held when it closes
    signal_event();
    // The socket stays readable (EOF) forever: keep it out of event_fd's set.
    ::epoll_ctl(ep.get(), EPOLL_CTL_DEL, sock.get(), nullptr);
    ::shutdown(sock.get(), SHUT_RDWR);
    cv.notify_all();
  }
  std::string closed_message() const {
    return "lockd closed the connection (" + path +
           "): tierce-lockd stopped or crashed; every hold of this client is lost";
  }
  void dispatch(const uint8_t* b, size_t n);

  // --- outside mu ---------------------------------------------------------------------------
  // One frame into buf (kMaxFrame + 1 bytes): its size, 0 at end of connection (or a read
  // error: *err says which), -1 past the deadline.
  // blocking: wait (spin, then sleep) until the deadline; else only take what is there.
  ssize_t read_frame(uint8_t* buf, Deadline d, bool blocking, std::string* err);
  void send_frame(const ipc::Frame& f, Deadline d);
  // Reads frames until slot `id` is done, the connection dies or the deadline passes.
  // Prereq: this thread is the reader.
  void lead(uint64_t id, Deadline d);
  // Reads every frame already waiting, without blocking (when nobody else is reading).
  void drain();
  ipc::Reply call(const ipc::Request& r, uint64_t id, bool is_lock, Deadline d,
                  const std::string& what);
  uint64_t new_id(bool is_lock);
  void flush_orphans();
  // UNLOCK, one-way (NOREPLY). Throws LockError when the frame cannot be sent.
  void send_unlock(uint64_t hold);
  // The caller now knows these holds are revoked: acknowledge those lockd revoked (UNLOCK,
  // one-way; lockd answers nothing and lets their home hand the locks on). Best effort: a
  // connection that is gone released them anyway.
  void acknowledge(const std::vector<uint64_t>& revoked);
};

// ---------------------------------------------------------------------------------------------
// Frames

void LockClient::Impl::dispatch(const uint8_t* b, size_t n) {
  ipc::DecodeError err;
  auto e =
      n > ipc::kMaxFrame ? std::nullopt : ipc::decode_event(std::span<const uint8_t>(b, n), &err);
  if (!e) {
    if (n > ipc::kMaxFrame) err.why = "frame of " + std::to_string(n) + " bytes";
    mark_dead(Status::Internal, "lockd (" + path + ") sent a malformed frame (" + err.why +
                                    "): are tierce-lockd and this library of the same release?");
    return;
  }
  if (auto* ev_ = std::get_if<ipc::RevokedEvent>(&*e)) {
    holds.erase(ev_->hold);
    unacked.insert(ev_->hold);
    revocations.push_back({ev_->hold, std::move(ev_->why)});
    signal_event();
    return;
  }
  auto& r = std::get<ipc::Reply>(*e);
  if (r.req_id == 0) {  // about the connection: lockd refuses us or is stopping
    mark_dead(r.status, "tierce-lockd (" + path + "): " + r.message);
    return;
  }
  auto it = pending.find(r.req_id);
  if (it == pending.end()) return;  // an answer nobody waits for (already timed out): dropped
  Slot& s = it->second;
  if (r.more) {
    if (s.text.size() + r.message.size() <= kMaxStatusAssembled) s.text += r.message;
    return;
  }
  if (s.abandoned) {
    if (s.is_lock && r.status == Status::Ok) orphans.push_back(r.hold);
    pending.erase(it);
    return;
  }
  if (!s.text.empty()) r.message = std::move(s.text) + r.message;
  if (s.is_lock && r.status == Status::Ok) holds.insert(r.hold);
  s.reply = std::move(r);
  s.done = true;
  cv.notify_all();
}

ssize_t LockClient::Impl::read_frame(uint8_t* buf, Deadline d, bool blocking, std::string* err) {
  const auto spin_for = spin_time();
  bool spinning = blocking && spin_for.count() > 0 && skip == 0;
  if (blocking && skip > 0) --skip;
  // Not spinning: a reply is rarely there yet, so sleep in poll() first (a recv() first would
  // only say EAGAIN: one syscall saved per request).
  bool poll_first = blocking && !spinning;
  Deadline spin_start{}, spin_end{};
  bool spin_failed = false, reset_seen = false;
  for (;;) {
    if (poll_first) {
      poll_first = false;
      pollfd p{sock.get(), POLLIN, 0};
      if (::poll(&p, 1, ms_until(d)) < 0 && errno != EINTR) {
        *err = std::string("poll: ") + std::strerror(errno);
        return 0;
      }
    }
    ssize_t n = ::recv(sock.get(), buf, ipc::kMaxFrame + 1, MSG_DONTWAIT | MSG_TRUNC);
    if (n >= 0) {
      if (spinning) {
        backoff = 0;  // the spin paid off
      } else if (spin_failed && Clock::now() - spin_start < kSpinUseful) {
        backoff = std::min(backoff * 2 + 1, 64u);
        skip = backoff;
      }
      return n;
    }
    if (errno == EINTR) continue;
    if (errno == ECONNRESET && !reset_seen) {
      // lockd closed while our request was unread in its queue: the kernel reports the reset
      // before the frames still queued for us (e.g. why lockd refused or is stopping), and
      // clears it. Read on: those frames, then end of file.
      reset_seen = true;
      continue;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *err = std::strerror(errno);
      return 0;
    }
    if (spinning) {
      auto now = Clock::now();
      if (spin_end == Deadline{}) {
        spin_start = now;
        spin_end = now + spin_for;
      }
      if (now < spin_end && now < d) {
        // Yield between polls: lockd may be runnable on this very CPU (VMs pack threads onto
        // few vCPUs); then it runs at once instead of waiting for our spin to end. With nothing
        // else runnable the yield returns at once.
        ::sched_yield();
        continue;
      }
      spinning = false;  // the spin came back empty: sleep (the back-off is decided on arrival)
      spin_failed = true;
    }
    int ms = ms_until(d);
    if (ms == 0) return -1;
    pollfd p{sock.get(), POLLIN, 0};
    int r = ::poll(&p, 1, ms);
    if (r < 0 && errno != EINTR) {
      *err = std::string("poll: ") + std::strerror(errno);
      return 0;
    }
  }
}

void LockClient::Impl::send_frame(const ipc::Frame& f, Deadline d) {
  std::lock_guard g(send_mu);
  for (;;) {
    ssize_t n = ::send(sock.get(), f.bytes, f.size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) return;
    int e = errno;
    if (e == EINTR) continue;
    if (e == EAGAIN || e == EWOULDBLOCK) {
      pollfd p{sock.get(), POLLOUT, 0};
      int ms = ms_until(d);
      if (ms == 0 || ::poll(&p, 1, ms) == 0)
        throw LockError(Status::Internal,
                        "tierce-lockd (" + path + ") does not read requests: is it hung?");
      continue;
    }
    if (e == EPIPE || e == ECONNRESET || e == ENOTCONN) {
      drain();  // a last frame may say why (lockd stopping)
      std::lock_guard lk(mu);
      mark_dead(Status::Internal, closed_message());
      throw LockError(dead_status, dead_message);
    }
    throw LockError(Status::Internal,
                    "sending to tierce-lockd (" + path + "): " + std::strerror(e));
  }
}

// ---------------------------------------------------------------------------------------------
// Leader/follower

void LockClient::Impl::lead(uint64_t id, Deadline d) {
  uint8_t buf[ipc::kMaxFrame + 1];
  for (;;) {
    std::string err;
    ssize_t n = read_frame(buf, d, true, &err);
    std::lock_guard lk(mu);
    if (n < 0) return;  // deadline
    if (n == 0) {
      mark_dead(Status::Internal, err.empty() ? closed_message()
                                              : "reading from tierce-lockd (" + path + "): " + err);
      return;
    }
    dispatch(buf, size_t(n));
    if (dead) return;
    auto it = pending.find(id);
    if (it == pending.end() || it->second.done) return;
  }
}

void LockClient::Impl::drain() {
  {
    std::lock_guard lk(mu);
    if (reader_active || dead) return;  // the reader drains; a dead socket has nothing left
    reader_active = true;
  }
  uint8_t buf[ipc::kMaxFrame + 1];
  for (;;) {
    std::string err;
    ssize_t n = read_frame(buf, Clock::now(), false, &err);
    std::lock_guard lk(mu);
    if (n == 0) mark_dead(Status::Internal, err.empty() ? closed_message() : err);
    if (n > 0) dispatch(buf, size_t(n));
    if (n <= 0 || dead) {
      reader_active = false;
      cv.notify_all();
      return;
    }
  }
}

uint64_t LockClient::Impl::new_id(bool is_lock) {
  std::lock_guard lk(mu);
  if (dead) throw LockError(dead_status, dead_message);
  uint64_t id = next_id++;
  pending[id].is_lock = is_lock;
  return id;
}

ipc::Reply LockClient::Impl::call(const ipc::Request& req, uint64_t id, bool is_lock, Deadline d,
                                  const std::string& what) {
  ipc::Frame f;
  ipc::encode(req, &f);
  try {
    send_frame(f, d);
  } catch (...) {
    std::lock_guard lk(mu);
    pending.erase(id);
    throw;
  }

  std::unique_lock lk(mu);
  for (;;) {
    auto it = pending.find(id);
    Slot& s = it->second;
    if (s.done) {
      ipc::Reply r = std::move(s.reply);
      pending.erase(it);
      return r;
    }
    if (dead) {
      pending.erase(it);
      throw LockError(dead_status, dead_message);
    }
    if (d != kForever && Clock::now() >= d) {
      if (is_lock) {
        s.abandoned = true;  // lockd may still grant it: dispatch() releases it then
      } else {
        pending.erase(it);
      }
      throw LockError(
          is_lock ? Status::Timeout : Status::Internal,
          what + ": tierce-lockd (" + path + ") did not answer in time" +
              (is_lock ? " (the request is withdrawn)" : ": is it overloaded or hung?"));
    }
    if (!reader_active) {
      reader_active = true;
      lk.unlock();
      try {
        lead(id, d);
      } catch (...) {
        lk.lock();
        reader_active = false;
        cv.notify_all();
        throw;
      }
      lk.lock();
      reader_active = false;
      cv.notify_all();  // another waiter becomes the reader
      continue;
    }
    if (d == kForever) {
      cv.wait(lk);
    } else {
      cv.wait_until(lk, d);
    }
  }
}

void LockClient::Impl::flush_orphans() {
  std::vector<uint64_t> todo;
  {
    std::lock_guard lk(mu);
    if (orphans.empty() || dead) return;
    todo.swap(orphans);
  }
  for (uint64_t h : todo) {
    try {
      send_unlock(h);
    } catch (const LockError&) {  // the connection is going: lockd releases it with the rest
    }
  }
}

void LockClient::Impl::send_unlock(uint64_t hold) {
  uint64_t id;
  {
    std::lock_guard lk(mu);
    id = next_id++;  // not registered: no answer comes (NOREPLY)
  }
  ipc::Frame f;
  ipc::encode(ipc::UnlockRequest{id, hold, true}, &f);
  send_frame(f, deadline_after(kOpTimeout));
}

void LockClient::Impl::acknowledge(const std::vector<uint64_t>& revoked) {
  for (uint64_t h : revoked) {
    {
      std::lock_guard lk(mu);
      if (dead || unacked.erase(h) == 0) continue;
    }
    try {
      send_unlock(h);
    } catch (const LockError&) {
      return;  // the connection is gone: lockd released everything it held
    }
  }
}

// ---------------------------------------------------------------------------------------------
// LockClient

std::string LockClient::default_socket() {
  const char* e = std::getenv("TIERCE_LOCKD_SOCKET");
  return e && *e ? std::string(e) : std::string("/run/tierce/lockd.sock");
}

LockClient::LockClient(const std::string& socket_path, std::chrono::milliseconds connect_timeout)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = socket_path;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof a.sun_path)
    throw LockError(Status::Internal, "lockd socket path '" + socket_path +
                                          "' is empty or too long (max " +
                                          std::to_string(sizeof a.sun_path - 1) + " bytes)");
  std::memcpy(a.sun_path, socket_path.data(), socket_path.size());
  m.sock.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (m.sock.get() < 0)
    throw LockError(Status::Internal, std::string("socket(AF_UNIX): ") + std::strerror(errno));
  const Deadline d = deadline_after(connect_timeout);
  for (;;) {
    if (::connect(m.sock.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    int e = errno;
    if (e == EINTR) continue;
    // A full backlog (a busy lockd, or one that is starting): retry until the deadline.
    if ((e == EAGAIN || e == EINPROGRESS) && Clock::now() < d) {
      std::this_thread::sleep_for(1ms);
      continue;
    }
    std::string hint;
    if (e == ENOENT || e == ECONNREFUSED)
      hint =
          ": is tierce-lockd running on this node, and is this its socket? (set "
          "TIERCE_LOCKD_SOCKET to the path given to tierce-lockd -s)";
    else if (e == EACCES || e == EPERM)
      hint = ": the socket's group may lock; add this user to it (or run as that group)";
    else if (e == EPROTOTYPE)
      hint = ": this socket is not a tierce-lockd socket";
    else if (e == EAGAIN || e == EINPROGRESS)
      hint = ": tierce-lockd did not accept within " + std::to_string(connect_timeout.count()) +
             " ms (overloaded?)";
    throw LockError(Status::Internal, "cannot connect to tierce-lockd at " + socket_path + ": " +
                                          std::strerror(e) + hint);
  }
  m.ep.reset(::epoll_create1(EPOLL_CLOEXEC));
  m.ev.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (m.ep.get() < 0 || m.ev.get() < 0)
    throw LockError(Status::Internal, std::string("epoll/eventfd: ") + std::strerror(errno));
  epoll_event e{};
  e.events = EPOLLIN;
  ::epoll_ctl(m.ep.get(), EPOLL_CTL_ADD, m.sock.get(), &e);
  ::epoll_ctl(m.ep.get(), EPOLL_CTL_ADD, m.ev.get(), &e);
}

LockClient::~LockClient() = default;

namespace {

std::string lock_what(const std::string& name, Mode mode) {
  return "lock '" + name + "' (" + std::string(to_string(mode)) + ")";
}

// Status::Ok, or WouldBlock for a try-lock that failed; throws otherwise.
ipc::Reply acquire(LockClient::Impl& m, const std::string& name, Mode mode,
                   std::chrono::milliseconds timeout) {
  if (auto why = ipc::name_problem(name); !why.empty()) throw LockError(Status::BadName, std::string(why));
  if (mode != Mode::Shared && mode != Mode::Exclusive)
    throw LockError(Status::BadRequest,
                    "mode " + std::to_string(int(mode)) + " is not a lock mode");
  m.flush_orphans();
  ipc::LockRequest r;
  r.mode = mode;
  r.name = name;
  Deadline d = kForever;
  if (timeout.count() < 0) {
    r.timeout_ms = -1;
  } else {
    r.timeout_ms = int32_t(std::min<int64_t>(timeout.count(), INT32_MAX));
    d = deadline_after(std::chrono::milliseconds(r.timeout_ms) + kLockReplyMargin);
  }
  r.req_id = m.new_id(true);
  ipc::Reply rep = m.call(r, r.req_id, true, d, lock_what(name, mode));
  if (rep.status == Status::Ok && rep.valid_until != 0 &&
      uint64_t(std::chrono::nanoseconds(Clock::now().time_since_epoch()).count()) >=
          rep.valid_until) {
    // Read after lockd's lease on the lock's home ended: lockd (between its lease check and
    // its write) or this process (before this read) was frozen or slow, and the home may have
    // given the lock to another node already. Not used: released, LeaseLost (docs/dlm.md).
    {
      std::lock_guard lk(m.mu);
      m.holds.erase(rep.hold);
      m.orphans.push_back(rep.hold);
    }
    m.flush_orphans();
    throw LockError(Status::LeaseLost,
                    status_message(lock_what(name, mode), Status::LeaseLost,
                                   "granted (token " + std::to_string(rep.token) +
                                       "), but the grant was read after the end of "
                                       "tierce-lockd's lease on the lock's home (was lockd or "
                                       "this process frozen?): not used, released; retry"));
  }
  if (rep.status == Status::Ok || (rep.status == Status::WouldBlock && timeout.count() == 0))
    return rep;
  std::string detail = rep.message;
  if (detail.empty() && rep.status == Status::Timeout)
    detail = "not granted within " + std::to_string(timeout.count()) + " ms";
  throw LockError(rep.status, status_message(lock_what(name, mode), rep.status, detail));
}

}  // namespace

HeldLock LockClient::lock(const std::string& name, Mode mode, std::chrono::milliseconds timeout) {
  ipc::Reply r = acquire(*impl_, name, mode, timeout);
  if (r.status != Status::Ok)
    throw LockError(r.status, status_message(lock_what(name, mode), r.status,
                                             r.message.empty() ? "the lock is held" : r.message));
  return HeldLock(this, r.hold, r.token, name, mode);
}

std::optional<HeldLock> LockClient::try_lock(const std::string& name, Mode mode) {
  ipc::Reply r = acquire(*impl_, name, mode, std::chrono::milliseconds(0));
  if (r.status != Status::Ok) return std::nullopt;
  return HeldLock(this, r.hold, r.token, name, mode);
}

// One-way: lockd answers nothing (NOREPLY), the caller never waits for a release (as the
// shared release of docs/dlm.md). Whether the hold is still ours is known here: frames already
// delivered are read first (a revocation that reached us makes this NotHeld), and lockd handles
// a connection's frames in order, so this client's next request sees the release. A revocation
// crossing the unlock in flight is still reported by revoked().
void LockClient::unlock(uint64_t hold) {
  Impl& m = *impl_;
  m.drain();
  bool held, revoked;
  {
    std::lock_guard lk(m.mu);
    if (m.dead) throw LockError(m.dead_status, m.dead_message);
    held = m.holds.erase(hold) != 0;
    revoked = !held && m.unacked.count(hold) != 0;
  }
  if (!held) {
    // Revoked by lockd: the caller learns it here, and stops using it (acknowledged; the
    // revocation is still reported by revoked()).
    if (revoked) m.acknowledge({hold});
    throw LockError(Status::NotHeld,
                    "unlock of hold " + std::to_string(hold) +
                        (revoked ? ": revoked by lockd (see revoked())"
                                 : ": not held by this client (unlocked already, or revoked: "
                                   "see revoked())"));
  }
  m.flush_orphans();
  m.send_unlock(hold);
}

std::vector<Revocation> LockClient::revoked() {
  Impl& m = *impl_;
  m.drain();
  std::vector<Revocation> out;
  {
    std::lock_guard lk(m.mu);
    out.assign(std::make_move_iterator(m.revocations.begin()),
               std::make_move_iterator(m.revocations.end()));
    m.revocations.clear();
    m.clear_event_if_empty();
  }
  std::vector<uint64_t> holds;
  for (const auto& r : out) holds.push_back(r.hold);
  m.acknowledge(holds);  // handed over: the caller knows
  return out;
}

std::optional<Revocation> LockClient::next_revoked() {
  Impl& m = *impl_;
  m.drain();
  std::optional<Revocation> r;
  {
    std::lock_guard lk(m.mu);
    if (m.revocations.empty()) return std::nullopt;
    r = std::move(m.revocations.front());
    m.revocations.pop_front();
    m.clear_event_if_empty();
  }
  m.acknowledge({r->hold});
  return r;
}

bool LockClient::connected() {
  Impl& m = *impl_;
  m.drain();
  std::lock_guard lk(m.mu);
  return !m.dead;
}

int LockClient::event_fd() const {
  return impl_->ep.get();
}

std::string LockClient::status() {
  Impl& m = *impl_;
  uint64_t id = m.new_id(false);
  ipc::Reply r = m.call(ipc::StatusRequest{id}, id, false, deadline_after(kOpTimeout), "status");
  if (r.status != Status::Ok)
    throw LockError(r.status, status_message("status", r.status, r.message));
  return r.message;
}

std::string LockClient::metrics() {
  Impl& m = *impl_;
  uint64_t id = m.new_id(false);
  ipc::Reply r =
      m.call(ipc::StatusRequest{id, true}, id, false, deadline_after(kOpTimeout), "metrics");
  if (r.status != Status::Ok)
    throw LockError(r.status, status_message("metrics", r.status, r.message));
  return r.message;
}

// ---------------------------------------------------------------------------------------------
// HeldLock

HeldLock::HeldLock(HeldLock&& o) noexcept
    : client_(std::exchange(o.client_, nullptr)),
      hold_(o.hold_),
      token_(o.token_),
      name_(std::move(o.name_)),
      mode_(o.mode_) {}

HeldLock& HeldLock::operator=(HeldLock&& o) noexcept {
  if (this != &o) {
    if (client_) {
      try {
        unlock();
      } catch (...) {
      }
    }
    client_ = std::exchange(o.client_, nullptr);
    hold_ = o.hold_;
    token_ = o.token_;
    name_ = std::move(o.name_);
    mode_ = o.mode_;
  }
  return *this;
}

HeldLock::~HeldLock() {
  if (client_) {
    try {
      unlock();
    } catch (...) {  // documented: call unlock() to see errors
    }
  }
}

void HeldLock::unlock() {
  if (!client_) throw LockError(Status::NotHeld, "this HeldLock holds nothing (moved or unlocked)");
  LockClient* c = std::exchange(client_, nullptr);
  c->unlock(hold_);
}

uint64_t HeldLock::release_ownership() {
  client_ = nullptr;
  return hold_;
}

}  // namespace tierce::dlm
