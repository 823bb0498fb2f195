// ftp_adts/server/sandbox.h — the seccomp filter of tierce-ftpd's pre-login process (privsep.h,
// monitor.h; docs/ftp.md "Privilege separation").
//
// The pre-login process parses everything a client sends before a login (USER, PASS, FEAT, OPTS,
// the TLS handshake), and after the login relays the control connection. It needs only what it
// already holds: read and write on its descriptors, poll, time, memory, random bytes. The filter
// allows exactly that (libseccomp); every other system call fails with EPERM — no open, no
// socket, connect, bind or accept, no execve, no fork or clone, no ptrace, no kill of another
// process, no mapping of executable memory. A memory bug in the pre-login code then gives an
// attacker an unprivileged process (the dropped account, no capability, NO_NEW_PRIVS) that can
// talk only to its client, its relay partner and the monitor.
//
// EPERM rather than killing the process: the security is the same (the call does not happen),
// and a library path that probes a call (glibc, OpenSSL) gets an error it handles instead of a
// dead session.
#pragma once

#include "base/status.h"

namespace tierce::ftpd {

// Loads the filter into the calling process (for good; inherited by its children, which it
// cannot create anyway). Needs PR_SET_NO_NEW_PRIVS set (base::drop_to sets it) or CAP_SYS_ADMIN.
// Call it after everything the process opens is open. Code::Internal when the kernel refused it.
base::Status enter_prelogin_sandbox();

}  // namespace tierce::ftpd
