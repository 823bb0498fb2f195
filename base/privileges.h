// base/privileges.h — becoming an unprivileged account for good: the one implementation of the
// privilege drop shared by tierce-ftpd (each session becomes its user), tierce-memd ([memd] user)
// and tierce-lockd (--user).
//
// lookup_account() resolves a name once (getpwnam_r + getgrouplist), so nothing needs NSS after the
// drop. drop_to() then changes, each call checked: setgroups (supplementary groups first: once the
// uid is not 0 they can no longer be changed), setresgid, setresuid; verifies with
// getresuid/getresgid that all three ids are the account's; proves there is no way back
// (setuid(0), seteuid(0), setgid(0) and setegid(0) must all fail); and sets PR_SET_NO_NEW_PRIVS
// (no setuid binary or file capability can give privileges back to this process or its children).
// A failure throws PrivilegeError naming the call and the errno text; the caller must then not go
// on serving (the process may be half-dropped).
//
// Side effects of the drop the callers must know about (credentials(7), prctl(2)): the
// parent-death signal is cleared and the process is no longer dumpable (no core files, no ptrace
// by the same account, /proc/PID entries owned by root).
#pragma once

#include <sys/types.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "base/status.h"

namespace tierce::base {

struct Account {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups (getgrouplist), the primary one included
};

class PrivilegeError : public std::runtime_error {
 public:
  // `error` is the errno of the failed call, 0 when the failure is not one call's (e.g. the ids
  // did not change as asked).
  PrivilegeError(const std::string& what, int error) : std::runtime_error(what), error_(error) {}
  int error() const { return error_; }

 private:
  int error_;
};

// The account `name` (uid, primary gid, supplementary groups), or why not: NotFound ("no such
// account"), Internal (the lookup's errno text), ResourceExhausted ("too many supplementary
// groups").
Result<Account> lookup_account(const std::string& name);

// Becomes `a` for good (see above). Throws PrivilegeError. Prereq: running as root (or with
// CAP_SETUID + CAP_SETGID); as anyone else setgroups fails with EPERM.
void drop_to(const Account& a);

// PR_SET_NO_NEW_PRIVS for this thread and the threads and children it creates from now on (a
// per-thread attribute: a daemon that drops after starting its threads calls this before creating
// them, so they all carry it). Throws PrivilegeError.
void set_no_new_privs();

// Whether real, effective and saved uid and gid are all already those of `a`.
bool running_as(const Account& a);

// chown(2) of `path` to a's uid, and to a's gid unless keep_group (e.g. a socket whose group says
// who may connect). Throws std::system_error naming the path.
void give_to(const std::string& path, const Account& a, bool keep_group = false);

}  // namespace tierce::base
