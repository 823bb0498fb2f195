// fabric/verbs_connection.cc — client setup (rdma_cm connect, handshake) and the message operations
// of VerbsConnection. The one-sided datapath is in verbs_datapath.cc.
#include "fabric/verbs_connection.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "fabric/verbs_stream.h"

namespace tierce::fabric::verbs {

using wire::Header;
using wire::Op;

namespace {

std::string text(const std::vector<uint8_t>& p) {
  return std::string(p.begin(), p.end());
}

std::string ms_text(Millis t) {
  return std::to_string(t.count()) + " ms";
}

// Errors after which the server is known to be alive and only our QP died.
bool recoverable(Errc e) {
  return e == Errc::BadKey || e == Errc::BadRequest;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// ClientLink

ClientLink::ClientLink(const Address& a, const ClientOptions& o, Kind kind, Deadline d)
    : uri_(a.uri()) {
  auto left = [&](const std::string& step) {
    int ms = ms_until(d);
    if (ms == 0) throw FabricError(Errc::Timeout, uri_ + ": connect_timeout passed before " + step);
    return ms;
  };

  // 1. Event channel (non-blocking: every wait below polls it with the deadline) and the id.
  ch_ = open_event_channel(uri_);
  rdma_cm_id* raw = nullptr;
  if (rdma_create_id(ch_.get(), &raw, nullptr, RDMA_PS_TCP) != 0)
    throw_verbs(Errc::System, uri_ + ": rdma_create_id", errno);
  id_.reset(raw);
  // Our own ACK timeout (Tunables::kAckTimeoutExp) instead of one derived from the packet lifetime,
  // so a dead server surfaces within seconds. Older kernels lack the option: keep their default.
  uint8_t ack_timeout = Tunables::kAckTimeoutExp;
  (void)rdma_set_option(raw, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout,
                        sizeof ack_timeout);

  // 2. Address: the server's IP (IPoIB / RoCE interface) → local device and port.
  socklen_t len = 0;
  sockaddr_storage dst = resolve_host(a.host, a.port, false, &len);
  if (rdma_resolve_addr(raw, nullptr, reinterpret_cast<sockaddr*>(&dst),
                        left("address resolution")) != 0) {
    int e = errno;
    if (e == ENODEV || e == EADDRNOTAVAIL || e == ENETUNREACH)
      throw FabricError(Errc::NoDevice,
                        uri_ + ": rdma_resolve_addr: " + err_text(e) +
                            ": no local RDMA device reaches " + a.host +
                            " (it must be the address of an IPoIB or RoCE interface)");
    throw_verbs(Errc::System, uri_ + ": rdma_resolve_addr", e);
  }
  expect(RDMA_CM_EVENT_ADDR_RESOLVED, d, "address resolution", a.host);

  // 3. Route (InfiniBand: a path record from the subnet manager).
  if (rdma_resolve_route(raw, left("route resolution")) != 0)
    throw_verbs(Errc::System, uri_ + ": rdma_resolve_route", errno);
  expect(RDMA_CM_EVENT_ROUTE_RESOLVED, d, "route resolution", a.host);

  // 4. Verbs objects on the device the id is now bound to.
  dev_ = query_device(raw->verbs, raw->port_num);
  errno = 0;
  pd_.reset(ibv_alloc_pd(raw->verbs));
  if (!pd_) throw_verbs(Errc::System, uri_ + ": ibv_alloc_pd(" + dev_.name + ")", errno);
  EndpointConfig cfg;
  if (kind == Kind::Control) {
    bounce_ = AlignedBuffer(Tunables::kBounceBytes);
    errno = 0;
    bounce_mr_.reset(ibv_reg_mr(pd_.get(), bounce_.data(), bounce_.size(), kAccessLocalWrite));
    if (!bounce_mr_)
      throw_verbs(
          Errc::System,
          uri_ + ": ibv_reg_mr(bounce memory, " + std::to_string(bounce_.size()) + " bytes)", errno,
          kMemlockHint);
    cfg = EndpointConfig{Tunables::kClientRecvDepth, Tunables::kClientSendDepth,
                         Tunables::kClientSendBuffers};
    if (o.registration_cache_bytes > 0) {
      // Caller buffers of large READ/WRITEs (verbs_datapath.cc). Process-wide, so that
      // fabric::invalidate_registrations() reaches it before the caller frees memory.
      RegCacheLimits lim;
      lim.max_unused_bytes = o.registration_cache_bytes;
      lim.max_unused_count = Tunables::kRegCacheMaxUnused;
      ibv_pd* pd = pd_.get();
      reg_cache_ = std::make_unique<RegCache>(
          [pd](void* addr, size_t len, uint32_t access) -> RegCache::Handle {
            return ibv_reg_mr(pd, addr, len, int(access));
          },
          [](RegCache::Handle h) { (void)ibv_dereg_mr(static_cast<ibv_mr*>(h)); }, lim,
          /*process_wide=*/true);
    }
  } else {
    cfg = EndpointConfig{Tunables::kStreamRecvDepth, Tunables::kStreamSendDepth,
                         Tunables::kStreamSendBuffers};
  }
  ep_ = std::make_unique<Endpoint>(raw, pd_.get(), dev_, cfg);
  ep_->set_watch(ch_->fd, [this] { on_cm_events(); });

  // 5. Connect. Private data: our receive depth and buffer size (verbs_resources.h).
  uint8_t mine[kPeerParamsSize];
  encode_peer_params(ep_->local_params(), mine);
  rdma_conn_param p{};
  p.private_data = mine;
  p.private_data_len = uint8_t(sizeof mine);
  // RDMA READ/atomics we may have outstanding at the server (the HCA queues any beyond).
  p.initiator_depth =
      uint8_t(std::min<uint32_t>(Tunables::kRdAtomicDepth, dev_.max_qp_init_rd_atom));
  // The server reads from us only to fetch our long frames, one at a time. Non-zero matters: the
  // kernel's IB CM grants our QP remote-read access only with responder resources.
  p.responder_resources = uint8_t(std::min<uint32_t>(1, dev_.max_qp_rd_atom));
  p.flow_control = 1;
  p.retry_count = Tunables::kRetryCount;    // transport retries, both directions
  p.rnr_retry_count = Tunables::kRnrRetry;  // the server's retries when we have no receive posted
  if (rdma_connect(raw, &p) != 0) throw_verbs(Errc::System, uri_ + ": rdma_connect", errno);
  connected_ = true;
  {
    CmEvent ev = expect(RDMA_CM_EVENT_ESTABLISHED, d, "connection", a.host);
    auto sp = decode_peer_params(ev->param.conn.private_data, ev->param.conn.private_data_len);
    if (!sp)
      throw FabricError(Errc::Protocol,
                        uri_ +
                            ": the server sent no Tierce connection parameters: not a Tierce "
                            "verbs server, or of another version");
    server_ = *sp;
  }
  ep_->set_peer(server_);
  nic_atomics_ = dev_.atomic_cap != IBV_ATOMIC_NONE &&
                 ((server_.flags & kPeerAtomicsGlob) ||
                  (Tunables::kNicAtomicsWithoutGlob && (server_.flags & kPeerAtomicsHca)));

  // 6. HELLO / AUTH / AUTH_OK as SEND/RECV messages.
  if (o.secret.empty()) throw FabricError(Errc::Config, "no shared secret configured for " + uri_);
  server_name_ = handshake(o.secret, o.identity, d);
  ep_->allow_long_frames();
}

ClientLink::~ClientLink() {
  shutdown();
}

void ClientLink::shutdown() noexcept {
  if (disconnected_) return;
  disconnected_ = true;
  if (connected_)
    (void)rdma_disconnect(id_.get());  // tells the server; fails harmlessly if never established
  // rdma_disconnect moves the QP to the error state on IB and RoCE; make sure of it whatever
  // happened above, so every posted WR completes (flushed) now.
  if (ep_ && ep_->qp()) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    (void)ibv_modify_qp(ep_->qp(), &attr, IBV_QP_STATE);
  }
}

CmEvent ClientLink::expect(rdma_cm_event_type want, Deadline d, const std::string& step,
                           const std::string& host) {
  CmEvent ev = next_cm_event(ch_.get(), d);
  if (!ev)
    throw FabricError(Errc::Timeout,
                      uri_ + ": " + step + " did not complete within connect_timeout");
  const int st = ev->status;
  if (ev->event == want && st == 0) return ev;
  const std::string what = uri_ + ": " + step + " failed (" + rdma_event_str(ev->event) + ")";
  switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_ERROR:
      if (st == -ETIMEDOUT)
        throw FabricError(Errc::Timeout,
                          what + ": " + host + " did not answer address resolution (ARP/ND)");
      if (st == -ENODEV || st == -EADDRNOTAVAIL || st == -ENETUNREACH)
        throw FabricError(Errc::NoDevice,
                          what + ": no local RDMA device reaches " + host + " (" + err_text(-st) +
                              "); it must be the address of an IPoIB or RoCE interface");
      throw FabricError(Errc::System,
                        what + ": " + (st < 0 ? err_text(-st) : "status " + std::to_string(st)));
    case RDMA_CM_EVENT_ROUTE_ERROR:
      throw FabricError(st == -ETIMEDOUT ? Errc::Timeout : Errc::System,
                        what + ": " + (st < 0 ? err_text(-st) : "status " + std::to_string(st)) +
                            " (InfiniBand: is a subnet manager running? see `ibstat`, `sminfo`)");
    case RDMA_CM_EVENT_UNREACHABLE:
      throw FabricError(
          Errc::Timeout,
          what + ": " + host +
              " did not answer the connection request (server host down or unreachable)");
    case RDMA_CM_EVENT_REJECTED:
      throw FabricError(Errc::PeerClosed, uri_ + ": connection refused: " + describe_reject(st));
    case RDMA_CM_EVENT_CONNECT_ERROR:
      throw FabricError(Errc::PeerClosed,
                        what + ": " + (st < 0 ? err_text(-st) : "status " + std::to_string(st)));
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      throw FabricError(Errc::NoDevice, what + ": the RDMA device was removed");
    default:
      if (ev->event == want)
        throw FabricError(Errc::System, what + ": status " + std::to_string(st));
      throw FabricError(Errc::Protocol, uri_ + ": unexpected rdma_cm event " +
                                            rdma_event_str(ev->event) + " during " + step);
  }
}

void ClientLink::on_cm_events() {
  for (;;) {
    CmEvent ev;
    try {
      ev = next_cm_event(ch_.get(), std::chrono::steady_clock::now());
    } catch (const FabricError& e) {
      ep_->fail(Errc::PeerClosed, uri_ + ": " + e.what());
      shutdown();
      return;
    }
    if (!ev) return;
    switch (ev->event) {
      case RDMA_CM_EVENT_DISCONNECTED:
        ep_->fail(Errc::PeerClosed, uri_ + ": the server closed the connection");
        shutdown();  // our QP to the error state: posted work completes (flushed) now
        break;
      case RDMA_CM_EVENT_DEVICE_REMOVAL:
        ep_->fail(Errc::NoDevice, uri_ + ": the RDMA device was removed");
        shutdown();
        break;
      default:  // TIMEWAIT_EXIT, ADDR_CHANGE, ...: nothing to do
        break;
    }
  }
}

std::string ClientLink::handshake(const Secret& secret, const ClientIdentity& id, Deadline d) {
  ClientHandshake hs(secret, Protection::None, &id);
  Header h;
  std::vector<uint8_t> p;
  if (!recv_frame(*ep_, &h, &p, d))
    throw FabricError(Errc::Timeout, uri_ + ": no HELLO from the server within connect_timeout");
  auto auth = hs.answer_hello(h, p);
  send_frame(*ep_, hs.auth_header(), auth, d);
  if (!recv_frame(*ep_, &h, &p, d))
    throw FabricError(Errc::Timeout, uri_ + ": server " + hs.server_name() +
                                         " did not answer AUTH within connect_timeout");
  hs.check_answer(h, p);
  return hs.server_name();
}

// ---------------------------------------------------------------------------------------------
// VerbsConnection: setup and messages

VerbsConnection::VerbsConnection(Address a, const ClientOptions& opts)
    : addr_(std::move(a)), uri_(addr_.uri()), opts_(opts) {
  if (opts_.secret.empty())
    throw FabricError(Errc::Config, "no shared secret configured for " + uri_);
  link_ = std::make_shared<ClientLink>(addr_, opts_, ClientLink::Kind::Control,
                                       deadline_in(opts_.connect_timeout));
  peer_name_ = link_->server_name();
}

// A batch posted and never waited for: destroying the link (QP first) stops the HCA before the
// bounce memory and the registrations go away.
VerbsConnection::~VerbsConnection() = default;

Capabilities VerbsConnection::capabilities() const {
  Capabilities c =
      capabilities_of(Transport::Verbs);  // max_message = wire::kMaxMessage (rendezvous)
  if (link_) {
    const DeviceLimits& d = link_->device();
    if (d.max_msg_sz) c.max_transfer = std::min<size_t>(c.max_transfer, d.max_msg_sz);
    c.native_atomics = link_->nic_atomics();
  }
  return c;
}

void VerbsConnection::check_message_size(const char* what, std::string_view service, size_t body,
                                         size_t payload) const {
  if (body > wire::kMaxMessage || wire::kHeaderSize + payload > Tunables::kMaxLongFrame)
    throw FabricError(Errc::TooLarge, std::string(what) + " " + std::string(service) + " at " +
                                          uri_ + ": body of " + std::to_string(body) +
                                          " bytes exceeds the message bound of " +
                                          std::to_string(wire::kMaxMessage) +
                                          " bytes (capabilities().max_message)");
}

void VerbsConnection::fail(const FabricError& e) {
  broken_ = true;
  broken_why_ = e.what();
  pending_ = false;
  link_.reset();  // QP first, then registrations, bounce memory, PD, id, channel
  throw FabricError(e.code(), uri_ + ": " + e.what());
}

ClientLink& VerbsConnection::usable_link() {
  if (broken_)
    throw FabricError(Errc::PeerClosed,
                      "connection to " + uri_ + " is broken (" + broken_why_ + "); reconnect");
  if (pending_)
    throw std::logic_error("fabric: operation on a connection with a posted, unwaited batch");
  if (link_ && !link_->ep().failed()) return *link_;
  Errc code = link_ ? link_->ep().fail_code() : Errc::PeerClosed;
  std::string why = link_ ? link_->ep().fail_why() : "not connected";
  if (!recoverable(code)) fail(FabricError(code, why));
  // The server refused one of our RDMA operations, which killed this QP but not the server: a new
  // QP keeps the connection usable, as a refused op does on tcp.
  link_.reset();
  unacked_sends_ = 0;
  try {
    link_ = std::make_shared<ClientLink>(addr_, opts_, ClientLink::Kind::Control,
                                         deadline_in(opts_.connect_timeout));
  } catch (const FabricError& e) {
    fail(FabricError(e.code(), std::string("reconnecting after '") + why + "': " + e.what()));
  }
  return *link_;
}

Header VerbsConnection::round_trip(Header req, std::span<const uint8_t> payload,
                                   std::vector<uint8_t>* reply) {
  ClientLink& l = usable_link();
  req.id = next_id_++;
  Deadline d = deadline_in(opts_.op_timeout);
  Header h;
  try {
    send_frame(l.ep(), req, payload, d);
    if (!recv_frame(l.ep(), &h, reply, d))
      throw FabricError(Errc::Timeout, "no reply to " + std::string(wire::op_name(req.op)) +
                                           " within op_timeout (" + ms_text(opts_.op_timeout) +
                                           ")");
    if (!h.reply || h.op != req.op || h.id != req.id)
      throw FabricError(Errc::Protocol, "reply does not match the request");
  } catch (const FabricError& e) {
    fail(e);
  }
  unacked_sends_ = 0;  // the server answers in order: every earlier message was consumed
  return h;
}

RemoteRegion VerbsConnection::lookup(std::string_view name) {
  if (name.empty() || name.size() > wire::kMaxRegionName)
    throw FabricError(Errc::BadRequest, "lookup at " + uri_ + ": region names are 1.." +
                                            std::to_string(wire::kMaxRegionName) + " bytes");
  Header req;
  req.op = Op::Lookup;
  std::vector<uint8_t> p;
  Header h =
      round_trip(req, std::span(reinterpret_cast<const uint8_t*>(name.data()), name.size()), &p);
  if (h.status != Errc::Ok)
    throw FabricError(h.status, "lookup of region '" + std::string(name) + "' at " + uri_ + ": " +
                                    std::string(to_string(h.status)) +
                                    (p.empty() ? "" : ": " + text(p)));
  if (h.a1 != 0) export_keys_[{h.a0, h.a1}] = h.a3;  // what its lease checks hold the segment to
  return RemoteRegion{uri_, h.a0, h.a2, h.a1};
}

std::vector<uint8_t> VerbsConnection::call(std::string_view service,
                                           std::span<const uint8_t> body) {
  std::vector<uint8_t> p, r;
  wire::encode_service_payload(p, service, body);
  check_message_size("call", service, body.size(), p.size());
  Header req;
  req.op = Op::Call;
  Header h = round_trip(req, p, &r);
  if (h.status != Errc::Ok)
    throw FabricError(h.status, "call " + std::string(service) + " at " + uri_ + ": " +
                                    std::string(to_string(h.status)) +
                                    (r.empty() ? "" : ": " + text(r)));
  return r;
}

void VerbsConnection::send(std::string_view service, std::span<const uint8_t> body) {
  std::vector<uint8_t> p;
  wire::encode_service_payload(p, service, body);
  check_message_size("send", service, body.size(), p.size());
  ClientLink* l = &usable_link();
  // Flow control: never more of our messages at the server than it keeps receives posted.
  if (unacked_sends_ + 2 > l->server().recv_depth) {
    ping();
    l = &usable_link();
  }
  const bool rendezvous = wire::kHeaderSize + p.size() > l->ep().eager_limit();
  Header req;
  req.op = Op::Send;
  req.id = next_id_++;
  try {
    send_frame(l->ep(), req, p, deadline_in(opts_.op_timeout));
  } catch (const FabricError& e) {
    fail(e);
  }
  ++unacked_sends_;
  // A long frame stays in our long-send buffer until the server has read it; the reply to a PING
  // (handled after the SEND, in order) says it has, before anything may overwrite the buffer.
  if (rendezvous) ping();
}

std::unique_ptr<Stream> VerbsConnection::open_stream(std::string_view service) {
  if (service.empty() || service.size() > wire::kMaxServiceName)
    throw FabricError(Errc::NoSuchService, "stream " + std::string(service) + " at " + uri_ + ": " +
                                               std::string(to_string(Errc::NoSuchService)));
  Deadline d = deadline_in(opts_.connect_timeout);
  auto link = std::make_shared<ClientLink>(addr_, opts_, ClientLink::Kind::Stream, d);
  Header req;
  req.op = Op::StreamOpen;
  req.id = 2;
  send_frame(link->ep(), req,
             std::span(reinterpret_cast<const uint8_t*>(service.data()), service.size()), d);
  Header h;
  std::vector<uint8_t> p;
  if (!recv_frame(link->ep(), &h, &p, d))
    throw FabricError(Errc::Timeout, uri_ + ": no answer to STREAM_OPEN within connect_timeout");
  if (h.op != Op::StreamOpen || !h.reply || h.id != req.id)
    throw FabricError(Errc::Protocol, uri_ + ": unexpected answer to STREAM_OPEN");
  if (h.status != Errc::Ok)
    throw FabricError(h.status, "stream " + std::string(service) + " at " + uri_ + ": " +
                                    std::string(to_string(h.status)));
  if (link->server().recv_depth <= Tunables::kStreamCtrlReserve + 1)
    throw FabricError(Errc::Unsupported,
                      uri_ + ": the server keeps too few receives posted for a verbs stream");
  Endpoint* ep = &link->ep();
  PeerParams server = link->server();
  return std::make_unique<VerbsStream>(std::shared_ptr<void>(std::move(link)), ep, server,
                                       opts_.op_timeout);
}

void VerbsConnection::ping() {
  Header req;
  req.op = Op::Ping;
  std::vector<uint8_t> p;
  Header h = round_trip(req, {}, &p);
  if (h.status != Errc::Ok)
    throw FabricError(h.status, "ping " + uri_ + ": " + std::string(to_string(h.status)));
}

}  // namespace tierce::fabric::verbs
