// ftp_adts/server/master.h — the pre-forking master of tierce-ftpd (seed 000 §9.3 "Parallel
// Prefork Server"). The master binds the control socket and keeps `workers` idle worker processes
// blocked on it; a worker that accepts a connection serves that one session and goes back to
// accepting (or exits after worker_sessions sessions). The master never serves FTP itself, except
// to turn a connection away with "421 Too many sessions" when max_sessions workers are busy.
//
// Worker -> master, one message on a SOCK_SEQPACKET pair per worker:
//   'B' HOST  accepted a connection from HOST (busy); the worker waits for the answer
//   'I'       session over, accepting again (idle)
// Master -> worker:
//   'A' / 'R' the answer to 'B': serve it, or refuse it (max_sessions_per_ip sessions from HOST
//             are being served already: the worker replies 421 and closes)
//   'Q'       quit when idle (more idle workers than `workers` after a burst); EOF = the master died.
// The master is one thread reading these messages in order, so counting the sessions of HOST when
// the 'B' arrives, this one included, is exact: two workers accepting from the same host at once
// are answered one after the other.
// Invariant: live workers <= max_sessions, so busy workers never exceed it; when every live worker
// is busy the master polls the listening socket and answers the overflow with 421.
//
// Privilege separation (privsep.h, when started as root): a worker runs as root until a login,
// then as the user's account; it exits after its session (it never serves a second one), and the
// master forks a fresh worker as for any worker that exits. A worker's messages are untrusted
// after the drop: the master only parses them (bounded), and a lying worker can only miscount
// its own session.
#pragma once

#include <functional>
#include <memory>

#include "fabric/log.h"
#include "ftp_adts/ftp/tls.h"
#include "ftp_adts/server/config.h"
#include "ftp_adts/server/privsep.h"
#include "ftp_adts/server/xferlog.h"

namespace tierce::ftpd {

struct MasterEnv {
  const Config* cfg = nullptr;
  fabric::LogSink log;
  std::shared_ptr<ftp::TlsContext> tls;
  Xferlog* xferlog = nullptr;
  // Privilege separation: nullptr or !enabled = off (not started as root). The worker's copy is
  // cleared after a login, as its copy of *cfg's user table.
  PrivsepPlan* privsep = nullptr;
  // SIGHUP (docs/ftp.md "Reload"): reads and checks the configuration file again and, when it
  // passed, updates *cfg, tls and *privsep in place (main.cc); true when it did. The master then
  // retires every worker (idle ones at once, busy ones after their session), so sessions accepted
  // afterwards are served by workers forked with the new configuration. Unset: SIGHUP is ignored.
  std::function<bool()> reload;
};

// Serves on `listen_fd` (non-blocking, listening) until SIGTERM/SIGINT arrives on `sigfd` (a
// signalfd for TERM, INT, HUP and CHLD, those signals blocked). Returns the exit code (0).
int run_master(const MasterEnv& env, int listen_fd, int sigfd);

}  // namespace tierce::ftpd
