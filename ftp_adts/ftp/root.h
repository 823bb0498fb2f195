// ftp_adts/ftp/root.h — path confinement for tierce-ftpd: virtual paths ("/" is the user's root)
// and a host directory that every file operation is confined to. The kernel does the confining
// (openat2 RESOLVE_IN_ROOT), so neither "..", absolute symlinks, relative symlinks pointing out,
// nor a rename racing with a lookup can reach a file outside the root.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <ctime>
#include <string>
#include <string_view>
#include <vector>

namespace tierce::ftp {

// Virtual paths: "/" is the user's root. join_virtual("/a/b", "../c") == "/a/c"; ".." above "/"
// stays "/"; an absolute arg is taken relative to "/"; "//" and "." collapse. The result always
// starts with "/" and has no trailing "/" except for the root itself.
std::string join_virtual(std::string_view cwd, std::string_view arg);

// A host directory every access is confined to: each call resolves the virtual path with
// openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) from the root's dirfd, so neither ".." nor any
// symlink (absolute or relative) can reach outside it: a symlink to "/etc/passwd" means
// "<root>/etc/passwd". All functions return >= 0 or -errno (a path with a NUL byte: -EINVAL).
class Root {
 public:
  explicit Root(const std::string& host_path);  // throws std::system_error naming the path
  ~Root();
  Root(Root&& o) noexcept;
  Root& operator=(Root&& o) noexcept;
  Root(const Root&) = delete;
  Root& operator=(const Root&) = delete;

  // An fd (O_CLOEXEC is added). `mode` is used only with O_CREAT / O_TMPFILE. Beware FIFOs and
  // devices: pass O_NONBLOCK or check the type first when a peer picks the path.
  int open(std::string_view vpath, int flags, mode_t mode = 0644) const;
  int stat(std::string_view vpath, struct stat* st) const;   // follows symlinks (confined)
  int lstat(std::string_view vpath, struct stat* st) const;  // the last component itself
  // Operations on the last component: the parent is resolved confined, then *at() acts on the
  // base name, so a symlink as the last component is removed/renamed, never followed.
  int mkdir(std::string_view vpath, mode_t mode = 0755) const;
  int rmdir(std::string_view vpath) const;
  int unlink(std::string_view vpath) const;
  int rename(std::string_view from, std::string_view to) const;

  struct Entry {
    std::string name;
    struct stat st;
    bool is_symlink;
  };
  // Directory entries sorted by name, without . and ..; st follows symlinks when it can
  // (confined), else it is the symlink's own lstat.
  int list(std::string_view vpath, std::vector<Entry>* out) const;
  int utime(std::string_view vpath, std::time_t mtime) const;  // MFMT: sets the mtime
  const std::string& host_path() const { return host_path_; }
  int dirfd() const { return fd_; }  // O_PATH fd of the root (for tests and diagnostics)

 private:
  // openat2 from the root with the confinement flags; retries the kernel's -EAGAIN (a rename
  // raced with the ".." walk).
  int resolve(std::string_view vpath, int flags, mode_t mode) const;
  // The parent directory of vpath as an O_PATH fd, and its base name; -EBUSY/-EEXIST style
  // errors for the root itself are the caller's to choose, signalled by an empty base.
  int parent(std::string_view vpath, std::string* base) const;

  std::string host_path_;
  int fd_ = -1;
};

}  // namespace tierce::ftp
