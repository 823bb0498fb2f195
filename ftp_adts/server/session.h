// ftp_adts/server/session.h — one FTP session, from the 220 banner to QUIT: login, the command
// table (one handler per verb, with its preconditions declared beside it), path confinement through
// ftp::Root, and the data transfers (plain in data.h, ADTS in adts_channel.h). A worker process
// runs one Session at a time; nothing here is shared between sessions.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "fabric/log.h"
#include "ftp_adts/ftp/tls.h"
#include "ftp_adts/server/config.h"
#include "ftp_adts/server/xferlog.h"

namespace tierce::ftpd {

struct SessionEnv {
  const Config* cfg = nullptr;
  fabric::LogSink log;
  Xferlog* xferlog = nullptr;
  std::shared_ptr<ftp::TlsContext> tls;  // nullptr: no [tls], AUTH TLS is refused
  // Called once the password is accepted and the user's root is open, before the 230 reply:
  // privilege separation (privsep.h) drops to the user's account there. A failure: the session
  // is ended with 421. Empty: nothing to do (not started as root).
  std::function<base::Status(const std::string& user, bool anonymous)> after_login;
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

}  // namespace tierce::ftpd
