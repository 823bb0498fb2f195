// ftp_adts/server/privsep.cc — resolving the session accounts and dropping to them (privsep.h).
#include "ftp_adts/server/privsep.h"

#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tierce::ftpd {

namespace {

// getpwnam + getgrouplist; false with *why when the account cannot be used.
bool lookup(const std::string& name, Account* out, std::string* why) {
  errno = 0;
  passwd* pw = ::getpwnam(name.c_str());
  if (!pw) {
    *why = errno ? std::string(std::strerror(errno)) : std::string("no such account");
    return false;
  }
  if (pw->pw_uid == 0 || pw->pw_gid == 0) {
    *why = "it is root (uid or gid 0); sessions must not run as root";
    return false;
  }
  out->name = name;
  out->uid = pw->pw_uid;
  out->gid = pw->pw_gid;
  int n = 32;
  for (;;) {
    out->groups.assign(size_t(n), 0);
    int want = n;
    if (::getgrouplist(name.c_str(), pw->pw_gid, out->groups.data(), &want) >= 0) {
      out->groups.resize(size_t(want));
      break;
    }
    if (want <= n) want = n * 2;  // some NSS modules do not report the size needed
    if (want > 65536) {
      *why = "too many supplementary groups";
      return false;
    }
    n = want;
  }
  for (gid_t g : out->groups)
    if (g == 0) {
      *why = "it is a member of group 0 (root); sessions must not run with group root";
      return false;
    }
  return true;
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
  std::string why;
  if (!lookup(cfg.unprivileged_user, &plan.unprivileged, &why))
    problems->push_back(cfg.source + ": unprivileged_user: \"" + cfg.unprivileged_user +
                        "\": " + why + "; create the account (useradd --system " +
                        cfg.unprivileged_user + ") or name another one");
  for (const UserConfig& u : cfg.users) {
    if (u.run_as.empty()) continue;
    Account a;
    if (!lookup(u.run_as, &a, &why)) {
      problems->push_back(cfg.source + ": user.run_as: user \"" + u.name + "\": \"" + u.run_as +
                          "\": " + why + "; create the account or name another one");
      continue;
    }
    plan.by_user[u.name] = a;
  }
  return plan;
}

bool drop_privileges(const Account& a, std::string* err) {
  auto fail = [&](const char* step) {
    *err = std::string(step) + ": " + std::strerror(errno);
    return false;
  };
  // Groups first: once the uid is not 0 they can no longer be changed.
  if (::setgroups(a.groups.size(), a.groups.data()) != 0) return fail("setgroups");
  if (::setresgid(a.gid, a.gid, a.gid) != 0) return fail("setresgid");
  if (::setresuid(a.uid, a.uid, a.uid) != 0) return fail("setresuid");
  uid_t ru, eu, su;
  gid_t rg, eg, sg;
  if (::getresuid(&ru, &eu, &su) != 0 || ::getresgid(&rg, &eg, &sg) != 0)
    return fail("getresuid");
  if (ru != a.uid || eu != a.uid || su != a.uid || rg != a.gid || eg != a.gid || sg != a.gid) {
    *err = "the ids did not change as asked (uid " + std::to_string(eu) + ", gid " +
           std::to_string(eg) + ")";
    return false;
  }
  // The proof: root must be out of reach now.
  if (::setuid(0) == 0 || ::seteuid(0) == 0 || ::setgid(0) == 0 || ::setegid(0) == 0) {
    *err = "root could be regained after the drop";
    return false;
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("PR_SET_NO_NEW_PRIVS");
  // The credential change cleared the parent-death signal (prctl(2)): set it again so the session
  // still ends with the master. The process is no longer dumpable either (ptrace by another
  // session of the same account is refused): left so on purpose.
  if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) return fail("PR_SET_PDEATHSIG");
  return true;
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
