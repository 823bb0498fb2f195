// base/unix_socket.cc — see unix_socket.h.
#include "base/unix_socket.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace tierce::base {

namespace {
std::string err(int e) { return std::strerror(e); }
}  // namespace

Result<Fd> listen_unix_seqpacket(const std::string& path, const UnixListenOptions& o,
                                 bool* removed_stale) {
  if (removed_stale) *removed_stale = false;
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof a.sun_path)
    return Status(Code::InvalidArgument, "socket path '" + path + "' is empty or longer than " +
                                             std::to_string(sizeof a.sun_path - 1) +
                                             " bytes: choose a shorter one");
  std::memcpy(a.sun_path, path.data(), path.size());
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  struct stat sb;
  if (::lstat(path.c_str(), &sb) == 0) {
    if (!S_ISSOCK(sb.st_mode))
      return Status(Code::FailedPrecondition,
                    path + " exists and is not a socket: remove it or configure another path");
    Fd probe(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!probe) return Status(Code::Internal, "socket(AF_UNIX): " + err(errno));
    if (::connect(probe.get(), sa, sizeof a) == 0) {
      ucred cr{};
      socklen_t cl = sizeof cr;
      std::string pid = ::getsockopt(probe.get(), SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0
                            ? " (pid " + std::to_string(cr.pid) + ")"
                            : "";
      return Status(Code::AlreadyExists, "another " + o.who + pid + " is serving " + path +
                                             ": stop it first, or configure another path");
    }
    int e = errno;
    if (e == EAGAIN)
      return Status(Code::AlreadyExists,
                    "a live server is serving " + path + " (its backlog is full): stop it first");
    if (e == EPROTOTYPE)
      return Status(Code::FailedPrecondition,
                    path + " is a socket of another kind, served by another program: refusing "
                           "to replace it");
    if (e != ECONNREFUSED) return Status(Code::Internal, "cannot probe " + path + ": " + err(e));
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      return Status(Code::Internal, "cannot remove the stale socket " + path + ": " + err(errno));
    if (removed_stale) *removed_stale = true;
  }
  Fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return Status(Code::Internal, "socket(AF_UNIX): " + err(errno));
  if (::bind(fd.get(), sa, sizeof a) != 0)
    return Status(Code::Internal, "cannot bind " + path + ": " + err(errno) +
                                      " (does the directory exist, and may " + o.who +
                                      " write there?)");
  // Mode and group before listen(): no client connects while they are still the umask's.
  auto undo = [&](const char* call, int e) {
    ::unlink(path.c_str());
    char mode[8];
    std::snprintf(mode, sizeof mode, "0%03o", unsigned(o.mode));
    return Status(Code::Internal, "cannot set the " + std::string(call) + " of " + path +
                                      " (mode " + mode + "): " + err(e) +
                                      "; not serving with the umask's permissions");
  };
  if (o.group != gid_t(-1) && ::chown(path.c_str(), uid_t(-1), o.group) != 0)
    return undo("group", errno);
  if (::chmod(path.c_str(), o.mode) != 0) return undo("mode", errno);
  if (::listen(fd.get(), SOMAXCONN) != 0) {
    int e = errno;
    ::unlink(path.c_str());
    return Status(Code::Internal, "listen on " + path + ": " + err(e));
  }
  return fd;
}

Result<gid_t> lookup_group(const std::string& name) {
  std::vector<char> buf(16384);
  group g{};
  group* out = nullptr;
  int rc = ::getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &out);
  if (rc != 0) return Status(Code::Internal, "getgrnam_r(" + name + "): " + err(rc));
  if (!out) return Status(Code::NotFound, "no such group: " + name);
  return out->gr_gid;
}

}  // namespace tierce::base
