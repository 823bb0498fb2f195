// ftp_adts/server/privsep.cc — resolving the session accounts and dropping to them (privsep.h).
#include "ftp_adts/server/privsep.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
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

// Whether `a` may write the directory `st` describes (owner, group or other write bit).
bool may_write(const Account& a, const struct stat& st) {
  if (st.st_uid == a.uid) return st.st_mode & S_IWUSR;
  bool in_group = st.st_gid == a.gid;
  for (gid_t g : a.groups) in_group = in_group || g == st.st_gid;
  if (in_group) return st.st_mode & S_IWGRP;
  return st.st_mode & S_IWOTH;
}

// The account separation rules (privsep.h): the kernel keeps what the server's flags promise.
void check_separation(const Config& cfg, const PrivsepPlan& plan, std::vector<std::string>* problems) {
  const std::string& anon = cfg.anonymous_run_as.empty() ? cfg.unprivileged_user : cfg.anonymous_run_as;
  std::vector<std::string> shared_writers;  // writable users without run_as
  for (const UserConfig& u : cfg.users) {
    if (!u.write) continue;
    auto it = plan.by_user.find(u.name);
    const Account& acc = it != plan.by_user.end() ? it->second : plan.unprivileged;
    if (u.run_as.empty()) shared_writers.push_back(u.name);
    if (cfg.anonymous && acc.uid == plan.anonymous.uid)
      problems->push_back(
          cfg.source + ": user \"" + u.name + "\" may write, and its sessions would run as \"" +
          (u.run_as.empty() ? cfg.unprivileged_user : u.run_as) + "\", the account of anonymous "
          "sessions (\"" + anon + "\"): anonymous could then write its files through the kernel "
          "(read-only is only this server's flag). Give the user run_as = its own account, or "
          "[anonymous] run_as another one (docs/ftp.md \"Accounts\")");
  }
  if (shared_writers.size() > 1) {
    std::string names;
    for (const auto& n : shared_writers) names += (names.empty() ? "\"" : ", \"") + n + "\"";
    problems->push_back(cfg.source + ": users " + names + " may write and all run as \"" +
                        cfg.unprivileged_user + "\" (no run_as): each could write the others' "
                        "files through the kernel. Give each its own run_as (or, if they are to "
                        "share, the same run_as explicitly; docs/ftp.md \"Accounts\")");
  }
  struct stat st {};
  if (cfg.anonymous && plan.anonymous.uid != 0 && ::stat(cfg.anonymous_root.c_str(), &st) == 0 &&
      may_write(plan.anonymous, st))
    problems->push_back(cfg.source + ": anonymous.root " + cfg.anonymous_root +
                        " is writable by \"" + anon + "\", the account anonymous sessions run "
                        "as: anonymous would be read-only only by this server's flag. Make it "
                        "root's (or another account's) and not writable by that one (chmod o-w)");
}

void wipe(std::string* s) {
  // explicit_bzero: not optimised away although the string is freed right after.
  if (!s->empty()) ::explicit_bzero(s->data(), s->size());
  s->clear();
  s->shrink_to_fit();
}

}  // namespace

const Account& PrivsepPlan::account_for(const std::string& user, bool anonymous) const {
  if (anonymous) return this->anonymous;
  {
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
  plan.anonymous = plan.unprivileged;
  if (!cfg.anonymous_run_as.empty()) {
    if (base::Result<Account> a = lookup(cfg.anonymous_run_as); a.ok())
      plan.anonymous = *a;
    else
      problems->push_back(cfg.source + ": anonymous.run_as: \"" + cfg.anonymous_run_as + "\": " +
                          a.message() + "; create the account or name another one");
  }
  check_separation(cfg, plan, problems);
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
