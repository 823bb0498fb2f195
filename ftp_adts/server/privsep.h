// ftp_adts/server/privsep.h — privilege separation of tierce-ftpd (docs/ftp.md "Privilege
// separation"; the model is vsftpd's and OpenSSH's).
//
// Started as root, tierce-ftpd binds its port as root and serves each session in a worker that
// becomes the session's monitor (monitor.h): an unprivileged, sandboxed pre-login process reads
// the client until the monitor accepts a password, then a session process becomes the session's
// system account for good: setgroups + setresgid + setresuid (each checked; afterwards
// setuid(0)/setgid(0) must fail, else the session is ended), PR_SET_NO_NEW_PRIVS, and the user
// table (names, roots, password hashes) is overwritten in its memory. A worker exits after its
// session, so a worker never serves two users (the master forks a fresh one). Started as another
// user, nothing changes: the sessions run as that user (FTPD0020 says so).
//
// Accounts are resolved once at start (base::lookup_account: getpwnam_r/getgrouplist), so a missing account is a startup
// error, not a failed login, and the worker needs no NSS lookup after the drop.
//
// No chroot: ftp::Root already confines every access with openat2(RESOLVE_IN_ROOT) from a dirfd
// opened before the drop, so a chroot would add nothing to the confinement and would take away
// what the session needs (/etc/localtime for xferlog times, /dev/log for syslog).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "base/privileges.h"
#include "base/status.h"
#include "ftp_adts/server/config.h"

namespace tierce::ftpd {

// The account lookup and the drop itself are base/privileges.h's, shared with memd and lockd.
using base::Account;

struct PrivsepPlan {
  bool enabled = false;  // started as root
  Account unprivileged;  // users without run_as
  Account anonymous;     // anonymous sessions: [anonymous] run_as, else unprivileged_user
  std::map<std::string, Account> by_user;  // [[user]] name -> its account

  // The account a login becomes: anonymous's; the user's run_as, else `unprivileged`.
  const Account& account_for(const std::string& user, bool anonymous) const;
};

// Resolves unprivileged_user, [anonymous] run_as and every run_as. Problems are appended to
// *problems, one line each, naming the key: an account that does not exist or is root; and the
// ACCOUNT SEPARATION rules (issue 32 point 4), since the kernel, not this server's read-only flag,
// must keep sessions apart: no writable user runs as the anonymous account; no two writable users
// share unprivileged_user (an explicit run_as shared by several is the operator's choice); the
// anonymous root is not writable by the anonymous account. `enabled` is set by the caller.
PrivsepPlan resolve_accounts(const Config& cfg, std::vector<std::string>* problems);

// Becomes `a` for good (see above). A failure (Code::Internal: a step failed, or root could be
// regained) means the caller must end the session.
base::Status drop_privileges(const Account& a);

// Overwrites then frees the user table of this process's configuration (names, roots, password
// hashes): a session running as its user keeps no other user's data, nor its own hash.
void wipe_user_table(Config* cfg);

}  // namespace tierce::ftpd
