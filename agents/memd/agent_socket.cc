// agents/memd/agent_socket.cc — see agent_socket.h.
#include "agents/memd/agent_socket.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "base/unix_socket.h"

namespace tierce::memd {

namespace aw = coherence::agentwire;
using fabric::LogLevel;

AgentSocket::AgentSocket(AgentSocketOptions o, Handler handle, std::function<void()> on_unserved,
                         fabric::LogSink log)
    : o_(std::move(o)), handle_(std::move(handle)), on_unserved_(std::move(on_unserved)),
      log_(std::move(log)) {
  base::UnixListenOptions lo;
  lo.mode = o_.mode;
  lo.group = o_.group;
  lo.who = "writer agent";
  bool stale = false;
  auto fd = base::listen_unix_seqpacket(o_.path, lo, &stale);
  if (!fd) throw std::runtime_error("MEMD0160 [writer] socket: " + fd.message());
  if (stale && log_)
    log_(LogLevel::Info, "MEMD0161 removed the stale socket " + o_.path + " of a dead writer agent");
  listen_fd_ = std::move(fd).value();
  stop_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop_fd_) throw std::runtime_error(std::string("MEMD0160 eventfd: ") + std::strerror(errno));
  acceptor_ = std::thread([this] { accept_loop(); });
}

AgentSocket::~AgentSocket() {
  stopping_ = true;
  uint64_t one = 1;
  (void)!::write(stop_fd_.get(), &one, sizeof one);
  if (acceptor_.joinable()) acceptor_.join();
  std::list<std::unique_ptr<Conn>> conns;
  {
    std::lock_guard lk(mu_);
    conns.swap(conns_);
  }
  for (auto& c : conns)
    if (c->thread.joinable()) c->thread.join();
  ::unlink(o_.path.c_str());
}

size_t AgentSocket::connections() const {
  std::lock_guard lk(mu_);
  size_t n = 0;
  for (const auto& c : conns_) n += c->done ? 0 : 1;
  return n;
}

void AgentSocket::reap_locked() {
  for (auto it = conns_.begin(); it != conns_.end();) {
    if ((*it)->done) {
      if ((*it)->thread.joinable()) (*it)->thread.join();
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void AgentSocket::accept_loop() {
  for (;;) {
    pollfd p[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    if (::poll(p, 2, 1000) < 0 && errno != EINTR) {
      if (log_) log_(LogLevel::Error, std::string("MEMD0162 agent socket: poll: ") + std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (stopping_) return;
    if (!(p[0].revents & POLLIN)) {
      std::lock_guard lk(mu_);
      reap_locked();
      continue;
    }
    base::Fd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd) continue;  // EAGAIN, or a client that left at once
    std::lock_guard lk(mu_);
    reap_locked();
    size_t live = conns_.size();
    if (live >= o_.max_clients) {
      counters_.refused.fetch_add(1, std::memory_order_relaxed);
      counters_.unserved.fetch_add(1, std::memory_order_relaxed);
      // Its request is not read: it may be the invalidation of a committed write.
      if (on_unserved_) on_unserved_();
      if (log_)
        log_(LogLevel::Warn, "MEMD0163 agent socket: " + std::to_string(live) +
                                 " connections (max_clients): one refused (closed unread; "
                                 "numbered bare, so the homes catch up); raise [writer] "
                                 "max_clients above the httpd's MaxRequestWorkers");
      continue;  // closes fd
    }
    auto c = std::make_unique<Conn>();
    ucred cr{};
    socklen_t cl = sizeof cr;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0) {
      c->uid = cr.uid;
      c->pid = cr.pid;
    }
    c->fd = std::move(fd);
    Conn* raw = c.get();
    counters_.accepted.fetch_add(1, std::memory_order_relaxed);
    conns_.push_back(std::move(c));
    raw->thread = std::thread([this, raw] {
      serve(*raw);
      raw->done = true;
    });
  }
}

bool AgentSocket::send_reply(Conn& c, const aw::Reply& r) {
  std::vector<uint8_t> out = aw::encode(r);
  for (int tries = 0; tries < 50; ++tries) {  // a client that does not read for 5 s is dropped
    ssize_t n = ::send(c.fd.get(), out.data(), out.size(), MSG_NOSIGNAL);
    if (n == ssize_t(out.size())) return true;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{c.fd.get(), POLLOUT, 0};
      ::poll(&p, 1, 100);
      continue;
    }
    return false;  // the client left (EPIPE): what it asked was done all the same
  }
  return false;
}

void AgentSocket::serve(Conn& c) {
  std::vector<uint8_t> in(aw::kMaxMessage + 1);
  uint64_t malformed_logged = 0;
  for (;;) {
    if (stopping_) {
      // Anything still queued would be lost with us: number once, bare, if there is.
      ssize_t n = ::recv(c.fd.get(), in.data(), in.size(), MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) {
        counters_.unserved.fetch_add(1, std::memory_order_relaxed);
        if (on_unserved_) on_unserved_();
      }
      return;
    }
    pollfd p[2] = {{c.fd.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    if (::poll(p, 2, 1000) < 0 && errno != EINTR) return;
    if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    ssize_t n = ::recv(c.fd.get(), in.data(), in.size(), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return;  // the client closed, and nothing of it is left unread
    std::span<const uint8_t> msg(in.data(), size_t(n));
    aw::Reply r;
    try {
      aw::Request q = aw::decode_request(msg);
      counters_.requests.fetch_add(1, std::memory_order_relaxed);
      switch (q.op) {
        case aw::Op::ReadSeq: counters_.read_seq.fetch_add(1, std::memory_order_relaxed); break;
        case aw::Op::Register: counters_.registered.fetch_add(1, std::memory_order_relaxed); break;
        case aw::Op::Invalidate: counters_.invalidations.fetch_add(1, std::memory_order_relaxed); break;
      }
      r = handle_(q);
      r.op = q.op;
      r.id = q.id;
      if (r.status != aw::Status::Ok) counters_.failed.fetch_add(1, std::memory_order_relaxed);
    } catch (const aw::AgentWireError& e) {
      counters_.malformed.fetch_add(1, std::memory_order_relaxed);
      r.op = aw::peek_op(msg);
      r.id = aw::peek_id(msg);
      r.status = aw::Status::BadRequest;
      r.message = e.what();
      if (log_ && malformed_logged++ % 1000 == 0)
        log_(LogLevel::Warn, "MEMD0164 agent socket: malformed request from pid " +
                                 std::to_string(c.pid) + " uid " + std::to_string(c.uid) +
                                 " refused: " + e.what() +
                                 " (logged once per 1000 of a connection; a client of another "
                                 "version, or a bug)");
    }
    (void)send_reply(c, r);
  }
}

std::string AgentSocket::status_text() const {
  std::ostringstream o;
  o << "agent_socket " << o_.path << "\n"
    << "agent_socket_connections " << connections() << "\n"
    << "agent_socket_accepted " << counters_.accepted.load() << "\n"
    << "agent_socket_refused " << counters_.refused.load() << "\n"
    << "agent_socket_requests " << counters_.requests.load() << "\n"
    << "agent_socket_read_seq " << counters_.read_seq.load() << "\n"
    << "agent_socket_registered " << counters_.registered.load() << "\n"
    << "agent_socket_invalidations " << counters_.invalidations.load() << "\n"
    << "agent_socket_failed " << counters_.failed.load() << "\n"
    << "agent_socket_malformed " << counters_.malformed.load() << "\n"
    << "agent_socket_unserved " << counters_.unserved.load() << "\n";
  return o.str();
}

void AgentSocket::metrics(base::Metrics& m) const {
  m.gauge("tierce_agent_socket_connections", "Connections of the writer agent's local socket.",
          double(connections()));
  m.counter("tierce_agent_socket_requests_total", "Requests answered on the agent socket.",
            counters_.requests.load());
  m.counter("tierce_agent_socket_invalidations_total",
            "Invalidations sent for the app tier through the agent socket.",
            counters_.invalidations.load());
  m.counter("tierce_agent_socket_failed_total",
            "Agent socket requests answered with a failure.", counters_.failed.load());
  m.counter("tierce_agent_socket_malformed_total", "Malformed agent socket requests refused.",
            counters_.malformed.load());
  m.counter("tierce_agent_socket_unserved_total",
            "Connections closed unread (max_clients, or queued at stop): each numbered bare.",
            counters_.unserved.load());
}

}  // namespace tierce::memd
