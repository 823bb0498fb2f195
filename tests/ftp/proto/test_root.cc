// tests/ftp/proto/test_root.cc — path confinement (ftp_adts/ftp/root.h): virtual path joining,
// and a Root whose every operation must stay inside its host directory whatever the path or the
// symlinks in the tree say. The tree has an "outside" sibling with a secret that nothing may read,
// write, create next to, rename into or list.
#define BOOST_TEST_MODULE ftp_proto_root
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

#include "ftp_adts/ftp/root.h"
#include "tests/test_util.h"

using namespace tierce::ftp;
namespace fs = std::filesystem;

BOOST_AUTO_TEST_CASE(join_virtual_paths) {
  BOOST_TEST(join_virtual("/a/b", "../c") == "/a/c");
  BOOST_TEST(join_virtual("/", "..") == "/");
  BOOST_TEST(join_virtual("/a", "../../..") == "/");
  BOOST_TEST(join_virtual("/", "a/../../..") == "/");
  BOOST_TEST(join_virtual("/x/y", "a/../../../../z") == "/z");
  BOOST_TEST(join_virtual("/a/b", "/c/d") == "/c/d");
  BOOST_TEST(join_virtual("/a/b", "//c//./d/") == "/c/d");
  BOOST_TEST(join_virtual("/a/b", "") == "/a/b");
  BOOST_TEST(join_virtual("/a/b/", ".") == "/a/b");
  BOOST_TEST(join_virtual("", "") == "/");
  BOOST_TEST(join_virtual("a", "b") == "/a/b");  // a relative cwd is taken from "/"
  BOOST_TEST(join_virtual("/", "name with spaces/.. x") == "/name with spaces/.. x");
  BOOST_TEST(join_virtual("/", "...") == "/...");
  BOOST_TEST(join_virtual("/a/../..", "b/./c/..") == "/b");
}

namespace {

// <tmp>/root is the Root; <tmp>/outside holds a secret.
struct Tree {
  tierce_test::TempDir tmp;
  std::string root = tmp / "root";
  std::string outside = tmp / "outside";
  std::string secret = outside + "/secret.txt";

  Tree() {
    fs::create_directories(root + "/a/b");
    fs::create_directories(outside);
    tierce_test::write_file(secret, "SECRET");
    tierce_test::write_file(root + "/a/b/f.txt", "inside");
    tierce_test::write_file(root + "/name with spaces.txt", "spaced");
    link("/etc/passwd", "abs_passwd");               // absolute, to a real host file
    link("../outside/secret.txt", "rel_out");        // relative, pointing out
    link(secret, "abs_out");                         // absolute host path of the secret
    link(outside, "outdir");                         // a directory outside
    link("a", "mid");                                // a directory inside, relative
    link("/a", "mid_abs");                           // absolute, means <root>/a
    link("../../..", "a/up");                        // climbs out from a subdirectory
    link(outside + "/created.txt", "dangling_out");  // dangling, target outside
    link("/proc/self/root", "magic");                // a magic link's path
  }
  void link(const std::string& target, const std::string& name) {
    fs::create_symlink(target, root + "/" + name);
  }
  bool outside_has(const std::string& name) const { return fs::exists(outside + "/" + name); }
};

std::string read_fd(int fd) {
  std::string s;
  char buf[256];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, size_t(n));
  ::close(fd);
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(constructor_errors) {
  tierce_test::TempDir tmp;
  try {
    Root r(tmp / "missing");
    BOOST_FAIL("no throw");
  } catch (const std::system_error& e) {
    BOOST_TEST(std::string(e.what()).find(tmp / "missing") != std::string::npos);
    BOOST_TEST(e.code().value() == ENOENT);
  }
  tierce_test::write_file(tmp / "file", "x");
  BOOST_CHECK_THROW(Root(tmp / "file"), std::system_error);
}

BOOST_AUTO_TEST_CASE(reads_inside) {
  Tree t;
  Root r(t.root);
  BOOST_TEST(r.host_path() == t.root);
  int fd = r.open("/a/b/f.txt", O_RDONLY);
  BOOST_REQUIRE(fd >= 0);
  BOOST_TEST(read_fd(fd) == "inside");
  fd = r.open("/name with spaces.txt", O_RDONLY);
  BOOST_REQUIRE(fd >= 0);
  BOOST_TEST(read_fd(fd) == "spaced");
  // Symlinked directories in the middle, relative and absolute (absolute = from the root).
  fd = r.open("/mid/b/f.txt", O_RDONLY);
  BOOST_REQUIRE(fd >= 0);
  BOOST_TEST(read_fd(fd) == "inside");
  fd = r.open("mid_abs/b/../b/f.txt", O_RDONLY);
  BOOST_REQUIRE(fd >= 0);
  BOOST_TEST(read_fd(fd) == "inside");
  struct stat st;
  BOOST_TEST(r.stat("/", &st) == 0);
  BOOST_TEST(S_ISDIR(st.st_mode));
  BOOST_TEST(r.stat("/mid", &st) == 0);
  BOOST_TEST(S_ISDIR(st.st_mode));
  BOOST_TEST(r.lstat("/mid", &st) == 0);
  BOOST_TEST(S_ISLNK(st.st_mode));
  BOOST_TEST(r.stat("/a/b/f.txt", &st) == 0);
  BOOST_TEST(st.st_size == 6);
  BOOST_TEST(r.stat("/nope", &st) == -ENOENT);
  BOOST_TEST(r.stat("/a/b/f.txt/x", &st) == -ENOTDIR);
  BOOST_TEST(r.stat(std::string_view("/a\0b", 4), &st) == -EINVAL);
  BOOST_TEST(r.open(std::string_view("/a/b/f.txt\0", 11), O_RDONLY) == -EINVAL);
}

BOOST_AUTO_TEST_CASE(nothing_outside_is_reachable) {
  Tree t;
  Root r(t.root);
  struct stat st;
  for (const char* p :
       {"/abs_passwd", "/rel_out", "/abs_out", "/outdir/secret.txt", "/a/up/outside/secret.txt",
        "/a/up/etc/passwd", "a/../../../outside/secret.txt", "../outside/secret.txt",
        "/mid/up/outside/secret.txt", "/magic/etc/passwd", "/dangling_out"}) {
    BOOST_TEST(r.stat(p, &st) < 0, p);
    BOOST_TEST(r.open(p, O_RDONLY) < 0, p);
  }
  // The absolute symlink means <root>/etc/passwd: once that exists, it is what we read.
  fs::create_directories(t.root + "/etc");
  tierce_test::write_file(t.root + "/etc/passwd", "fake");
  int fd = r.open("/abs_passwd", O_RDONLY);
  BOOST_REQUIRE(fd >= 0);
  BOOST_TEST(read_fd(fd) == "fake");
  fd = r.open("/a/up/etc/passwd", O_RDONLY);  // ../../.. stops at the root
  BOOST_REQUIRE(fd >= 0);
  BOOST_TEST(read_fd(fd) == "fake");
  // lstat of a link to outside describes the link itself, and that is allowed.
  BOOST_TEST(r.lstat("/abs_out", &st) == 0);
  BOOST_TEST(S_ISLNK(st.st_mode));
}

BOOST_AUTO_TEST_CASE(writes_through_symlinks_stay_inside) {
  Tree t;
  Root r(t.root);
  // Truncating / writing the secret through symlinks fails, the secret is intact.
  for (const char* p : {"/abs_out", "/rel_out", "/outdir/secret.txt", "/a/up/outside/secret.txt"})
    BOOST_TEST(r.open(p, O_WRONLY | O_TRUNC) < 0, p);
  BOOST_TEST(tierce_test::read_file(t.secret) == "SECRET");
  // O_CREAT through a dangling symlink pointing outside creates nothing outside.
  int fd = r.open("/dangling_out", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) ::close(fd);
  BOOST_TEST(!t.outside_has("created.txt"));
  BOOST_TEST(r.open("/outdir/new.txt", O_WRONLY | O_CREAT, 0644) < 0);
  BOOST_TEST(!t.outside_has("new.txt"));
  // A dangling absolute link inside the root's namespace creates inside, confined.
  t.link("/made_inside.txt", "dangling_in");
  fd = r.open("/dangling_in", O_WRONLY | O_CREAT | O_EXCL, 0600);
  BOOST_TEST(fd == -EEXIST);  // O_EXCL never follows a final symlink
  fd = r.open("/dangling_in", O_WRONLY | O_CREAT, 0600);
  BOOST_REQUIRE(fd >= 0);
  BOOST_TEST(::write(fd, "x", 1) == 1);
  ::close(fd);
  BOOST_TEST(fs::exists(t.root + "/made_inside.txt"));
  // Plain creation with a mode; the mode is not passed without O_CREAT (openat2 would refuse).
  fd = r.open("/a/new file.txt", O_WRONLY | O_CREAT | O_EXCL, 0600);
  BOOST_REQUIRE(fd >= 0);
  ::close(fd);
  fd = r.open("/a/new file.txt", O_RDONLY, 0600);
  BOOST_REQUIRE(fd >= 0);
  ::close(fd);
  struct stat st;
  BOOST_REQUIRE(::stat((t.root + "/a/new file.txt").c_str(), &st) == 0);
  BOOST_TEST((st.st_mode & 07777) == 0600u);
}

BOOST_AUTO_TEST_CASE(last_component_operations) {
  Tree t;
  Root r(t.root);
  BOOST_TEST(r.mkdir("/new dir") == 0);
  BOOST_TEST(fs::is_directory(t.root + "/new dir"));
  BOOST_TEST(r.mkdir("/new dir") == -EEXIST);
  BOOST_TEST(r.mkdir("/") == -EEXIST);
  BOOST_TEST(r.mkdir("/outdir/x") < 0);  // parent is a link to outside
  BOOST_TEST(!t.outside_has("x"));
  BOOST_TEST(r.mkdir("/a/up/escaped") == 0);  // a/up is ../../.. == the root
  BOOST_TEST(fs::is_directory(t.root + "/escaped"));
  BOOST_TEST(!fs::exists(t.tmp / "escaped"));

  // Unlink removes a symlink itself, never its target.
  BOOST_TEST(r.unlink("/abs_out") == 0);
  BOOST_TEST(!fs::is_symlink(t.root + "/abs_out"));
  BOOST_TEST(tierce_test::read_file(t.secret) == "SECRET");
  BOOST_TEST(r.unlink("/outdir/secret.txt") < 0);
  BOOST_TEST(fs::exists(t.secret));
  BOOST_TEST(r.unlink("/a") == -EISDIR);
  BOOST_TEST(r.unlink("/") < 0);
  BOOST_TEST(r.unlink("/nope") == -ENOENT);

  BOOST_TEST(r.rmdir("/new dir") == 0);
  BOOST_TEST(r.rmdir("/a") == -ENOTEMPTY);
  BOOST_TEST(r.rmdir("/") < 0);
  BOOST_TEST(r.rmdir("/outdir") == -ENOTDIR);  // the link, not the directory it names
  BOOST_TEST(fs::is_directory(t.outside));

  // Rename within, through a symlinked parent inside, and never out.
  BOOST_TEST(r.rename("/a/b/f.txt", "/mid/moved.txt") == 0);
  BOOST_TEST(fs::exists(t.root + "/a/moved.txt"));
  BOOST_TEST(r.rename("/a/moved.txt", "/outdir/stolen.txt") < 0);
  BOOST_TEST(r.rename("/a/moved.txt", "/a/up/../../outside/stolen.txt") < 0);
  BOOST_TEST(!t.outside_has("stolen.txt"));
  BOOST_TEST(r.rename("/outdir/secret.txt", "/got.txt") < 0);
  BOOST_TEST(fs::exists(t.secret));
  BOOST_TEST(r.rename("/rel_out", "/renamed link") == 0);  // moves the link only
  BOOST_TEST(fs::is_symlink(t.root + "/renamed link"));
  BOOST_TEST(fs::exists(t.secret));
  BOOST_TEST(r.rename("/", "/x") < 0);
}

BOOST_AUTO_TEST_CASE(listing) {
  Tree t;
  Root r(t.root);
  std::vector<Root::Entry> es;
  BOOST_REQUIRE(r.list("/", &es) == 0);
  std::vector<std::string> names;
  for (auto& e : es) names.push_back(e.name);
  std::vector<std::string> want = {"a",      "abs_out", "abs_passwd", "dangling_out",
                                   "magic",  "mid",     "mid_abs",    "name with spaces.txt",
                                   "outdir", "rel_out"};
  BOOST_TEST(names == want, boost::test_tools::per_element());
  for (auto& e : es) {
    if (e.name == "mid" || e.name == "mid_abs") {
      BOOST_TEST(e.is_symlink);
      BOOST_TEST(S_ISDIR(e.st.st_mode), e.name);  // followed, confined
    } else if (e.name == "outdir" || e.name == "abs_out" || e.name == "rel_out") {
      BOOST_TEST(e.is_symlink);
      BOOST_TEST(S_ISLNK(e.st.st_mode), e.name);  // cannot be followed: the link's own stat
    } else if (e.name == "a") {
      BOOST_TEST(!e.is_symlink);
      BOOST_TEST(S_ISDIR(e.st.st_mode));
    } else if (e.name == "name with spaces.txt") {
      BOOST_TEST(e.st.st_size == 6);
    }
  }
  BOOST_TEST(r.list("/mid/b", &es) == 0);
  BOOST_REQUIRE(es.size() == 1u);
  BOOST_TEST(es[0].name == "f.txt");
  BOOST_TEST(r.list("/a/b/f.txt", &es) == -ENOTDIR);
  BOOST_TEST(r.list("/outdir", &es) < 0);
  BOOST_TEST(r.list("/nope", &es) == -ENOENT);
}

BOOST_AUTO_TEST_CASE(set_mtime) {
  Tree t;
  Root r(t.root);
  BOOST_TEST(r.utime("/a/b/f.txt", 1000000000) == 0);
  struct stat st;
  BOOST_REQUIRE(r.stat("/a/b/f.txt", &st) == 0);
  BOOST_TEST(st.st_mtime == 1000000000);
  BOOST_TEST(r.utime("/a", 1000000001) == 0);
  BOOST_REQUIRE(r.stat("/a", &st) == 0);
  BOOST_TEST(st.st_mtime == 1000000001);
  struct stat before;
  BOOST_REQUIRE(::stat(t.secret.c_str(), &before) == 0);
  BOOST_TEST(r.utime("/abs_out", 12345) < 0);
  BOOST_TEST(r.utime("/outdir/secret.txt", 12345) < 0);
  struct stat after;
  BOOST_REQUIRE(::stat(t.secret.c_str(), &after) == 0);
  BOOST_TEST(after.st_mtime == before.st_mtime);
  BOOST_TEST(r.utime("/nope", 1) == -ENOENT);
}

BOOST_AUTO_TEST_CASE(moved_root_still_works) {
  Tree t;
  Root a(t.root);
  Root b(std::move(a));
  struct stat st;
  BOOST_TEST(b.stat("/a", &st) == 0);
  BOOST_TEST(a.stat("/a", &st) == -EBADF);
  Root c(t.outside);
  c = std::move(b);
  BOOST_TEST(c.stat("/a", &st) == 0);
  BOOST_TEST(c.host_path() == t.root);
}
