// fabric/verbs_server.cc — the rdma-core backend's server side: make_verbs_listener, an rdma_cm
// listening id on HOST:PORT, a thread for rdma_cm events and one thread per established connection
// running the protocol of wire.h over SEND/RECV: HELLO → AUTH → AUTH_OK, then LOOKUP, CALL, SEND,
// PING, CAS/FAA (see below) and STREAM_OPEN.
//
// In short:
// - One protection domain per device context, shared by the connections on that device. Per
//   exported region and device two MRs, registered on its first LOOKUP and cached by region id:
//   the data (local write, remote read/write, remote atomic where peers use RDMA atomics) and the
//   segment's header page (remote read only). LOOKUP answers addr = the virtual address of the
//   segment's data, len = its size, key = header rkey << 32 | data rkey, and in a3 the export's key
//   (segment.h). Every Tunables::kMrSweepInterval the rdma_cm thread deregisters the MRs of regions
//   no longer exported (or re-exported, or revoked): from then on peers holding the old descriptor
//   get BadKey and look the name up again. Before that, their batches already see the revocation in
//   the header's state and export-key words (verbs_connection.h).
// - READ/WRITE never reach the server's CPU (ServerStats::one_sided_ops counts only the atomics it
//   performs); READ/WRITE/MAP frames (meant for tcp/shm) are answered NotPermitted.
// - CAS/FAA frames on verbs descriptors are performed here with CPU atomics, unless the HCA's own
//   atomics are atomic against the CPU's (IBV_ATOMIC_GLOB, announced in the accept's private data;
//   see Tunables::kNicAtomicsWithoutGlob).
// - A peer's QP gets no remote access to this PD's memory until it has authenticated (the access
//   flags rdma_accept set are withdrawn at once and restored after AUTH_OK).
// - STREAM_OPEN is implemented: the connection turns into a credit-based byte stream
//   (verbs_stream.h) handed to the stream handler on the connection's thread, as on tcp.
// - Messages: eager up to one receive buffer (64 KiB bodies), by rendezvous up to wire::kMaxMessage
//   (verbs_endpoint.h); a reply larger than that is answered TooLarge.
// - A malformed frame, a reply frame sent as a request, a failed AUTH or a peer that does not
//   authenticate within auth_timeout closes that connection; nothing a peer sends can crash the
//   server. stop() disconnects every connection (their QPs go to the error state, which wakes their
//   threads at once), waits for the threads, then releases ids, PDs and the event channel.
// - iWARP note: rdma_cm on iWARP wants the active side to send first; here the server sends HELLO
//   first, so this backend targets InfiniBand and RoCE.
// - fork: registered memory survives fork() safely on kernels >= 5.13 with rdma-core >= 35; on
//   older kernels run with RDMAV_FORK_SAFE=1. Never use a Connection across fork (ARCHITECTURE §2).
//
// Log ids FAB0401..FAB0499.
#include "fabric/verbs_transport.h"

#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "fabric/responder.h"
#include "fabric/verbs_endpoint.h"
#include "fabric/verbs_resources.h"
#include "fabric/verbs_stream.h"

namespace tierce::fabric {

using verbs::Tunables;

// ---------------------------------------------------------------------------------------------
// Server side

namespace {

class VerbsListener;

// A device context's protection domain and the MRs of exported regions on it. Per region two MRs:
// its data (local write, remote read/write/atomic) and its header page (remote read only: peers
// check the segment's state and lease there). The descriptor key is header rkey << 32 | data rkey.
class DeviceCtx {
 public:
  DeviceCtx(ibv_context* ctx, uint8_t port) : limits_(verbs::query_device(ctx, port)) {
    errno = 0;
    pd_.reset(ibv_alloc_pd(ctx));
    if (!pd_) verbs::throw_verbs(Errc::System, "ibv_alloc_pd(" + limits_.name + ")", errno);
    // Remote atomics only where peers are told to use them (Tunables::kNicAtomicsWithoutGlob);
    // otherwise a peer's NIC atomic could race the owners' CPU atomics: refused by the HCA instead.
    nic_atomics_ = limits_.atomic_cap == IBV_ATOMIC_GLOB ||
                   (Tunables::kNicAtomicsWithoutGlob && limits_.atomic_cap != IBV_ATOMIC_NONE);
    access_ = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
              (nic_atomics_ ? IBV_ACCESS_REMOTE_ATOMIC : 0);
  }
  const verbs::DeviceLimits& limits() const { return limits_; }
  ibv_pd* pd() const { return pd_.get(); }
  // Whether peers' cas64/faa64 are RDMA atomics on this device (else CAS/FAA messages).
  bool nic_atomics() const { return nic_atomics_; }
  // What a QP of an authenticated peer may do.
  int qp_access() const {
    return IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
           (nic_atomics_ ? IBV_ACCESS_REMOTE_ATOMIC : 0);
  }

  // The descriptor key of r on this device, registering its MRs on first use. 0 and *why on
  // failure.
  uint64_t key_for(const std::shared_ptr<const ExportedRegion>& r, std::string* why) {
    std::lock_guard g(mu_);
    if (auto it = mrs_.find(r->id); it != mrs_.end()) {
      if (it->second.region == r) return it->second.key();
      drop(it);  // cannot happen (ids are never reused); be safe
    }
    errno = 0;
    verbs::Mr data(ibv_reg_mr(pd_.get(), r->seg->data(), r->seg->size(), access_));
    if (!data)
      return fail_reg(errno, "ibv_reg_mr(" + std::to_string(r->seg->size()) + " bytes)", why);
    errno = 0;
    verbs::Mr header(
        ibv_reg_mr(pd_.get(), r->seg->header(), fabric::kHeaderSize, int(IBV_ACCESS_REMOTE_READ)));
    if (!header) return fail_reg(errno, "ibv_reg_mr(segment header)", why);
    rkeys_[data->rkey] = r->id;
    auto it = mrs_.emplace(r->id, Registration{r, std::move(data), std::move(header)}).first;
    return it->second.key();
  }

  // The region a verbs descriptor key names, if it still is the current export under its id:
  // BadKey otherwise (a stale or forged key, as the HCA would say).
  Errc resolve(uint64_t key, const RegionTable& regions,
               std::shared_ptr<const ExportedRegion>* out) {
    std::lock_guard g(mu_);
    auto k = rkeys_.find(uint32_t(key));
    if (k == rkeys_.end()) return Errc::BadKey;
    auto it = mrs_.find(k->second);
    if (it == mrs_.end() || it->second.key() != key) return Errc::BadKey;
    if (regions.by_id(it->first) != it->second.region) return Errc::BadKey;
    *out = it->second.region;
    return Errc::Ok;
  }

  // Deregisters the MRs of regions that are no longer exported under the id they were registered
  // for, or revoked. Returns how many regions.
  size_t sweep(const RegionTable& regions) {
    std::vector<Registration> dead;  // deregistered after the lock is released
    {
      std::lock_guard g(mu_);
      for (auto it = mrs_.begin(); it != mrs_.end();) {
        auto cur = regions.by_id(it->first);
        if (!cur || cur != it->second.region || !cur->seg->live()) {
          rkeys_.erase(it->second.data->rkey);
          dead.push_back(std::move(it->second));
          it = mrs_.erase(it);
        } else {
          ++it;
        }
      }
    }
    return dead.size();
  }

 private:
  struct Registration {
    std::shared_ptr<const ExportedRegion> region;  // keeps the segment mapped while registered
    verbs::Mr data;                                // declared after: deregistered first
    verbs::Mr header;
    uint64_t key() const { return uint64_t(header->rkey) << 32 | data->rkey; }
  };

  void drop(std::map<uint32_t, Registration>::iterator it) {
    rkeys_.erase(it->second.data->rkey);
    mrs_.erase(it);
  }
  uint64_t fail_reg(int err, const std::string& what, std::string* why) const {
    *why = what + " on " + limits_.name + ": " + verbs::err_text(err) +
           (err == ENOMEM || err == EPERM || err == EAGAIN ? std::string("; ") + verbs::kMemlockHint
                                                           : std::string());
    return 0;
  }

  verbs::DeviceLimits limits_;
  verbs::Pd pd_;
  bool nic_atomics_ = false;
  int access_ = 0;
  std::mutex mu_;
  std::map<uint32_t, Registration>
      mrs_;  // by region id; after pd_: deregistered before the PD is freed
  std::map<uint32_t, uint32_t> rkeys_;  // data rkey → region id
};

class ServerConn;

// Connections whose ids were retrieved with an rdma_cm event must not be destroyed until that event
// is acknowledged (rdma_destroy_id would wait for the ack forever on this very thread). The
// rdma_cm thread parks them here; a Graveyard is destroyed after the event's CmEvent.
struct Graveyard {
  std::vector<verbs::CmId> ids;  // destroyed last: after the QPs in conns
  std::vector<std::shared_ptr<ServerConn>> conns;
};

class VerbsListener final : public Listener {
 public:
  VerbsListener(const Address& a, ServeContext ctx);
  ~VerbsListener() override { stop(); }
  std::string uri() const override { return addr_.uri(); }
  void stop() override;

  void log(LogLevel l, const std::string& s) const {
    if (ctx_.opts->log) ctx_.opts->log(l, s);
  }
  const ServeContext& ctx() const { return ctx_; }
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

  // Counts a connection for max_connections and stop(); one per ServerConn, first member.
  class Active {
   public:
    explicit Active(VerbsListener& l) : l_(l) {
      std::lock_guard g(l_.mu_);
      ++l_.active_;
    }
    ~Active() {
      std::lock_guard g(l_.mu_);
      --l_.active_;
      l_.cv_.notify_all();  // under the lock: stop() cannot return (and free the listener) before
                            // this ends
    }
    Active(const Active&) = delete;
    Active& operator=(const Active&) = delete;

   private:
    VerbsListener& l_;
  };

  // A ServerConn leaving: no rdma_cm event may reach it any more.
  void unregister(rdma_cm_id* id) {
    std::lock_guard g(mu_);
    registry_.erase(id);
  }

 private:
  void cm_loop() noexcept;
  void handle_event(const rdma_cm_event& ev, Graveyard& g);
  void on_connect_request(const rdma_cm_event& ev, Graveyard& g);
  void on_established(rdma_cm_id* id, Graveyard& g);
  void on_gone(const rdma_cm_event& ev, Graveyard& g);
  void sweep(Graveyard& g);
  std::shared_ptr<DeviceCtx> device_for(ibv_context* ctx, uint8_t port);

  Address addr_;
  ServeContext ctx_;
  // Creation order; destroyed in reverse: devices (PDs, MRs), listening id, event channel.
  verbs::EventChannel ch_;
  verbs::CmId listen_id_;
  std::map<ibv_context*, std::shared_ptr<DeviceCtx>>
      devices_;                          // rdma_cm thread only (and ctor, stop)
  std::set<std::string> warned_access_;  // rdma_cm thread only

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<rdma_cm_id*, ServerConn*> registry_;  // live connections, for rdma_cm events
  std::map<rdma_cm_id*, std::shared_ptr<ServerConn>> pending_;  // accepted, not yet established
  size_t active_ = 0;                                           // ServerConns alive
  bool stopped_ = false;
  // Set once by stop(); read by every thread. Release/acquire: a thread that sees it also sees the
  // disconnects stop() issued before.
  std::atomic<bool> stopping_{false};
  std::thread cm_thread_;
};

// One accepted connection: its QP (in the Endpoint) and the thread that serves it.
class ServerConn : public std::enable_shared_from_this<ServerConn> {
 public:
  ServerConn(VerbsListener& l, rdma_cm_id* id, std::shared_ptr<DeviceCtx> dev,
             verbs::PeerParams client, std::string remote)
      : active_(l),
        l_(l),
        raw_(id),
        dev_(std::move(dev)),
        client_(client),
        peer_{std::move(remote), Transport::Verbs, {}} {
    ep_ = std::make_unique<verbs::Endpoint>(
        id, dev_->pd(), dev_->limits(),
        verbs::EndpointConfig{Tunables::kServerRecvDepth, Tunables::kServerSendDepth,
                              Tunables::kServerSendBuffers});
    ep_->set_peer(client_);
  }
  ~ServerConn() {
    l_.unregister(raw_);
    if (id_)
      (void)rdma_disconnect(raw_);  // tells the client now; fails harmlessly if not connected
  }
  ServerConn(const ServerConn&) = delete;
  ServerConn& operator=(const ServerConn&) = delete;

  // After rdma_accept succeeded, the connection owns its id.
  void adopt(verbs::CmId id) { id_ = std::move(id); }
  verbs::PeerParams local_params() const { return ep_->local_params(); }
  // Grants or withholds the peer's RDMA access to this PD's memory through our QP (RTS→RTS
  // change of its access flags). Withheld from accept until AUTH succeeded. Returns 0, or the
  // errno value of a provider that refuses the change.
  int remote_access(bool allow, bool member = true) {
    ibv_qp_attr attr{};
    attr.qp_access_flags = !allow ? 0u
                           : member ? unsigned(dev_->qp_access())
                                    : unsigned(dev_->qp_access()) & unsigned(IBV_ACCESS_REMOTE_READ);
    return ibv_modify_qp(ep_->qp(), &attr, IBV_QP_ACCESS_FLAGS);
  }
  bool access_withheld = false;  // remote_access(false) succeeded at accept
  const verbs::DeviceLimits& device() const { return dev_->limits(); }
  bool nic_atomics() const { return dev_->nic_atomics(); }
  const std::string& remote() const { return peer_.remote; }

  // Runs the protocol on the connection's thread until the peer leaves, a protocol error, an idle
  // timeout or stop(). Never throws.
  void serve() noexcept;

  std::atomic<bool> closing{false};  // set by the rdma_cm thread or stop(); polled by serve()
  const std::chrono::steady_clock::time_point requested_at = std::chrono::steady_clock::now();

 private:
  void run();
  // Steps 1 and 2: HELLO, then AUTH proving the secret, answered with AUTH_OK. False when the
  // connection is to close (logged and counted).
  bool handshake();
  // The next message, or nullopt when d passed or the connection is being closed.
  std::optional<verbs::Inbound> next(Deadline d);
  bool ending() const { return closing.load(std::memory_order_acquire) || l_.stopping(); }
  void send_reply(Reply& r);
  void lookup(const wire::Header& req, std::span<const uint8_t> payload, Reply* out);
  // CAS/FAA on a verbs descriptor, performed by this CPU (see Tunables::kNicAtomicsWithoutGlob).
  void atomic(const wire::Header& req, std::span<const uint8_t> payload, Reply* out);
  // true when the connection was handed to a stream handler (serve() ends).
  bool stream_open(const wire::Header& req, std::span<const uint8_t> payload);

  // Member order = creation order; destroyed in reverse: the QP and buffers (ep_) first, then the
  // id, then our hold on the device's PD, and last the Active count stop() waits on.
  VerbsListener::Active active_;
  VerbsListener& l_;
  rdma_cm_id* raw_;
  std::shared_ptr<DeviceCtx> dev_;
  verbs::CmId id_;
  std::unique_ptr<verbs::Endpoint> ep_;
  verbs::PeerParams client_;
  PeerInfo peer_;
};

// ---------------------------------------------------------------------------------------------
// VerbsListener

VerbsListener::VerbsListener(const Address& a, ServeContext ctx) : addr_(a), ctx_(ctx) {
  ctx_.view = TransportView{Transport::Verbs, false};
  ch_ = verbs::open_event_channel("cannot listen on " + a.uri());
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(ch_.get(), &id, nullptr, RDMA_PS_TCP) != 0)
    verbs::throw_verbs(Errc::System, "cannot listen on " + a.uri() + ": rdma_create_id", errno);
  listen_id_.reset(id);
  int reuse = 1;  // restart without waiting for old connections' time-wait; best effort
  (void)rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &reuse, sizeof reuse);

  socklen_t len = 0;
  sockaddr_storage ss = verbs::resolve_host(a.host, a.port, true, &len);
  if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&ss)) != 0) {
    int e = errno;
    if (e == EADDRNOTAVAIL || e == ENODEV)
      throw FabricError(Errc::NoDevice,
                        "cannot listen on " + a.uri() + ": rdma_bind_addr: " + verbs::err_text(e) +
                            ": " + a.host + " is not the address of an IPoIB or RoCE interface");
    verbs::throw_verbs(Errc::System, "cannot listen on " + a.uri() + ": rdma_bind_addr", e,
                       e == EADDRINUSE ? "another process listens on that port" : "");
  }
  if (rdma_listen(id, Tunables::kListenBacklog) != 0)
    verbs::throw_verbs(Errc::System, "cannot listen on " + a.uri() + ": rdma_listen", errno);
  addr_.port = ntohs(rdma_get_src_port(id));

  if (id->verbs) {
    // Bound to one interface's address: its device is known now; set it up so that errors show at
    // startup rather than at the first connection.
    auto dev = device_for(id->verbs, id->port_num ? id->port_num : 1);
    log(LogLevel::Info, "FAB0401 verbs listener " + uri() + " on device " + dev->limits().name +
                            " port " + std::to_string(dev->limits().port));
  } else {
    log(LogLevel::Info, "FAB0401 verbs listener " + uri() + " accepts on every RDMA device");
  }
  cm_thread_ = std::thread([this] { cm_loop(); });
}

void VerbsListener::stop() {
  {
    std::lock_guard g(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  stopping_.store(true, std::memory_order_release);
  if (cm_thread_.joinable()) cm_thread_.join();
  // From here on this thread alone handles rdma_cm state.
  listen_id_.reset();  // no new requests: the kernel rejects them now
  std::map<rdma_cm_id*, std::shared_ptr<ServerConn>> pending;
  {
    std::lock_guard g(mu_);
    pending.swap(pending_);
    for (auto& [id, conn] : registry_) {
      conn->closing.store(true, std::memory_order_release);
      (void)rdma_disconnect(
          id);  // QP to error: the connection's thread wakes with flushed receives
    }
  }
  pending.clear();  // never established, no thread: destroyed here (they lock mu_ themselves)
  std::unique_lock g(mu_);
  while (active_ > 0) {
    if (!cv_.wait_for(g, std::chrono::seconds(5), [&] { return active_ == 0; }))
      log(LogLevel::Warn,
          "FAB0402 verbs listener " + uri() + ": still waiting for " + std::to_string(active_) +
              " connection(s) to finish (a stream handler still holding its stream?)");
  }
}

std::shared_ptr<DeviceCtx> VerbsListener::device_for(ibv_context* ctx, uint8_t port) {
  if (auto it = devices_.find(ctx); it != devices_.end()) return it->second;
  auto dev = std::make_shared<DeviceCtx>(ctx, port);
  const verbs::DeviceLimits& d = dev->limits();
  log(LogLevel::Info, "FAB0403 verbs: using RDMA device " + d.name + " port " +
                          std::to_string(d.port) + " (" + (d.ethernet ? "RoCE" : "InfiniBand") +
                          "), " + verbs::describe_atomics(d.atomic_cap));
  if (d.atomic_cap == IBV_ATOMIC_NONE)
    log(LogLevel::Info, "FAB0404 device " + d.name +
                            " offers no RDMA atomics: peers' cas64/faa64 are performed by "
                            "this server's CPU (CAS/FAA messages)");
  else if (d.atomic_cap == IBV_ATOMIC_HCA && !Tunables::kNicAtomicsWithoutGlob)
    log(LogLevel::Info,
        "FAB0405 device " + d.name +
            ": RDMA atomics are atomic among RDMA operations only, not "
            "against CPU atomics on the same words; peers' cas64/faa64 are performed by this "
            "server's CPU so that they stay exact with the owners' local atomics");
  else if (d.atomic_cap == IBV_ATOMIC_HCA)
    log(LogLevel::Warn, "FAB0405 device " + d.name +
                            ": peers use RDMA atomics that are NOT atomic against CPU "
                            "atomics on the same words (Tunables::kNicAtomicsWithoutGlob is set)");
  devices_.emplace(ctx, dev);
  return dev;
}

void VerbsListener::cm_loop() noexcept {
  auto next_sweep = std::chrono::steady_clock::now() + Tunables::kMrSweepInterval;
  while (!stopping()) {
    try {
      pollfd p{ch_->fd, POLLIN, 0};
      if (::poll(&p, 1, int(Tunables::kPollSlice.count())) < 0 && errno != EINTR) {
        log(LogLevel::Error, "FAB0406 verbs listener " + uri() +
                                 ": poll on the rdma_cm channel: " + verbs::err_text(errno));
        std::this_thread::sleep_for(Tunables::kPollSlice);
      }
      for (;;) {
        rdma_cm_event* raw = nullptr;
        if (rdma_get_cm_event(ch_.get(), &raw) != 0) {
          int e = errno;
          if (e != EAGAIN && e != EWOULDBLOCK && e != EINTR) {
            log(LogLevel::Error,
                "FAB0406 verbs listener " + uri() + ": rdma_get_cm_event: " + verbs::err_text(e));
            std::this_thread::sleep_for(Tunables::kPollSlice);
          }
          break;
        }
        Graveyard g;  // declared first: emptied after the event below is acknowledged
        verbs::CmEvent ev(raw);
        handle_event(*raw, g);
      }
      if (std::chrono::steady_clock::now() >= next_sweep) {
        Graveyard g;
        sweep(g);
        next_sweep = std::chrono::steady_clock::now() + Tunables::kMrSweepInterval;
      }
    } catch (const std::exception& e) {
      log(LogLevel::Error, "FAB0407 verbs listener " + uri() + ": " + e.what());
    }
  }
}

void VerbsListener::handle_event(const rdma_cm_event& ev, Graveyard& g) {
  switch (ev.event) {
    case RDMA_CM_EVENT_CONNECT_REQUEST:
      on_connect_request(ev, g);
      return;
    case RDMA_CM_EVENT_ESTABLISHED:
      on_established(ev.id, g);
      return;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_REJECTED:
      on_gone(ev, g);
      return;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      if (listen_id_ && ev.id == listen_id_.get()) {
        log(LogLevel::Error,
            "FAB0408 verbs listener " + uri() +
                ": its RDMA device was removed; it accepts no more connections (restart the server "
                "once the device is back)");
        g.ids.push_back(std::move(listen_id_));  // the manual says: destroy the id (after the ack)
        return;
      }
      on_gone(ev, g);
      return;
    case RDMA_CM_EVENT_ADDR_CHANGE:
      log(LogLevel::Info, "FAB0409 verbs listener " + uri() +
                              ": the network address changed under the RDMA device");
      return;
    default:  // TIMEWAIT_EXIT and the rest: nothing to do
      return;
  }
}

void VerbsListener::on_connect_request(const rdma_cm_event& ev, Graveyard& g) {
  rdma_cm_id* raw = ev.id;
  verbs::CmId owned(raw);  // ours from now on; destroyed via the graveyard unless adopted
  const std::string remote = verbs::format_sockaddr(rdma_get_peer_addr(raw));
  auto refuse = [&](LogLevel lvl, const std::string& msg) {
    log(lvl, msg);
    if (rdma_reject(raw, nullptr, 0) != 0)
      log(LogLevel::Warn, "FAB0410 rdma_reject for " + remote + ": " + verbs::err_text(errno));
    if (owned) g.ids.push_back(std::move(owned));
  };
  if (stopping())
    return refuse(LogLevel::Info,
                  "FAB0411 refusing verbs connection from " + remote + ": stopping");
  bool full = false;
  {
    std::lock_guard lk(mu_);
    full = active_ >= ctx_.opts->max_connections;
  }
  if (full)
    return refuse(LogLevel::Warn, "FAB0412 refusing verbs connection from " + remote +
                                      ": max_connections (" +
                                      std::to_string(ctx_.opts->max_connections) + ") reached");
  auto client =
      verbs::decode_peer_params(ev.param.conn.private_data, ev.param.conn.private_data_len);
  if (!client)
    return refuse(
        LogLevel::Warn,
        "FAB0413 refusing verbs connection from " + remote +
            ": it sent no Tierce connection parameters (not a Tierce client, or another version)");

  std::shared_ptr<ServerConn> conn;
  try {
    auto dev = device_for(raw->verbs, raw->port_num);
    uint8_t ack_timeout = Tunables::kAckTimeoutExp;  // see Tunables; older kernels lack the option
    (void)rdma_set_option(raw, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout,
                          sizeof ack_timeout);
    conn = std::make_shared<ServerConn>(*this, raw, std::move(dev), *client, remote);
  } catch (const std::exception& e) {
    return refuse(LogLevel::Error,
                  "FAB0414 cannot set up a verbs connection from " + remote + ": " + e.what());
  }

  const verbs::DeviceLimits& d = conn->device();
  verbs::PeerParams params = conn->local_params();
  if (d.atomic_cap == IBV_ATOMIC_GLOB) params.flags |= verbs::kPeerAtomicsGlob;
  if (d.atomic_cap != IBV_ATOMIC_NONE && conn->nic_atomics())
    params.flags |= verbs::kPeerAtomicsHca;
  params.lease_ms = uint32_t(std::clamp<int64_t>(ctx_.opts->lease.count(), 0, UINT32_MAX));
  uint8_t mine[verbs::kPeerParamsSize];
  verbs::encode_peer_params(params, mine);
  rdma_conn_param p{};
  p.private_data = mine;
  p.private_data_len = uint8_t(sizeof mine);
  // RDMA READ/atomics of the client we answer at once (its initiator depth), within the device.
  p.responder_resources = uint8_t(std::min<uint32_t>(Tunables::kRdAtomicDepth, d.max_qp_rd_atom));
  // We issue none; never more than the client said it can take, nor the device allows.
  p.initiator_depth = uint8_t(std::min<uint32_t>(
      {uint32_t(ev.param.conn.initiator_depth), d.max_qp_init_rd_atom, Tunables::kRdAtomicDepth}));
  p.flow_control = 1;
  p.retry_count = Tunables::kRetryCount;    // ignored on accept: the client's rdma_connect sets it
  p.rnr_retry_count = Tunables::kRnrRetry;  // the client's retries when we have no receive posted
  if (rdma_accept(raw, &p) != 0) {
    int e = errno;
    g.conns.push_back(std::move(conn));  // its QP goes before the id (Graveyard order)
    return refuse(LogLevel::Error,
                  "FAB0415 rdma_accept for " + remote + " failed: " + verbs::err_text(e));
  }
  conn->adopt(std::move(owned));
  // rdma_accept left the QP in RTS with remote read/write/atomic access: withhold it until the
  // peer has authenticated (ARCHITECTURE §3), so even a peer that guessed a key reaches nothing.
  const int withheld = conn->remote_access(false);
  conn->access_withheld = withheld == 0;
  if (withheld != 0 && warned_access_.insert(d.name).second)
    log(LogLevel::Warn, "FAB0430 device " + d.name +
                            " does not let remote access be withheld until authentication "
                            "(ibv_modify_qp access flags: " +
                            verbs::err_text(withheld) +
                            "); RDMA keys alone then guard exported memory before AUTH");
  {
    std::lock_guard lk(mu_);
    registry_[raw] = conn.get();
    pending_[raw] = conn;
  }
  ctx_.counters->connections_accepted.fetch_add(1, std::memory_order_relaxed);
}

void VerbsListener::on_established(rdma_cm_id* id, Graveyard& g) {
  std::lock_guard lk(mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  std::shared_ptr<ServerConn> conn = std::move(it->second);
  pending_.erase(it);
  // This thread's references end only after the event is acknowledged: if the connection's thread
  // is already done by then, the last reference (and rdma_destroy_id) must not fall here earlier.
  g.conns.push_back(conn);
  try {
    std::thread([conn] { conn->serve(); }).detach();
  } catch (const std::system_error& e) {
    log(LogLevel::Error, "FAB0416 cannot start a thread for the verbs connection from " +
                             conn->remote() + ": " + e.what() + "; closing it");
    conn->closing.store(true, std::memory_order_release);
    (void)rdma_disconnect(id);
  }
}

void VerbsListener::on_gone(const rdma_cm_event& ev, Graveyard& g) {
  std::lock_guard lk(mu_);
  if (auto it = pending_.find(ev.id); it != pending_.end()) {
    if (ev.event != RDMA_CM_EVENT_DISCONNECTED)
      log(LogLevel::Info, "FAB0417 verbs connection from " + it->second->remote() +
                              " failed during setup: " + rdma_event_str(ev.event) + " (status " +
                              std::to_string(ev.status) + ")");
    g.conns.push_back(std::move(it->second));
    pending_.erase(it);
    return;
  }
  if (auto it = registry_.find(ev.id); it != registry_.end()) {
    it->second->closing.store(true, std::memory_order_release);
    (void)rdma_disconnect(
        ev.id);  // rdma_cm leaves the QP alone on DISCONNECTED: flush it ourselves
  }
}

void VerbsListener::sweep(Graveyard& g) {
  size_t dropped = 0;
  for (auto& [ctx, dev] : devices_) dropped += dev->sweep(*ctx_.regions);
  if (dropped)
    log(LogLevel::Debug, "FAB0418 verbs listener " + uri() + ": deregistered " +
                             std::to_string(dropped) +
                             " memory region(s) of regions no longer exported");
  // Accepted requests whose client never completed the connection.
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lk(mu_);
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now - it->second->requested_at > ctx_.opts->auth_timeout) {
      log(LogLevel::Info, "FAB0419 verbs connection from " + it->second->remote() +
                              " was accepted but never established within auth_timeout; dropped");
      g.conns.push_back(std::move(it->second));
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// ServerConn

void ServerConn::serve() noexcept {
  try {
    run();
  } catch (const FabricError& e) {
    if (e.code() != Errc::PeerClosed && !ending())
      l_.log(LogLevel::Info,
             "FAB0420 verbs connection from " + peer_.remote + " ended: " + e.what());
  } catch (const std::exception& e) {
    l_.log(LogLevel::Error,
           "FAB0421 verbs connection from " + peer_.remote + " failed: " + e.what());
  }
}

std::optional<verbs::Inbound> ServerConn::next(Deadline d) {
  for (;;) {
    if (ending()) return std::nullopt;
    Deadline slice = std::min(d, deadline_in(Tunables::kPollSlice));
    // Throws once the QP failed (peer gone); a long frame is fetched within kLongFetchTimeout.
    if (auto m = ep_->receive(slice, deadline_in(Tunables::kLongFetchTimeout))) return m;
    if (std::chrono::steady_clock::now() >= d) return std::nullopt;
  }
}

bool ServerConn::handshake() {
  using wire::Header;
  using wire::Op;
  const ServerOptions& o = *l_.ctx().opts;
  Counters& counters = *l_.ctx().counters;
  verbs::Endpoint& ep = *ep_;

  // 1. HELLO with our nonce.
  Nonce sn = make_nonce();
  std::vector<uint8_t> hello(sn.begin(), sn.end());
  std::string_view name = std::string_view(o.name).substr(0, Tunables::kMaxNameInHello);
  hello.insert(hello.end(), name.begin(), name.end());
  Header hh;
  hh.op = Op::Hello;
  hh.a0 = wire::kProtocolVersion;  // a1 = 0: verbs frames are not protected (one trust domain)
  const Deadline auth_d = deadline_in(o.auth_timeout);
  verbs::send_frame(ep, hh, hello, auth_d);

  // 2. AUTH must come first and prove the secret.
  auto m = next(auth_d);
  if (!m) {
    if (!ending())
      l_.log(LogLevel::Info, "FAB0422 verbs peer " + peer_.remote +
                                 " did not authenticate within auth_timeout; closing");
    return false;
  }
  std::span<const uint8_t> payload;
  std::string why;
  auto h = verbs::parse_frame(m->bytes, &payload, &why);
  if (!h) {
    counters.malformed_frames.fetch_add(1, std::memory_order_relaxed);
    l_.log(LogLevel::Warn, "FAB0423 verbs peer " + peer_.remote + ": malformed frame (" + why +
                               "); closing the connection");
    return false;
  }
  std::optional<AuthRequest> req;
  if (h->op == Op::Auth && !h->reply) req = parse_auth(payload);
  if (!req) {
    counters.auth_failures.fetch_add(1, std::memory_order_relaxed);
    l_.log(LogLevel::Warn, "FAB0424 verbs peer " + peer_.remote + " sent " +
                               std::string(wire::op_name(h->op)) +
                               " before authenticating; closing");
    Header r;
    r.op = h->op;
    r.reply = true;
    r.id = h->id;
    r.status = Errc::AuthFailed;
    ep.repost(m->slot);
    verbs::send_frame(ep, r, {}, auth_d);
    ep.drain_sends(auth_d);  // let the refusal reach the peer before the disconnect
    return false;
  }
  const Nonce cn = req->cn;
  // Version 2 binds the version and the protection settings (none on verbs) into the proofs; a
  // peer of another version fails here (FAB0425), as it would fail the check of our proof.
  HandshakeParams params;
  params.client = h->a0 == wire::kProtocolVersion && h->a1 == 0 ? Protection::None
                                                                : Protection::Encrypt;
  std::string node;
  const AuthVerdict verdict =
      h->a0 == wire::kProtocolVersion && h->a1 == 0
          ? check_auth(*req, o.secret, sn, params, o.name, o.identity, &node)
          : AuthVerdict::BadProof;
  const uint64_t auth_id = h->id;
  const std::string claimed = req->node;
  ep.repost(m->slot);
  if (verdict != AuthVerdict::Ok) {
    counters.auth_failures.fetch_add(1, std::memory_order_relaxed);
    l_.log(LogLevel::Warn, verdict == AuthVerdict::BadProof
                               ? "FAB0425 verbs peer " + peer_.remote +
                                     " failed authentication (wrong shared secret?); closing"
                               : identity_refusal(verdict, peer_.remote, claimed));
    Header r;
    r.op = Op::Auth;
    r.reply = true;
    r.id = auth_id;
    r.status = Errc::AuthFailed;
    verbs::send_frame(ep, r, {}, auth_d);
    ep.drain_sends(auth_d);
    return false;
  }
  peer_.node = node;
  peer_.member = !node.empty() || l_.ctx().opts->identity.peers.empty();  // PeerInfo: roles
  // Authenticated: from now on the peer may reach exported memory through this QP — a reader
  // (PeerInfo::member) for remote READs only: its RDMA WRITEs and atomics fail on the QP.
  if (access_withheld) {
    if (int rc = remote_access(true, peer_.member); rc != 0) {
      l_.log(LogLevel::Error,
             "FAB0429 cannot grant RDMA access to the authenticated peer " + peer_.remote +
                 " (ibv_modify_qp access flags: " + verbs::err_text(rc) + "); closing");
      return false;
    }
  }
  ep.allow_long_frames();  // only an authenticated peer may make us fetch (and buffer) 1 MiB frames
  std::vector<uint8_t> sp = auth_ok_payload(o.secret, sn, cn, params, o.name, o.identity);
  Header ok;
  ok.op = Op::AuthOk;
  ok.reply = true;
  ok.id = auth_id;
  verbs::send_frame(ep, ok, sp, auth_d);
  return true;
}

void ServerConn::run() {
  using wire::Op;
  const ServerOptions& o = *l_.ctx().opts;
  Counters& counters = *l_.ctx().counters;
  verbs::Endpoint& ep = *ep_;

  if (!handshake()) return;

  // 3. Requests, each answered after its receive buffer went back to the HCA (the client's flow
  //    control counts on that: a reply means every earlier message was consumed).
  Responder responder(*l_.ctx().regions, *l_.ctx().services, counters);
  Reply reply;
  std::span<const uint8_t> payload;
  std::string why;
  for (;;) {
    Deadline idle = o.idle_timeout.count() > 0 ? deadline_in(o.idle_timeout) : kNoDeadline;
    auto m = next(idle);
    if (!m) {
      if (!ending())
        l_.log(LogLevel::Info,
               "FAB0426 verbs peer " + peer_.remote + " idle for idle_timeout; closing");
      return;
    }
    auto h = verbs::parse_frame(m->bytes, &payload, &why);
    if (!h) {
      counters.malformed_frames.fetch_add(1, std::memory_order_relaxed);
      l_.log(LogLevel::Warn, "FAB0423 verbs peer " + peer_.remote + ": malformed frame (" + why +
                                 "); closing the connection");
      return;
    }
    if (h->reply) {
      counters.malformed_frames.fetch_add(1, std::memory_order_relaxed);
      l_.log(LogLevel::Warn,
             "FAB0427 verbs peer " + peer_.remote + " sent a reply frame as a request; closing");
      return;
    }
    switch (h->op) {
      case Op::StreamOpen: {
        std::vector<uint8_t> name_bytes(payload.begin(), payload.end());
        ep.repost(m->slot);
        if (stream_open(*h, name_bytes)) return;  // the stream handler had the connection
        continue;
      }
      case Op::Lookup:
        lookup(*h, payload, &reply);
        ep.repost(m->slot);
        send_reply(reply);
        continue;
      case Op::Cas:
      case Op::Faa:
        atomic(*h, payload, &reply);
        ep.repost(m->slot);
        send_reply(reply);
        continue;
      case Op::Read:
      case Op::Write:
      case Op::Map:
        // Over verbs these are RDMA operations on the descriptor's addr/rkey, never messages.
        counters.rejected_ops.fetch_add(1, std::memory_order_relaxed);
        reply = Reply{};
        reply.header.op = h->op;
        reply.header.reply = true;
        reply.header.id = h->id;
        reply.header.status = Errc::NotPermitted;
        ep.repost(m->slot);
        send_reply(reply);
        continue;
      default: {
        bool answer = responder.handle(*h, payload, peer_, l_.ctx().view, &reply);
        ep.repost(m->slot);
        if (answer) send_reply(reply);
        reply.pinned.reset();
        continue;
      }
    }
  }
}

void ServerConn::send_reply(Reply& r) {
  // Frames beyond the client's receive buffers go by rendezvous, up to kMaxLongFrame.
  const size_t cap = Tunables::kMaxLongFrame - wire::kHeaderSize;
  std::span<const uint8_t> body = r.direct.empty() ? std::span<const uint8_t>(r.payload) : r.direct;
  if (body.size() > cap) {
    if (r.header.status == Errc::Ok) {
      r.header.status = Errc::TooLarge;
      std::string msg = "reply of " + std::to_string(body.size()) +
                        " bytes exceeds the verbs message bound of " + std::to_string(cap) +
                        " bytes";
      r.payload.assign(msg.begin(), msg.end());
    } else {
      std::vector<uint8_t> cut(body.begin(),
                               body.begin() + cap);  // an error text: its start says enough
      r.payload = std::move(cut);
    }
    body = r.payload;
  }
  verbs::send_frame(*ep_, r.header, body, deadline_in(Tunables::kReplySendTimeout));
}

void ServerConn::lookup(const wire::Header& req, std::span<const uint8_t> payload, Reply* out) {
  Reply& r = *out;
  r = Reply{};
  r.header.op = wire::Op::Lookup;
  r.header.reply = true;
  r.header.id = req.id;
  auto reject = [&](Errc e, const std::string& msg = {}) {
    r.header.status = e;
    r.payload.assign(msg.begin(), msg.end());
    l_.ctx().counters->rejected_ops.fetch_add(1, std::memory_order_relaxed);
  };
  if (payload.empty() || payload.size() > wire::kMaxRegionName) return reject(Errc::BadRequest);
  std::string_view name(reinterpret_cast<const char*>(payload.data()), payload.size());
  auto reg = l_.ctx().regions->by_name(name);
  if (!reg) return reject(Errc::NoSuchRegion);
  if (!reg->seg->live()) return reject(Errc::Revoked);
  const uint64_t size = reg->seg->size();
  r.header.a0 = reinterpret_cast<uintptr_t>(reg->seg->data());
  r.header.a2 = size;
  if (size == 0) return;  // nothing to register; key 0; every non-empty op is OutOfBounds locally
  std::string why;
  const uint64_t key = dev_->key_for(reg, &why);
  if (!key) {
    l_.log(LogLevel::Error,
           "FAB0428 cannot register region '" + std::string(name) + "' for RDMA: " + why);
    r.header.a0 = r.header.a2 = 0;
    return reject(Errc::BadRequest, "the server could not register region '" + std::string(name) +
                                        "' for RDMA (see its log, FAB0428)");
  }
  r.header.a1 = key;
  // The export's own key, which the segment header carries while this export lasts: clients compare
  // it after their ops, so a re-export invalidates old descriptors at once (before the MR sweep).
  r.header.a3 = reg->key;
}

void ServerConn::atomic(const wire::Header& req, std::span<const uint8_t> payload, Reply* out) {
  Reply& r = *out;
  r = Reply{};
  r.header.op = req.op;
  r.header.reply = true;
  r.header.id = req.id;
  Counters& counters = *l_.ctx().counters;
  counters.one_sided_ops.fetch_add(1, std::memory_order_relaxed);
  auto reject = [&](Errc e) {
    r.header.status = e;
    counters.rejected_ops.fetch_add(1, std::memory_order_relaxed);
  };
  if (!payload.empty()) return reject(Errc::BadRequest);
  std::shared_ptr<const ExportedRegion> reg;  // keeps the segment mapped during the operation
  if (Errc e = dev_->resolve(req.a1, *l_.ctx().regions, &reg); e != Errc::Ok) return reject(e);
  if (!reg->seg->live()) return reject(Errc::Revoked);
  if (!peer_.member && !reg->access.readers_may_write) {  // PeerInfo: roles
    counters.reader_refusals.fetch_add(1, std::memory_order_relaxed);
    return reject(Errc::NotPermitted);
  }
  const uint64_t base = reinterpret_cast<uintptr_t>(reg->seg->data());
  const uint64_t size = reg->seg->size();
  if (req.a0 < base || req.a0 - base > size || size - (req.a0 - base) < 8)
    return reject(Errc::OutOfBounds);
  const uint64_t off = req.a0 - base;
  if (off % 8 != 0) return reject(Errc::Misaligned);
  // The same CPU atomics the owner applies to these words (and the tcp responder).
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(reg->seg->data() + off));
  if (req.op == wire::Op::Cas) {
    uint64_t expected = req.a2;
    word.compare_exchange_strong(expected, req.a3, std::memory_order_acq_rel);
    r.header.a0 = expected;  // the old value, whether or not the swap happened
  } else {
    r.header.a0 = word.fetch_add(req.a2, std::memory_order_acq_rel);
  }
}

bool ServerConn::stream_open(const wire::Header& req, std::span<const uint8_t> payload) {
  using wire::Header;
  std::string_view name(reinterpret_cast<const char*>(payload.data()), payload.size());
  bool refused = false;
  auto handler = name.empty() || name.size() > wire::kMaxServiceName
                     ? StreamHandler()
                     : l_.ctx().services->stream(name, peer_, &refused);
  Header r;
  r.op = wire::Op::StreamOpen;
  r.reply = true;
  r.id = req.id;
  const Deadline d = deadline_in(Tunables::kReplySendTimeout);
  if (!handler) {
    r.status = refused ? Errc::NotPermitted : Errc::NoSuchService;
    if (refused) l_.ctx().counters->reader_refusals.fetch_add(1, std::memory_order_relaxed);
    verbs::send_frame(*ep_, r, {}, d);
    return false;
  }
  if (client_.recv_depth <= Tunables::kStreamCtrlReserve + 1) {
    // A client connection sized for requests only cannot carry a stream's window.
    r.status = Errc::NotPermitted;
    verbs::send_frame(*ep_, r, {}, d);
    return false;
  }
  verbs::send_frame(*ep_, r, {}, d);
  l_.ctx().counters->streams.fetch_add(1, std::memory_order_relaxed);
  // The stream holds this connection (QP, id, PD) for as long as the handler keeps it.
  auto stream = std::make_unique<verbs::VerbsStream>(shared_from_this(), ep_.get(), client_,
                                                     Tunables::kServerStreamTimeout);
  handler(peer_, std::move(stream));
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Entry point

std::unique_ptr<Listener> make_verbs_listener(const Address& a, ServeContext ctx) {
  if (auto probe = verbs_probe(); !probe.ok())
    throw FabricError(Errc::NoDevice, "cannot listen on " + a.uri() + ": " + probe.message() +
                                          "; use a tcp:// listen address");
  return std::make_unique<VerbsListener>(a, ctx);
}

}  // namespace tierce::fabric
