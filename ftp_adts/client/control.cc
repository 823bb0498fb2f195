// ftp_adts/client/control.cc — FtpClient (control.h): the control connection, login, FEAT, the
// ADTS and plain data paths, pipelined batches.
#include "ftp_adts/client/control.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ftp_adts/adts/adts.h"

namespace tierce::ftpc {

constexpr uint64_t kMaxListing = 256ull << 20;  // a listing larger than this is refused

struct FtpClient::Control {
  Fd sock;
  std::unique_ptr<ftp::TlsConnection> tls;
  ftp::ReplyParser parser;
};

namespace {

std::string upper(std::string_view s) {
  std::string o;
  for (char c : s) o.push_back(char(std::toupper(static_cast<unsigned char>(c))));
  return o;
}

// "TPRT"-style first word of a FEAT line and the rest.
std::pair<std::string, std::string> split_feature(std::string_view line) {
  while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  size_t sp = line.find(' ');
  std::string name = upper(line.substr(0, sp));
  std::string rest = sp == std::string_view::npos ? "" : std::string(line.substr(sp + 1));
  return {name, rest};
}

std::string one_line(const ftp::Reply& r) {
  std::string t = r.text();
  for (char& c : t)
    if (c == '\n') c = ' ';
  return std::to_string(r.code) + " " + t;
}

Exit exit_for_adts(adts::AdtsError::Code c) {
  switch (c) {
    case adts::AdtsError::Code::Timeout: return Exit::Network;
    case adts::AdtsError::Code::LocalIo: return Exit::Local;
    case adts::AdtsError::Code::NoDevice:
    case adts::AdtsError::Code::Config: return Exit::Refused;
    default: return Exit::Transfer;
  }
}

}  // namespace

Exit exit_for_reply(int code) {
  if (code == 530 || code == 331 || code == 332) return Exit::Login;
  if (code == 421) return Exit::Network;
  if (code == 425 || code == 426 || code == 451) return Exit::Transfer;
  return Exit::Refused;
}

std::optional<AdtsChoice> parse_adts_choice(std::string_view s) {
  AdtsChoice c;
  std::string l;
  for (char ch : s) l.push_back(char(std::tolower(static_cast<unsigned char>(ch))));
  if (l == "auto") c.mode = AdtsChoice::Mode::Auto;
  else if (l == "off" || l == "stream") c.mode = AdtsChoice::Mode::Off;
  else if (l == "tcp") c.mode = AdtsChoice::Mode::Tcp;
  else if (l == "verbs") c.mode = AdtsChoice::Mode::Verbs;
  else if (l.rfind("ptcp:", 0) == 0 && l.size() > 5 && l.size() <= 7) {
    unsigned n = 0;
    for (char ch : l.substr(5)) {
      if (ch < '0' || ch > '9') return std::nullopt;
      n = n * 10 + unsigned(ch - '0');
    }
    if (n < 1 || n > adts::kMaxStreams) return std::nullopt;
    c.mode = AdtsChoice::Mode::ParallelTcp;
    c.streams = n;
  } else {
    return std::nullopt;
  }
  return c;
}

FtpClient::FtpClient(std::string host, uint16_t port, Login login, ClientOptions opts)
    : host_(std::move(host)), port_(port), login_(std::move(login)), opts_(opts) {}

FtpClient::~FtpClient() {
  if (adts_) adts_->close();
  if (ctl_ && ctl_->sock && !broken_) {
    // QUIT politely, but never wait long for the answer.
    try {
      opts_.timeout = Millis(2000);
      if (ctl_->tls) ctl_->tls->set_timeout(opts_.timeout);
      send_lines("QUIT\r\n");
      read_reply();
    } catch (...) {
    }
  }
  if (ctl_ && ctl_->tls) {
    try {
      ctl_->tls->shutdown();
    } catch (...) {
    }
  }
}

std::string FtpClient::where() const {
  return (host_.find(':') != std::string::npos ? "[" + host_ + "]" : host_) + ":" +
         std::to_string(port_);
}

void FtpClient::fail_network(Exit code, const std::string& what) {
  broken_ = true;
  if (adts_) adts_->close();
  throw ClientError(code, what);
}

void FtpClient::send_lines(const std::string& lines) {
  if (broken_ || !ctl_) throw ClientError(Exit::Network, "connection to " + where() + " lost");
  if (opts_.verbose) {
    size_t p = 0;
    while (p < lines.size()) {
      size_t e = lines.find("\r\n", p);
      std::string l = lines.substr(p, e - p);
      if (l.rfind("PASS ", 0) == 0) l = "PASS ****";
      std::fprintf(stderr, "> %s\n", l.c_str());
      p = e == std::string::npos ? lines.size() : e + 2;
    }
  }
  if (ctl_->tls) {
    try {
      ctl_->tls->write_all(std::span<const uint8_t>(
          reinterpret_cast<const uint8_t*>(lines.data()), lines.size()));
      return;
    } catch (const ftp::TlsError& e) {
      fail_network(Exit::Network, "control connection to " + where() + ": " + e.what());
    }
  }
  const char* p = lines.data();
  size_t n = lines.size();
  while (n > 0) {
    ssize_t w = ::send(ctl_->sock.get(), p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      if (!wait_fd(ctl_->sock.get(), true, opts_.timeout))
        fail_network(Exit::Network, "control connection to " + where() + ": send timed out");
      continue;
    }
    fail_network(Exit::Network,
                 "control connection to " + where() + ": " + std::strerror(errno));
  }
}

ftp::Reply FtpClient::read_reply() {
  if (broken_ || !ctl_) throw ClientError(Exit::Network, "connection to " + where() + " lost");
  for (;;) {
    if (auto r = ctl_->parser.take()) {
      if (opts_.verbose) std::fprintf(stderr, "< %s\n", one_line(*r).c_str());
      if (r->code == 421)
        fail_network(Exit::Network, "server " + where() + " closed the session: " + one_line(*r));
      return std::move(*r);
    }
    if (ctl_->parser.error())
      fail_network(Exit::Network, "garbled reply from " + where() + ": " +
                                      ctl_->parser.error_text());
    char buf[8192];
    size_t n = 0;
    if (ctl_->tls) {
      try {
        n = ctl_->tls->read_some(std::span<uint8_t>(reinterpret_cast<uint8_t*>(buf), sizeof buf));
      } catch (const ftp::TlsError& e) {
        fail_network(Exit::Network, "control connection to " + where() + ": " + e.what());
      }
    } else {
      if (!wait_fd(ctl_->sock.get(), false, opts_.timeout))
        fail_network(Exit::Network, "no reply from " + where() + " within " +
                                        std::to_string(opts_.timeout.count() / 1000) + " s");
      ssize_t r = ::recv(ctl_->sock.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (r < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        fail_network(Exit::Network,
                     "control connection to " + where() + ": " + std::strerror(errno));
      }
      n = size_t(r);
    }
    if (n == 0) fail_network(Exit::Network, "connection closed by " + where());
    ctl_->parser.feed(std::string_view(buf, n));
  }
}

ftp::Reply FtpClient::read_final_reply() {
  for (;;) {
    ftp::Reply r = read_reply();
    if (!r.positive_preliminary()) return r;
  }
}

ftp::Reply FtpClient::command(const std::string& line) {
  send_lines(line + "\r\n");
  return read_final_reply();
}

void FtpClient::open() {
  ctl_ = std::make_unique<Control>();
  ctl_->sock = connect_tcp(host_, port_, opts_.timeout, true);
  peer_ = peer_address(ctl_->sock.get());
  if (peer_.empty()) peer_ = host_;
  ftp::Reply greet = read_final_reply();
  if (greet.code != 220)
    fail_network(Exit::Network, "unexpected greeting from " + where() + ": " + one_line(greet));
  if (opts_.tls) {
    ftp::Reply r = command("AUTH TLS");
    if (r.code != 234)
      throw ClientError(Exit::Login, "server " + where() + " refused AUTH TLS: " + one_line(r));
    try {
      tls_ctx_ = ftp::TlsContext::client(!opts_.tls_insecure);
      ctl_->tls = ftp::TlsConnection::connect(tls_ctx_, ctl_->sock.get(), host_, opts_.timeout);
    } catch (const ftp::TlsError& e) {
      fail_network(Exit::Network, "TLS handshake with " + where() + " failed: " + e.what());
    }
  }
  login();
  if (opts_.tls) {
    command("PBSZ 0");
    ftp::Reply r = command("PROT P");
    if (r.code != 200)
      throw ClientError(Exit::Refused, "server refused PROT P: " + one_line(r));
  }
  read_features();
  if (has_feature("UTF8")) command("OPTS UTF8 ON");
  ftp::Reply t = command("TYPE I");
  if (t.code != 200) throw ClientError(Exit::Refused, "server refused TYPE I: " + one_line(t));
  setup_adts();
}

void FtpClient::login() {
  ftp::Reply r = command("USER " + login_.user);
  if (r.code == 331) r = command("PASS " + login_.password);
  if (r.code == 332)
    throw ClientError(Exit::Login, "login as " + login_.user + " refused: the server wants an "
                                   "account (ACCT), which tierce-ftp does not support");
  if (r.code != 230 && r.code != 202)
    throw ClientError(Exit::Login, "login as " + login_.user + " refused: " + one_line(r));
}

void FtpClient::read_features() {
  ftp::Reply r = command("FEAT");
  if (r.code != 211) return;  // no FEAT: a minimal RFC 959 server
  for (size_t i = 1; i + 1 < r.lines.size(); ++i) {
    auto [name, rest] = split_feature(r.lines[i]);
    if (!name.empty()) features_[name] = rest;
  }
}

bool FtpClient::has_feature(const std::string& name) const { return features_.count(name) > 0; }

std::string FtpClient::data_path() const {
  if (adts_) return "ADTS " + adts_desc_;
  return epsv_refused_ ? "plain (PASV)" : "plain (EPSV)";
}

void FtpClient::setup_adts() {
  using Mode = AdtsChoice::Mode;
  const AdtsChoice& c = opts_.adts;
  if (c.mode == Mode::Off) return;
  bool explicit_mode = c.mode != Mode::Auto;
  auto it = features_.find("TPRT");
  if (it == features_.end()) {
    if (!explicit_mode) return;
    throw ClientError(Exit::Refused, "server " + where() +
                                         " does not offer ADTS (no TPRT in FEAT); use --adts off");
  }
  // Under PROT P the data must be encrypted; ADTS channels are not, so auto keeps TLS data.
  if (opts_.tls && !explicit_mode) return;
  std::string offered = upper(it->second);
  auto listed = [&](const std::string& k) {
    size_t p = 0;
    while (p <= offered.size()) {
      size_t e = offered.find(';', p);
      std::string item = offered.substr(p, e == std::string::npos ? std::string::npos : e - p);
      while (!item.empty() && item.back() == ' ') item.pop_back();
      if (item == k) return true;
      if (e == std::string::npos) break;
      p = e + 1;
    }
    return false;
  };
  adts::SessionParams p;
  p.timeout = opts_.timeout;
  std::string req;
  switch (c.mode) {
    case Mode::Auto:
    case Mode::Tcp:
      req = "TCP";
      p.kind = adts::ChannelKind::Tcp;
      break;
    case Mode::ParallelTcp:
      req = "PTCP " + std::to_string(c.streams);
      p.kind = adts::ChannelKind::ParallelTcp;
      p.streams = c.streams;
      break;
    case Mode::Verbs:
      req = "VERBS";
      p.kind = adts::ChannelKind::Verbs;
      break;
    case Mode::Off:
      return;
  }
  std::string kind_word = req.substr(0, req.find(' '));
  if (!listed(kind_word)) {
    if (!explicit_mode) return;
    throw ClientError(Exit::Refused, "server " + where() + " does not offer TPRT " + kind_word +
                                         " (FEAT: TPRT " + it->second + ")");
  }
  ftp::Reply r = command("TPRT " + req);
  if (r.code != 200) {
    if (!explicit_mode) return;
    throw ClientError(Exit::Refused, "server refused TPRT " + req + ": " + one_line(r));
  }
  auto cookie = ftp::parse_tprt_cookie(r.text());
  if (!cookie) fail_network(Exit::Network, "TPRT reply without a cookie: " + one_line(r));
  p.cookie = *cookie;
  uint16_t dport = 0;
  std::string dhost = peer_;
  ftp::Reply e = command("EPSV");
  if (e.code == 229) {
    auto port = ftp::parse_epsv_reply(e.text());
    if (!port) fail_network(Exit::Network, "unparsable EPSV reply: " + one_line(e));
    dport = *port;
  } else {
    ftp::Reply pv = command("PASV");
    auto hp = pv.code == 227 ? ftp::parse_pasv_reply(pv.text()) : std::nullopt;
    if (!hp) throw ClientError(Exit::Refused, "server refused passive mode: " + one_line(pv));
    dport = hp->port;
    dhost = pasv_host(hp->host);
  }
  try {
    adts_ = adts::connect(dhost, dport, p);
  } catch (const adts::AdtsError& err) {
    if (explicit_mode)
      fail_network(Exit::Network, "cannot open the ADTS " + req + " session to " + dhost + ":" +
                                      std::to_string(dport) + ": " + err.what());
    // auto: back to plain data connections.
    std::fprintf(stderr, "tierce-ftp: ADTS session failed (%s); using plain data connections\n",
                 err.what());
    command("TPRT STREAM");
    return;
  }
  adts_desc_ = req;
}

Fd FtpClient::open_passive() {
  if (!epsv_refused_) {
    ftp::Reply r = command("EPSV");
    if (r.code == 229) {
      auto port = ftp::parse_epsv_reply(r.text());
      if (!port) fail_network(Exit::Network, "unparsable EPSV reply: " + one_line(r));
      return connect_tcp(peer_, *port, opts_.timeout, false);
    }
    if (r.code < 500) throw ClientError(exit_for_reply(r.code), "EPSV: " + one_line(r));
    epsv_refused_ = true;
  }
  ftp::Reply r = command("PASV");
  auto hp = r.code == 227 ? ftp::parse_pasv_reply(r.text()) : std::nullopt;
  if (!hp) throw ClientError(exit_for_reply(r.code), "server refused passive mode: " + one_line(r));
  return connect_tcp(pasv_host(hp->host), hp->port, opts_.timeout, false);
}

std::string FtpClient::pasv_host(const std::string& announced) {
  // The address in a 227 reply is not trusted (as curl's default, CURLOPT_FTP_SKIP_PASV_IP):
  // data connections go to the control connection's peer, so a hostile server cannot point the
  // client at a third host (FTP bounce, internal port scans through the client). A server behind
  // NAT announcing its private address works too. 0.0.0.0 is a server that does not know its
  // address: no warning for that.
  if (announced != peer_ && announced != "0.0.0.0" && !pasv_warned_) {
    pasv_warned_ = true;
    std::fprintf(stderr,
                 "tierce-ftp: the PASV reply names %s, not the server's address %s: "
                 "connecting to %s\n",
                 announced.c_str(), peer_.c_str(), peer_.c_str());
  }
  return peer_;
}

std::unique_ptr<PlainData> FtpClient::start_plain(const std::string& cmd,
                                                  const std::string& rest_cmd,
                                                  ftp::Reply* prelim) {
  Fd d = open_passive();
  if (!rest_cmd.empty()) {
    ftp::Reply r = command(rest_cmd);
    if (r.code != 350)
      throw ClientError(Exit::Refused, "server refused " + rest_cmd + " (resume): " + one_line(r));
  }
  send_lines(cmd + "\r\n");
  ftp::Reply r = read_reply();
  if (!r.positive_preliminary()) {
    if (r.code == 226 || r.code == 250) {
      // Some servers send an empty listing with no 150; the data connection carries nothing.
      if (prelim) *prelim = r;
      return nullptr;
    }
    throw ClientError(exit_for_reply(r.code), cmd + ": " + one_line(r));
  }
  if (prelim) *prelim = r;
  auto pd = std::make_unique<PlainData>(std::move(d), opts_.timeout);
  if (opts_.tls) pd->start_tls(tls_ctx_, host_, ctl_->tls.get());
  return pd;
}

uint64_t FtpClient::finish_plain_reply(const std::string& what) {
  ftp::Reply r = read_final_reply();
  if (r.code != 226 && r.code != 250)
    throw ClientError(r.code >= 500 ? exit_for_reply(r.code) : Exit::Transfer,
                      what + ": " + one_line(r));
  return 0;
}

std::string FtpClient::list_raw(const std::string& cmd, bool* mlsd) {
  (void)mlsd;
  if (adts_) {
    send_lines(cmd + "\r\n");
    ftp::Reply r = read_reply();
    if (!r.positive_preliminary()) {
      if (r.code == 226 || r.code == 250) return "";
      throw ClientError(exit_for_reply(r.code), cmd + ": " + one_line(r));
    }
    std::vector<uint8_t> mem;
    adts::Sink sink;
    sink.memory = &mem;
    sink.max_length = kMaxListing;
    try {
      adts_->receive(sink);
    } catch (const adts::AdtsError& e) {
      if (adts_->broken()) fail_network(exit_for_adts(e.code()), cmd + ": ADTS: " + e.what());
      read_final_reply();
      throw ClientError(exit_for_adts(e.code()), cmd + ": " + e.what());
    }
    finish_plain_reply(cmd);
    return std::string(mem.begin(), mem.end());
  }
  auto pd = start_plain(cmd, "", nullptr);
  if (!pd) return "";
  std::string data;
  try {
    data = pd->receive_to_memory(kMaxListing);
  } catch (...) {
    pd->close();
    try {
      read_final_reply();
    } catch (...) {
    }
    throw;
  }
  pd->close();
  finish_plain_reply(cmd);
  return data;
}

std::vector<RemoteEntry> FtpClient::list(const std::string& dir,
                                         std::vector<std::string>* rejected) {
  bool mlsd = has_feature("MLST");
  std::string cmd = mlsd ? "MLSD" : "LIST";
  if (!dir.empty()) cmd += " " + dir;
  std::string data = list_raw(cmd, &mlsd);
  return parse_listing(data, mlsd, std::time(nullptr), rejected);
}

std::string FtpClient::pwd() {
  ftp::Reply r = command("PWD");
  if (r.code != 257) throw ClientError(exit_for_reply(r.code), "PWD: " + one_line(r));
  std::string t = r.lines.empty() ? "" : r.lines[0];
  size_t q = t.find('"');
  if (q == std::string::npos) return "";
  std::string out;
  for (size_t i = q + 1; i < t.size(); ++i) {
    if (t[i] == '"') {
      if (i + 1 < t.size() && t[i + 1] == '"') {
        out.push_back('"');
        ++i;
        continue;
      }
      break;
    }
    out.push_back(t[i]);
  }
  return out;
}

std::optional<uint64_t> FtpClient::size(const std::string& path) {
  ftp::Reply r = command("SIZE " + path);
  if (r.code != 213 || r.lines.empty()) return std::nullopt;
  const std::string& t = r.lines[0];
  uint64_t v = 0;
  size_t i = 0;
  for (; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i)
    v = v * 10 + uint64_t(t[i] - '0');
  if (i == 0) return std::nullopt;
  return v;
}

std::optional<std::time_t> FtpClient::mdtm(const std::string& path) {
  ftp::Reply r = command("MDTM " + path);
  if (r.code != 213 || r.lines.empty()) return std::nullopt;
  std::string t = r.lines[0];
  while (!t.empty() && t.back() == ' ') t.pop_back();
  return ftp::parse_time_val(t);
}

void FtpClient::mkd(const std::string& path) {
  ftp::Reply r = command("MKD " + path);
  if (r.code != 257 && r.code != 250)
    throw ClientError(exit_for_reply(r.code), "MKD " + path + ": " + one_line(r));
}

void FtpClient::rmd(const std::string& path) {
  ftp::Reply r = command("RMD " + path);
  if (r.code != 250 && r.code != 200)
    throw ClientError(exit_for_reply(r.code), "RMD " + path + ": " + one_line(r));
}

void FtpClient::dele(const std::string& path) {
  ftp::Reply r = command("DELE " + path);
  if (r.code != 250 && r.code != 200)
    throw ClientError(exit_for_reply(r.code), "DELE " + path + ": " + one_line(r));
}

bool FtpClient::mfmt(const std::string& path, std::time_t t) {
  if (!has_feature("MFMT")) return false;
  ftp::Reply r = command("MFMT " + ftp::format_time_val(t) + " " + path);
  return r.code == 213 || r.code == 250 || r.code == 200;
}

bool FtpClient::is_dir(const std::string& path) {
  std::string old = pwd();
  ftp::Reply r = command("CWD " + path);
  if (r.code != 250 && r.code != 200) return false;
  ftp::Reply b = command("CWD " + (old.empty() ? std::string("/") : old));
  if (b.code != 250 && b.code != 200)
    fail_network(Exit::Network, "cannot return to " + old + ": " + one_line(b));
  return true;
}

// ---- transfers --------------------------------------------------------------------------------

BatchResult FtpClient::adts_retr_one(const BatchItem& it, bool rest_sent) {
  BatchResult res;
  const std::string what = "RETR " + it.remote;
  uint64_t offset = it.offset;
  if (rest_sent) {
    ftp::Reply r = read_reply();
    // REST refused: the RETR that follows sends the whole file; take it from byte 0.
    if (r.code != 350) offset = 0;
  }
  ftp::Reply r = read_reply();
  if (!r.positive_preliminary()) {
    res.code = r.code == 226 ? Exit::Transfer : exit_for_reply(r.code);
    res.error = what + ": " + one_line(r);
    return res;
  }
  // The server accepted the RETR: only now is the local file opened (created, truncated).
  int fd = it.fd;
  std::string open_err;
  Fd drain;
  if (fd < 0 && it.open_local) {
    base::Result<int> opened = it.open_local();
    fd = opened.ok() ? *opened : -1;
    open_err = opened.message();
    if (fd < 0) {
      // The transfer is coming anyway: drain it so the session stays in step, then report.
      if (open_err.empty()) open_err = "cannot open the local file";
      drain.reset(::open("/dev/null", O_WRONLY | O_CLOEXEC));
      fd = drain.get();
      offset = 0;
    }
  }
  if (fd < 0) {
    // Nothing to write to: a drain that cannot even open /dev/null leaves the session unusable.
    fail_network(Exit::Local, what + ": " + open_err);
  }
  adts::Sink sink;
  sink.fd = fd;
  sink.offset = offset;
  try {
    res.bytes = adts_->receive(sink, progress_ ? adts::Progress(progress_) : adts::Progress());
  } catch (const adts::AdtsError& e) {
    if (drain) {
      if (adts_->broken()) fail_network(Exit::Local, what + ": " + open_err);
      read_final_reply();
      res.code = Exit::Local;
      res.error = what + ": " + open_err;
      return res;
    }
    if (adts_->broken()) fail_network(exit_for_adts(e.code()), what + ": ADTS: " + e.what());
    ftp::Reply f = read_final_reply();
    res.code = exit_for_adts(e.code());
    res.error = what + ": " + e.what() + " (" + one_line(f) + ")";
    return res;
  }
  ftp::Reply f = read_final_reply();
  if (drain) {
    res.code = Exit::Local;
    res.error = what + ": " + open_err;
    return res;
  }
  if (f.code != 226 && f.code != 250) {
    res.code = f.code >= 500 ? exit_for_reply(f.code) : Exit::Transfer;
    res.error = what + ": " + one_line(f);
    return res;
  }
  res.ok = true;
  return res;
}

uint64_t FtpClient::retr(const BatchItem& it, uint64_t total_hint, const ProgressFn& p) {
  if (adts_) {
    std::string lines;
    if (it.offset > 0) lines += "REST " + std::to_string(it.offset) + "\r\n";
    lines += "RETR " + it.remote + "\r\n";
    send_lines(lines);
    progress_ = p;
    BatchResult r;
    try {
      r = adts_retr_one(it, it.offset > 0);
    } catch (...) {
      progress_ = nullptr;
      throw;
    }
    progress_ = nullptr;
    if (!r.ok) throw ClientError(r.code, r.error);
    return r.bytes;
  }
  const std::string what = "RETR " + it.remote;
  std::string rest = it.offset > 0 ? "REST " + std::to_string(it.offset) : "";
  // A refused RETR (55x) throws here, before the local file is touched.
  auto pd = start_plain(what, rest, nullptr);
  int fd = it.fd;
  if (fd < 0 && it.open_local) {
    base::Result<int> opened = it.open_local();
    fd = opened.ok() ? *opened : -1;
    std::string err = opened.message();
    if (fd < 0) {
      if (pd) {
        pd->close();  // the server sees the data connection go and ends the transfer (426)
        try {
          read_final_reply();
        } catch (...) {
        }
      }
      if (err.empty()) err = "cannot open the local file";
      throw ClientError(Exit::Local, what + ": " + err);
    }
  }
  if (!pd) return 0;  // 226 without a 150: nothing was sent
  uint64_t n = 0;
  try {
    n = pd->receive_to_file(fd, it.offset, total_hint, p);
  } catch (...) {
    pd->close();
    try {
      read_final_reply();
    } catch (...) {
    }
    throw;
  }
  pd->close();
  finish_plain_reply(what);
  return n;
}

uint64_t FtpClient::stor(const std::string& remote, int fd, uint64_t offset, uint64_t length,
                         bool append, const ProgressFn& p) {
  const std::string cmd = (append ? "APPE " : "STOR ") + remote;
  if (adts_) {
    progress_ = p;
    BatchResult res;
    try {
      stor_many({BatchItem{remote, fd, offset, length, append, {}}},
                [&](size_t, const BatchResult& r) { res = r; });
    } catch (...) {
      progress_ = nullptr;
      throw;
    }
    progress_ = nullptr;
    if (!res.ok) throw ClientError(res.code, res.error);
    return res.bytes;
  }
  auto pd = start_plain(cmd, "", nullptr);
  if (!pd) throw ClientError(Exit::Transfer, cmd + ": server did not open the data connection");
  uint64_t n = 0;
  try {
    n = pd->send_from_file(fd, offset, length, p);
  } catch (...) {
    pd->close();
    try {
      read_final_reply();
    } catch (...) {
    }
    throw;
  }
  pd->finish_send();  // EOF: the end of the upload
  finish_plain_reply(cmd);
  return n;
}

void FtpClient::each_serially(const std::vector<BatchItem>& items, const BatchDone& done,
                              const std::function<uint64_t(const BatchItem&)>& one) {
  for (size_t i = 0; i < items.size(); ++i) {
    BatchResult r;
    try {
      r.bytes = one(items[i]);
      r.ok = true;
    } catch (const ClientError& e) {
      if (broken_) throw;
      r.code = e.code();
      r.error = e.what();
    }
    done(i, r);
  }
}

void FtpClient::retr_many(const std::vector<BatchItem>& items, const BatchDone& done) {
  if (!adts_)
    return each_serially(items, done, [&](const BatchItem& it) { return retr(it, 0, {}); });
  // Pipelined: keep up to `window` RETRs ahead of the one being received. The server answers in
  // order and its transfers follow one another on the session, so we read them in order too.
  const size_t window = std::max<unsigned>(1, opts_.pipeline_window);
  size_t sent = 0;
  for (size_t next = 0; next < items.size(); ++next) {
    std::string lines;
    while (sent < items.size() && sent - next < window) {
      if (items[sent].offset > 0) lines += "REST " + std::to_string(items[sent].offset) + "\r\n";
      lines += "RETR " + items[sent].remote + "\r\n";
      ++sent;
    }
    if (!lines.empty()) send_lines(lines);
    done(next, adts_retr_one(items[next], items[next].offset > 0));
  }
}

void FtpClient::stor_many(const std::vector<BatchItem>& items, const BatchDone& done) {
  if (!adts_)
    return each_serially(items, done, [&](const BatchItem& it) {
      return stor(it.remote, it.fd, it.offset, it.length, it.append, {});
    });
  // Commands go ahead; each transfer is sent only after its 150, so a refused STOR (553) never
  // leaves bytes on the session that the server would not read.
  const size_t window = std::max<unsigned>(1, opts_.pipeline_window);
  size_t sent = 0;
  for (size_t next = 0; next < items.size(); ++next) {
    std::string lines;
    while (sent < items.size() && sent - next < window) {
      lines += (items[sent].append ? "APPE " : "STOR ") + items[sent].remote + "\r\n";
      ++sent;
    }
    if (!lines.empty()) send_lines(lines);
    const BatchItem& it = items[next];
    const std::string what = (it.append ? "APPE " : "STOR ") + it.remote;
    BatchResult res;
    ftp::Reply r = read_reply();
    if (!r.positive_preliminary()) {
      res.code = exit_for_reply(r.code);
      res.error = what + ": " + one_line(r);
      done(next, res);
      continue;
    }
    adts::Source src;
    src.fd = it.fd;
    src.offset = it.offset;
    src.length = it.length;
    try {
      res.bytes = adts_->send(src, progress_ ? adts::Progress(progress_) : adts::Progress());
    } catch (const adts::AdtsError& e) {
      if (adts_->broken()) fail_network(exit_for_adts(e.code()), what + ": ADTS: " + e.what());
      ftp::Reply f = read_final_reply();
      res.code = exit_for_adts(e.code());
      res.error = what + ": " + e.what() + " (" + one_line(f) + ")";
      done(next, res);
      continue;
    }
    ftp::Reply f = read_final_reply();
    if (f.code != 226 && f.code != 250) {
      res.code = f.code >= 500 ? exit_for_reply(f.code) : Exit::Transfer;
      res.error = what + ": " + one_line(f);
    } else {
      res.ok = true;
    }
    done(next, res);
  }
}

}  // namespace tierce::ftpc
