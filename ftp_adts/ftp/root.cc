// ftp_adts/ftp/root.cc — Root: every lookup is an openat2(2) from the root's O_PATH dirfd with
// RESOLVE_IN_ROOT, so the kernel treats the root as "/" for "..", absolute and relative symlinks
// alike. Nothing here resolves a path in user space: a check-then-open in user space would race
// with a symlink swapped in by another session.
#include "ftp_adts/ftp/root.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

#include "base/fd.h"

namespace tierce::ftp {

namespace {

using base::Fd;  // the fds opened per call are closed on scope exit

constexpr uint64_t kResolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;

// The relative host path of a normalised virtual path ("/a/b" -> "a/b", "/" -> ".").
std::string relative(std::string_view vpath) {
  std::string v = join_virtual("/", vpath);
  return v == "/" ? std::string(".") : v.substr(1);
}

bool has_nul(std::string_view s) {
  return s.find('\0') != std::string_view::npos;
}

int openat2_retry(int dirfd, const std::string& path, open_how* how) {
  for (int attempt = 0;; ++attempt) {
    long r = ::syscall(SYS_openat2, dirfd, path.c_str(), how, sizeof *how);
    if (r >= 0) return int(r);
    int e = errno;
    if (e == EINTR || (e == EAGAIN && attempt < 64)) continue;
    return -e;
  }
}

}  // namespace

std::string join_virtual(std::string_view cwd, std::string_view arg) {
  // Built in place, one allocation: "/c1/c2/..."; ".." cuts the last "/c" off (a component never
  // holds a '/').
  std::string out;
  out.reserve(cwd.size() + arg.size() + 1);
  auto walk = [&out](std::string_view p) {
    size_t i = 0;
    while (i <= p.size()) {
      size_t j = p.find('/', i);
      if (j == std::string_view::npos) j = p.size();
      std::string_view c = p.substr(i, j - i);
      if (c.empty() || c == ".") {
        // nothing
      } else if (c == "..") {
        size_t last = out.rfind('/');
        if (last != std::string::npos) out.resize(last);
      } else {
        out += '/';
        out += c;
      }
      i = j + 1;
    }
  };
  if (arg.empty() || arg[0] != '/') walk(cwd);
  walk(arg);
  if (out.empty()) return "/";
  return out;
}

Root::Root(const std::string& host_path) : host_path_(host_path) {
  fd_ = ::open(host_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0)
    throw std::system_error(errno, std::generic_category(), "ftp root \"" + host_path + "\"");
  // Probe once: a kernel without openat2 (< 5.6) cannot confine, and we refuse to run unconfined.
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = kResolve;
  int probe = openat2_retry(fd_, ".", &how);
  if (probe < 0) {
    int e = -probe;
    ::close(fd_);
    fd_ = -1;
    throw std::system_error(e, std::generic_category(),
                            "ftp root \"" + host_path + "\": openat2(RESOLVE_IN_ROOT) failed");
  }
  ::close(probe);
}

Root::~Root() {
  if (fd_ >= 0) ::close(fd_);
}

Root::Root(Root&& o) noexcept
    : host_path_(std::move(o.host_path_)), fd_(std::exchange(o.fd_, -1)) {}

Root& Root::operator=(Root&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    host_path_ = std::move(o.host_path_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

int Root::resolve(std::string_view vpath, int flags, mode_t mode) const {
  if (fd_ < 0) return -EBADF;
  if (has_nul(vpath)) return -EINVAL;
  open_how how{};
  how.flags = uint64_t(flags | O_CLOEXEC);
  // openat2 rejects a mode without O_CREAT/O_TMPFILE (EINVAL), unlike openat.
  how.mode = ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? (mode & 07777) : 0;
  how.resolve = kResolve;
  return openat2_retry(fd_, relative(vpath), &how);
}

int Root::parent(std::string_view vpath, std::string* base) const {
  if (has_nul(vpath)) return -EINVAL;
  std::string v = join_virtual("/", vpath);
  size_t slash = v.rfind('/');
  *base = v.substr(slash + 1);
  std::string dir = slash == 0 ? std::string("/") : v.substr(0, slash);
  return resolve(dir, O_PATH | O_DIRECTORY, 0);
}

int Root::open(std::string_view vpath, int flags, mode_t mode) const {
  return resolve(vpath, flags, mode);
}

int Root::stat(std::string_view vpath, struct stat* st) const {
  int fd = resolve(vpath, O_PATH, 0);
  if (fd < 0) return fd;
  Fd g(fd);
  return ::fstat(fd, st) < 0 ? -errno : 0;
}

int Root::lstat(std::string_view vpath, struct stat* st) const {
  // O_PATH | O_NOFOLLOW opens a final symlink itself; fstat then describes the link.
  int fd = resolve(vpath, O_PATH | O_NOFOLLOW, 0);
  if (fd < 0) return fd;
  Fd g(fd);
  return ::fstat(fd, st) < 0 ? -errno : 0;
}

int Root::mkdir(std::string_view vpath, mode_t mode) const {
  std::string base;
  int pfd = parent(vpath, &base);
  if (pfd < 0) return pfd;
  Fd g(pfd);
  if (base.empty()) return -EEXIST;  // the root
  return ::mkdirat(pfd, base.c_str(), mode) < 0 ? -errno : 0;
}

int Root::rmdir(std::string_view vpath) const {
  std::string base;
  int pfd = parent(vpath, &base);
  if (pfd < 0) return pfd;
  Fd g(pfd);
  if (base.empty()) return -EBUSY;
  return ::unlinkat(pfd, base.c_str(), AT_REMOVEDIR) < 0 ? -errno : 0;
}

int Root::unlink(std::string_view vpath) const {
  std::string base;
  int pfd = parent(vpath, &base);
  if (pfd < 0) return pfd;
  Fd g(pfd);
  if (base.empty()) return -EISDIR;
  return ::unlinkat(pfd, base.c_str(), 0) < 0 ? -errno : 0;
}

int Root::rename(std::string_view from, std::string_view to) const {
  std::string fbase, tbase;
  int ffd = parent(from, &fbase);
  if (ffd < 0) return ffd;
  Fd fg(ffd);
  int tfd = parent(to, &tbase);
  if (tfd < 0) return tfd;
  Fd tg(tfd);
  if (fbase.empty() || tbase.empty()) return -EBUSY;
  return ::renameat(ffd, fbase.c_str(), tfd, tbase.c_str()) < 0 ? -errno : 0;
}

int Root::list(std::string_view vpath, std::vector<Entry>* out) const {
  out->clear();
  int fd = resolve(vpath, O_RDONLY | O_DIRECTORY, 0);
  if (fd < 0) return fd;
  DIR* d = ::fdopendir(fd);
  if (!d) {
    int e = errno;
    ::close(fd);
    return -e;
  }
  std::string dir = join_virtual("/", vpath);
  if (dir != "/") dir += '/';
  int err = 0;
  for (;;) {
    errno = 0;
    dirent* de = ::readdir(d);
    if (!de) {
      err = errno;
      break;
    }
    std::string_view name = de->d_name;
    if (name == "." || name == "..") continue;
    Entry e;
    e.name = std::string(name);
    if (::fstatat(::dirfd(d), de->d_name, &e.st, AT_SYMLINK_NOFOLLOW) < 0) continue;  // gone
    e.is_symlink = S_ISLNK(e.st.st_mode);
    if (e.is_symlink) {
      // Follow it the confined way: through the root, never from this directory's fd.
      struct stat target;
      if (stat(dir + e.name, &target) == 0) e.st = target;
    }
    out->push_back(std::move(e));
  }
  ::closedir(d);
  if (err) return -err;
  std::sort(out->begin(), out->end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return 0;
}

int Root::utime(std::string_view vpath, std::time_t mtime) const {
  struct timespec ts[2];
  ts[0].tv_sec = 0;
  ts[0].tv_nsec = UTIME_OMIT;
  ts[1].tv_sec = mtime;
  ts[1].tv_nsec = 0;
  // futimens needs an fd opened for reading or writing (an O_PATH fd gives EBADF). O_NONBLOCK:
  // a FIFO must not block the session.
  int fd = resolve(vpath, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
  if (fd >= 0) {
    Fd g(fd);
    return ::futimens(fd, ts) < 0 ? -errno : 0;
  }
  if (fd != -EACCES) return fd;
  // No read permission (an owner may still set times): act on the entry from its parent, without
  // following a final symlink, which could point anywhere.
  std::string base;
  int pfd = parent(vpath, &base);
  if (pfd < 0) return pfd;
  Fd g(pfd);
  if (base.empty()) return -EACCES;
  return ::utimensat(pfd, base.c_str(), ts, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

}  // namespace tierce::ftp
