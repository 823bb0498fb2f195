// base/signals.cc
#include "base/signals.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>

#include <cerrno>

#include "base/errors.h"

namespace tierce::base {

SignalFd SignalFd::take(const std::vector<int>& signals) {
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  for (int s : signals) sigaddset(&set, s);
  if (::sigprocmask(SIG_BLOCK, &set, nullptr) != 0) throw_errno("sigprocmask");
  int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) throw_errno("signalfd");
  SignalFd s;
  s.fd_ = Fd(fd);
  return s;
}

Signal SignalFd::next() {
  signalfd_siginfo si;
  for (;;) {
    ssize_t n = ::read(fd_.get(), &si, sizeof si);
    if (n == ssize_t(sizeof si)) return Signal{int(si.ssi_signo), pid_t(si.ssi_pid)};
    if (n < 0 && errno == EINTR) continue;
    return Signal{};  // EAGAIN: none pending
  }
}

Signal SignalFd::wait(int timeout_ms) {
  pollfd p{fd_.get(), POLLIN, 0};
  for (;;) {
    int n = ::poll(&p, 1, timeout_ms);
    if (n < 0 && errno == EINTR) continue;
    return n > 0 ? next() : Signal{};
  }
}

}  // namespace tierce::base
