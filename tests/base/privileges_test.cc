// tests/base/privileges_test.cc — base/privileges.h: account lookup, and the drop itself in a
// forked child (the test process stays root): the child drops to `nobody` and reports what the
// kernel says about it through a pipe. The drop cases need root and are skipped, saying so,
// without it.
#define BOOST_TEST_MODULE base_privileges
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/daemon.h"
#include "base/privileges.h"
#include "tests/test_util.h"

using namespace tierce;
using namespace tierce_test;

namespace {

boost::test_tools::assertion_result needs_root(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result r(::geteuid() == 0);
  r.message() << "skipped: dropping privileges needs root (run the test as root)";
  return r;
}

base::Account nobody() {
  base::Result<base::Account> a = base::lookup_account("nobody");
  BOOST_TEST_REQUIRE(a.ok(), "lookup nobody: " << a.message());
  return *a;
}

// Runs `fn` in a forked child; returns what it wrote to the pipe (its report) and its exit code.
template <class Fn>
std::pair<std::string, int> in_child(Fn fn) {
  int p[2];
  BOOST_TEST_REQUIRE(::pipe(p) == 0);
  pid_t pid = ::fork();
  BOOST_TEST_REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(p[0]);
    std::string out;
    int code = 0;
    try {
      code = fn(&out);
    } catch (const std::exception& e) {
      out += std::string("exception: ") + e.what();
      code = 99;
    }
    (void)!::write(p[1], out.data(), out.size());
    ::_exit(code);
  }
  ::close(p[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  ::close(p[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return {out, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st)};
}

}  // namespace

BOOST_AUTO_TEST_CASE(lookup_finds_nobody_with_its_groups) {
  base::Account a = nobody();
  passwd* pw = ::getpwnam("nobody");
  BOOST_TEST_REQUIRE(pw);
  BOOST_TEST(a.name == "nobody");
  BOOST_TEST(a.uid == pw->pw_uid);
  BOOST_TEST(a.gid == pw->pw_gid);
  BOOST_TEST(std::count(a.groups.begin(), a.groups.end(), pw->pw_gid) == 1);
}

BOOST_AUTO_TEST_CASE(unknown_user_is_an_error_naming_no_such_account) {
  base::Result<base::Account> a = base::lookup_account("tierce-no-such-user-" + random_suffix());
  BOOST_TEST(!a.ok());
  BOOST_TEST(a.status().code() == base::Code::NotFound);
  BOOST_TEST(a.message() == "no such account");
}

BOOST_AUTO_TEST_CASE(drop_to_nobody_for_good, *boost::unit_test::precondition(needs_root)) {
  const base::Account who = nobody();
  auto [report, code] = in_child([&](std::string* out) {
    base::drop_to(who);
    uid_t ru, eu, su;
    gid_t rg, eg, sg;
    ::getresuid(&ru, &eu, &su);
    ::getresgid(&rg, &eg, &sg);
    gid_t groups[64];
    int n = ::getgroups(64, groups);
    *out += "uid " + std::to_string(ru) + " " + std::to_string(eu) + " " + std::to_string(su) +
            "\ngid " + std::to_string(rg) + " " + std::to_string(eg) + " " + std::to_string(sg) +
            "\ngroups";
    for (int i = 0; i < n; ++i) *out += " " + std::to_string(groups[i]);
    *out += "\nsetuid0 " + std::to_string(::setuid(0)) + " seteuid0 " +
            std::to_string(::seteuid(0)) + " setgid0 " + std::to_string(::setgid(0)) +
            " setegid0 " + std::to_string(::setegid(0)) + "\nno_new_privs " +
            std::to_string(::prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)) + "\n";
    return 0;
  });
  BOOST_TEST_INFO("child's report:\n" << report);
  BOOST_TEST_REQUIRE(code == 0);
  const std::string u = std::to_string(who.uid), g = std::to_string(who.gid);
  BOOST_TEST(report.find("uid " + u + " " + u + " " + u + "\n") != std::string::npos);
  BOOST_TEST(report.find("gid " + g + " " + g + " " + g + "\n") != std::string::npos);
  std::string groups = "groups";
  for (gid_t x : who.groups) groups += " " + std::to_string(x);
  BOOST_TEST(report.find(groups + "\n") != std::string::npos);  // root's groups are gone
  BOOST_TEST(report.find("setuid0 -1 seteuid0 -1 setgid0 -1 setegid0 -1\n") != std::string::npos);
  BOOST_TEST(report.find("no_new_privs 1\n") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(drop_without_privileges_fails_naming_the_call,
                     *boost::unit_test::precondition(needs_root)) {
  const base::Account who = nobody();
  base::Result<base::Account> found = base::lookup_account("root");
  BOOST_TEST_REQUIRE(found.ok());
  const base::Account root = *found;
  auto [report, code] = in_child([&](std::string* out) {
    base::drop_to(who);
    if (!base::running_as(who)) {
      *out = "the first drop did not make the child nobody";
      return 2;
    }
    try {
      base::drop_to(root);  // no way back
      *out = "the second drop succeeded";
      return 1;
    } catch (const base::PrivilegeError& e) {
      *out = std::string(e.what()) + "\nerrno " + std::to_string(e.error());
      return 0;
    }
  });
  BOOST_TEST_INFO("child's report:\n" << report);
  BOOST_TEST(code == 0);
  BOOST_TEST(report.rfind("setgroups: ", 0) == 0u);
  BOOST_TEST(report.find("errno " + std::to_string(EPERM)) != std::string::npos);
}

// After the drop the pid file can still be written (chown_to) and, in a directory the user may
// not write, is emptied at release rather than left naming a pid.
BOOST_AUTO_TEST_CASE(pid_file_given_to_the_user_is_emptied_when_it_cannot_be_removed,
                     *boost::unit_test::precondition(needs_root)) {
  const base::Account who = nobody();
  TempDir dir;  // 0700 root: nobody may not remove anything in it
  ::chmod(dir.path().c_str(), 0755);
  const std::string path = dir / "d.pid";
  auto [report, code] = in_child([&](std::string* out) {
    pid_t stale = 0;
    base::PidFile f = base::PidFile::acquire(path, &stale);
    f.chown_to(who.uid, who.gid);
    base::drop_to(who);
    f.release();
    *out = "released";
    return 0;
  });
  BOOST_TEST_INFO("child's report:\n" << report);
  BOOST_TEST_REQUIRE(code == 0);
  struct stat st {};
  BOOST_TEST_REQUIRE(::stat(path.c_str(), &st) == 0);
  BOOST_TEST(st.st_uid == who.uid);
  BOOST_TEST(st.st_size == 0);
  // The next start takes it over (it names no pid).
  pid_t stale = 1;
  base::PidFile again = base::PidFile::acquire(path, &stale);
  BOOST_TEST(stale == 0);
}
