// ftp_adts/server/session.h — one FTP session, from the 220 banner to QUIT: login, the command
// table (one handler per verb, with its preconditions declared beside it), path confinement through
// ftp::Root, and the data transfers (plain in data.h, ADTS in adts_channel.h). A worker process
// runs one Session at a time; nothing here is shared between sessions.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "fabric/log.h"
#include "ftp_adts/ftp/tls.h"
#include "ftp_adts/server/config.h"
#include "ftp_adts/server/data.h"
#include "ftp_adts/server/xferlog.h"

namespace tierce::ftpd {

// The longest user name or password a pre-login process hands to the monitor (monitor.h).
inline constexpr size_t kMaxLoginField = 1024;

// What a pre-login process hands over with a PASS under privilege separation (monitor.h): the
// credentials to check, and the state the session must start from.
struct LoginState {
  std::string user, password;
  bool tls = false;                 // the control connection is inside TLS (AUTH TLS done)
  bool pbsz = false, prot_p = false;
  ftp::SessionBinding binding{};    // the control connection's ticket mark (tls)
  unsigned facts = 0x1f;            // OPTS MLST selection (FactSelection::bits)
};

// The monitor's answer to a LoginState.
enum class AuthAnswer { Ok, Failed, TooMany };

// A login the password check accepted: who, where, with what rights. `user` points into the
// configuration's user table (nullptr for anonymous): the per-user limits.
struct LoginGrant {
  std::string name, root;
  bool anonymous = false, write = false;
  const UserConfig* user = nullptr;
};

// The password check: anonymous ("anonymous"/"ftp") when [anonymous] is on, else a user of the
// table with a matching hash. An unknown name costs the same time as a known one (a real entry's
// hash is checked and the result ignored): no user enumeration by timing. nullopt: refused.
std::optional<LoginGrant> check_login(const Config& cfg, const std::string& user,
                                      const std::string& password);

struct SessionEnv {
  const Config* cfg = nullptr;
  fabric::LogSink log;
  Xferlog* xferlog = nullptr;
  std::shared_ptr<ftp::TlsContext> tls;  // nullptr: no [tls], AUTH TLS is refused
  // Called once the password is accepted and the user's root is open, before the 230 reply:
  // privilege separation (privsep.h) drops to the user's account there. A failure: the session
  // is ended with 421. Empty: nothing to do (not started as root).
  std::function<base::Status(const std::string& user, bool anonymous)> after_login;
  // Privilege separation's pre-login process (monitor.h): PASS asks the monitor, which holds the
  // user table, instead of checking here; on Ok the session hands its control connection over
  // (serve_prelogin). Empty: the password is checked in this process (check_login).
  std::function<AuthAnswer(const LoginState&)> authenticate;
};

// What one session did, for the master's metrics (master.h; docs/ftp.md "Metrics").
struct SessionStats {
  uint64_t logins_ok = 0, logins_failed = 0;
  uint64_t files_out = 0, files_in = 0;  // transfers that completed (RETR; STOR/APPE/STOU)
  uint64_t transfers_failed = 0;         // either direction
  uint64_t bytes_out = 0, bytes_in = 0;  // data bytes moved, failed transfers included
};

// Serves the session on the accepted control socket `fd` (owned) until QUIT, a timeout or the
// client going away. Never throws; returns what the session did (zeros if it failed to start).
SessionStats serve_session(const SessionEnv& env, int fd);

// The control socket's options (no Nagle, inline urgent data, keepalive, a send timeout); the
// sessions set them, the monitor before a sandboxed pre-login process starts.
void prepare_control_socket(int fd, const Config& cfg);

// Privilege separation (monitor.h). The pre-login process: serves `fd` as serve_session does
// until env.authenticate accepts a login, then relays the control connection (its TLS included)
// to and from `relay_fd` (a stream socket to the session process) until either side ends.
void serve_prelogin(const SessionEnv& env, int fd, int relay_fd);
// The session process: starts logged in as `grant` (env.after_login drops to its account and the
// root is opened, then 230), from the pre-login `state`, on `fd` (the relayed control
// connection); `peer`/`local` are the client's control connection's addresses.
SessionStats serve_after_login(const SessionEnv& env, int fd, const LoginState& state,
                               const LoginGrant& grant, const SockAddr& peer,
                               const SockAddr& local);

}  // namespace tierce::ftpd
