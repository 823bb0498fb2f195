// ftp_adts/server/privsep.cc — resolving the session accounts and dropping to them (privsep.h).
#include "ftp_adts/server/privsep.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/errors.h"

namespace tierce::ftpd {

namespace {

// base::lookup_account, then the policy of the sessions: never root.
base::Result<Account> lookup(const std::string& name) {
  base::Result<Account> a = base::lookup_account(name);
  if (!a.ok()) return a;
  if (a->uid == 0 || a->gid == 0)
    return base::Status(base::Code::PermissionDenied,
                        "it is root (uid or gid 0); sessions must not run as root");
  for (gid_t g : a->groups)
    if (g == 0)
      return base::Status(
          base::Code::PermissionDenied,
          "it is a member of group 0 (root); sessions must not run with group root");
  return a;
}

void wipe(std::string* s) {
  // explicit_bzero: not optimised away although the string is freed right after.
  if (!s->empty()) ::explicit_bzero(s->data(), s->size());
  s->clear();
  s->shrink_to_fit();
}

}  // namespace

const Account& PrivsepPlan::account_for(const std::string& user, bool anonymous) const {
  if (!anonymous) {
    auto it = by_user.find(user);
    if (it != by_user.end()) return it->second;
  }
  return unprivileged;
}

PrivsepPlan resolve_accounts(const Config& cfg, std::vector<std::string>* problems) {
  PrivsepPlan plan;
  if (base::Result<Account> a = lookup(cfg.unprivileged_user); a.ok())
    plan.unprivileged = *a;
  else
    problems->push_back(cfg.source + ": unprivileged_user: \"" + cfg.unprivileged_user +
                        "\": " + a.message() + "; create the account (useradd --system " +
                        cfg.unprivileged_user + ") or name another one");
  for (const UserConfig& u : cfg.users) {
    if (u.run_as.empty()) continue;
    base::Result<Account> a = lookup(u.run_as);
    if (!a.ok()) {
      problems->push_back(cfg.source + ": user.run_as: user \"" + u.name + "\": \"" + u.run_as +
                          "\": " + a.message() + "; create the account or name another one");
      continue;
    }
    plan.by_user[u.name] = *a;
  }
  return plan;
}

base::Status drop_privileges(const Account& a) {
  try {
    base::drop_to(a);  // setgroups, setresgid, setresuid, the no-way-back proof, NO_NEW_PRIVS
  } catch (const base::PrivilegeError& e) {
    return base::Status(base::Code::Internal, e.what());
  }
  // The credential change cleared the parent-death signal (prctl(2)): set it again so the session
  // still ends with the master. The process is no longer dumpable either (ptrace by another
  // session of the same account is refused): left so on purpose.
  if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0)
    return base::Status(base::Code::Internal, "PR_SET_PDEATHSIG: " + base::errno_text(errno));
  return {};
}

void wipe_user_table(Config* cfg) {
  for (UserConfig& u : cfg->users) {
    wipe(&u.name);
    wipe(&u.password_hash);
    wipe(&u.root);
    wipe(&u.run_as);
  }
  cfg->users.clear();
  cfg->users.shrink_to_fit();
}

}  // namespace tierce::ftpd
