// base/privileges.cc — account lookup and the privilege drop (privileges.h).
#include "base/privileges.h"

#include <grp.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "base/errors.h"

namespace tierce::base {

Result<Account> lookup_account(const std::string& name) {
  long hint = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size_t(hint > 0 ? hint : 4096));
  passwd pw{};
  passwd* found = nullptr;
  for (;;) {
    int e = ::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found);
    if (e == ERANGE && buf.size() < (1u << 20)) {
      buf.resize(buf.size() * 2);
      continue;
    }
    if (!found) {
      // getpwnam_r(3): 0 (or, with some NSS modules, ENOENT/ESRCH/EBADF/EPERM) means "not there".
      if (e == 0 || e == ENOENT || e == ESRCH || e == EBADF || e == EPERM)
        return Status(Code::NotFound, "no such account");
      return Status(Code::Internal, errno_text(e));
    }
    break;
  }
  Account out;
  out.name = name;
  out.uid = pw.pw_uid;
  out.gid = pw.pw_gid;
  int n = 32;
  for (;;) {
    out.groups.assign(size_t(n), 0);
    int want = n;
    if (::getgrouplist(name.c_str(), pw.pw_gid, out.groups.data(), &want) >= 0) {
      out.groups.resize(size_t(want));
      break;
    }
    if (want <= n) want = n * 2;  // some NSS modules do not report the size needed
    if (want > 65536) return Status(Code::ResourceExhausted, "too many supplementary groups");
    n = want;
  }
  return out;
}

namespace {

[[noreturn]] void fail(const char* call) {
  int e = errno;
  throw PrivilegeError(std::string(call) + ": " + errno_text(e), e);
}

}  // namespace

void drop_to(const Account& a) {
  // Groups first: once the uid is not 0 they can no longer be changed.
  if (::setgroups(a.groups.size(), a.groups.data()) != 0) fail("setgroups");
  if (::setresgid(a.gid, a.gid, a.gid) != 0) fail("setresgid");
  if (::setresuid(a.uid, a.uid, a.uid) != 0) fail("setresuid");
  uid_t ru, eu, su;
  gid_t rg, eg, sg;
  if (::getresuid(&ru, &eu, &su) != 0) fail("getresuid");
  if (::getresgid(&rg, &eg, &sg) != 0) fail("getresgid");
  if (ru != a.uid || eu != a.uid || su != a.uid || rg != a.gid || eg != a.gid || sg != a.gid)
    throw PrivilegeError("the ids did not change as asked (uid " + std::to_string(eu) + ", gid " +
                             std::to_string(eg) + ")",
                         0);
  // The proof: root must be out of reach now (for an account that is not root itself).
  if (a.uid != 0 && (::setuid(0) == 0 || ::seteuid(0) == 0))
    throw PrivilegeError("root could be regained after the drop", 0);
  if (a.gid != 0 && (::setgid(0) == 0 || ::setegid(0) == 0))
    throw PrivilegeError("root could be regained after the drop", 0);
  set_no_new_privs();
}

void set_no_new_privs() {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail("prctl(PR_SET_NO_NEW_PRIVS)");
}

bool running_as(const Account& a) {
  uid_t ru, eu, su;
  gid_t rg, eg, sg;
  if (::getresuid(&ru, &eu, &su) != 0 || ::getresgid(&rg, &eg, &sg) != 0) return false;
  return ru == a.uid && eu == a.uid && su == a.uid && rg == a.gid && eg == a.gid && sg == a.gid;
}

void give_to(const std::string& path, const Account& a, bool keep_group) {
  if (::chown(path.c_str(), a.uid, keep_group ? gid_t(-1) : a.gid) != 0)
    throw_errno("chown " + path + " to " + a.name);
}

}  // namespace tierce::base
