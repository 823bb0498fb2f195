// ftp_adts/server/master.h — the pre-forking master of tierce-ftpd (seed 000 §9.3 "Parallel
// Prefork Server"). The master binds the control socket and keeps `workers` idle worker processes
// blocked on it; a worker that accepts a connection serves that one session and goes back to
// accepting (or exits after worker_sessions sessions). The master never serves FTP itself, except
// to turn a connection away with "421 Too many sessions" when max_sessions workers are busy.
//
// Worker -> master, one message on a SOCK_SEQPACKET pair per worker:
//   'B' HOST  accepted a connection from HOST (busy); the worker waits for the answer
//   'S' STATS what the session just served did (SessionStats: 7 u64 little-endian, logins_ok,
//             logins_failed, files_out, files_in, transfers_failed, bytes_out, bytes_in = 57
//             bytes), sent once per session before its 'I' (or its exit, privilege separation);
//             added to the master's totals for the metrics
//   'I'       session over, accepting again (idle)
// Master -> worker:
//   'A' / 'R' the answer to 'B': serve it, or refuse it (max_sessions_per_ip sessions from HOST
//             are being served already: the worker replies 421 and closes)
//   'O'       the answer to a 'B' of a worker retired by a reload (forked with the old
//             configuration): it replies 421 and quits, so that no connection the master hears
//             of after the reload is served with the old configuration (the client reconnects
//             and gets a fresh worker)
//   'Q'       quit when idle (more idle workers than `workers` after a burst, or a reload);
//             EOF = the master died.
// The master is one thread reading these messages in order, so counting the sessions of HOST when
// the 'B' arrives, this one included, is exact: two workers accepting from the same host at once
// are answered one after the other.
// Invariant: live workers <= max_sessions, so busy workers never exceed it; when every live worker
// is busy the master polls the listening socket and answers the overflow with 421.
//
// Privilege separation (privsep.h, when started as root): a worker that takes a connection becomes
// its session's monitor (monitor.h: root, it reads no client byte; an unprivileged pre-login
// process and then a session process as the user's account serve the client); it exits after the
// session (it never serves a second one), and the master forks a fresh worker as for any worker
// that exits. Only the monitor writes to the master; the session process's counters reach it
// through the monitor and are untrusted: the master only parses them (bounded), and a lying
// session can only miscount itself (its 'S' is taken once, after its 'B': a session's account
// that could run code in its session process could misreport that session's logins, transfers
// and bytes — no more).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/config.h"

#include "fabric/log.h"
#include "ftp_adts/ftp/tls.h"
#include "ftp_adts/server/config.h"
#include "ftp_adts/server/privsep.h"
#include "ftp_adts/server/session.h"
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
  // For the metrics (docs/ftp.md "Metrics"): the reloads applied and refused so far, the version
  // and the control socket's address ("127.0.0.1:2121") for tierce_ftpd_info.
  std::function<base::ReloadCounters()> reload_counters;
  std::string version, listen;
};

// What the master counts (it alone: sessions are served by workers, see docs/ftp.md "Metrics").
struct MasterCounters {
  uint64_t sessions = 0;              // connections a worker was told to serve ('A')
  uint64_t refused_max_sessions = 0;  // turned away by the master: every worker busy
  uint64_t refused_per_ip = 0;        // refused by max_sessions_per_ip ('R')
  uint64_t refused_reload = 0;        // reached a worker of the old configuration ('O')
  uint64_t workers_started = 0;
  uint64_t workers_died = 0;          // exited uncleanly (signal, non-zero status)
  uint64_t fork_failures = 0;
  // The sessions' own numbers, summed from the workers' 'S' messages at the end of each session.
  uint64_t logins_ok = 0, logins_failed = 0, files_out = 0, files_in = 0, transfers_failed = 0,
           bytes_out = 0, bytes_in = 0;
};

// The 'S' message (above) and its reading: false unless `m` is exactly one.
std::string encode_session_stats(const SessionStats& s);
bool decode_session_stats(std::string_view m, SessionStats* out);
struct MasterGauges {
  size_t sessions = 0;  // workers serving a client now
  size_t idle = 0, busy = 0, retiring = 0;
};
// The master's metrics in Prometheus text format (base::Metrics): tierce_ftpd_*.
std::string master_metrics_text(const MasterEnv& env, const MasterCounters& c,
                                const MasterGauges& g, double uptime_s);

// Serves on `listen_fd` (non-blocking, listening) until SIGTERM/SIGINT arrives on `sigfd` (a
// signalfd for TERM, INT, HUP and CHLD, those signals blocked). Returns the exit code (0).
int run_master(const MasterEnv& env, int listen_fd, int sigfd);

}  // namespace tierce::ftpd
