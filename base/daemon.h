// base/daemon.h — what makes a program a well-behaved Unix daemon, apart from what it serves:
// going to the background with an honest exit code, the pid file, the ready file, and the
// systemd readiness note. Used by tierce-memd, tierce-lockd and tierce-ftpd (log sinks: log.h).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>


namespace tierce::base {

// Exit codes of the daemons (documented in docs/memd.md, docs/dlm.md, docs/ftp.md; launchers
// rely on them).
enum ExitCode : int {
  kExitOk = 0,       // clean stop (SIGTERM/SIGINT), --check passed, --help, --version
  kExitFailure = 1,  // runtime failure: cannot bind, cannot write the pid file, ...
  kExitUsage = 2,    // bad command line or bad configuration
  kExitRunning = 3,  // another instance holds the pid file
};

// The daemon's word to the process that started it. In the foreground it goes nowhere.
class StartupReport {
 public:
  StartupReport() = default;
  explicit StartupReport(int fd) : fd_(fd) {}
  StartupReport(StartupReport&& o) noexcept;
  StartupReport& operator=(StartupReport&& o) noexcept;
  StartupReport(const StartupReport&) = delete;
  StartupReport& operator=(const StartupReport&) = delete;
  ~StartupReport();  // without a report: the parent exits 1 ("died during startup")

  bool detached() const { return fd_ >= 0; }
  void ready();                                       // the parent exits 0
  void failed(int code, const std::string& message);  // the parent prints message, exits code

 private:
  void send(int code, const std::string& message);
  int fd_ = -1;
};

// Goes to the background: fork, setsid, fork again (never to reacquire a terminal), chdir("/"),
// stdin and stdout to /dev/null, stderr too unless keep_stderr (log = "stderr" with a launcher that
// redirected it). The original process waits for the daemon's StartupReport and exits with its
// code (its messages prefixed with `program`); only the daemon returns. Prereq: no threads yet
// (fork keeps only the caller's).
StartupReport daemonize(const std::string& program, bool keep_stderr);

class AlreadyRunning : public std::runtime_error {
 public:
  AlreadyRunning(pid_t pid, const std::string& what) : std::runtime_error(what), pid_(pid) {}
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

// A pid file held with an exclusive flock() for the daemon's life: a live daemon always holds the
// lock, so a second one sees it (AlreadyRunning), and a file left by a crash is taken over.
// Removed on destruction.
class PidFile {
 public:
  // Throws AlreadyRunning, or std::system_error naming the path. *stale_pid gets the pid a stale
  // file named (0 if none).
  static PidFile acquire(const std::string& path, pid_t* stale_pid);
  PidFile() = default;
  PidFile(PidFile&& o) noexcept;
  PidFile& operator=(PidFile&& o) noexcept;
  PidFile(const PidFile&) = delete;
  PidFile& operator=(const PidFile&) = delete;
  ~PidFile();
  // Gives the file to uid/gid (fchown), before a privilege drop, so the daemon can still write it.
  // Throws std::system_error naming the path.
  void chown_to(uid_t uid, gid_t gid);
  // Unlinks and unlocks now. When the unlink is refused (after a privilege drop, a directory the
  // daemon's user may not write), the file is emptied instead: it then names no pid, and the next
  // start takes it over.
  void release();

 private:
  std::string path_;
  int fd_ = -1;
};

// Replaces `path` with `text` atomically (a temporary file in the same directory, then rename), so
// a reader never sees a half-written file. Throws std::system_error.
void write_file_atomically(const std::string& path, const std::string& text, unsigned mode = 0644);

// sd_notify(3) without libsystemd: sends `state` to $NOTIFY_SOCKET when set (Type=notify units).
void notify_systemd(const std::string& state);

}  // namespace tierce::base
