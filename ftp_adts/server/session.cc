// ftp_adts/server/session.cc — the core of one FTP session: the command table (each verb, its
// handler and its preconditions), the control loop and dispatch, HELP/FEAT/OPTS, and
// serve_session. The handlers live in session_*.cc by concern (session_internal.h).
#include "ftp_adts/server/session_internal.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <vector>

namespace tierce::ftpd {

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

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
    {"RNTO", &Session::cmd_rnto, kLogin | kArg | kWrite | kAfterRnfr, "RNTO <to>"},
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

void prepare_control_socket(int fd, const Config& cfg) {
  int one = 1;
  // Replies must leave at once (no Nagle wait behind a previous small segment): a client that
  // pipelines hundreds of RETRs would otherwise stall on delayed ACKs.
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // Telnet "urgent" bytes of an ABOR (IAC IP IAC DM) arrive inline; the parser strips them.
  ::setsockopt(fd, SOL_SOCKET, SO_OOBINLINE, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  timeval tv{std::max<long>(30, long(cfg.data_timeout_s)), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void Session::run() {
  // A pre-login process cannot set socket options (its sandbox): the monitor did, before it.
  if (!env_.authenticate) prepare_control_socket(ctl_.fd(), cfg_);
  if (!greeted_) {
    log(LogLevel::Info,
        "FTPD0101 session from " + peer_.host() + ":" + std::to_string(peer_.port()));
    ctl_.reply(220, cfg_.banner);
    greeted_ = true;
  }
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
  if (handed_over_) return;  // the session process goes on with it (serve_prelogin)
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
  if ((spec->flags & kAfterRnfr) && !was_rnfr) {
    ctl_.reply(503, "RNFR first");
    return;
  }
  (this->*spec->handler)(cmd.arg);
}

// ---- state: what the server offers ----

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

void Session::resume(const LoginState& st, const LoginGrant& g) {
  greeted_ = true;
  user_ = st.user;
  pbsz_ = st.pbsz;
  prot_p_ = st.prot_p;
  facts_ = FactSelection::from_bits(st.facts);
  if (st.tls) ctl_.set_relayed_tls(st.binding);
  login_ok(g.name, g.root, g.anonymous, g.write, g.user);
}

void serve_prelogin(const SessionEnv& env, int fd, int relay_fd) {
  try {
    Session s(env, fd);
    s.run();
    if (!s.handed_over()) return;
    // No handshake happens in this process any more: the key leaves it (the connection's own
    // reference goes in relay()).
    if (env.tls) env.tls->forget_private_key();
    s.control().relay(relay_fd, std::chrono::seconds(std::max(30u, env.cfg->data_timeout_s)));
  } catch (const std::exception& e) {
    if (env.log) env.log(fabric::LogLevel::Error, std::string("FTPD0107 session failed: ") + e.what());
  }
}

SessionStats serve_after_login(const SessionEnv& env, int fd, const LoginState& state,
                               const LoginGrant& grant, const SockAddr& peer,
                               const SockAddr& local) {
  std::unique_ptr<Session> s;
  try {
    s = std::make_unique<Session>(env, fd, peer, local);
    s->resume(state, grant);
    s->run();
  } catch (const std::exception& e) {
    if (env.log) env.log(fabric::LogLevel::Error, std::string("FTPD0107 session failed: ") + e.what());
  }
  return s ? s->stats() : SessionStats{};
}

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
