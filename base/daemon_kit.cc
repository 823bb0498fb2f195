// base/daemon_kit.cc — the daemon's life in the order of daemon_kit.h's steps.
#include "base/daemon_kit.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <utility>

namespace tierce::base {

DaemonKit::DaemonKit(DaemonSpec spec, DaemonMessages messages)
    : spec_(std::move(spec)), msg_(std::move(messages)) {}

DaemonKit::~DaemonKit() = default;

int DaemonKit::fail(int code, const std::string& line) {
  log_(LogLevel::Error, line);
  if (report_.detached()) {
    report_.failed(code, line);
  } else if (!spec_.to_stderr) {
    std::fprintf(stderr, "%s: %s\n", spec_.program.c_str(), line.c_str());
  }
  return code;
}

std::string DaemonKit::unwritable_dir(const std::string& file) {
  if (file.empty()) return "";
  std::string dir = std::filesystem::path(file).parent_path().string();
  if (dir.empty()) dir = ".";
  return ::access(dir.c_str(), W_OK) != 0 ? dir : "";
}

// Steps 1 and 2.
int DaemonKit::begin() {
  if (!spec_.foreground) {
    try {
      report_ = daemonize(spec_.program, spec_.to_stderr);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: cannot go to the background: %s; try --foreground\n",
                   spec_.program.c_str(), e.what());
      return kExitFailure;
    }
  }
  level_ = std::make_shared<std::atomic<LogLevel>>(spec_.log_level);
  log_ = level_filter(
      spec_.to_stderr ? stderr_sink(spec_.program, LogLevel::Debug) : syslog_sink(spec_.program),
      level_);
  if (msg_.starting) log_(LogLevel::Info, msg_.starting());
  if (spec_.user && ::geteuid() != 0) {
    if (!running_as(*spec_.user)) return fail(kExitFailure, msg_.user_mismatch(*spec_.user));
    spec_.user.reset();  // already that user: nothing to drop
  }
  return kExitOk;
}

// Step 3.
int DaemonKit::acquire_pid_file() {
  if (!spec_.pid_file.empty()) {
    pid_t stale = 0;
    try {
      pid_file_ = PidFile::acquire(spec_.pid_file, &stale);
    } catch (const AlreadyRunning& e) {
      return fail(kExitRunning, msg_.pid_file_held(e.pid()));
    } catch (const std::exception& e) {
      return fail(kExitFailure, msg_.pid_file_failed(e.what()));
    }
    if (stale > 0 && msg_.pid_file_stale) log_(LogLevel::Warn, msg_.pid_file_stale(stale));
  }
  if (spec_.clear_ready_file && !spec_.ready_file.empty()) ::unlink(spec_.ready_file.c_str());
  return kExitOk;
}

// Step 4. Blocked before the server starts its threads, which inherit the mask, so no thread is
// interrupted by them.
int DaemonKit::take_signals() {
  try {
    signals_ = SignalFd::take(spec_.signals);
  } catch (const std::system_error& e) {
    return fail(kExitFailure, msg_.signals_failed + e.what());
  }
  if (spec_.user) {
    try {
      set_no_new_privs();
    } catch (const std::exception& e) {
      return fail(kExitFailure, msg_.no_new_privs_failed + e.what());
    }
  }
  return kExitOk;
}

int DaemonKit::write_ready_file(const DaemonHooks& hooks) {
  if (spec_.ready_file.empty() || wrote_ready_) return kExitOk;
  try {
    write_file_atomically(spec_.ready_file, hooks.ready_text ? hooks.ready_text() : "");
    wrote_ready_ = true;
  } catch (const std::exception& e) {
    return fail(kExitFailure, msg_.ready_file_failed(e.what()));
  }
  return kExitOk;
}

// Step 6: what the daemon must still write or remove after the drop becomes the user's, then the
// daemon becomes the user for good.
int DaemonKit::drop(const DaemonHooks& hooks) {
  const Account& u = *spec_.user;
  try {
    pid_file_.chown_to(u.uid, u.gid);
    if (wrote_ready_) give_to(spec_.ready_file, u);
    if (hooks.hand_over) hooks.hand_over(u);
    drop_to(u);
  } catch (const std::exception& e) {
    if (wrote_ready_) ::unlink(spec_.ready_file.c_str());  // the daemon will not serve
    wrote_ready_ = false;
    return fail(kExitFailure, msg_.drop_failed + u.name + ": " + e.what());
  }
  log_(LogLevel::Info, msg_.running_as + u.name + " (uid " + std::to_string(u.uid) + ", gid " +
                           std::to_string(u.gid) + ") from now on");
  return kExitOk;
}

int DaemonKit::loop(const DaemonHooks& hooks) {
  for (;;) {
    if (hooks.wait) {
      if (!hooks.wait(signals_.fd())) continue;
    } else {
      pollfd p{signals_.fd(), POLLIN, 0};
      if (::poll(&p, 1, -1) <= 0) continue;  // EINTR
    }
    while (Signal sig = signals_.next()) {
      if (sig.number == SIGTERM || sig.number == SIGINT) {
        log_(LogLevel::Info, msg_.stopping + (sig.number == SIGTERM ? "SIGTERM" : "SIGINT") +
                                 " from pid " + std::to_string(sig.from) + ": stopping");
        return kExitOk;
      }
      if (sig.number == SIGHUP) {
        if (hooks.reload) hooks.reload();
      } else if (hooks.signal) {
        hooks.signal(sig);
      }
    }
  }
}

void DaemonKit::remove_ready_file() {
  if (!wrote_ready_ || !spec_.remove_ready_file) return;
  if (::unlink(spec_.ready_file.c_str()) != 0 && (errno == EACCES || errno == EPERM))
    (void)!::truncate(spec_.ready_file.c_str(), 0);  // dropped to a user who may not remove it
}

int DaemonKit::run(const DaemonHooks& hooks) {
  if (int code = begin(); code != kExitOk) return code;
  if (int code = acquire_pid_file(); code != kExitOk) return code;
  if (int code = take_signals(); code != kExitOk) return code;
  if (int code = hooks.start(*this); code != kExitOk) return code;
  if (spec_.user) {
    if (spec_.ready_before_drop)
      if (int code = write_ready_file(hooks); code != kExitOk) return code;
    if (int code = drop(hooks); code != kExitOk) return code;
  }
  if (hooks.started)
    if (int code = hooks.started(*this); code != kExitOk) return code;
  if (int code = write_ready_file(hooks); code != kExitOk) return code;
  report_.ready();
  notify_systemd("READY=1\nMAINPID=" + std::to_string(::getpid()));

  int code = kExitOk;
  if (hooks.serve) {
    code = hooks.serve(*this);
  } else if (!msg_.unexpected) {
    code = loop(hooks);
  } else {
    try {
      code = loop(hooks);
    } catch (const std::exception& e) {
      log_(LogLevel::Error, msg_.unexpected(e.what()));
      code = kExitFailure;
    }
  }
  if (spec_.notify_stopping) notify_systemd("STOPPING=1");
  if (hooks.stop) hooks.stop();
  remove_ready_file();
  pid_file_.release();
  if (!msg_.stopped.empty()) log_(LogLevel::Info, msg_.stopped);
  return code;
}

}  // namespace tierce::base
