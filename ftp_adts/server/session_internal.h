// ftp_adts/server/session_internal.h — the Session class behind serve_session (session.h), shared
// by the files that implement it; private to ftp_adts/server/session*.cc:
//   session.cc           the command table, the control loop and dispatch, HELP/FEAT/OPTS
//   session_login.cc     USER, PASS, QUIT and the login itself (privilege separation's hook)
//   session_files.cc     paths and the tree: CWD/PWD, STAT, listings, SIZE/MDTM/MFMT/MLST, DELE,
//                        MKD/RMD, RNFR/RNTO, SITE
//   session_transfer.cc  TYPE/MODE/STRU/REST, the data port (PORT/EPRT/PASV/EPSV), TPRT (ADTS),
//                        RETR/STOR/APPE/STOU and the transfer plumbing
//   session_security.cc  AUTH TLS, PBSZ, PROT, CCC and the data protection policy
//
// Log ids: FTPD01xx session, FTPD02xx login, FTPD03xx transfers, FTPD04xx TLS/ADTS.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "fabric/log.h"
#include "ftp_adts/ftp/protocol.h"
#include "ftp_adts/ftp/root.h"
#include "ftp_adts/server/adts_channel.h"
#include "ftp_adts/server/control.h"
#include "ftp_adts/server/data.h"
#include "ftp_adts/server/listing.h"
#include "ftp_adts/server/session.h"

namespace tierce::ftpd {

using Clock = std::chrono::steady_clock;
using fabric::LogLevel;

// ASCII upper case of a verb or keyword argument (session.cc).
std::string upper(std::string s);

class Session {
 public:
  Session(const SessionEnv& env, int fd)
      : Session(env, fd, SockAddr::peer_of(fd), SockAddr::local_of(fd)) {}
  // `peer`/`local`: the client's control connection's addresses (fd may be a relay to it).
  Session(const SessionEnv& env, int fd, const SockAddr& peer, const SockAddr& local)
      : env_(env), cfg_(*env.cfg), ctl_(fd, env.cfg->max_command_line,
                                        env.cfg->control_buffer_bytes),
        peer_(peer),
        local_(local) {
    // Called from the thread that accepts the ADTS streams too: only the (thread-safe) sink.
    adts_.set_log([sink = env_.log](const std::string& m) {
      if (sink) sink(LogLevel::Warn, "FTPD0402 ADTS: " + m);
    });
  }
  void run();
  // Privilege separation's session process (serve_after_login): takes over the pre-login state,
  // then logs in as `g` (drop, root, 230). run() afterwards skips the banner.
  void resume(const LoginState& st, const LoginGrant& g);
  // The pre-login process: whether the monitor accepted a login (run() returned for the relay).
  bool handed_over() const { return handed_over_; }
  Control& control() { return ctl_; }

 private:
  // ---- the command table (session.cc) ----
  // dispatch() checks the flags in this order, before the handler runs; what depends on more
  // than the verb (USER under [tls] require, PBSZ/PROT before AUTH) stays in the handler.
  enum Flags : unsigned {
    kNone = 0,
    kLogin = 1,      // needs a logged-in user (530 otherwise)
    kArg = 2,        // needs an argument (501 otherwise)
    kWrite = 4,      // needs write permission (550 otherwise)
    kAfterRnfr = 8,  // must come right after RNFR (503 otherwise)
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

  // access (session_login.cc)
  void cmd_user(const std::string&);
  void cmd_pass(const std::string&);
  void ask_monitor(const std::string& password);  // cmd_pass under privilege separation
  void cmd_acct(const std::string&) { ctl_.reply(202, "ACCT not needed"); }
  void cmd_quit(const std::string&);
  void cmd_rein(const std::string&) { ctl_.reply(502, "REIN not implemented"); }
  // state (session.cc; STAT, PWD, CWD, CDUP: session_files.cc; TYPE to REST: session_transfer.cc)
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
  // data port (session_transfer.cc)
  void cmd_port(const std::string&);
  void cmd_eprt(const std::string&);
  void cmd_pasv(const std::string&);
  void cmd_epsv(const std::string&);
  void cmd_tprt(const std::string&);
  // transfers (session_transfer.cc; LIST, NLST, MLSD in session_files.cc)
  void cmd_retr(const std::string&);
  void cmd_stor(const std::string& a) { store(a, StoreKind::Stor); }
  void cmd_appe(const std::string& a) { store(a, StoreKind::Appe); }
  void cmd_stou(const std::string& a) { store(a, StoreKind::Stou); }
  void cmd_list(const std::string& a) { listing(a, ListKind::List); }
  void cmd_nlst(const std::string& a) { listing(a, ListKind::Nlst); }
  void cmd_mlsd(const std::string& a) { listing(a, ListKind::Mlsd); }
  void cmd_abor(const std::string&) { ctl_.reply(225, "No transfer to abort"); }
  // files (session_files.cc)
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
  // TLS (session_security.cc)
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
  base::Result<std::unique_ptr<DataConn>> open_data();
  TransferOptions transfer_options(bool ascii);
  // By value: after_login may wipe the user table these come from (and `u` with it: its limits
  // are read before).
  void forget_tls_key();  // after the privilege drop (session_login.cc)
  void login_ok(std::string name, std::string root, bool anonymous, bool write,
                const UserConfig* u = nullptr);

  const SessionEnv& env_;
  const Config& cfg_;
  Control ctl_;
  SockAddr peer_, local_;

  std::string user_;  // from USER (logged in or pending)
  bool logged_in_ = false;
  bool tls_key_dropped_ = false;  // forget_tls_key: only resumptions of the control session work
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
  bool greeted_ = false;      // the 220 was sent (by this process or the pre-login one)
  bool handed_over_ = false;  // ask_monitor: the login is the session process's now
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


}  // namespace tierce::ftpd
