// base/daemon_kit.h — the start-up, signal loop and stop of a Tierce daemon, written once for
// tierce-memd, tierce-lockd and tierce-ftpd (the model: Seastar's app_template). The program
// supplies what differs (its messages with their ids, its server, its reload); the kit runs the
// sequence over base/daemon.h, base/signals.h and base/privileges.h:
//
//   1. background (daemonize) or foreground; the log sink; the starting line
//   2. `user`: started as root, the drop comes later; as that user already, nothing to drop; as
//      anyone else, a startup failure (exit 1)
//   3. the pid file (exit 3 while a live process holds it); a ready file left from before removed
//   4. the signals, through a signalfd (blocked before any thread starts); no-new-privs when a drop
//      is coming (per thread: before the server starts its threads)
//   5. hooks.start: the server, still with the start's privileges
//   6. the drop: the pid file, the ready file and hooks.hand_over's files to the user, then
//      base::drop_to; a ready file written already is removed when it fails
//   7. hooks.started: the rest of the start as the user
//   8. the ready file, the starting process's report, READY=1 to systemd
//   9. the loop: TERM/INT stop, HUP is hooks.reload, the others hooks.signal; or hooks.serve
//  10. the stop: STOPPING=1, hooks.stop, the ready file and the pid file removed, the stopped line
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/daemon.h"
#include "base/log.h"
#include "base/privileges.h"
#include "base/signals.h"

namespace tierce::base {

struct DaemonSpec {
  std::string program;      // "tierce-memd": the syslog ident, the stderr prefix
  bool foreground = false;  // no daemonize
  bool to_stderr = true;    // log to stderr (kept open in the background), else to syslog
  LogLevel log_level = LogLevel::Info;
  std::optional<Account> user;     // resolved by the program; nullopt: no drop
  std::string pid_file;            // "": none
  std::string ready_file;          // "": none
  bool clear_ready_file = false;   // step 3: never let a launcher read an old one
  bool ready_before_drop = false;  // with a drop, written as root (its directory is root's)
  bool remove_ready_file = false;  // at a clean stop (emptied when the user may not remove it)
  bool notify_stopping = false;    // STOPPING=1 to systemd at a stop
  std::vector<int> signals;        // taken by the signalfd; SIGTERM and SIGINT stop
};

// The program's own lines, each beginning with its message id (docs/msgids.txt). A prefix ends
// where the kit appends what it knows (an errno text, an account name). Empty: not logged.
struct DaemonMessages {
  std::function<std::string()> starting;  // step 1 (after daemonize: the daemon's pid)
  std::function<std::string(const Account& user)> user_mismatch;  // step 2, exit 1
  std::function<std::string(pid_t holder)> pid_file_held;         // exit 3 (holder 0: unknown)
  std::function<std::string(const std::string& why)> pid_file_failed;
  std::function<std::string(pid_t stale)> pid_file_stale;  // a warning; unset: said nowhere
  std::string signals_failed;                              // prefix of the errno text
  std::string no_new_privs_failed;                         // prefix of the error
  std::string drop_failed;                                 // prefix of "NAME: error"
  std::string running_as;  // prefix of "NAME (uid U, gid G) from now on"
  std::function<std::string(const std::string& why)> ready_file_failed;
  std::string stopping;  // prefix of "SIGTERM from pid N: stopping"
  std::string stopped;   // step 10, as is
  // An exception out of the loop: the line (exit 1, then the stop). Unset: it propagates.
  std::function<std::string(const std::string& what)> unexpected;
};

class DaemonKit;

// What the program does at each step. Only start is required. A hook that returns an int returns
// kExitOk to go on, or DaemonKit::fail's result to stop the start.
struct DaemonHooks {
  std::function<int(DaemonKit&)> start;           // step 5
  std::function<void(const Account&)> hand_over;  // step 6, before the drop; throws
  std::function<int(DaemonKit&)> started;         // step 7
  std::function<std::string()> ready_text;        // the ready file's content
  // Serves until the signalfd is readable (true) or for a while (false: called again). Unset: a
  // plain wait on the signalfd.
  std::function<bool(int signal_fd)> wait;
  std::function<void()> reload;          // SIGHUP
  std::function<void(Signal)> signal;    // any other signal but SIGTERM and SIGINT
  std::function<int(DaemonKit&)> serve;  // instead of the loop: runs until the stop, its exit code
  std::function<void()> stop;            // step 10, before the files go
};

class DaemonKit {
 public:
  DaemonKit(DaemonSpec spec, DaemonMessages messages);
  DaemonKit(const DaemonKit&) = delete;
  DaemonKit& operator=(const DaemonKit&) = delete;
  ~DaemonKit();  // a pid file still held is removed (a start that failed)

  // The whole life; returns the exit code. Once.
  int run(const DaemonHooks& hooks);

  // A startup failure: logged, told to the starting process, and shown on the terminal when the
  // log goes to syslog. Returns `code`.
  int fail(int code, const std::string& line);

  const LogSink& log() const { return log_; }
  const std::shared_ptr<std::atomic<LogLevel>>& level() const { return level_; }
  // The account the daemon drops to (or dropped to); nullopt when there is no drop.
  const std::optional<Account>& user() const { return spec_.user; }
  SignalFd& signals() { return signals_; }

  // The directory of `file` when `file` is set and its directory is not writable (after a drop:
  // `file` cannot be removed at stop); "" otherwise.
  static std::string unwritable_dir(const std::string& file);

 private:
  int begin();
  int acquire_pid_file();
  int take_signals();
  int drop(const DaemonHooks& hooks);
  int write_ready_file(const DaemonHooks& hooks);
  int loop(const DaemonHooks& hooks);
  void remove_ready_file();

  DaemonSpec spec_;
  DaemonMessages msg_;
  StartupReport report_;
  std::shared_ptr<std::atomic<LogLevel>> level_;
  LogSink log_;
  PidFile pid_file_;
  SignalFd signals_;
  bool wrote_ready_ = false;
};

}  // namespace tierce::base
