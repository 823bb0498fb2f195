// fabric/stream_transport.cc — tcp backend, shm control channel, and the shm datapath.
#include "fabric/stream_transport.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstring>

namespace tierce::fabric {

using wire::Header;
using wire::Op;

// ---------------------------------------------------------------------------------------------
// SocketStream

void SocketStream::write_all(std::span<const uint8_t> b) {
  send_all(fd_.get(), b.data(), b.size(), deadline_in(timeout_));
}

size_t SocketStream::read_some(std::span<uint8_t> b) {
  return recv_some(fd_.get(), b.data(), b.size(), deadline_in(timeout_));
}

void SocketStream::shutdown_write() {
  ::shutdown(fd_.get(), SHUT_WR);
}

void Stream::read_exact(std::span<uint8_t> buf) {
  size_t got = 0;
  while (got < buf.size()) {
    size_t n = read_some(buf.subspan(got));
    if (n == 0) throw FabricError(Errc::PeerClosed, "stream ended early");
    got += n;
  }
}

// ---------------------------------------------------------------------------------------------
// Frames on sockets

void send_frame(int fd, const Header& h, std::span<const uint8_t> payload, Deadline d,
                FrameProtector* prot) {
  if (prot && prot->active()) {
    if (prot->mode() == Protection::Mac && payload.size() > 4096) {  // large: no copy
      uint8_t hb[wire::kHeaderSize], tag[FrameProtector::kTagSize];
      Header c = h;
      c.length = uint32_t(payload.size());
      wire::encode_header(c, hb);
      prot->seal_const(hb, payload.data(), payload.size(), tag);
      send_all(fd, hb, sizeof hb, d);
      send_all(fd, payload.data(), payload.size(), d);
      send_all(fd, tag, sizeof tag, d);
      return;
    }
    std::vector<uint8_t> buf;
    buf.reserve(wire::kHeaderSize + payload.size() + FrameProtector::kTagSize);
    append_sealed_frame(buf, h, payload, prot);
    send_all(fd, buf.data(), buf.size(), d);
    return;
  }
  uint8_t hb[wire::kHeaderSize];
  Header c = h;
  c.length = uint32_t(payload.size());
  wire::encode_header(c, hb);
  if (payload.size() <= 4096) {
    uint8_t buf[wire::kHeaderSize + 4096];
    std::memcpy(buf, hb, sizeof hb);
    if (!payload.empty()) std::memcpy(buf + sizeof hb, payload.data(), payload.size());
    send_all(fd, buf, sizeof hb + payload.size(), d);
  } else {
    send_all(fd, hb, sizeof hb, d);
    send_all(fd, payload.data(), payload.size(), d);
  }
}

void append_sealed_frame(std::vector<uint8_t>& out, const Header& h,
                         std::span<const uint8_t> payload, FrameProtector* prot) {
  size_t at = out.size();
  wire::append_frame(out, h, payload);
  if (!prot || !prot->active()) return;
  out.resize(out.size() + FrameProtector::kTagSize);
  uint8_t* f = out.data() + at;
  prot->seal(f, f + wire::kHeaderSize, payload.size(), f + wire::kHeaderSize + payload.size());
}

namespace {

// Reads one frame; false on clean EOF between frames. Throws Protocol on a malformed header or,
// with an active protector, a frame that fails its tag; TooLarge on a payload over max_len
// (before anything is allocated for it).
bool recv_frame(int fd, Header* h, std::vector<uint8_t>* payload, Deadline header_deadline,
                Deadline body_deadline, size_t max_len = wire::kMaxPayload,
                FrameProtector* prot = nullptr) {
  uint8_t hb[wire::kHeaderSize];
  if (!recv_exact(fd, hb, sizeof hb, header_deadline, true)) return false;
  auto dh = wire::decode_header(hb);
  if (!dh) throw FabricError(Errc::Protocol, "malformed frame: " + dh.message());
  if (dh->length > max_len)
    throw FabricError(Errc::TooLarge, "a " + std::to_string(dh->length) +
                                          "-byte frame where at most " + std::to_string(max_len) +
                                          " are accepted");
  *h = *dh;
  payload->resize(h->length);
  if (h->length) recv_exact(fd, payload->data(), h->length, body_deadline);
  if (prot && prot->active()) {
    uint8_t tag[FrameProtector::kTagSize];
    recv_exact(fd, tag, sizeof tag, body_deadline);
    if (!prot->open(hb, payload->data(), payload->size(), tag))
      throw FabricError(Errc::Protocol, "frame failed authentication (bad MAC: injected, "
                                        "replayed or reordered)");
  }
  return true;
}

// Handshake frames from a server (HELLO, AUTH_OK or a refusal) are small; a client does not let
// a bogus server make it allocate more.
constexpr size_t kMaxHandshakeFrame = 4096;

constexpr Millis kFrameBodyTimeout{5000};

}  // namespace

bool FrameReader::header(Header* h, Deadline d) {
  while (buffered() < wire::kHeaderSize) {
    if (begin_ > 0) {  // compact: keep the partial frame at the front
      std::memmove(buf_.data(), buf_.data() + begin_, buffered());
      end_ -= begin_;
      begin_ = 0;
    }
    // Adaptive spin: poll briefly before sleeping, as long as polling pays off. When a spin comes
    // back empty (the peer is slow, or shares this CPU and cannot run while we poll) the next
    // waits sleep at once, for a doubling number of waits (up to 64).
    std::optional<size_t> got;
    if (spin_.count() > 0 && skip_ == 0) {
      got = recv_spin(fd_, buf_.data() + end_, buf_.size() - end_, spin_);
      backoff_ = got ? 0 : std::min(backoff_ * 2 + 1, 64u);
      skip_ = backoff_;
    } else if (skip_ > 0) {
      --skip_;
    }
    size_t n = got ? *got : recv_some(fd_, buf_.data() + end_, buf_.size() - end_, d);
    if (n == 0) {
      if (buffered() == 0) return false;
      throw FabricError(Errc::PeerClosed, "peer closed the connection mid-frame");
    }
    end_ += n;
  }
  auto dh = wire::decode_header(std::span(buf_.data() + begin_, wire::kHeaderSize));
  if (!dh) throw FabricError(Errc::Protocol, "malformed frame: " + dh.message());
  begin_ += wire::kHeaderSize;
  *h = *dh;
  return true;
}

bool FrameReader::finish(const Header& h, uint8_t* payload, Deadline d) {
  if (!prot_ || !prot_->active()) return true;
  uint8_t tag[FrameProtector::kTagSize], hb[wire::kHeaderSize];
  body(tag, sizeof tag, d);
  // The header as it was on the wire: decode_header accepts only canonical encodings of what it
  // returns, so encoding it again gives the bytes the sender sealed.
  wire::encode_header(h, hb);
  return prot_->open(hb, payload, h.length, tag);
}

void FrameReader::body(void* dst, size_t n, Deadline d) {
  auto* out = static_cast<uint8_t*>(dst);
  size_t take = std::min(n, buffered());
  if (take) std::memcpy(out, buf_.data() + begin_, take);
  begin_ += take;
  if (begin_ == end_) begin_ = end_ = 0;
  // The rest goes straight to the destination: large payloads are not copied twice.
  if (n > take) recv_exact(fd_, out + take, n - take, d);
}

// ---------------------------------------------------------------------------------------------
// Server side

namespace {

void log_to(const ServerOptions& o, LogLevel l, const std::string& s) {
  if (o.log) o.log(l, s);
}

// Answers a handshake frame with AuthFailed and `why` as its body.
void refuse_auth(int fd, const Header& to, std::string_view why, Deadline d) {
  Header r;
  r.op = to.op;
  r.reply = true;
  r.id = to.id;
  r.status = Errc::AuthFailed;
  send_frame(fd, r, std::span(reinterpret_cast<const uint8_t*>(why.data()), why.size()), d);
}

// Steps 1 and 2 of a connection: HELLO, then AUTH proving the secret, answered with AUTH_OK.
// Returns the session's protector, or nothing when the peer was refused or left (already logged
// and counted). Throws FabricError on socket failures.
std::optional<FrameProtector> server_handshake(int fd, PeerInfo& peer, const ServeContext& ctx) {
  const ServerOptions& o = *ctx.opts;
  // 1. HELLO with our nonce, protocol version and protection (tcp only: shm stays on this
  //    host, inside the trust domain, and its control channel is not protected).
  const Protection ours = ctx.view.transport == Transport::Tcp ? o.protection : Protection::None;
  Nonce sn = make_nonce();
  std::vector<uint8_t> hello(sn.begin(), sn.end());
  hello.insert(hello.end(), o.name.begin(), o.name.end());
  Header hh;
  hh.op = Op::Hello;
  hh.a0 = wire::kProtocolVersion;
  hh.a1 = uint64_t(ours);
  Deadline auth_d = deadline_in(o.auth_timeout);
  send_frame(fd, hh, hello, auth_d);

  // 2. AUTH must come first and prove the secret. Until it has, a frame may claim at most
  //    max_preauth_frame bytes: an unauthenticated peer cannot make us allocate more.
  Header h;
  std::vector<uint8_t> payload;
  try {
    if (!recv_frame(fd, &h, &payload, auth_d, auth_d, o.max_preauth_frame)) return std::nullopt;
  } catch (const FabricError& e) {
    if (e.code() != Errc::TooLarge) throw;
    ctx.counters->preauth_oversize.fetch_add(1, std::memory_order_relaxed);
    log_to(o, LogLevel::Warn, "FAB0209 peer " + peer.remote + " sent " + e.what() +
                                  " before authenticating (max_preauth_frame); closing");
    return std::nullopt;
  }
  std::optional<AuthRequest> req;
  if (h.op == Op::Auth && !h.reply) req = parse_auth(payload);
  if (!req) {
    ctx.counters->auth_failures.fetch_add(1, std::memory_order_relaxed);
    log_to(o, LogLevel::Warn, "FAB0201 peer " + peer.remote + " sent " +
                                  std::string(wire::op_name(h.op)) +
                                  " before authenticating; closing");
    refuse_auth(fd, h, "authenticate first", auth_d);
    return std::nullopt;
  }
  if (h.a0 != wire::kProtocolVersion || h.a1 > uint64_t(Protection::Encrypt)) {
    ctx.counters->auth_failures.fetch_add(1, std::memory_order_relaxed);
    std::string why = "peer speaks fabric protocol version " +
                      std::to_string(h.a0 == 0 ? 1 : h.a0) + ", this server version " +
                      std::to_string(wire::kProtocolVersion) +
                      " (frame protection): run the same Tierce release on both ends";
    log_to(o, LogLevel::Warn, "FAB0210 " + peer.remote + ": " + why + "; closing");
    refuse_auth(fd, h, why, auth_d);
    return std::nullopt;
  }
  HandshakeParams params;
  params.server = ours;
  params.client = Protection(h.a1);
  const Protection agreed =
      ctx.view.transport == Transport::Tcp ? params.agreed() : Protection::None;
  std::string node;
  const AuthVerdict verdict = check_auth(*req, o.secret, sn, params, o.name, o.identity, &node);
  if (verdict != AuthVerdict::Ok) {
    ctx.counters->auth_failures.fetch_add(1, std::memory_order_relaxed);
    log_to(o, LogLevel::Warn,
           verdict == AuthVerdict::BadProof
               ? "FAB0202 peer " + peer.remote + " failed authentication (wrong shared secret?); closing"
               : identity_refusal(verdict, peer.remote, req->node));
    refuse_auth(fd, h, verdict == AuthVerdict::BadProof ? "" : "node identity refused", auth_d);
    return std::nullopt;
  }
  peer.node = node;
  peer.member = !node.empty() || o.identity.peers.empty();  // PeerInfo: roles
  const Nonce& cn = req->cn;
  std::vector<uint8_t> sp = auth_ok_payload(o.secret, sn, cn, params, o.name, o.identity);
  Header ok;
  ok.op = Op::AuthOk;
  ok.reply = true;
  ok.id = h.id;
  ok.a1 = uint64_t(agreed);
  send_frame(fd, ok, sp, auth_d);
  return FrameProtector(o.secret, sn, cn, agreed, false);
}

// Reads the next request (header, body, tag). False when the connection is to close: EOF, a
// reply frame, a bad MAC, a malformed frame or a timeout (logged and counted here).
bool read_request(FrameReader& reader, Header* h, std::vector<uint8_t>* payload,
                  const PeerInfo& peer, const ServeContext& ctx) {
  const ServerOptions& o = *ctx.opts;
  Deadline idle = o.idle_timeout.count() > 0 ? deadline_in(o.idle_timeout) : kNoDeadline;
  try {
    if (!reader.header(h, idle)) return false;
    if (h->reply) {  // before the body and tag: closing either way, no need to wait for them
      ctx.counters->malformed_frames.fetch_add(1, std::memory_order_relaxed);
      log_to(o, LogLevel::Warn,
             "FAB0205 peer " + peer.remote + " sent a reply frame as a request; closing");
      return false;
    }
    payload->resize(h->length);
    Deadline bd = deadline_in(kFrameBodyTimeout);
    if (h->length) reader.body(payload->data(), h->length, bd);
    if (!reader.finish(*h, payload->data(), bd)) {
      // Checked before anything is done with the frame: a forged request is never applied.
      ctx.counters->bad_frame_macs.fetch_add(1, std::memory_order_relaxed);
      log_to(o, LogLevel::Warn, "FAB0211 peer " + peer.remote + ": a " +
                                    std::string(wire::op_name(h->op)) +
                                    " frame failed authentication (bad MAC: injected, replayed or "
                                    "reordered, or another secret); closing the connection");
      return false;
    }
  } catch (const FabricError& e) {
    if (e.code() == Errc::Protocol) {
      ctx.counters->malformed_frames.fetch_add(1, std::memory_order_relaxed);
      log_to(o, LogLevel::Warn,
             "FAB0203 peer " + peer.remote + ": " + e.what() + "; closing the connection");
    } else if (e.code() == Errc::Timeout) {
      log_to(o, LogLevel::Info,
             "FAB0204 peer " + peer.remote + " idle or stalled mid-frame; closing");
    }
    return false;
  }
  return true;
}

// Replies held back while more requests are already buffered, so a posted batch costs one send.
class ReplyBatch {
 public:
  ReplyBatch(int fd, FrameProtector* prot) : fd_(fd), prot_(prot) {}

  void flush(Deadline d) {
    if (!out_.empty()) send_all(fd_, out_.data(), out_.size(), d);
    out_.clear();
  }

  // Sends (or queues) one reply from the responder.
  void add(Reply& reply, Deadline d) {
    if (reply.fd_to_pass >= 0) {
      flush(d);
      uint8_t hb[wire::kHeaderSize];
      reply.header.length = 0;
      wire::encode_header(reply.header, hb);
      send_with_fd(fd_, hb, sizeof hb, reply.fd_to_pass, d);
    } else {
      auto body = reply.direct.empty() ? std::span<const uint8_t>(reply.payload) : reply.direct;
      if (body.size() > FrameReader::kBufferSize) {  // large: no extra copy, but see below
        flush(d);
        if (!reply.direct.empty() && prot_ && prot_->mode() == Protection::Mac) {
          // A live region (a READ): its owner may write it while it is sent. The tag must cover
          // the bytes that go out, so they are taken once, here; MACing the region and then
          // sending it again made the client see a bad MAC whenever a write fell in between.
          // (Encrypt mode copies anyway; unprotected frames carry no tag to disagree with.)
          snapshot_.assign(body.begin(), body.end());
          body = snapshot_;
        }
        send_frame(fd_, reply.header, body, d, prot_);
      } else {
        append_sealed_frame(out_, reply.header, body, prot_);
      }
    }
  }

  size_t size() const { return out_.size(); }

 private:
  int fd_;
  FrameProtector* prot_;
  std::vector<uint8_t> out_;
  std::vector<uint8_t> snapshot_;  // a large READ's bytes in Mac mode (add)
};

enum class StreamOpened { Refused, Handed, Close };

// STREAM_OPEN: hands the socket to the named service (Handed), or answers NoSuchService
// (Refused: the connection goes on). Close when the peer sent data too early.
StreamOpened open_stream(Fd& fd, const Header& h, const std::vector<uint8_t>& payload,
                         const PeerInfo& peer, const ServeContext& ctx, FrameReader& reader,
                         FrameProtector* prot, Deadline d) {
  if (reader.buffered() != 0) {
    log_to(*ctx.opts, LogLevel::Warn,
           "FAB0208 peer " + peer.remote + " sent data before its stream was accepted; closing");
    return StreamOpened::Close;
  }
  std::string_view name(reinterpret_cast<const char*>(payload.data()), payload.size());
  bool refused = false;
  auto handler = name.empty() || name.size() > wire::kMaxServiceName
                     ? StreamHandler()
                     : ctx.services->stream(name, peer, &refused);
  Header r;
  r.op = Op::StreamOpen;
  r.reply = true;
  r.id = h.id;
  if (!handler) {
    r.status = refused ? Errc::NotPermitted : Errc::NoSuchService;
    if (refused) ctx.counters->reader_refusals.fetch_add(1, std::memory_order_relaxed);
    send_frame(fd.get(), r, {}, d, prot);
    return StreamOpened::Refused;
  }
  // From here on the socket carries the service's raw bytes (sendfile/splice): streams are
  // not protected by the fabric (ADTS/FTP bring their own TLS where they need it).
  send_frame(fd.get(), r, {}, d, prot);
  ctx.counters->streams.fetch_add(1, std::memory_order_relaxed);
  handler(peer, std::make_unique<SocketStream>(std::move(fd), Millis(30000)));
  return StreamOpened::Handed;
}

}  // namespace

void serve_stream_connection(Fd fd, const PeerInfo& accepted, const ServeContext& ctx) {
  const ServerOptions& o = *ctx.opts;
  PeerInfo peer = accepted;  // + the client's node, once its signature is checked
  try {
    std::optional<FrameProtector> handshake = server_handshake(fd.get(), peer, ctx);
    if (!handshake) return;
    FrameProtector prot = std::move(*handshake);

    // 3. Requests.
    Responder responder(*ctx.regions, *ctx.services, *ctx.counters);
    Reply reply;
    Header h;
    std::vector<uint8_t> payload;
    FrameReader reader(fd.get(), o.spin);
    reader.protect(&prot);
    ReplyBatch out(fd.get(), &prot);
    for (;;) {
      if (!read_request(reader, &h, &payload, peer, ctx)) return;
      Deadline d = deadline_in(kFrameBodyTimeout);
      if (h.op == Op::StreamOpen) {
        out.flush(d);
        if (open_stream(fd, h, payload, peer, ctx, reader, &prot, d) == StreamOpened::Refused)
          continue;
        return;
      }
      if (responder.handle(h, payload, peer, ctx.view, &reply)) {
        out.add(reply, d);
        reply.pinned.reset();
      }
      // Coalesce: while the next request is already here, answer it before sending (a posted
      // batch then costs one send), but never sit on a reply when nothing else is pending.
      if (reader.buffered() < wire::kHeaderSize || out.size() > FrameReader::kBufferSize)
        out.flush(d);
    }
  } catch (const FabricError& e) {
    if (e.code() != Errc::PeerClosed)
      log_to(o, LogLevel::Info, "FAB0206 connection from " + peer.remote + " ended: " + e.what());
  } catch (const std::exception& e) {
    log_to(o, LogLevel::Error, "FAB0207 connection from " + peer.remote + " failed: " + e.what());
  }
}

// ---------------------------------------------------------------------------------------------
// Client side

std::string client_handshake(int fd, const Secret& secret, Deadline d, Protection wanted,
                             FrameProtector* prot, const ClientIdentity* id) {
  ClientHandshake hs(secret, wanted, id);
  Header h;
  std::vector<uint8_t> p;
  if (!recv_frame(fd, &h, &p, d, d, kMaxHandshakeFrame))
    throw FabricError(Errc::PeerClosed, "server closed before HELLO");
  auto auth = hs.answer_hello(h, p);
  send_frame(fd, hs.auth_header(), auth, d);
  if (!recv_frame(fd, &h, &p, d, d, kMaxHandshakeFrame))
    throw FabricError(Errc::AuthFailed, "server " + hs.server_name() +
                                            " closed the connection during authentication");
  hs.check_answer(h, p);
  if (prot)
    *prot = FrameProtector(secret, hs.server_nonce(), hs.client_nonce(), hs.protection(), true);
  return hs.server_name();
}

namespace {
// What a client asks for: tcp only (shm's control channel stays on this host).
Protection wanted_on(Transport t, Protection p) {
  return t == Transport::Tcp ? p : Protection::None;
}
[[noreturn]] void bad_reply_mac() {
  throw FabricError(Errc::Protocol,
                    "a reply failed authentication (bad MAC: injected, replayed or reordered "
                    "frame on the path); the connection is closed, nothing from it was used");
}
}  // namespace

StreamConnection::StreamConnection(Address addr, const ClientOptions& opts)
    : addr_(std::move(addr)), uri_(addr_.uri()), opts_(opts) {
  if (opts_.secret.empty())
    throw FabricError(Errc::Config, "no shared secret configured for " + uri_);
  Deadline d = deadline_in(opts_.connect_timeout);
  fd_ = open_socket(d);
  if (opts_.reset_on_close && addr_.transport == Transport::Tcp) {
    linger lg{1, 0};  // ClientOptions::reset_on_close
    if (::setsockopt(fd_.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg) != 0)
      throw FabricError(Errc::System, uri_ + ": setsockopt SO_LINGER: " + std::strerror(errno));
  }
  peer_name_ = client_handshake(fd_.get(), opts_.secret, d,
                                wanted_on(addr_.transport, opts_.protection), &prot_,
                                &opts_.identity);
  reader_ = std::make_unique<FrameReader>(fd_.get(), opts_.spin);
  reader_->protect(&prot_);
}

Fd StreamConnection::open_socket(Deadline d) const {
  if (addr_.transport == Transport::Shm) return unix_connect(addr_.path, d);
  return tcp_connect(addr_.host, addr_.port, d);
}

void StreamConnection::check_usable() const {
  if (broken_)
    throw FabricError(Errc::PeerClosed,
                      "connection to " + uri_ + " is broken (" + broken_why_ + "); reconnect");
  if (pending_)
    throw std::logic_error("fabric: operation on a connection with a posted, unwaited batch");
}

void StreamConnection::fail(const FabricError& e) {
  broken_ = true;
  broken_why_ = e.what();
  // Reset, not closed gracefully: after a timeout, a request may still sit in this socket's send
  // queue, and TCP would keep retransmitting it after the close (and deliver it once a partition
  // heals, long after the caller gave up on it and moved on). A reset drops it; what the server
  // already received it handled when it arrived.
  if (fd_) {
    linger lg{1, 0};
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  fd_.reset();
  throw FabricError(e.code(), uri_ + ": " + e.what());
}

Header StreamConnection::round_trip(const Header& req0, std::span<const uint8_t> payload,
                                    std::vector<uint8_t>* reply_payload, int* fd_out) {
  check_usable();
  Header req = req0;
  req.id = next_id_++;
  Deadline d = deadline_in(opts_.op_timeout);
  Header h;
  try {
    send_frame(fd_.get(), req, payload, d, &prot_);
    if (fd_out) {
      if (prot_.active()) throw std::logic_error("MAP on a protected connection");
      if (reader_->buffered() != 0)
        throw FabricError(Errc::Protocol, "unexpected bytes before a MAP reply");
      uint8_t hb[wire::kHeaderSize];
      recv_with_fd(fd_.get(), hb, sizeof hb, fd_out, d);
      auto dh = wire::decode_header(hb);
      if (!dh) throw FabricError(Errc::Protocol, "malformed reply: " + dh.message());
      h = *dh;
      reply_payload->resize(h.length);
      if (h.length) recv_exact(fd_.get(), reply_payload->data(), h.length, d);
    } else {
      if (!reader_->header(&h, d))
        throw FabricError(Errc::PeerClosed, "server closed the connection");
      reply_payload->resize(h.length);
      if (h.length) reader_->body(reply_payload->data(), h.length, d);
      if (!reader_->finish(h, reply_payload->data(), d)) bad_reply_mac();
    }
    if (!h.reply || h.op != req.op || h.id != req.id)
      throw FabricError(Errc::Protocol, "reply does not match the request");
  } catch (const FabricError& e) {
    if (fd_out && *fd_out >= 0) ::close(*fd_out);
    fail(e);
  }
  return h;
}

namespace {
std::string text(const std::vector<uint8_t>& p) {
  return std::string(p.begin(), p.end());
}
}  // namespace

RemoteRegion StreamConnection::lookup(std::string_view name) {
  Header req;
  req.op = Op::Lookup;
  std::vector<uint8_t> p;
  Header h =
      round_trip(req, std::span(reinterpret_cast<const uint8_t*>(name.data()), name.size()), &p);
  if (h.status != Errc::Ok)
    throw FabricError(h.status, "lookup of region '" + std::string(name) + "' at " + uri_ + ": " +
                                    std::string(to_string(h.status)));
  return RemoteRegion{uri_, h.a0, h.a2, h.a1};
}

void StreamConnection::post(std::span<OneSidedOp> ops) {
  check_usable();
  // Refused before any frame is sealed: a sealed frame that is never sent would put the
  // sequence numbers out of step.
  for (auto& op : ops)
    if (op.len > wire::kMaxTransfer)
      throw FabricError(Errc::TooLarge, "one-sided transfer over 16 MiB");
  sendbuf_.clear();
  sent_.assign(ops.size(), 0);
  size_t n = 0;
  for (auto& op : ops) {
    // Checked here too, because an offset past the region would spill into the address's
    // region-id bits and name another region.
    uint64_t len = (op.kind == OpKind::Read || op.kind == OpKind::Write) ? op.len : 8;
    if (op.offset > op.region->len || len > op.region->len - op.offset) {
      op.status = Errc::OutOfBounds;
      ++n;
      continue;
    }
    sent_[n++] = 1;
    Header h;
    h.id = next_id_++;
    h.a0 = op.region->addr + op.offset;
    h.a1 = op.region->key;
    op.status = Errc::Ok;
    std::span<const uint8_t> payload;
    switch (op.kind) {
      case OpKind::Read:
        h.op = Op::Read;
        h.a2 = op.len;
        break;
      case OpKind::Write:
        h.op = Op::Write;
        payload = std::span(static_cast<const uint8_t*>(op.src), op.len);
        break;
      case OpKind::Cas:
        h.op = Op::Cas;
        h.a2 = op.arg0;
        h.a3 = op.arg1;
        break;
      case OpKind::Faa:
        h.op = Op::Faa;
        h.a2 = op.arg0;
        break;
    }
    append_sealed_frame(sendbuf_, h, payload, &prot_);
  }
  try {
    send_all(fd_.get(), sendbuf_.data(), sendbuf_.size(), deadline_in(opts_.op_timeout));
  } catch (const FabricError& e) {
    fail(e);
  }
  pending_ = ops.size();
}

void StreamConnection::wait(std::span<OneSidedOp> ops) {
  if (pending_ != ops.size())
    throw std::logic_error("fabric: wait() with other ops than were posted");
  pending_ = 0;
  Deadline d = deadline_in(opts_.op_timeout);
  size_t n_sent = 0;
  for (auto b : sent_) n_sent += b;
  uint64_t id = next_id_ - n_sent;
  try {
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!sent_[i]) continue;
      auto& op = ops[i];
      std::optional<Header> h = Header{};
      if (!reader_->header(&*h, d))
        throw FabricError(Errc::PeerClosed, "server closed the connection");
      if (!h->reply || h->id != id++) throw FabricError(Errc::Protocol, "reply out of order");
      if (h->length) {
        if (op.kind != OpKind::Read || h->status != Errc::Ok || h->length != op.len)
          throw FabricError(Errc::Protocol, "reply payload of unexpected length");
        reader_->body(op.dst, op.len, d);
      } else if (op.kind == OpKind::Read && h->status == Errc::Ok && op.len != 0) {
        throw FabricError(Errc::Protocol, "READ reply without data");
      }
      // A forged or replayed reply: wait() throws (fail() below) and the op's status and result
      // are not taken from it; what landed in op.dst must not be used (wait() did not succeed).
      if (!reader_->finish(*h, static_cast<uint8_t*>(h->length ? op.dst : nullptr), d))
        bad_reply_mac();
      op.status = h->status;
      op.result = h->a0;
    }
  } catch (const FabricError& e) {
    fail(e);
  }
}

std::vector<uint8_t> StreamConnection::call(std::string_view service,
                                            std::span<const uint8_t> body) {
  if (body.size() > wire::kMaxMessage) throw FabricError(Errc::TooLarge, "message body over 1 MiB");
  std::vector<uint8_t> p, r;
  wire::encode_service_payload(p, service, body);
  Header req;
  req.op = Op::Call;
  Header h = round_trip(req, p, &r);
  if (h.status != Errc::Ok)
    throw FabricError(h.status, "call " + std::string(service) + " at " + uri_ + ": " +
                                    std::string(to_string(h.status)) +
                                    (r.empty() ? "" : ": " + text(r)));
  return r;
}

void StreamConnection::send(std::string_view service, std::span<const uint8_t> body) {
  check_usable();
  if (body.size() > wire::kMaxMessage) throw FabricError(Errc::TooLarge, "message body over 1 MiB");
  std::vector<uint8_t> p;
  wire::encode_service_payload(p, service, body);
  Header req;
  req.op = Op::Send;
  req.id = next_id_++;
  try {
    send_frame(fd_.get(), req, p, deadline_in(opts_.op_timeout), &prot_);
  } catch (const FabricError& e) {
    fail(e);
  }
}

std::unique_ptr<Stream> StreamConnection::open_stream(std::string_view service) {
  Deadline d = deadline_in(opts_.connect_timeout);
  Fd fd = open_socket(d);
  FrameProtector prot;  // covers STREAM_OPEN and its reply; the stream's bytes are raw
  client_handshake(fd.get(), opts_.secret, d, wanted_on(addr_.transport, opts_.protection),
                   &prot, &opts_.identity);
  Header req;
  req.op = Op::StreamOpen;
  req.id = 1;
  send_frame(fd.get(), req,
             std::span(reinterpret_cast<const uint8_t*>(service.data()), service.size()), d,
             &prot);
  Header h;
  std::vector<uint8_t> p;
  if (!recv_frame(fd.get(), &h, &p, d, d, kMaxHandshakeFrame, &prot))
    throw FabricError(Errc::PeerClosed, "server closed the stream request");
  if (h.op != Op::StreamOpen || !h.reply)
    throw FabricError(Errc::Protocol, "unexpected answer to STREAM_OPEN");
  if (h.status != Errc::Ok)
    throw FabricError(h.status, "stream " + std::string(service) + " at " + uri_ + ": " +
                                    std::string(to_string(h.status)));
  return std::make_unique<SocketStream>(std::move(fd), opts_.op_timeout);
}

void StreamConnection::ping() {
  Header req;
  req.op = Op::Ping;
  std::vector<uint8_t> p;
  round_trip(req, {}, &p);
}

// ---------------------------------------------------------------------------------------------
// shm datapath: no server involvement after the one-time MAP.

Errc ShmConnection::locate(const RemoteRegion& r, uint64_t off, uint64_t len, bool atomic,
                           bool writes, uint8_t** p, const SegmentHeader** hdr) {
  uint64_t id = r.addr >> wire::kRegionShift;
  uint64_t base_off = r.addr & wire::kOffsetMask;
  auto it = maps_.find(uint32_t(id));
  if (it == maps_.end()) {
    // First touch of this region through this connection: ask the server for its fd.
    Header req;
    req.op = Op::Map;
    req.a0 = r.addr & ~wire::kOffsetMask;
    req.a1 = r.key;
    std::vector<uint8_t> pl;
    int fd = -1;
    Header h = round_trip(req, {}, &pl, &fd);
    if (h.status != Errc::Ok) {
      if (fd >= 0) ::close(fd);
      return h.status;
    }
    if (fd < 0) fail(FabricError(Errc::Protocol, "MAP reply carried no descriptor"));
    Mapping m{r.key, SharedSegment::from_fd(fd, "shm:" + std::to_string(id))};
    it = maps_.emplace(uint32_t(id), std::move(m)).first;
  }
  Mapping& m = it->second;
  if (m.key != r.key) return Errc::BadKey;
  uint64_t size = m.seg.size();
  if (base_off > size || off > size - base_off || len > size - base_off - off)
    return Errc::OutOfBounds;
  uint64_t at = base_off + off;
  if (atomic && at % 8 != 0) return Errc::Misaligned;
  *p = m.seg.data() + at;
  *hdr = m.seg.header();
  // A reader's mapping of a region it may not write is read-only (PeerInfo::member): refuse here,
  // as the tcp responder does, instead of faulting on the page.
  if (!m.seg.writable() && writes) return Errc::NotPermitted;
  return Errc::Ok;
}

Errc ShmConnection::check_lease(const SegmentHeader* h, uint64_t key) {
  // Ordered after the data access by the acquire loads/RMWs that performed it.
  if (h->state.load(std::memory_order_acquire) != uint64_t(SegmentState::Live))
    return Errc::Revoked;
  if (h->export_key.load(std::memory_order_acquire) != key)
    return Errc::Revoked;  // unexported/re-exported
  if (monotonic_ns() > h->lease_deadline_ns.load(std::memory_order_acquire)) return Errc::PeerDead;
  return Errc::Ok;
}

Errc ShmConnection::run(OneSidedOp& op) {
  check_usable();
  uint8_t* p = nullptr;
  const SegmentHeader* hdr = nullptr;
  bool atomic = op.kind == OpKind::Cas || op.kind == OpKind::Faa;
  uint64_t len = atomic ? 8 : op.len;
  if (len > wire::kMaxTransfer) return Errc::TooLarge;
  if (Errc e = locate(*op.region, op.offset, len, atomic, op.kind != OpKind::Read, &p, &hdr);
      e != Errc::Ok)
    return e;
  // Refuse to start on a dead exporter's memory, and re-check afterwards: the result only counts
  // if the lease held across the access.
  if (Errc e = check_lease(hdr, op.region->key); e != Errc::Ok) return e;
  bool word = len == 8 && reinterpret_cast<uintptr_t>(p) % 8 == 0;
  switch (op.kind) {
    case OpKind::Read:
      if (word) {
        uint64_t v = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p))
                         .load(std::memory_order_acquire);
        std::memcpy(op.dst, &v, 8);
      } else {
        std::memcpy(op.dst, p, op.len);
        std::atomic_thread_fence(std::memory_order_acquire);
      }
      break;
    case OpKind::Write:
      if (word) {
        uint64_t v;
        std::memcpy(&v, op.src, 8);
        std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p))
            .store(v, std::memory_order_release);
      } else {
        std::atomic_thread_fence(std::memory_order_release);
        std::memcpy(p, op.src, op.len);
      }
      break;
    case OpKind::Cas: {
      uint64_t expected = op.arg0;
      std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p))
          .compare_exchange_strong(expected, op.arg1, std::memory_order_acq_rel);
      op.result = expected;
      break;
    }
    case OpKind::Faa:
      op.result = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p))
                      .fetch_add(op.arg0, std::memory_order_acq_rel);
      break;
  }
  return check_lease(hdr, op.region->key);
}

void ShmConnection::post(std::span<OneSidedOp> ops) {
  check_usable();
  for (auto& op : ops) op.status = run(op);  // done at once: nothing to overlap with
  pending_ = ops.size();
}

void ShmConnection::wait(std::span<OneSidedOp> ops) {
  if (pending_ != ops.size())
    throw std::logic_error("fabric: wait() with other ops than were posted");
  pending_ = 0;
}

}  // namespace tierce::fabric
