// base/daemon.cc — background start with a report pipe, pid file, ready file, systemd notes.
//
// Report pipe format (daemon → starting process): a decimal exit code, '\n', then a message for
// the starting process's stderr (may be empty). EOF without a report means the daemon died.
#include "base/daemon.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

namespace tierce::base {

namespace {

[[noreturn]] void throw_sys(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= size_t(w);
  }
  return true;
}

std::string g_program = "tierce";  // for the starting process's messages (daemonize)

// How long the starting process waits for the daemon's report before giving up on it.
constexpr std::chrono::seconds kStartupReportWait{60};

// The starting process: wait for the report, print it, exit with its code.
[[noreturn]] void wait_for_report(int fd, pid_t child) {
  std::string buf;
  auto deadline = std::chrono::steady_clock::now() + kStartupReportWait;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      std::fprintf(
          stderr,
          "%s: the daemon did not report within %lld s; it may still be starting: "
          "see syslog and the pid file\n",
          g_program.c_str(), static_cast<long long>(kStartupReportWait.count()));
      std::_Exit(kExitFailure);
    }
    pollfd p{fd, POLLIN, 0};
    int n = ::poll(&p, 1, int(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char chunk[4096];
    ssize_t r = ::read(fd, chunk, sizeof chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    buf.append(chunk, size_t(r));
  }
  int status = 0;
  ::waitpid(child, &status, 0);  // the intermediate process exits at once
  auto nl = buf.find('\n');
  if (nl == std::string::npos) {
    std::fprintf(stderr, "%s: the daemon exited during startup without a word; see syslog\n",
                 g_program.c_str());
    std::_Exit(kExitFailure);
  }
  int code = std::atoi(buf.substr(0, nl).c_str());
  std::string msg = buf.substr(nl + 1);
  if (!msg.empty()) std::fprintf(stderr, "%s: %s\n", g_program.c_str(), msg.c_str());
  std::fflush(stderr);
  std::_Exit(code);
}

}  // namespace

StartupReport::StartupReport(StartupReport&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
StartupReport& StartupReport::operator=(StartupReport&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}
StartupReport::~StartupReport() {
  if (fd_ >= 0) ::close(fd_);
}

void StartupReport::send(int code, const std::string& message) {
  if (fd_ < 0) return;
  std::string s = std::to_string(code) + "\n" + message;
  write_all(fd_, s.data(), s.size());
  ::close(fd_);
  fd_ = -1;
}

void StartupReport::ready() {
  send(kExitOk, "");
}
void StartupReport::failed(int code, const std::string& message) {
  send(code, message);
}

StartupReport daemonize(const std::string& program, bool keep_stderr) {
  g_program = program;
  std::fflush(nullptr);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw_sys("pipe");
  pid_t child = ::fork();
  if (child < 0) throw_sys("fork");
  if (child > 0) {
    ::close(p[1]);
    wait_for_report(p[0], child);
  }
  ::close(p[0]);
  if (::setsid() < 0) throw_sys("setsid");
  pid_t grandchild = ::fork();
  if (grandchild < 0) throw_sys("fork");
  if (grandchild > 0) std::_Exit(0);  // the session leader leaves; the daemon can never get a tty
  if (::chdir("/") != 0) throw_sys("chdir /");
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) throw_sys("open /dev/null");
  ::dup2(null, STDIN_FILENO);
  ::dup2(null, STDOUT_FILENO);
  if (!keep_stderr) ::dup2(null, STDERR_FILENO);
  if (null > STDERR_FILENO) ::close(null);
  return StartupReport(p[1]);
}

// ---------------------------------------------------------------------------------------------

PidFile PidFile::acquire(const std::string& path, pid_t* stale_pid) {
  *stale_pid = 0;
  for (int attempt = 0; attempt < 10; ++attempt) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw_sys("pid file " + path);
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    pid_t named = n > 0 ? pid_t(std::atol(buf)) : 0;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int e = errno;
      ::close(fd);
      if (e == EWOULDBLOCK)
        throw AlreadyRunning(
            named, "pid file " + path + " is held by a running process" +
                       (named > 0 ? " (pid " + std::to_string(named) + ")" : std::string()));
      errno = e;
      throw_sys("lock pid file " + path);
    }
    // A stopping daemon unlinks its file while holding the lock: make sure we locked the file that
    // is at `path` now, not an orphan.
    struct stat a {
    }, b{};
    if (::fstat(fd, &a) != 0 || ::stat(path.c_str(), &b) != 0 || a.st_ino != b.st_ino ||
        a.st_dev != b.st_dev) {
      ::close(fd);
      continue;
    }
    // The lock is ours; re-read what it names, in case it changed before we locked.
    n = ::pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    named = n > 0 ? pid_t(std::atol(buf)) : 0;
    if (named > 0 && named != ::getpid()) *stale_pid = named;
    std::string text = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 ||
        ::pwrite(fd, text.data(), text.size(), 0) != ssize_t(text.size())) {
      int e = errno;
      ::close(fd);
      errno = e;
      throw_sys("write pid file " + path);
    }
    PidFile f;
    f.path_ = path;
    f.fd_ = fd;
    return f;
  }
  errno = EAGAIN;
  throw_sys("pid file " + path + " keeps being replaced");
}

PidFile::PidFile(PidFile&& o) noexcept : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)) {}
PidFile& PidFile::operator=(PidFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}
PidFile::~PidFile() {
  release();
}

void PidFile::chown_to(uid_t uid, gid_t gid) {
  if (fd_ >= 0 && ::fchown(fd_, uid, gid) != 0) throw_sys("chown pid file " + path_);
}

void PidFile::release() {
  if (fd_ < 0) return;
  // Under the lock: the next daemon's inode check sees it go.
  if (::unlink(path_.c_str()) != 0 && (errno == EACCES || errno == EPERM))
    (void)!::ftruncate(fd_, 0);
  ::close(fd_);
  fd_ = -1;
}

// ---------------------------------------------------------------------------------------------

void write_file_atomically(const std::string& path, const std::string& text, unsigned mode) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) throw_sys("create " + tmp);
  if (!write_all(fd, text.data(), text.size()) || ::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    errno = e;
    throw_sys("write " + tmp);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    errno = e;
    throw_sys("rename " + tmp + " to " + path);
  }
}

void notify_systemd(const std::string& state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (!path || !*path) return;
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  size_t len = std::strlen(path);
  if (len >= sizeof sa.sun_path) return;
  std::memcpy(sa.sun_path, path, len);
  if (sa.sun_path[0] == '@') sa.sun_path[0] = 0;  // abstract namespace
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&sa),
           socklen_t(offsetof(sockaddr_un, sun_path) + len));
  ::close(fd);
}

}  // namespace tierce::base
