// fabric/server.cc — Server: listeners per address, connection threads, shm lease heartbeats.
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/net.h"
#include "fabric/fabric.h"
#include "fabric/listener.h"
#include "fabric/responder.h"
#include "fabric/socket.h"
#include "fabric/stream_transport.h"
#include "fabric/verbs_transport.h"
#include "fabric/wire.h"

namespace tierce::fabric {

namespace {

// Accepts on a tcp or unix socket; one thread per connection (lowest latency on few cores; the
// count is capped by max_connections).
class SocketListener final : public Listener {
 public:
  SocketListener(const Address& a, ServeContext ctx) : ctx_(ctx) {
    addr_ = a;
    if (a.transport == Transport::Shm) {
      fd_ = unix_listen(a.path);
    } else {
      uint16_t port = 0;
      fd_ = tcp_listen(a.host, a.port, &port);
      addr_.port = port;
    }
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~SocketListener() override { stop(); }

  std::string uri() const override { return addr_.uri(); }

  void stop() override {
    {
      std::lock_guard g(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    ::shutdown(fd_.get(), SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    std::unique_lock g(mu_);
    for (int fd : conns_) ::shutdown(fd, SHUT_RDWR);
    while (active_ > 0) {
      if (!cv_.wait_for(g, std::chrono::seconds(5), [&] { return active_ == 0; }) && ctx_.opts->log)
        ctx_.opts->log(LogLevel::Warn, "FAB0101 still waiting for " + std::to_string(active_) +
                                           " connection handler(s) to finish");
    }
    if (addr_.transport == Transport::Shm) ::unlink(addr_.path.c_str());
  }

 private:
  // The address part of accept_conn's "HOST:PORT" ("[v6]:PORT" or "v6:PORT" alike).
  static std::string host_of(const std::string& peer) {
    auto colon = peer.rfind(':');
    return colon == std::string::npos ? peer : peer.substr(0, colon);
  }

  // Tells a refused peer why before closing: a HELLO carrying Busy and the reason, so its
  // connect fails with that message instead of "closed before HELLO". Never blocks the acceptor
  // (a fresh socket's send buffer is empty; if it is not, the peer gets the bare close).
  void refuse(const Fd& c, const std::string& peer, const char* id, const std::string& why) {
    ctx_.counters->connections_refused.fetch_add(1, std::memory_order_relaxed);
    if (ctx_.opts->log)
      ctx_.opts->log(LogLevel::Warn,
                     std::string(id) + " refusing connection from " + peer + ": " + why);
    std::string text = ctx_.opts->name + ": " + why;
    wire::Header h;
    h.op = wire::Op::Hello;
    h.reply = true;  // statuses travel in replies only (wire.h)
    h.status = Errc::Busy;
    h.a0 = wire::kProtocolVersion;
    std::vector<uint8_t> f;
    wire::append_frame(f, h, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
    (void)!::send(c.get(), f.data(), f.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }

  void accept_loop() {
    const bool per_ip = addr_.transport == Transport::Tcp && ctx_.opts->max_connections_per_ip > 0;
    for (;;) {
      std::string peer;
      Fd c = accept_conn(fd_.get(), &peer);
      if (!c) return;
      std::unique_lock g(mu_);
      if (stopped_) return;
      if (active_ >= ctx_.opts->max_connections) {
        g.unlock();
        refuse(c, peer, "FAB0102",
               "max_connections (" + std::to_string(ctx_.opts->max_connections) + ") reached");
        continue;
      }
      // IPv6 peers counted by their /64 (base::address_group).
      std::string host = per_ip ? base::address_group(host_of(peer)) : std::string();
      if (per_ip && per_ip_[host] >= ctx_.opts->max_connections_per_ip) {
        g.unlock();
        refuse(c, peer, "FAB0107",
               "max_connections_per_ip (" + std::to_string(ctx_.opts->max_connections_per_ip) +
                   ") reached for " + host);
        continue;
      }
      Fd mine(::dup(c.get()));  // lets stop() shut the socket down whatever its owner does with c
      if (!mine) continue;
      int raw = mine.get();
      conns_.insert(raw);
      ++active_;
      if (per_ip) ++per_ip_[host];
      ctx_.counters->connections_accepted.fetch_add(1, std::memory_order_relaxed);
      std::thread([this, c = std::move(c), mine = std::move(mine), raw, peer, host,
                   per_ip]() mutable {
        PeerInfo info{addr_.transport == Transport::Shm ? "local" : peer, addr_.transport, {}};
        serve_stream_connection(std::move(c), info, ctx_);
        release_thread_crypto();
        std::lock_guard g2(mu_);
        conns_.erase(raw);
        mine.reset();
        if (per_ip) {
          auto it = per_ip_.find(host);
          if (it != per_ip_.end() && --it->second == 0) per_ip_.erase(it);
        }
        --active_;
        cv_.notify_all();  // under the lock: stop() cannot return (and free us) before this ends
      }).detach();
    }
  }

  Address addr_;
  ServeContext ctx_;
  Fd fd_;
  std::thread acceptor_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<int> conns_;
  std::map<std::string, size_t> per_ip_;  // tcp: connections served per peer address
  size_t active_ = 0;
  bool stopped_ = false;
};

}  // namespace

struct Server::Impl {
  ServerOptions opts;
  RegionTable regions;
  ServiceTable services;
  Counters counters;
  std::vector<std::unique_ptr<Listener>> listeners;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::thread heartbeat;

  uint64_t lease_ns() const {
    return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(opts.lease).count());
  }
  void renew_leases() {
    for (auto& r : regions.all()) renew_lease(r->seg->header(), lease_ns());
  }
  void withdraw_leases() {
    for (auto& r : regions.all()) withdraw_lease(r->seg->header());
  }

  // Publication: the lease is stored with release; shm peers load it with acquire after their
  // data access, so an access that saw a fresh lease happened while this server vouched for it.
  void heartbeat_loop() {
    std::unique_lock g(mu);
    while (!stopping) {
      renew_leases();
      cv.wait_for(g, opts.heartbeat, [&] { return stopping; });
    }
  }
};

Server::Server(ServerOptions opts) : impl_(std::make_unique<Impl>()) {
  auto& I = *impl_;
  I.opts = std::move(opts);
  if (!I.opts.log) I.opts.log = stderr_sink(I.opts.name);
  if (I.opts.secret.empty())
    throw FabricError(Errc::Config,
                      "server " + I.opts.name + ": no shared secret configured (secret_file)");
  if (I.opts.listen.empty())
    throw FabricError(Errc::Config, "server " + I.opts.name + ": no listen address");
  if (I.opts.lease <= I.opts.heartbeat)
    throw FabricError(Errc::Config, "lease must be longer than the heartbeat period");
  if (I.opts.max_preauth_frame < wire::kNonceSize + wire::kMacSize ||
      I.opts.max_preauth_frame > 65536)
    throw FabricError(Errc::Config, "server " + I.opts.name + ": max_preauth_frame must be " +
                                        std::to_string(wire::kNonceSize + wire::kMacSize) +
                                        "..65536 (the AUTH frame carries " +
                                        std::to_string(wire::kNonceSize + wire::kMacSize) +
                                        " bytes)");
  if (I.opts.protection == Protection::None)
    I.opts.log(LogLevel::Warn,
               "FAB0108 WARNING: " + I.opts.name +
                   " runs with protection = none: tcp frames after the handshake carry no MAC, "
                   "so anyone on the path can inject, replay or read them (unless every client "
                   "asks for mac). For measurements only; use mac or encrypt");
  try {
    for (auto& uri : I.opts.listen) {
      Address a = parse_address(uri);
      ServeContext ctx{&I.opts, &I.regions, &I.services, &I.counters,
                       TransportView{a.transport, a.transport == Transport::Shm}};
      if (a.transport == Transport::Verbs)
        I.listeners.push_back(make_verbs_listener(a, ctx));
      else
        I.listeners.push_back(std::make_unique<SocketListener>(a, ctx));
      I.opts.log(LogLevel::Info,
                 "FAB0103 " + I.opts.name + " serving on " + I.listeners.back()->uri());
    }
  } catch (...) {
    for (auto& l : I.listeners) l->stop();
    throw;
  }
  I.heartbeat = std::thread([&I] { I.heartbeat_loop(); });
}

Server::~Server() {
  stop();
}

void Server::stop() {
  auto& I = *impl_;
  {
    std::lock_guard g(I.mu);
    if (I.stopping) return;
    I.stopping = true;
    I.cv.notify_all();
  }
  if (I.heartbeat.joinable()) I.heartbeat.join();
  for (auto& l : I.listeners) l->stop();
  // A clean stop withdraws our word at once: shm peers fail their next op instead of waiting for
  // the lease to run out.
  I.withdraw_leases();
}

ExportInfo Server::export_region(const std::string& name, std::shared_ptr<SharedSegment> seg,
                                 RegionAccess access) {
  auto& I = *impl_;
  renew_lease(seg->header(), I.lease_ns());
  ExportInfo info = I.regions.add(name, std::move(seg), access);
  I.opts.log(LogLevel::Info, "FAB0104 exporting region '" + name + "' (" +
                                 std::to_string(info.len) + " bytes, segment " + info.segment +
                                 ", id " + std::to_string(info.id) + ")");
  return info;
}

void Server::unexport_region(const std::string& name) {
  if (impl_->regions.remove(name))
    impl_->opts.log(LogLevel::Info, "FAB0105 region '" + name + "' no longer exported");
}

std::vector<ExportInfo> Server::exports() const {
  std::vector<ExportInfo> v;
  for (auto& r : impl_->regions.all())
    v.push_back(ExportInfo{r->name, r->seg->name(), r->id, r->seg->size(), r->seg->incarnation(),
                           Responder::address_of(r->id, 0), r->key});
  return v;
}

void Server::on_call(const std::string& service, CallHandler h, Callers who) {
  impl_->services.add_call(service, std::move(h), who);
}
void Server::on_stream(const std::string& service, StreamHandler h, Callers who) {
  impl_->services.add_stream(service, std::move(h), who);
}

std::vector<std::string> Server::bound_uris() const {
  std::vector<std::string> v;
  for (auto& l : impl_->listeners) v.push_back(l->uri());
  return v;
}

ServerStats Server::stats() const {
  return impl_->counters.snapshot();
}

}  // namespace tierce::fabric
