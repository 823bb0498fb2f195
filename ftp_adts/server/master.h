// ftp_adts/server/master.h — the pre-forking master of tierce-ftpd (seed 000 §9.3 "Parallel
// Prefork Server"). The master binds the control socket and keeps `workers` idle worker processes
// blocked on it; a worker that accepts a connection serves that one session and goes back to
// accepting (or exits after worker_sessions sessions). The master never serves FTP itself, except
// to turn a connection away with "421 Too many sessions" when max_sessions workers are busy.
//
// Worker -> master, one byte on a SOCK_SEQPACKET pair per worker:
//   'B'  accepted a session (busy)       'I'  session over, accepting again (idle)
// Master -> worker:
//   'Q'  quit when idle (more idle workers than `workers` after a burst); EOF = the master died.
// Invariant: live workers <= max_sessions, so busy workers never exceed it; when every live worker
// is busy the master polls the listening socket and answers the overflow with 421.
#pragma once

#include <memory>

#include "fabric/log.h"
#include "ftp_adts/ftp/tls.h"
#include "ftp_adts/server/config.h"
#include "ftp_adts/server/xferlog.h"

namespace tierce::ftpd {

struct MasterEnv {
  const Config* cfg = nullptr;
  fabric::LogSink log;
  std::shared_ptr<ftp::TlsContext> tls;
  Xferlog* xferlog = nullptr;
};

// Serves on `listen_fd` (non-blocking, listening) until SIGTERM/SIGINT arrives on `sigfd` (a
// signalfd for TERM, INT, HUP and CHLD, those signals blocked). Returns the exit code (0).
int run_master(const MasterEnv& env, int listen_fd, int sigfd);

}  // namespace tierce::ftpd
