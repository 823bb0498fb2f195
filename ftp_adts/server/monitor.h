// ftp_adts/server/monitor.h — one session under privilege separation, as vsftpd and OpenSSH do
// it (docs/ftp.md "Privilege separation"; issue 32 point 4).
//
// The worker that accepted the connection becomes the session's MONITOR (root, small: it never
// parses a client byte) and forks two processes in turn:
//
//   monitor (root)  ── SOCK_SEQPACKET ──  pre-login process (unprivileged_user, seccomp)
//        │                                  │ the client's connection: banner, USER, PASS, FEAT,
//        │                                  │ OPTS, AUTH TLS and the handshake, PBSZ, PROT
//        │ fork after an accepted PASS      │ after the login: relays the control connection
//        ▼                                  │ (and its TLS) to the session process
//   session process (the user's account) ───┘ SOCK_STREAM: the control connection, plain
//
// The pre-login process holds no user table and runs as unprivileged_user with no capability,
// NO_NEW_PRIVS and the seccomp filter of sandbox.h; it sends each PASS to the monitor as a
// LoginState (below). The monitor checks the password (check_login), counts failures, makes the
// pause after one, logs them, and answers Ok, Failed or TooMany. On Ok it forks the session
// process, which drops to the user's account (privsep.h), opens the user's root as that account
// and sends the 230 through the relay; the monitor then wipes its own user table and waits.
// The session process reports what it did (SessionStats) to the monitor on a pipe; the monitor
// adds the failed logins and reports to the master (master.h 'S'). Only the monitor talks to the
// master.
//
// What each process holds: the monitor, the user table and root (until the login); the pre-login
// process, the client's connection, the TLS key until the login (dropped when it starts
// relaying), its ends of the two pairs; the session process, its end of the relay, its root,
// its data connections, the xferlog, the stats pipe — no listener, no client socket of anyone.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "ftp_adts/server/config.h"
#include "ftp_adts/server/privsep.h"
#include "ftp_adts/server/session.h"

namespace tierce::ftpd {

// A PASS from the pre-login process: 'L', u8 flags (1 tls, 2 pbsz, 4 prot_p), u8 facts bits,
// 16 bytes of binding, u16 user length, user, u16 password length, password (little-endian).
// The decoder takes exactly one whole message, fields of at most kMaxLoginField bytes, and no
// unknown flag bit; anything else is nullopt (the monitor then ends the session: its pre-login
// process is not speaking the protocol).
std::string encode_login_state(const LoginState& s);
std::optional<LoginState> decode_login_state(std::string_view m);

struct MonitorEnv {
  SessionEnv session;        // cfg, log, xferlog, tls (authenticate/after_login are set here)
  Config* cfg = nullptr;     // this worker's copy: the children and the monitor wipe its users
  PrivsepPlan* plan = nullptr;
  int master_ctl = -1;       // the worker's pipe to the master: closed in both children
};

// Serves the accepted control connection `fd` (owned) as above; returns the session's numbers
// for the master. The calling process (the worker) is the monitor.
SessionStats serve_separated(const MonitorEnv& env, int fd);

}  // namespace tierce::ftpd
