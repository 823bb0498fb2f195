// base/signals.h — signals taken synchronously: blocked, then read from a signalfd in the
// daemon's own loop (no handler runs between two instructions of the daemon's code).
#pragma once

#include <sys/types.h>

#include <vector>

#include "base/fd.h"

namespace tierce::base {

struct Signal {
  int number = 0;  // 0: none
  pid_t from = 0;  // the sender's pid (0 for the kernel's own)
  explicit operator bool() const { return number != 0; }
};

class SignalFd {
 public:
  // Blocks `signals` in the calling thread (threads started afterwards inherit the mask, so none
  // of them is interrupted) and opens a non-blocking, close-on-exec signalfd for them; ignores
  // SIGPIPE (a peer gone is an EPIPE to handle, not a death). Throws std::system_error.
  static SignalFd take(const std::vector<int>& signals);

  int fd() const { return fd_.get(); }
  // The next pending signal; none (false) when none is pending.
  Signal next();
  // Waits up to `timeout_ms` (-1: no limit) for a signal, then next(). EINTR is retried.
  Signal wait(int timeout_ms);

 private:
  Fd fd_;
};

}  // namespace tierce::base
