// ftp_adts/server/session_transfer.cc — the data side of a Session: TYPE/MODE/STRU/REST, the
// data port (PORT/EPRT/PASV/EPSV), TPRT (the ADTS extension), RETR/STOR/APPE/STOU, and the
// plumbing every transfer and listing goes through (plain or ADTS, outcome, xferlog).
#include "ftp_adts/server/session_internal.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/rand.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

namespace tierce::ftpd {

namespace {

// An unnamed scratch file (O_TMPFILE in $TMPDIR, else /tmp), for TYPE A over ADTS: the BEGIN
// block carries the converted size, so the conversion runs file -> scratch file -> session, in
// bounded memory, instead of through a string the size of the file. -errno on failure.
int scratch_file() {
  const char* d = std::getenv("TMPDIR");
  std::string dir = d && *d ? d : "/tmp";
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  // File systems without O_TMPFILE: a named one, unlinked at once.
  std::string path = dir + "/tierce-ftpd-XXXXXX";
  fd = ::mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0) return -errno;
  ::unlink(path.c_str());
  return fd;
}

// TYPE A conversion of [in_off, EOF) of `in` to `out` from offset out_off, kConvertChunk bytes at
// a time (to_crlf / from_crlf carry a CR across chunk boundaries). Bytes written in *written.
// An I/O error: Code::Internal with its text.
constexpr size_t kConvertChunk = 256 << 10;
base::Status convert_file(int in, uint64_t in_off, int out, uint64_t out_off, bool crlf,
                          uint64_t* written) {
  std::vector<char> buf(kConvertChunk);
  bool carry = false;
  auto put = [&](const std::string& b) -> base::Status {
    for (size_t done = 0; done < b.size();) {
      ssize_t n = ::pwrite(out, b.data() + done, b.size() - done, off_t(out_off));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return base::Status(base::Code::Internal, n < 0 ? std::strerror(errno) : "short write");
      done += size_t(n);
      out_off += uint64_t(n);
      *written += uint64_t(n);
    }
    return {};
  };
  for (;;) {
    ssize_t n = ::pread(in, buf.data(), buf.size(), off_t(in_off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return base::Status(base::Code::Internal, std::strerror(errno));
    if (n == 0) break;
    in_off += uint64_t(n);
    std::string_view chunk(buf.data(), size_t(n));
    if (base::Status s = put(crlf ? to_crlf(chunk, &carry) : from_crlf(chunk, &carry)); !s.ok())
      return s;
  }
  if (!crlf && carry) return put("\r");  // a CR at the very end is data
  return {};
}

}  // namespace

// ---- state: representation and restart ----

void Session::cmd_type(const std::string& arg) {
  std::string a = upper(arg);
  if (a == "I" || a == "L 8" || a == "L8") {
    ascii_ = false;
    ctl_.reply(200, "Type set to I");
  } else if (a == "A" || a == "A N") {
    ascii_ = true;
    ctl_.reply(200, "Type set to A");
  } else {
    ctl_.reply(504, "TYPE " + a.substr(0, 8) + " not supported (A or I)");
  }
}

void Session::cmd_mode(const std::string& arg) {
  if (upper(arg) == "S")
    ctl_.reply(200, "Mode set to S");
  else
    ctl_.reply(504, "Only MODE S (stream) is supported");
}

void Session::cmd_stru(const std::string& arg) {
  if (upper(arg) == "F")
    ctl_.reply(200, "Structure set to F");
  else
    ctl_.reply(504, "Only STRU F (file) is supported");
}

void Session::cmd_rest(const std::string& arg) {
  if (arg.size() > 19 || !std::all_of(arg.begin(), arg.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    ctl_.reply(501, "REST wants a byte offset");
    return;
  }
  rest_ = std::stoull(arg);
  ctl_.reply(350, "Restarting at " + std::to_string(rest_) + "; send RETR or STOR");
}

// ---- data port ----

void Session::cmd_port(const std::string& arg) {
  if (!active_mode_allowed()) return;
  auto hp = ftp::parse_port_arg(arg);
  SockAddr target;
  if (!hp || !SockAddr::parse(hp->host, hp->port, &target)) {
    ctl_.reply(501, "PORT wants h1,h2,h3,h4,p1,p2");
    return;
  }
  set_active_target("PORT", target);
}

void Session::cmd_eprt(const std::string& arg) {
  if (!active_mode_allowed()) return;
  // RFC 2428: <d><proto><d><address><d><port><d>, d one character of 33..126. A well-formed
  // argument with a protocol other than 1 (IPv4) or 2 (IPv6) gets 522; anything malformed 501.
  {
    char d = arg.empty() ? 0 : arg[0];
    bool delim_ok = d >= 33 && d <= 126;
    std::vector<size_t> at;
    for (size_t i = 0; delim_ok && i < arg.size(); ++i)
      if (arg[i] == d) at.push_back(i);
    auto digits = [](std::string_view f) {
      return !f.empty() && std::all_of(f.begin(), f.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    bool shape = delim_ok && at.size() == 4 && at[3] == arg.size() - 1;
    if (shape) {
      std::string_view a(arg);
      std::string_view proto = a.substr(at[0] + 1, at[1] - at[0] - 1);
      std::string_view host = a.substr(at[1] + 1, at[2] - at[1] - 1);
      std::string_view port = a.substr(at[2] + 1, at[3] - at[2] - 1);
      if (digits(proto) && !host.empty() && digits(port) && proto != "1" && proto != "2") {
        ctl_.reply(522, "Network protocol not supported, use (1,2)");
        return;
      }
    }
  }
  auto hp = ftp::parse_eprt_arg(arg);
  SockAddr target;
  if (!hp || !SockAddr::parse(hp->host, hp->port, &target)) {
    ctl_.reply(501, "EPRT wants |1|a.b.c.d|port| or |2|v6addr|port|");
    return;
  }
  set_active_target("EPRT", target);
}

void Session::cmd_pasv(const std::string&) {
  if (epsv_all_) {
    ctl_.reply(501, "EPSV ALL in effect: only EPSV");
    return;
  }
  std::string host = local_.host();
  SockAddr probe;
  if (!SockAddr::parse(host, 0, &probe) || probe.family() != AF_INET) {
    ctl_.reply(522, "PASV needs IPv4; use EPSV");
    return;
  }
  int port = listen_passive(host);
  if (port <= 0) return;
  std::string announced = cfg_.pasv_address.empty() ? host : cfg_.pasv_address;
  ctl_.reply(227, "Entering Passive Mode (" +
                      ftp::format_port_arg({announced, uint16_t(port)}) + ")");
}

bool Session::active_mode_allowed() {
  if (epsv_all_) {
    ctl_.reply(501, "EPSV ALL in effect: only EPSV");
    return false;
  }
  if (adts_.configured()) {
    ctl_.reply(501, "Active mode is not offered for ADTS sessions; use EPSV or TPRT STREAM");
    return false;
  }
  return true;
}

void Session::set_active_target(const std::string& verb, const SockAddr& target) {
  if (!target.same_host(peer_)) {
    log(LogLevel::Warn,
        "FTPD0104 " + who() + ": " + verb + " to " + target.host() + " refused (bounce)");
    ctl_.reply(500, verb + " refused: the address must be the control connection's (no bounce)");
    return;
  }
  if (target.port() < 1024) {
    ctl_.reply(500, verb + " refused: port below 1024 (no bounce)");
    return;
  }
  port_.set_active(target);
  ctl_.reply(200, verb + " command successful");
}

int Session::listen_passive(const std::string& host) {
  int port;
  std::string err;
  if (adts_.configured()) {
    base::Result<int> listening = adts_.listen(host, cfg_.pasv_min, cfg_.pasv_max);
    port = listening.ok() ? *listening : -1;
    err = listening.message();
  } else {
    port = port_.listen_passive(local_, cfg_.pasv_min, cfg_.pasv_max);
    if (port < 0) err = std::strerror(-port);
  }
  if (port <= 0) {
    log(LogLevel::Warn, "FTPD0105 " + who() + ": no passive port: " + err);
    ctl_.reply(425, "Cannot open a passive port: " + err);
  }
  return port;
}

void Session::cmd_epsv(const std::string& arg) {
  std::string a = upper(arg);
  if (a == "ALL") {
    epsv_all_ = true;
    ctl_.reply(200, "EPSV ALL ok");
    return;
  }
  std::string host = local_.host();
  SockAddr probe;
  SockAddr::parse(host, 0, &probe);
  if (!a.empty()) {
    int want = a == "1" ? AF_INET : a == "2" ? AF_INET6 : -1;
    if (want != probe.family()) {
      ctl_.reply(522, std::string("Network protocol not supported, use (") +
                          (probe.family() == AF_INET ? "1" : "2") + ")");
      return;
    }
  }
  int port = listen_passive(host);
  if (port <= 0) return;
  ctl_.reply(229, "Entering Extended Passive Mode (|||" + std::to_string(port) + "|)");
}

void Session::cmd_tprt(const std::string& arg) {
  if (!cfg_.adts_enable) {
    ctl_.reply(502, "TPRT not offered by this server");
    return;
  }
  auto req = ftp::parse_tprt_arg(arg);
  if (!req) {
    std::string a = upper(arg);
    if (a.rfind("PTCP", 0) == 0)
      ctl_.reply(501, "TPRT " + a.substr(0, 16) + ": stream count must be 1.." +
                          std::to_string(cfg_.adts_max_streams));
    else
      ctl_.reply(501, "TPRT wants TCP, PTCP <n>, VERBS or STREAM");
    return;
  }
  using K = ftp::TprtRequest::Kind;
  if (req->kind == K::Stream) {
    adts_.reset();
    ctl_.reply(200, "TPRT STREAM");
    return;
  }
  if (req->kind == K::ParallelTcp && (req->streams < 1 || req->streams > cfg_.adts_max_streams)) {
    ctl_.reply(501, "TPRT PTCP " + std::to_string(req->streams) + ": stream count must be 1.." +
                        std::to_string(cfg_.adts_max_streams));
    return;
  }
  if (req->kind == K::Verbs && !AdtsChannel::verbs_available()) {
    ctl_.reply(504, "TPRT VERBS not available: no RDMA device on the server");
    return;
  }
  if (prot_p_ || cfg_.tls_require) {
    // ADTS streams are not encrypted; a client that asked for protected data must keep it.
    ctl_.reply(504, "TPRT not available with protected data (PROT P); use TPRT STREAM");
    return;
  }
  uint64_t cookie = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&cookie), sizeof cookie) != 1) {
    ctl_.reply(451, "TPRT: no random cookie available");
    return;
  }
  AdtsChannel::Kind kind = req->kind == K::Tcp           ? AdtsChannel::Kind::Tcp
                           : req->kind == K::ParallelTcp ? AdtsChannel::Kind::ParallelTcp
                                                         : AdtsChannel::Kind::Verbs;
  unsigned streams = req->kind == K::ParallelTcp ? req->streams : 1;
  if (!adts_.configure(kind, streams, size_t(cfg_.adts_block_kib) * 1024,
                       cfg_.adts_zero_copy && !ascii_, std::chrono::seconds(cfg_.data_timeout_s),
                       cookie, cfg_.adts_peer_only ? peer_.host() : std::string())) {
    ctl_.reply(501, std::string("TPRT ") + upper(arg).substr(0, 16) + ": stream count must be 1.." +
                        std::to_string(cfg_.adts_max_streams));
    return;
  }
  port_.reset();
  char text[96];
  const char* name = kind == AdtsChannel::Kind::Tcp           ? "TCP"
                     : kind == AdtsChannel::Kind::ParallelTcp ? "PTCP"
                                                              : "VERBS";
  if (kind == AdtsChannel::Kind::ParallelTcp)
    std::snprintf(text, sizeof text, "TPRT %s %u cookie=%016" PRIx64, name, streams, cookie);
  else
    std::snprintf(text, sizeof text, "TPRT %s cookie=%016" PRIx64, name, cookie);
  // The cookie stays out of the log: it authenticates the data streams.
  log(LogLevel::Info, "FTPD0401 " + who() + ": TPRT " + name +
                          (streams > 1 ? " " + std::to_string(streams) : std::string()));
  ctl_.reply(200, text);
}

// ---- transfers ----

bool Session::data_channel_ready() {
  if (adts_.configured()) {
    if (!adts_.ready()) {
      ctl_.reply(425, "No ADTS data session: send EPSV or PASV after TPRT");
      return false;
    }
    // The streams may still be connecting (the listener accepts them in the background while
    // commands are served): the client gets every reply so far, then the transfer waits for
    // them, at most the data timeout.
    ctl_.flush();
    if (base::Status up = adts_.wait_session(); !up.ok()) {
      log(LogLevel::Warn,
          "FTPD0404 " + who() + ": ADTS data session not established: " + up.message());
      ctl_.reply(425, "Cannot open the ADTS data session: " + up.message());
      return false;
    }
    return true;
  }
  if (!port_.ready()) {
    ctl_.reply(425, "Use PORT, EPRT, PASV or EPSV first");
    return false;
  }
  return true;
}

base::Result<std::unique_ptr<DataConn>> Session::open_data() {
  auto opened = port_.open(peer_, std::chrono::seconds(cfg_.data_timeout_s),
                           [this](const std::string& m) { log(LogLevel::Warn, "FTPD0106 " + m); });
  if (!opened.ok()) return opened;
  std::unique_ptr<DataConn> conn = std::move(opened).value();
  if (prot_p_) {
    try {
      conn->start_tls(env_.tls, std::chrono::seconds(cfg_.data_timeout_s));
    } catch (const std::exception& e) {
      if (tls_key_dropped_) {
        // This session holds no TLS key (forget_tls_key): only a resumption of this control
        // connection's session can succeed, so a failed handshake is a refused stranger (or a
        // client that does not resume), as below.
        log(LogLevel::Warn, "FTPD0405 " + who() + ": data connection without TLS session reuse " +
                                "(its handshake failed: " + e.what() +
                                "): refused ([tls] require_reuse)");
        return base::Status(base::Code::PermissionDenied,
                            "TLS session reuse required on the data connection");
      }
      return base::Status(base::Code::Unavailable,
                          std::string("TLS on the data connection failed: ") + e.what());
    }
    if (cfg_.tls_require_reuse && !conn->tls()->resumed_binding(ctl_.tls_binding())) {
      // As vsftpd's require_ssl_reuse: the data connection must resume the TLS session of this
      // control connection, so a stranger who raced for the port (with a fresh handshake, or
      // with a ticket of their own session on this server) cannot take the data. curl, lftp and
      // tierce-ftp resume.
      log(LogLevel::Warn, "FTPD0405 " + who() + ": data connection " +
                              (conn->tls()->session_reused()
                                   ? "resumed another control connection's TLS session"
                                   : "without TLS session reuse") +
                              ": refused ([tls] require_reuse)");
      return base::Status(base::Code::PermissionDenied,
                          "TLS session reuse required on the data connection");
    }
  }
  return {std::move(conn)};
}

TransferOptions Session::transfer_options(bool ascii) {
  TransferOptions o;
  o.ascii = ascii;
  o.zero_copy = !ascii && !prot_p_;
  o.receive_splice = cfg_.store_splice;
  o.timeout = std::chrono::seconds(cfg_.data_timeout_s);
  o.control_fd = ctl_.fd();
  o.abort = [this] {
    if (!ctl_.poll_input()) return true;
    return ctl_.take_abort();
  };
  return o;
}

TransferResult Session::send_plain_or_adts(int fd, uint64_t offset, uint64_t size,
                                           std::string_view mem, bool from_memory) {
  if (adts_.configured()) {
    if (from_memory) return adts_.send_bytes(mem);
    if (ascii_) {
      // TYPE A over ADTS: the BEGIN block carries the converted size, so the file is converted
      // into a scratch file first (bounded memory, issue 17), and that is sent.
      TransferResult r;
      r.adts = true;
      int tmp = scratch_file();
      if (tmp < 0) {
        r.status = TransferResult::Status::LocalError;
        r.error = std::string("scratch file for TYPE A: ") + std::strerror(-tmp);
        return r;
      }
      uint64_t converted = 0;
      if (base::Status s = convert_file(fd, offset, tmp, 0, true, &converted); !s.ok()) {
        ::close(tmp);
        r.status = TransferResult::Status::LocalError;
        r.error = "TYPE A conversion: " + s.message();
        return r;
      }
      r = adts_.send_file(tmp, 0, converted);
      ::close(tmp);
      return r;
    }
    return adts_.send_file(fd, offset, size > offset ? size - offset : 0);
  }
  auto opened = open_data();
  if (!opened.ok()) {
    TransferResult r;
    r.status = TransferResult::Status::PeerError;
    r.error = "cannot open the data connection: " + opened.message();
    return r;
  }
  std::unique_ptr<DataConn> conn = std::move(opened).value();
  TransferResult r = from_memory ? ftpd::send_bytes(*conn, mem, transfer_options(false))
                                 : ftpd::send_file(*conn, fd, offset, transfer_options(ascii_));
  if (r.status == TransferResult::Status::Ok) conn->finish();
  return r;
}

TransferResult Session::receive_plain_or_adts(int fd, uint64_t offset, uint64_t max) {
  if (adts_.configured()) {
    if (!ascii_) return adts_.receive_file(fd, offset, max);
    // TYPE A over ADTS: received into a scratch file as the blocks arrive, then converted into
    // the target a chunk at a time (bounded memory whatever the BEGIN announced).
    int tmp = scratch_file();
    if (tmp < 0) {
      TransferResult r;
      r.adts = true;
      r.status = TransferResult::Status::LocalError;
      r.error = std::string("scratch file for TYPE A: ") + std::strerror(-tmp);
      return r;
    }
    TransferResult r = adts_.receive_file(tmp, 0, max);
    if (r.status == TransferResult::Status::Ok) {
      uint64_t written = 0;
      if (base::Status s = convert_file(tmp, 0, fd, offset, false, &written); !s.ok()) {
        r.status = TransferResult::Status::LocalError;
        r.error = "TYPE A conversion: " + s.message();
      }
    }
    ::close(tmp);
    return r;
  }
  auto opened = open_data();
  if (!opened.ok()) {
    TransferResult r;
    r.status = TransferResult::Status::PeerError;
    r.error = "cannot open the data connection: " + opened.message();
    return r;
  }
  std::unique_ptr<DataConn> conn = std::move(opened).value();
  TransferOptions o = transfer_options(ascii_);
  o.max_bytes = max;
  TransferResult r = ftpd::receive_file(*conn, fd, offset, o);
  if (r.status == TransferResult::Status::Ok) conn->finish();
  return r;
}

void Session::finish_transfer(const TransferResult& r, const std::string& path, char direction,
                              Clock::time_point start, bool log_xfer) {
  double secs = std::chrono::duration<double>(Clock::now() - start).count();
  bool ok = r.status == TransferResult::Status::Ok;
  switch (r.status) {
    case TransferResult::Status::Ok:
      ctl_.reply(226, "Transfer complete (" + std::to_string(r.bytes) + " bytes)");
      break;
    case TransferResult::Status::Aborted:
      if (ctl_.overflowed()) {
        ctl_.reply(426, "Transfer aborted");  // 421 below
      } else if (r.adts) {
        // The sender's ABORT block, not an ABOR command: this transfer's one final reply.
        ctl_.reply(426, "Transfer aborted by the sender" +
                            (r.error.empty() ? std::string() : ": " + r.error));
      } else {
        // The client's ABOR (taken from the control input): 426 for the transfer, 226 for ABOR.
        ctl_.reply(426, "Transfer aborted");
        ctl_.reply(226, "ABOR successful");
      }
      break;
    case TransferResult::Status::Timeout:
      ctl_.reply(426, "Transfer failed: data connection timed out");
      break;
    case TransferResult::Status::PeerError:
      ctl_.reply(426, "Transfer failed: " + r.error);
      break;
    case TransferResult::Status::LocalError:
      ctl_.reply(451, "Transfer failed, local error: " + r.error);
      break;
    case TransferResult::Status::Quota:
      ctl_.reply(552, "Exceeded storage allocation: " + r.error);
      log(LogLevel::Warn, "FTPD0305 " + who() + ": upload " + path + " stopped at " +
                              std::to_string(r.bytes) + " bytes: upload limit (" + r.error + ")");
      break;
  }
  if (ctl_.overflowed()) {
    // The client sent more command input during the transfer than [limits] control_buffer_kib
    // lets us hold (a flood): the transfer was stopped as for ABOR; the session ends here.
    ctl_.reply(421, "Too much command input during a transfer, closing the control connection");
    log(LogLevel::Warn, "FTPD0108 " + who() + ": over " +
                            std::to_string(cfg_.control_buffer_bytes) +
                            " bytes of command input during a transfer: session closed");
    quit_ = true;
  }
  if (!log_xfer) return;
  transfers_failed_ += !ok;
  if (direction == 'o') {
    files_out_ += ok;
    bytes_out_ += r.bytes;
  } else {
    files_in_ += ok;
    bytes_in_ += r.bytes;
  }
  double rate = secs > 0 ? double(r.bytes) / secs / 1e6 : 0;
  char rate_s[32];
  std::snprintf(rate_s, sizeof rate_s, "%.1f MB/s", rate);
  std::string channel = r.adts ? "adts" : r.zero_copy ? "zero-copy" : "buffered";
  log(ok ? LogLevel::Info : LogLevel::Warn,
      std::string(ok ? "FTPD0301 " : "FTPD0302 ") + who() + ": " +
          (direction == 'o' ? "sent " : "received ") + path + ": " + std::to_string(r.bytes) +
          " bytes in " + std::to_string(secs).substr(0, 6) + " s, " + rate_s + " (" + channel +
          ")" + (ok ? "" : ", failed: " + r.error));
  if (env_.xferlog) {
    XferRecord x;
    x.when = std::time(nullptr);
    x.seconds = secs;
    x.remote_host = peer_.host();
    x.bytes = r.bytes;
    x.filename = path;
    x.ascii = ascii_;
    x.direction = direction;
    x.access = anonymous_ ? 'a' : 'r';
    x.user = user_;
    x.complete = ok;
    env_.xferlog->write(x);
  }
}

void Session::cmd_retr(const std::string& arg) {
  std::string v = vpath(arg);
  uint64_t offset = rest_;
  rest_ = 0;
  if (!data_policy_ok()) return;
  // O_NONBLOCK: a FIFO planted in the tree must not hang the open; regular files ignore it.
  int fd = root_->open(v, O_RDONLY | O_NONBLOCK);
  if (failed(fd, arg)) return;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    ctl_.reply(550, arg.substr(0, 256) + ": Not a plain file");
    return;
  }
  if (!data_channel_ready()) {
    ::close(fd);
    return;
  }
  if (offset > uint64_t(st.st_size)) {
    ::close(fd);
    ctl_.reply(554, "REST offset beyond the end of the file");
    return;
  }
  ctl_.reply(150, std::string("Opening ") + (ascii_ ? "ASCII" : "BINARY") +
                      " mode data connection for " + v + " (" + std::to_string(st.st_size) +
                      " bytes)");
  ctl_.flush();
  auto start = Clock::now();
  TransferResult r = send_plain_or_adts(fd, offset, uint64_t(st.st_size), {}, false);
  ::close(fd);
  finish_transfer(r, v, 'o', start, true);
}

void Session::store(const std::string& arg, StoreKind kind) {
  uint64_t offset = rest_;
  rest_ = 0;
  if (!data_policy_ok()) return;
  std::string v;
  int fd;
  if (kind == StoreKind::Stou) {
    std::string base = arg.empty() ? "file" : arg;
    fd = -EEXIST;
    for (unsigned i = 0; i < 1000 && fd == -EEXIST; ++i) {
      v = vpath(i == 0 ? base : base + "." + std::to_string(i));
      fd = root_->open(v, O_WRONLY | O_CREAT | O_EXCL, 0644);
    }
    offset = 0;
  } else {
    v = vpath(arg);
    int flags = O_WRONLY | O_CREAT | O_NONBLOCK;
    if (kind == StoreKind::Stor && offset == 0) flags |= O_TRUNC;
    fd = root_->open(v, flags, 0644);
  }
  if (failed(fd, arg, v)) return;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    ctl_.reply(550, arg.substr(0, 256) + ": Not a plain file");
    return;
  }
  int fl = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  if (kind == StoreKind::Appe) offset = uint64_t(st.st_size);
  if (offset > uint64_t(st.st_size)) {
    // REST past the end would leave a hole: an arbitrarily large sparse file from a few bytes.
    ::close(fd);
    ctl_.reply(554, "REST offset beyond the end of the file (" + std::to_string(st.st_size) +
                        " bytes)");
    return;
  }
  uint64_t max = upload_allowance(offset);
  if (max == 0) {
    ::close(fd);
    log(LogLevel::Warn, "FTPD0305 " + who() + ": upload " + v + " refused: upload limit reached");
    ctl_.reply(552, "Exceeded storage allocation: upload limit reached");
    return;
  }
  if (!data_channel_ready()) {
    ::close(fd);
    return;
  }
  if (kind == StoreKind::Stou)
    ctl_.reply(150, "FILE: " + v.substr(v.rfind('/') + 1));
  else
    ctl_.reply(150, std::string("Ok to send data (") + (ascii_ ? "ASCII" : "BINARY") + " mode)");
  ctl_.flush();
  auto start = Clock::now();
  TransferResult r = receive_plain_or_adts(fd, offset, max);
  ::close(fd);
  finish_transfer(r, v, 'i', start, true);
}

uint64_t Session::upload_allowance(uint64_t offset) const {
  uint64_t max = UINT64_MAX;
  if (max_upload_) max = max_upload_ > offset ? max_upload_ - offset : 0;
  if (session_upload_)
    max = std::min(max, session_upload_ > bytes_in_ ? session_upload_ - bytes_in_ : 0);
  return max;
}

}  // namespace tierce::ftpd
