// ftp_adts/server/session.cc — the control loop and the command table of one FTP session.
//
// Log ids: FTPD01xx session, FTPD02xx login, FTPD03xx transfers, FTPD04xx TLS/ADTS.
#include "ftp_adts/server/session.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/rand.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

#include "ftp_adts/ftp/protocol.h"
#include "ftp_adts/ftp/root.h"
#include "ftp_adts/server/adts_channel.h"
#include "ftp_adts/server/control.h"
#include "ftp_adts/server/data.h"
#include "ftp_adts/server/listing.h"
#include "ftp_adts/server/password.h"

namespace tierce::ftpd {

namespace {

using Clock = std::chrono::steady_clock;
using fabric::LogLevel;

std::string quote_path(const std::string& p) {
  // RFC 959 Appendix II: a '"' inside the quoted name is doubled.
  std::string s = "\"";
  for (char c : p) {
    s.push_back(c);
    if (c == '"') s.push_back('"');
  }
  return s + "\"";
}

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string errno_text(int neg) {
  switch (-neg) {
    case ENOENT:
      return "No such file or directory";
    case EACCES:
    case EPERM:
      return "Permission denied";
    case EEXIST:
      return "File exists";
    case ENOTDIR:
      return "Not a directory";
    case EISDIR:
      return "Is a directory";
    case ENOTEMPTY:
      return "Directory not empty";
    case EXDEV:
      return "Cannot move across file systems";
    case ELOOP:
      return "Too many levels of symbolic links";
    case ENOSPC:
      return "No space left on device";
    default:
      return std::strerror(-neg);
  }
}

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
// false with *err on an I/O error.
constexpr size_t kConvertChunk = 256 << 10;
bool convert_file(int in, uint64_t in_off, int out, uint64_t out_off, bool crlf,
                  uint64_t* written, std::string* err) {
  std::vector<char> buf(kConvertChunk);
  bool carry = false;
  auto put = [&](const std::string& b) {
    for (size_t done = 0; done < b.size();) {
      ssize_t n = ::pwrite(out, b.data() + done, b.size() - done, off_t(out_off));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        *err = n < 0 ? std::strerror(errno) : "short write";
        return false;
      }
      done += size_t(n);
      out_off += uint64_t(n);
      *written += uint64_t(n);
    }
    return true;
  };
  for (;;) {
    ssize_t n = ::pread(in, buf.data(), buf.size(), off_t(in_off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *err = std::strerror(errno);
      return false;
    }
    if (n == 0) break;
    in_off += uint64_t(n);
    std::string_view chunk(buf.data(), size_t(n));
    if (!put(crlf ? to_crlf(chunk, &carry) : from_crlf(chunk, &carry))) return false;
  }
  if (!crlf && carry) return put("\r");  // a CR at the very end is data
  return true;
}

class Session {
 public:
  Session(const SessionEnv& env, int fd)
      : env_(env), cfg_(*env.cfg), ctl_(fd, env.cfg->max_command_line,
                                        env.cfg->control_buffer_bytes),
        peer_(SockAddr::peer_of(fd)),
        local_(SockAddr::local_of(fd)) {
    // Called from the thread that accepts the ADTS streams too: only the (thread-safe) sink.
    adts_.set_log([sink = env_.log](const std::string& m) {
      if (sink) sink(LogLevel::Warn, "FTPD0402 ADTS: " + m);
    });
  }
  void run();

 private:
  // ---- the command table ----
  enum Flags : unsigned {
    kNone = 0,
    kLogin = 1,  // needs a logged-in user (530 otherwise)
    kArg = 2,    // needs an argument (501 otherwise)
    kWrite = 4,  // needs write permission (550 otherwise)
  };
  using Handler = void (Session::*)(const std::string& arg);
  struct Spec {
    const char* verb;
    Handler handler;
    unsigned flags;
    const char* help;
  };
  static const Spec kCommands[];

  void dispatch(const ftp::Command& cmd);
  void log(LogLevel l, const std::string& line) {
    if (env_.log) env_.log(l, line);
  }
  std::string who() const {
    return peer_.host() + (logged_in_ ? " user " + user_ : std::string());
  }

  // access
  void cmd_user(const std::string&);
  void cmd_pass(const std::string&);
  void cmd_acct(const std::string&) { ctl_.reply(202, "ACCT not needed"); }
  void cmd_quit(const std::string&);
  void cmd_rein(const std::string&) { ctl_.reply(502, "REIN not implemented"); }
  // state
  void cmd_noop(const std::string&) { ctl_.reply(200, "NOOP ok"); }
  void cmd_syst(const std::string&) { ctl_.reply(215, "UNIX Type: L8"); }
  void cmd_help(const std::string&);
  void cmd_feat(const std::string&);
  void cmd_opts(const std::string&);
  void cmd_stat(const std::string&);
  void cmd_pwd(const std::string&);
  void cmd_cwd(const std::string&);
  void cmd_cdup(const std::string&) { cmd_cwd(".."); }
  void cmd_type(const std::string&);
  void cmd_mode(const std::string&);
  void cmd_stru(const std::string&);
  void cmd_allo(const std::string&) { ctl_.reply(202, "ALLO not needed"); }
  void cmd_rest(const std::string&);
  // data port
  void cmd_port(const std::string&);
  void cmd_eprt(const std::string&);
  void cmd_pasv(const std::string&);
  void cmd_epsv(const std::string&);
  void cmd_tprt(const std::string&);
  // transfers
  void cmd_retr(const std::string&);
  void cmd_stor(const std::string& a) { store(a, StoreKind::Stor); }
  void cmd_appe(const std::string& a) { store(a, StoreKind::Appe); }
  void cmd_stou(const std::string& a) { store(a, StoreKind::Stou); }
  void cmd_list(const std::string& a) { listing(a, ListKind::List); }
  void cmd_nlst(const std::string& a) { listing(a, ListKind::Nlst); }
  void cmd_mlsd(const std::string& a) { listing(a, ListKind::Mlsd); }
  void cmd_abor(const std::string&) { ctl_.reply(225, "No transfer to abort"); }
  // files
  void cmd_size(const std::string&);
  void cmd_mdtm(const std::string&);
  void cmd_mfmt(const std::string&);
  void cmd_mlst(const std::string&);
  void cmd_dele(const std::string&);
  void cmd_mkd(const std::string&);
  void cmd_rmd(const std::string&);
  void cmd_rnfr(const std::string&);
  void cmd_rnto(const std::string&);
  void cmd_site(const std::string&);
  // TLS
  void cmd_auth(const std::string&);
  void cmd_pbsz(const std::string&);
  void cmd_prot(const std::string&);
  void cmd_ccc(const std::string&) {
    ctl_.reply(534, "CCC refused: the control connection stays encrypted");
  }

  // helpers
  std::string vpath(const std::string& arg) const { return ftp::join_virtual(cwd_, arg); }
  // For a Root call's result (rc = -errno): on failure replies "550 <arg>: <reason>" (the client's
  // argument, at most 256 bytes of it; `if_empty` when it is empty) and returns true.
  bool failed(int rc, const std::string& arg, const std::string& if_empty = {});
  bool data_policy_ok();  // 521 when [tls] require and PROT C
  // Before the 150 of a transfer: a plain data port, or the ADTS session (waited for while its
  // streams connect; 425 when none came). false after the error reply.
  bool data_channel_ready();
  bool active_mode_allowed();  // PORT/EPRT: 501 under EPSV ALL or an ADTS session
  // PORT/EPRT: the control peer's host and a port >= 1024 only (500: no bounce), then 200.
  void set_active_target(const std::string& verb, const SockAddr& target);
  // PASV/EPSV: a listener (the ADTS session's when one is configured) on `host`; its port, or
  // <= 0 after the 425 reply.
  int listen_passive(const std::string& host);
  enum class StoreKind { Stor, Appe, Stou };
  void store(const std::string& arg, StoreKind kind);
  enum class ListKind { List, Nlst, Mlsd };
  void listing(const std::string& arg, ListKind kind);
  // Runs one plain or ADTS transfer after the 150; replies with the outcome.
  TransferResult send_plain_or_adts(int fd, uint64_t offset, uint64_t size, std::string_view mem,
                                    bool from_memory);
  TransferResult receive_plain_or_adts(int fd, uint64_t offset, uint64_t max);
  // The bytes the next upload may take ([limits] / the user's max_upload_bytes and
  // session_upload_bytes); UINT64_MAX: no limit.
  uint64_t upload_allowance(uint64_t offset) const;
  void finish_transfer(const TransferResult& r, const std::string& path, char direction,
                       Clock::time_point start, bool log_xfer);
  std::unique_ptr<DataConn> open_data(std::string* err);
  TransferOptions transfer_options(bool ascii);
  // By value: after_login may wipe the user table these come from (and `u` with it: its limits
  // are read before).
  void login_ok(std::string name, std::string root, bool anonymous, bool write,
                const UserConfig* u = nullptr);

  const SessionEnv& env_;
  const Config& cfg_;
  Control ctl_;
  SockAddr peer_, local_;

  std::string user_;  // from USER (logged in or pending)
  bool logged_in_ = false;
  bool anonymous_ = false;
  bool writable_ = false;
  uint64_t max_upload_ = 0, session_upload_ = 0;  // the logged-in user's limits (0 = none)
  unsigned failures_ = 0;
  std::unique_ptr<ftp::Root> root_;
  std::string cwd_ = "/";

  bool ascii_ = false;
  uint64_t rest_ = 0;  // REST offset for the next RETR/STOR
  std::string rnfr_;
  bool rnfr_set_ = false;
  bool epsv_all_ = false;
  bool pbsz_ = false;
  bool prot_p_ = false;
  bool quit_ = false;
  FactSelection facts_;

  DataPort port_;
  AdtsChannel adts_;

  uint64_t files_out_ = 0, files_in_ = 0, bytes_out_ = 0, bytes_in_ = 0;
  uint64_t logins_ok_ = 0, logins_failed_ = 0, transfers_failed_ = 0;

 public:
  SessionStats stats() const {
    return {logins_ok_, logins_failed_, files_out_, files_in_, transfers_failed_, bytes_out_,
            bytes_in_};
  }
};

// clang-format off
const Session::Spec Session::kCommands[] = {
    {"USER", &Session::cmd_user, kArg, "USER <name>: who you are"},
    {"PASS", &Session::cmd_pass, kNone, "PASS <password>"},
    {"ACCT", &Session::cmd_acct, kNone, "ACCT: not needed"},
    {"QUIT", &Session::cmd_quit, kNone, "QUIT: end the session"},
    {"REIN", &Session::cmd_rein, kNone, "REIN: not implemented"},
    {"NOOP", &Session::cmd_noop, kNone, "NOOP: do nothing"},
    {"SYST", &Session::cmd_syst, kNone, "SYST: system type"},
    {"HELP", &Session::cmd_help, kNone, "HELP [command]"},
    {"FEAT", &Session::cmd_feat, kNone, "FEAT: extensions"},
    {"OPTS", &Session::cmd_opts, kArg, "OPTS UTF8 ON | OPTS MLST facts"},
    {"STAT", &Session::cmd_stat, kLogin, "STAT [path]: status, or a listing on this connection"},
    {"PWD",  &Session::cmd_pwd,  kLogin, "PWD: working directory"},
    {"XPWD", &Session::cmd_pwd,  kLogin, "XPWD: as PWD"},
    {"CWD",  &Session::cmd_cwd,  kLogin | kArg, "CWD <dir>"},
    {"XCWD", &Session::cmd_cwd,  kLogin | kArg, "XCWD <dir>"},
    {"CDUP", &Session::cmd_cdup, kLogin, "CDUP: parent directory"},
    {"XCUP", &Session::cmd_cdup, kLogin, "XCUP: as CDUP"},
    {"TYPE", &Session::cmd_type, kLogin | kArg, "TYPE A | I"},
    {"MODE", &Session::cmd_mode, kLogin | kArg, "MODE S"},
    {"STRU", &Session::cmd_stru, kLogin | kArg, "STRU F"},
    {"ALLO", &Session::cmd_allo, kLogin, "ALLO: not needed"},
    {"REST", &Session::cmd_rest, kLogin | kArg, "REST <offset>: restart the next RETR/STOR there"},
    {"PORT", &Session::cmd_port, kLogin | kArg, "PORT h1,h2,h3,h4,p1,p2"},
    {"EPRT", &Session::cmd_eprt, kLogin | kArg, "EPRT |af|addr|port|"},
    {"PASV", &Session::cmd_pasv, kLogin, "PASV: passive mode"},
    {"EPSV", &Session::cmd_epsv, kLogin, "EPSV [1|2|ALL]: extended passive mode"},
    {"TPRT", &Session::cmd_tprt, kLogin | kArg, "TPRT TCP | PTCP <n> | VERBS | STREAM: ADTS data session"},
    {"RETR", &Session::cmd_retr, kLogin | kArg, "RETR <file>: download"},
    {"STOR", &Session::cmd_stor, kLogin | kArg | kWrite, "STOR <file>: upload"},
    {"APPE", &Session::cmd_appe, kLogin | kArg | kWrite, "APPE <file>: append"},
    {"STOU", &Session::cmd_stou, kLogin | kWrite, "STOU [name]: upload to a unique name"},
    {"LIST", &Session::cmd_list, kLogin, "LIST [path]: long listing"},
    {"NLST", &Session::cmd_nlst, kLogin, "NLST [path]: names"},
    {"MLSD", &Session::cmd_mlsd, kLogin, "MLSD [dir]: machine listing"},
    {"MLST", &Session::cmd_mlst, kLogin, "MLST [path]: facts of one entry"},
    {"ABOR", &Session::cmd_abor, kLogin, "ABOR: abort the transfer"},
    {"SIZE", &Session::cmd_size, kLogin | kArg, "SIZE <file>"},
    {"MDTM", &Session::cmd_mdtm, kLogin | kArg, "MDTM <file>: modification time (UTC)"},
    {"MFMT", &Session::cmd_mfmt, kLogin | kArg | kWrite, "MFMT <YYYYMMDDHHMMSS> <file>"},
    {"DELE", &Session::cmd_dele, kLogin | kArg | kWrite, "DELE <file>"},
    {"MKD",  &Session::cmd_mkd,  kLogin | kArg | kWrite, "MKD <dir>"},
    {"XMKD", &Session::cmd_mkd,  kLogin | kArg | kWrite, "XMKD <dir>"},
    {"RMD",  &Session::cmd_rmd,  kLogin | kArg | kWrite, "RMD <dir>"},
    {"XRMD", &Session::cmd_rmd,  kLogin | kArg | kWrite, "XRMD <dir>"},
    {"RNFR", &Session::cmd_rnfr, kLogin | kArg | kWrite, "RNFR <from>"},
    {"RNTO", &Session::cmd_rnto, kLogin | kArg | kWrite, "RNTO <to>"},
    {"SITE", &Session::cmd_site, kLogin | kArg, "SITE CHMOD <mode> <path> | SITE HELP"},
    {"AUTH", &Session::cmd_auth, kArg, "AUTH TLS"},
    {"PBSZ", &Session::cmd_pbsz, kArg, "PBSZ 0"},
    {"PROT", &Session::cmd_prot, kArg, "PROT P | C"},
    {"CCC",  &Session::cmd_ccc,  kNone, "CCC: refused"},
};
// clang-format on

// Verbs of RFC 959 and its extensions we know but do not offer: 502 rather than 500.
constexpr const char* kNotImplemented[] = {"SMNT", "LANG", "ADAT", "MIC", "CONF", "ENC", "XRCP",
                                           "XSEM", "XSEN", "MLFL", "MAIL", "MSND", "MSOM", "MSAM"};

void Session::run() {
  int fd = ctl_.fd();
  int one = 1;
  // Replies must leave at once (no Nagle wait behind a previous small segment): a client that
  // pipelines hundreds of RETRs would otherwise stall on delayed ACKs.
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // Telnet "urgent" bytes of an ABOR (IAC IP IAC DM) arrive inline; the parser strips them.
  ::setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  timeval tv{std::max<long>(30, long(cfg_.data_timeout_s)), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);

  log(LogLevel::Info, "FTPD0101 session from " + peer_.host() + ":" + std::to_string(peer_.port()));
  ctl_.reply(220, cfg_.banner);
  auto login_deadline = Clock::now() + std::chrono::seconds(cfg_.login_timeout_s);
  std::string line;
  while (!quit_) {
    Millis timeout = std::chrono::seconds(cfg_.idle_timeout_s);
    if (!logged_in_)
      timeout = std::min(timeout, std::chrono::duration_cast<Millis>(login_deadline - Clock::now()));
    if (timeout.count() <= 0) timeout = Millis(1);
    Control::Read r = ctl_.read_line(&line, timeout);
    if (r == Control::Read::Timeout) {
      ctl_.reply(421, logged_in_ ? "Idle timeout, closing the control connection"
                                 : "Login timeout, closing the control connection");
      log(LogLevel::Info, "FTPD0103 " + who() + ": " + (logged_in_ ? "idle" : "login") + " timeout");
      break;
    }
    if (r == Control::Read::Closed) break;
    if (r == Control::Read::TooLong) {
      ctl_.reply(500, "Command line too long");
      continue;
    }
    ftp::Command cmd;
    ftp::ParseError pe = ftp::parse_command(line, &cmd);
    if (pe == ftp::ParseError::Empty) {
      ctl_.reply(500, "Empty command");
      continue;
    }
    if (pe != ftp::ParseError::None) {
      ctl_.reply(500, "Syntax error: " + std::string(ftp::to_string(pe)));
      continue;
    }
    dispatch(cmd);
  }
  ctl_.flush();
  adts_.reset();
  log(LogLevel::Info, "FTPD0102 session end " + who() + ": " + std::to_string(files_out_) +
                          " files out (" + std::to_string(bytes_out_) + " bytes), " +
                          std::to_string(files_in_) + " files in (" + std::to_string(bytes_in_) +
                          " bytes)");
}

void Session::dispatch(const ftp::Command& cmd) {
  const Spec* spec = nullptr;
  for (const Spec& s : kCommands)
    if (cmd.verb == s.verb) {
      spec = &s;
      break;
    }
  bool was_rnfr = rnfr_set_;
  rnfr_set_ = false;
  if (!spec) {
    bool known = std::any_of(std::begin(kNotImplemented), std::end(kNotImplemented),
                             [&](const char* v) { return cmd.verb == v; });
    if (known)
      ctl_.reply(502, cmd.verb + " not implemented");
    else
      ctl_.reply(500, "Unknown command '" + cmd.verb.substr(0, 16) + "'");
    return;
  }
  if ((spec->flags & kLogin) && !logged_in_) {
    ctl_.reply(530, "Please login with USER and PASS");
    return;
  }
  if ((spec->flags & kArg) && cmd.arg.empty()) {
    ctl_.reply(501, std::string(spec->verb) + " needs an argument: " + spec->help);
    return;
  }
  if ((spec->flags & kWrite) && !writable_) {
    ctl_.reply(550, "Permission denied");
    return;
  }
  // RNTO must come right after RNFR. (A REST offset, like vsftpd's, stays until the next
  // RETR/STOR uses it: clients put PASV/EPSV between REST and RETR.)
  if (std::string_view(spec->verb) == "RNTO" && !was_rnfr) {
    ctl_.reply(503, "RNFR first");
    return;
  }
  (this->*spec->handler)(cmd.arg);
}

// ---- access ----

void Session::cmd_user(const std::string& arg) {
  if (logged_in_) {
    ctl_.reply(530, "Already logged in; cannot change to another user");
    return;
  }
  if (cfg_.tls_require && !ctl_.tls()) {
    ctl_.reply(530, "TLS required: send AUTH TLS first");
    return;
  }
  user_ = arg;
  if ((arg == "anonymous" || arg == "ftp") && cfg_.anonymous)
    ctl_.reply(331, "Anonymous login ok, send your e-mail address as password");
  else
    ctl_.reply(331, "Password required for " + arg.substr(0, 64));
}

void Session::login_ok(std::string name, std::string root, bool anonymous, bool write,
                       const UserConfig* u) {
  // Read before after_login: it wipes the user table `u` points into.
  uint64_t max_upload = u && u->max_upload_bytes >= 0 ? uint64_t(u->max_upload_bytes)
                                                      : cfg_.max_upload_bytes;
  uint64_t session_upload = u && u->session_upload_bytes >= 0 ? uint64_t(u->session_upload_bytes)
                                                              : cfg_.session_upload_bytes;
  u = nullptr;
  try {
    root_ = std::make_unique<ftp::Root>(root);
  } catch (const std::exception& e) {
    log(LogLevel::Error, "FTPD0204 " + peer_.host() + ": cannot open the root of " + name + ": " +
                             e.what());
    ctl_.reply(421, "Cannot open your home directory; try later");
    quit_ = true;
    return;
  }
  // ---- privilege separation (privsep.h): the one call of the session into it ----
  if (std::string err; env_.after_login && !env_.after_login(name, anonymous, &err)) {
    log(LogLevel::Error, "FTPD0205 " + peer_.host() + ": cannot drop privileges for " + name +
                             ": " + err + "; session ended");
    ctl_.reply(421, "Internal error; try later");
    quit_ = true;
    return;
  }
  logged_in_ = true;
  anonymous_ = anonymous;
  writable_ = write;
  max_upload_ = max_upload;
  session_upload_ = session_upload;
  cwd_ = "/";
  user_ = name;
  ++logins_ok_;
  log(LogLevel::Info, "FTPD0201 login ok: " + name + " from " + peer_.host() +
                          (anonymous ? " (anonymous, read-only)" : write ? "" : " (read-only)"));
  ctl_.reply(230, anonymous ? "Anonymous access granted, restrictions apply" : "Login successful");
}

void Session::cmd_pass(const std::string& arg) {
  if (logged_in_) {
    ctl_.reply(230, "Already logged in");
    return;
  }
  if (user_.empty()) {
    ctl_.reply(503, "Login with USER first");
    return;
  }
  if ((user_ == "anonymous" || user_ == "ftp") && cfg_.anonymous) {
    login_ok("anonymous", cfg_.anonymous_root, true, false);
    return;
  }
  const UserConfig* u = cfg_.find_user(user_);
  bool ok;
  if (u) {
    ok = verify_password(arg, u->password_hash);
  } else {
    // Spend the same time on unknown names as on known ones: no user enumeration by timing.
    // The check runs against a real entry's hash (same algorithm and cost); result ignored.
    std::vector<std::string> known;
    for (const auto& k : cfg_.users) known.push_back(k.password_hash);
    verify_password(arg, dummy_hash_for(known));
    ok = false;
  }
  if (ok) {
    login_ok(u->name, u->root, false, u->write, u);
    return;
  }
  ++failures_;
  ++logins_failed_;
  log(LogLevel::Warn, "FTPD0202 login failed: " + user_.substr(0, 64) + " from " + peer_.host() +
                          " (attempt " + std::to_string(failures_) + ")");
  user_.clear();
  // The pause slows down password guessing on this connection.
  std::this_thread::sleep_for(Millis(cfg_.login_fail_delay_ms));
  if (failures_ >= cfg_.max_login_failures) {
    ctl_.reply(421, "Too many failed logins, closing the control connection");
    log(LogLevel::Warn, "FTPD0203 " + peer_.host() + ": too many failed logins");
    quit_ = true;
    return;
  }
  ctl_.reply(530, "Login incorrect");
}

void Session::cmd_quit(const std::string&) {
  ctl_.reply(221, "Goodbye");
  quit_ = true;
}

// ---- state ----

void Session::cmd_help(const std::string& arg) {
  if (!arg.empty()) {
    std::string v = upper(arg);
    for (const Spec& s : kCommands)
      if (v == s.verb) {
        ctl_.reply(214, s.help);
        return;
      }
    ctl_.reply(502, "Unknown command " + v.substr(0, 16));
    return;
  }
  std::vector<std::string> lines{"The following commands are recognized:"};
  std::string row;
  int n = 0;
  for (const Spec& s : kCommands) {
    char cell[8];
    std::snprintf(cell, sizeof cell, " %-5s", s.verb);
    row += cell;
    if (++n % 10 == 0) {
      lines.push_back(row);
      row.clear();
    }
  }
  if (!row.empty()) lines.push_back(row);
  lines.push_back("Help OK");
  ctl_.reply_multi(214, lines);
}

void Session::cmd_feat(const std::string&) {
  std::vector<std::string> l{"Features:"};
  if (env_.tls) {
    l.push_back(" AUTH TLS");
    l.push_back(" PBSZ");
    l.push_back(" PROT");
  }
  for (const char* f : {" EPRT", " EPSV", " MDTM", " MFMT"}) l.push_back(f);
  l.push_back(facts_.feat_line());
  for (const char* f : {" PASV", " REST STREAM", " SIZE", " TVFS", " UTF8"}) l.push_back(f);
  if (cfg_.adts_enable)
    l.push_back(AdtsChannel::verbs_available() ? " TPRT TCP;PTCP;VERBS" : " TPRT TCP;PTCP");
  l.push_back("End");
  ctl_.reply_multi(211, l);
}

void Session::cmd_opts(const std::string& arg) {
  std::string a = upper(arg);
  if (a == "UTF8 ON" || a == "UTF-8 ON") {
    ctl_.reply(200, "UTF8 set to on");  // names are bytes; UTF-8 passes through unchanged
  } else if (a == "UTF8 OFF" || a == "UTF-8 OFF") {
    ctl_.reply(200, "UTF8 set to off");
  } else if (a.rfind("MLST", 0) == 0) {
    std::string spec = arg.size() > 5 ? arg.substr(5) : "";
    ctl_.reply(200, "MLST OPTS " + facts_.set(spec));
  } else {
    ctl_.reply(501, "OPTS: unknown option");
  }
}

void Session::cmd_stat(const std::string& arg) {
  if (arg.empty()) {
    std::vector<std::string> l{"FTP server status:",
                               " Connected to " + peer_.host(),
                               " Logged in as " + user_ + (writable_ ? "" : " (read-only)"),
                               std::string(" TYPE: ") + (ascii_ ? "ASCII" : "BINARY") +
                                   ", STRUcture: File, MODE: Stream",
                               std::string(" Control connection ") + (ctl_.tls() ? "TLS" : "plain") +
                                   ", data " + (prot_p_ ? "TLS" : "plain"),
                               std::string(" ADTS: ") + (adts_.configured() ? "on" : "off"),
                               " Session pid " + std::to_string(::getpid()),
                               "End of status"};
    ctl_.reply_multi(211, l);
    return;
  }
  std::string a = arg;
  while (a.size() >= 2 && a[0] == '-') {  // "-la" etc.
    size_t sp = a.find(' ');
    a = sp == std::string::npos ? "" : a.substr(sp + 1);
  }
  std::string v = vpath(a);
  struct stat st;
  int rc = root_->stat(v, &st);
  if (rc < 0) {
    ctl_.reply(550, errno_text(rc));
    return;
  }
  std::vector<std::string> l{"Status of " + v + ":"};
  std::time_t now = std::time(nullptr);
  if (S_ISDIR(st.st_mode)) {
    std::vector<ftp::Root::Entry> entries;
    rc = root_->list(v, &entries);
    if (rc < 0) {
      ctl_.reply(550, errno_text(rc));
      return;
    }
    for (auto& e : entries) l.push_back(" " + list_line(e.name, e.st, now));
  } else {
    l.push_back(" " + list_line(v.substr(v.rfind('/') + 1), st, now));
  }
  l.push_back("End of status");
  ctl_.reply_multi(213, l);
}

void Session::cmd_pwd(const std::string&) {
  ctl_.reply(257, quote_path(cwd_) + " is the current directory");
}

void Session::cmd_cwd(const std::string& arg) {
  std::string v = vpath(arg);
  struct stat st;
  int rc = root_->stat(v, &st);
  if (failed(rc, arg)) return;
  if (!S_ISDIR(st.st_mode)) {
    ctl_.reply(550, arg.substr(0, 256) + ": Not a directory");
    return;
  }
  cwd_ = v;
  ctl_.reply(250, "Directory changed to " + cwd_);
}

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
    port = adts_.listen(host, cfg_.pasv_min, cfg_.pasv_max, &err);
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

bool Session::data_policy_ok() {
  if (cfg_.tls_require && !prot_p_) {
    ctl_.reply(521, "Data connections must be encrypted: send PBSZ 0 and PROT P");
    return false;
  }
  return true;
}

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
    std::string err;
    if (!adts_.wait_session(&err)) {
      log(LogLevel::Warn, "FTPD0404 " + who() + ": ADTS data session not established: " + err);
      ctl_.reply(425, "Cannot open the ADTS data session: " + err);
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

std::unique_ptr<DataConn> Session::open_data(std::string* err) {
  auto conn = port_.open(peer_, std::chrono::seconds(cfg_.data_timeout_s), err,
                         [this](const std::string& m) { log(LogLevel::Warn, "FTPD0106 " + m); });
  if (!conn) return nullptr;
  if (prot_p_) {
    try {
      conn->start_tls(env_.tls, std::chrono::seconds(cfg_.data_timeout_s));
    } catch (const std::exception& e) {
      *err = std::string("TLS on the data connection failed: ") + e.what();
      return nullptr;
    }
    if (cfg_.tls_require_reuse && !conn->tls()->session_reused()) {
      // As vsftpd's require_ssl_reuse: the data connection must resume the TLS session of this
      // server's control connection, so a stranger who raced for the port (with a fresh
      // handshake) cannot take the data. curl, lftp and tierce-ftp resume.
      log(LogLevel::Warn, "FTPD0405 " + who() + ": data connection without TLS session reuse " +
                              "refused ([tls] require_reuse)");
      *err = "TLS session reuse required on the data connection";
      return nullptr;
    }
  }
  return conn;
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
      std::string err;
      if (!convert_file(fd, offset, tmp, 0, true, &converted, &err)) {
        ::close(tmp);
        r.status = TransferResult::Status::LocalError;
        r.error = "TYPE A conversion: " + err;
        return r;
      }
      r = adts_.send_file(tmp, 0, converted);
      ::close(tmp);
      return r;
    }
    return adts_.send_file(fd, offset, size > offset ? size - offset : 0);
  }
  std::string err;
  auto conn = open_data(&err);
  if (!conn) {
    TransferResult r;
    r.status = TransferResult::Status::PeerError;
    r.error = "cannot open the data connection: " + err;
    return r;
  }
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
      std::string err;
      if (!convert_file(tmp, 0, fd, offset, false, &written, &err)) {
        r.status = TransferResult::Status::LocalError;
        r.error = "TYPE A conversion: " + err;
      }
    }
    ::close(tmp);
    return r;
  }
  std::string err;
  auto conn = open_data(&err);
  if (!conn) {
    TransferResult r;
    r.status = TransferResult::Status::PeerError;
    r.error = "cannot open the data connection: " + err;
    return r;
  }
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

void Session::listing(const std::string& arg, ListKind kind) {
  if (!data_policy_ok()) return;
  std::string a = arg;
  if (kind != ListKind::Mlsd) {
    // "-a", "-l", "-la": ls flags clients send; tolerated and ignored.
    while (!a.empty() && a[0] == '-') {
      size_t sp = a.find(' ');
      a = sp == std::string::npos ? "" : a.substr(sp + 1);
    }
  }
  std::string v = vpath(a);
  struct stat st;
  int rc = root_->stat(v, &st);
  if (failed(rc, a, v)) return;
  std::string out;
  std::time_t now = std::time(nullptr);
  if (S_ISDIR(st.st_mode)) {
    std::vector<ftp::Root::Entry> entries;
    rc = root_->list(v, &entries);
    if (rc < 0) {
      ctl_.reply(550, errno_text(rc));
      return;
    }
    if (kind == ListKind::Mlsd) out += mlsx_line(".", st, facts_, writable_, "cdir") + "\r\n";
    for (auto& e : entries) {
      switch (kind) {
        case ListKind::List:
          out += list_line(e.name, e.st, now) + "\r\n";
          break;
        case ListKind::Nlst:
          out += e.name + "\r\n";
          break;
        case ListKind::Mlsd:
          out += mlsx_line(e.name, e.st, facts_, writable_) + "\r\n";
          break;
      }
    }
  } else {
    if (kind == ListKind::Mlsd) {
      ctl_.reply(501, a.substr(0, 256) + ": Not a directory (MLSD lists directories; use MLST)");
      return;
    }
    std::string name = kind == ListKind::Nlst ? a : v.substr(v.rfind('/') + 1);
    out += (kind == ListKind::List ? list_line(name, st, now) : name) + "\r\n";
  }
  if (!data_channel_ready()) return;
  ctl_.reply(150, "Here comes the directory listing");
  ctl_.flush();
  auto start = Clock::now();
  TransferResult r = send_plain_or_adts(-1, 0, out.size(), out, true);
  finish_transfer(r, v, 'o', start, false);
}

// ---- files ----

bool Session::failed(int rc, const std::string& arg, const std::string& if_empty) {
  if (rc >= 0) return false;
  ctl_.reply(550, (arg.empty() ? if_empty : arg.substr(0, 256)) + ": " + errno_text(rc));
  return true;
}

void Session::cmd_size(const std::string& arg) {
  struct stat st;
  int rc = root_->stat(vpath(arg), &st);
  if (failed(rc, arg)) return;
  if (!S_ISREG(st.st_mode)) {
    ctl_.reply(550, arg.substr(0, 256) + ": Not a plain file");
    return;
  }
  ctl_.reply(213, std::to_string(st.st_size));
}

void Session::cmd_mdtm(const std::string& arg) {
  struct stat st;
  int rc = root_->stat(vpath(arg), &st);
  if (failed(rc, arg)) return;
  ctl_.reply(213, ftp::format_time_val(st.st_mtime));
}

void Session::cmd_mfmt(const std::string& arg) {
  size_t sp = arg.find(' ');
  if (sp == std::string::npos || sp + 1 >= arg.size()) {
    ctl_.reply(501, "MFMT wants <YYYYMMDDHHMMSS> <path>");
    return;
  }
  auto t = ftp::parse_time_val(arg.substr(0, sp));
  if (!t) {
    ctl_.reply(501, "MFMT: bad time value (YYYYMMDDHHMMSS, UTC)");
    return;
  }
  std::string path = arg.substr(sp + 1);
  int rc = root_->utime(vpath(path), *t);
  if (failed(rc, path)) return;
  ctl_.reply(213, "Modify=" + ftp::format_time_val(*t) + "; " + path);
}

void Session::cmd_mlst(const std::string& arg) {
  std::string v = vpath(arg);
  struct stat st;
  int rc = root_->stat(v, &st);
  if (failed(rc, arg, v)) return;
  ctl_.reply_multi(250, {"Listing " + v, " " + mlsx_line(v, st, facts_, writable_), "End"});
}

void Session::cmd_dele(const std::string& arg) {
  std::string v = vpath(arg);
  int rc = root_->unlink(v);
  if (failed(rc, arg)) return;
  log(LogLevel::Info, "FTPD0303 " + who() + ": deleted " + v);
  ctl_.reply(250, "Deleted " + v);
}

void Session::cmd_mkd(const std::string& arg) {
  std::string v = vpath(arg);
  int rc = root_->mkdir(v);
  if (failed(rc, arg)) return;
  ctl_.reply(257, quote_path(v) + " created");
}

void Session::cmd_rmd(const std::string& arg) {
  std::string v = vpath(arg);
  if (v == "/") {
    ctl_.reply(550, "Cannot remove the root directory");
    return;
  }
  int rc = root_->rmdir(v);
  if (failed(rc, arg)) return;
  ctl_.reply(250, "Removed " + v);
}

void Session::cmd_rnfr(const std::string& arg) {
  std::string v = vpath(arg);
  struct stat st;
  int rc = root_->lstat(v, &st);
  if (failed(rc, arg)) return;
  if (v == "/") {
    ctl_.reply(550, "Cannot rename the root directory");
    return;
  }
  rnfr_ = v;
  rnfr_set_ = true;
  ctl_.reply(350, "Ready for RNTO");
}

void Session::cmd_rnto(const std::string& arg) {
  std::string v = vpath(arg);
  int rc = root_->rename(rnfr_, v);
  if (failed(rc, arg)) return;
  log(LogLevel::Info, "FTPD0304 " + who() + ": renamed " + rnfr_ + " to " + v);
  ctl_.reply(250, "Renamed to " + v);
}

void Session::cmd_site(const std::string& arg) {
  std::string a = arg;
  size_t sp = a.find(' ');
  std::string sub = upper(a.substr(0, sp));
  if (sub == "HELP") {
    ctl_.reply(214, "SITE CHMOD <octal mode> <path>");
    return;
  }
  if (sub != "CHMOD") {
    ctl_.reply(500, "SITE " + sub.substr(0, 16) + " not understood (SITE HELP)");
    return;
  }
  if (!writable_) {
    ctl_.reply(550, "Permission denied");
    return;
  }
  std::string rest = sp == std::string::npos ? "" : a.substr(sp + 1);
  size_t sp2 = rest.find(' ');
  std::string mode_s = rest.substr(0, sp2);
  if (sp2 == std::string::npos || mode_s.empty() || mode_s.size() > 4 ||
      !std::all_of(mode_s.begin(), mode_s.end(), [](char c) { return c >= '0' && c <= '7'; })) {
    ctl_.reply(501, "SITE CHMOD wants <octal mode> <path>");
    return;
  }
  unsigned mode = unsigned(std::stoul(mode_s, nullptr, 8)) & 0777;  // no setuid/setgid/sticky
  std::string path = rest.substr(sp2 + 1);
  int fd = root_->open(vpath(path), O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (failed(fd, path)) return;
  int rc = ::fchmod(fd, mode);
  int e = errno;
  ::close(fd);
  if (failed(rc != 0 ? -e : 0, path)) return;
  ctl_.reply(200, "SITE CHMOD command ok");
}

// ---- TLS ----

void Session::cmd_auth(const std::string& arg) {
  std::string a = upper(arg);
  if (!env_.tls) {
    ctl_.reply(504, "AUTH TLS is not configured on this server");
    return;
  }
  if (ctl_.tls()) {
    ctl_.reply(503, "Already using TLS");
    return;
  }
  if (a != "TLS" && a != "TLS-C" && a != "SSL") {
    ctl_.reply(504, "AUTH " + a.substr(0, 16) + " not supported; use AUTH TLS");
    return;
  }
  if (logged_in_ && env_.after_login) {
    // Privilege separation: this process already runs as the user's account and holds no user
    // table any more, so the reset RFC 4217 asks for (a new login inside TLS) cannot happen here.
    log(LogLevel::Info, "FTPD0207 " + peer_.host() + ": AUTH TLS after login refused: the session "
                        "already runs as " + user_ + "'s account (privilege separation)");
    ctl_.reply(503, "AUTH TLS must come before the login: reconnect and send AUTH TLS first");
    return;
  }
  ctl_.reply(234, "AUTH TLS ok, start the handshake");
  try {
    ctl_.start_tls(env_.tls, std::chrono::seconds(cfg_.login_timeout_s));
  } catch (const std::exception& e) {
    log(LogLevel::Warn, "FTPD0403 " + peer_.host() + ": TLS handshake failed: " + e.what());
    quit_ = true;
    return;
  }
  // RFC 4217 §4: AUTH resets the session; the login starts over inside TLS, also for a client
  // that was logged in over the plain connection.
  if (logged_in_)
    log(LogLevel::Info, "FTPD0206 " + peer_.host() + ": AUTH TLS after login: " + user_ +
                            " logged out, log in again");
  user_.clear();
  logged_in_ = anonymous_ = writable_ = false;
  max_upload_ = session_upload_ = 0;
  root_.reset();
  cwd_ = "/";
  rest_ = 0;
  rnfr_set_ = false;
  pbsz_ = prot_p_ = false;
  port_.reset();
  adts_.reset();
}

void Session::cmd_pbsz(const std::string&) {
  if (!ctl_.tls()) {
    ctl_.reply(503, "PBSZ needs AUTH TLS first");
    return;
  }
  pbsz_ = true;
  ctl_.reply(200, "PBSZ=0");
}

void Session::cmd_prot(const std::string& arg) {
  if (!ctl_.tls()) {
    ctl_.reply(503, "PROT needs AUTH TLS first");
    return;
  }
  if (!pbsz_) {
    ctl_.reply(503, "PROT needs PBSZ first");
    return;
  }
  std::string a = upper(arg);
  if (a == "P") {
    if (adts_.configured()) {
      ctl_.reply(536, "PROT P not available during an ADTS session; send TPRT STREAM first");
      return;
    }
    prot_p_ = true;
    ctl_.reply(200, "PROT now Private");
  } else if (a == "C") {
    prot_p_ = false;
    ctl_.reply(200, "PROT now Clear");
  } else {
    ctl_.reply(536, "PROT " + a.substr(0, 4) + " not supported (C or P)");
  }
}

}  // namespace

SessionStats serve_session(const SessionEnv& env, int fd) {
  std::unique_ptr<Session> s;
  try {
    s = std::make_unique<Session>(env, fd);
    s->run();
  } catch (const std::exception& e) {
    if (env.log) env.log(fabric::LogLevel::Error, std::string("FTPD0107 session failed: ") + e.what());
  }
  return s ? s->stats() : SessionStats{};
}

}  // namespace tierce::ftpd
