// tools/tierce-lock/main.cc — tierce-lock: run a command while holding a Tierce lock, like
// flock(1) but cluster-wide (the lock is served by this node's tierce-lockd). The lock is held by
// this process's connection to lockd; it is released when COMMAND ends (or when this process
// dies). Exit codes and behaviour: the help text below.
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dlm/client.h"

#ifndef TIERCE_VERSION
#define TIERCE_VERSION "dev"
#endif

namespace {

using tierce::dlm::LockClient;
using tierce::dlm::LockError;
using tierce::dlm::Mode;
using tierce::dlm::Status;

// Exit codes (besides COMMAND's own status and the conflict code).
constexpr int kExitUsage = 2;
constexpr int kExitUnavailable = 69;  // EX_UNAVAILABLE: lockd unreachable or refused the lock
constexpr int kExitSoftware = 70;     // EX_SOFTWARE: internal error
constexpr int kExitLost = 75;         // EX_TEMPFAIL: the hold was lost while COMMAND ran
constexpr int kExitCannotRun = 126;
constexpr int kExitNotFound = 127;

const char* const kHelp = R"(Usage:
  tierce-lock [options] NAME COMMAND [ARG...]
  tierce-lock [options] NAME -c 'SHELL COMMAND'
  tierce-lock --status [--socket PATH]
  tierce-lock --metrics [--socket PATH]

Runs COMMAND while holding the Tierce lock NAME, like flock(1), except that the lock is
cluster-wide: it is served by this node's tierce-lockd and excludes holders on every node.
The lock is held by tierce-lock itself (its connection to lockd) and released when COMMAND
ends. NAME is 1 to 255 bytes.

Options:
  -x, --exclusive          exclusive lock (the default)
  -s, --shared             shared lock (any number of shared holders, no exclusive one)
  -n, --nonblock           fail at once, with the conflict code, if the lock is not free
  -w, --timeout SECONDS    fail, with the conflict code, if the lock is not granted within
                           SECONDS (decimals allowed; 0 is the same as -n). A grant that
                           lockd's lease made worthless (LeaseLost) is asked for again
  -E, --conflict-exit-code CODE
                           the exit code when -n or -w could not get the lock (default 1)
  -c, --command CMD        run CMD with "$SHELL -c" (/bin/sh when SHELL is unset), may also
                           follow NAME as in flock(1)
      --socket PATH        tierce-lockd's socket (default: $TIERCE_LOCKD_SOCKET, else
                           /run/tierce/lockd.sock)
      --on-lost ACTION     what to do when the hold is lost while COMMAND runs (lockd revoked
                           it because this node lost contact with the lock's home, or lockd
                           stopped or crashed): term = send SIGTERM to COMMAND (the default),
                           kill = send SIGKILL, ignore = let it run. A message goes to stderr
                           in every case.
      --status             print tierce-lockd's status report and exit
      --metrics            print tierce-lockd's metrics (Prometheus text format) and exit
  -v, --verbose            report on stderr when the lock is granted, with its token
  -h, --help               this text
  -V, --version            the version

COMMAND's environment gets:
  TIERCE_LOCK_NAME    the lock name
  TIERCE_LOCK_MODE    shared or exclusive
  TIERCE_LOCK_TOKEN   the fencing token of this grant (decimal): strictly increasing per lock;
                      pass it to the resource you protect so it can refuse older holders

Environment of tierce-lock: TIERCE_LOCKD_SOCKET (the default socket), TIERCE_LOCK_SPIN_US
(how long to poll for lockd's reply before sleeping, default 50; 0 on a host with one CPU).

Signals: SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to tierce-lock are
forwarded to COMMAND (those a terminal sends to its whole foreground group reach COMMAND
directly and are not sent twice). If tierce-lock is killed with SIGKILL, the lock is released
while COMMAND may still run.

Exit status:
  COMMAND's exit status, or 128+N when COMMAND was killed by signal N
  1 (or -E CODE)  -n / -w: the lock was not granted (held by someone else, or timed out)
  2    usage error, or an invalid lock name
  69   tierce-lockd is unreachable, or could not grant the lock (the lock's home node is down,
       a limit was reached, lockd is stopping, the connection dropped while waiting)
  70   internal error (a bug; the message says what)
  75   the hold was lost while COMMAND ran (see --on-lost); COMMAND's own status is printed
  126  COMMAND could not be executed
  127  COMMAND was not found
  --status, --metrics: 0, or 69 when lockd is unreachable (or, --metrics, too old to
  serve metrics).
)";

enum class OnLost { Term, Kill, Ignore };

struct Options {
  Mode mode = Mode::Exclusive;
  long timeout_ms = -1;  // -1 forever, 0 try
  int conflict_code = 1;
  std::string socket = LockClient::default_socket();
  OnLost on_lost = OnLost::Term;
  bool status = false;
  bool metrics = false;  // --status with flag METRICS
  bool verbose = false;
  std::optional<std::string> shell_command;
  std::string name;
  std::vector<std::string> command;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "tierce-lock: %s\nTry 'tierce-lock --help'.\n", msg.c_str());
  std::exit(kExitUsage);
}

Options parse(int argc, char** argv) {
  Options o;
  enum { kSocket = 1000, kOnLost, kStatus, kMetrics };
  static const option longs[] = {
      {"exclusive", no_argument, nullptr, 'x'},
      {"shared", no_argument, nullptr, 's'},
      {"nonblock", no_argument, nullptr, 'n'},
      {"timeout", required_argument, nullptr, 'w'},
      {"wait", required_argument, nullptr, 'w'},
      {"conflict-exit-code", required_argument, nullptr, 'E'},
      {"command", required_argument, nullptr, 'c'},
      {"socket", required_argument, nullptr, kSocket},
      {"on-lost", required_argument, nullptr, kOnLost},
      {"status", no_argument, nullptr, kStatus},
      {"metrics", no_argument, nullptr, kMetrics},
      {"verbose", no_argument, nullptr, 'v'},
      {"help", no_argument, nullptr, 'h'},
      {"version", no_argument, nullptr, 'V'},
      {nullptr, 0, nullptr, 0},
  };
  opterr = 0;
  int ch;
  // '+': stop at the first non-option (NAME): COMMAND's own options are not ours.
  while ((ch = getopt_long(argc, argv, "+xsnw:E:c:vhV", longs, nullptr)) != -1) {
    switch (ch) {
      case 'x':
        o.mode = Mode::Exclusive;
        break;
      case 's':
        o.mode = Mode::Shared;
        break;
      case 'n':
        o.timeout_ms = 0;
        break;
      case 'w': {
        char* end = nullptr;
        errno = 0;
        double s = std::strtod(optarg, &end);
        if (errno || end == optarg || *end || !(s >= 0) || s > 2e6)
          usage_error(std::string("invalid timeout '") + optarg +
                      "': give seconds, e.g. -w 10 or -w 0.5");
        o.timeout_ms = long(std::llround(s * 1000));
        break;
      }
      case 'E': {
        char* end = nullptr;
        long v = std::strtol(optarg, &end, 10);
        if (end == optarg || *end || v < 0 || v > 255)
          usage_error(std::string("invalid exit code '") + optarg + "': give 0..255");
        o.conflict_code = int(v);
        break;
      }
      case 'c':
        o.shell_command = optarg;
        break;
      case kSocket:
        o.socket = optarg;
        break;
      case kOnLost: {
        std::string v = optarg;
        if (v == "term")
          o.on_lost = OnLost::Term;
        else if (v == "kill")
          o.on_lost = OnLost::Kill;
        else if (v == "ignore")
          o.on_lost = OnLost::Ignore;
        else
          usage_error("invalid --on-lost '" + v + "': term, kill or ignore");
        break;
      }
      case kStatus:
        o.status = true;
        break;
      case kMetrics:
        o.status = o.metrics = true;
        break;
      case 'v':
        o.verbose = true;
        break;
      case 'h':
        std::fputs(kHelp, stdout);
        std::exit(0);
      case 'V':
        std::printf("tierce-lock %s\n", TIERCE_VERSION);
        std::exit(0);
      default:
        if (optopt && optopt < 256)
          usage_error(std::string("invalid option or missing argument: -") + char(optopt));
        usage_error(std::string("invalid option or missing argument: ") + argv[optind - 1]);
    }
  }
  if (o.status) {
    if (optind != argc)
      usage_error(std::string(o.metrics ? "--metrics" : "--status") + " takes no NAME or COMMAND");
    return o;
  }
  if (optind >= argc) usage_error("no lock NAME given");
  o.name = argv[optind++];
  // flock(1) style: NAME -c 'command'.
  if (!o.shell_command && optind < argc &&
      (std::strcmp(argv[optind], "-c") == 0 || std::strcmp(argv[optind], "--command") == 0)) {
    if (optind + 1 >= argc) usage_error("-c needs a shell command");
    o.shell_command = argv[optind + 1];
    optind += 2;
  }
  if (o.shell_command) {
    if (optind != argc) usage_error("-c takes one shell command: quote it");
    const char* sh = std::getenv("SHELL");
    o.command = {sh && *sh ? sh : "/bin/sh", "-c", *o.shell_command};
  } else {
    if (optind >= argc) usage_error("no COMMAND given to run under lock '" + o.name + "'");
    for (int i = optind; i < argc; ++i) o.command.emplace_back(argv[i]);
  }
  return o;
}

int exit_code_of(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return kExitSoftware;
}

std::string describe(int wstatus) {
  if (WIFEXITED(wstatus)) return "exited with status " + std::to_string(WEXITSTATUS(wstatus));
  if (WIFSIGNALED(wstatus))
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(wstatus)) + " (" +
           strsignal(WTERMSIG(wstatus)) + ")";
  return "ended";
}

int lock_error_exit(const Options& o, const LockError& e) {
  switch (e.status()) {
    case Status::Timeout:
    case Status::WouldBlock:
      if (o.verbose) std::fprintf(stderr, "tierce-lock: %s\n", e.what());
      return o.conflict_code;
    case Status::LeaseLost:  // still so when the wait ran out (run() asks again until then)
      std::fprintf(stderr, "tierce-lock: %s\n", e.what());
      return o.conflict_code;
    case Status::BadName:
      std::fprintf(stderr, "tierce-lock: invalid lock name: %s\n", e.what());
      return kExitUsage;
    case Status::BadRequest:
      std::fprintf(stderr, "tierce-lock: %s\n", e.what());
      return kExitSoftware;
    default:
      std::fprintf(stderr, "tierce-lock: %s\n", e.what());
      return kExitUnavailable;
  }
}

int run_status(const Options& o) {
  try {
    LockClient c(o.socket);
    std::string text = o.metrics ? c.metrics() : c.status();
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (!text.empty() && text.back() != '\n') std::fputc('\n', stdout);
    return 0;
  } catch (const LockError& e) {
    std::fprintf(stderr, "tierce-lock: %s%s\n", e.what(),
                 o.metrics && e.status() == Status::BadRequest
                     ? " (this tierce-lockd is older than --metrics: update it)"
                     : "");
    return kExitUnavailable;
  }
}

// Takes the lock into *held; the exit code when it cannot (held by someone else for a try-lock,
// timed out, refused). LeaseLost while acquiring: a grant arrived after its lockd's lease on the
// lock's home ended (lockd was frozen or cut off for a moment) and was released unused.
// Transient: asked again while the wait allows (a try-lock: a few times), as a user of -w expects.
std::optional<int> acquire(LockClient& client, const Options& o, tierce::dlm::HeldLock* held) {
  using SteadyClock = std::chrono::steady_clock;
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(std::max(o.timeout_ms, 0L));
  for (int attempt = 1;; ++attempt) {
    try {
      if (o.timeout_ms == 0) {
        auto t = client.try_lock(o.name, o.mode);
        if (!t) {
          if (o.verbose)
            std::fprintf(stderr, "tierce-lock: lock '%s' is held by someone else\n", o.name.c_str());
          return o.conflict_code;
        }
        *held = std::move(*t);
      } else {
        auto wait = std::chrono::milliseconds(o.timeout_ms);
        if (o.timeout_ms > 0)
          wait = std::max(std::chrono::milliseconds(1),
                          std::chrono::duration_cast<std::chrono::milliseconds>(
                              deadline - SteadyClock::now()));
        *held = client.lock(o.name, o.mode, wait);
      }
      return std::nullopt;
    } catch (const LockError& e) {
      const bool again = e.status() == Status::LeaseLost &&
                         (o.timeout_ms < 0 || (o.timeout_ms == 0 && attempt < 3) ||
                          (o.timeout_ms > 0 && SteadyClock::now() < deadline));
      if (!again) return lock_error_exit(o, e);
      if (o.verbose) std::fprintf(stderr, "tierce-lock: %s (asking again)\n", e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

// Signals forwarded to COMMAND (SIGCHLD is blocked too: it comes through the signalfd).
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

int run(const Options& o) {
  std::optional<LockClient> client;
  try {
    client.emplace(o.socket);
  } catch (const LockError& e) {
    std::fprintf(stderr, "tierce-lock: %s\n", e.what());
    return kExitUnavailable;
  }
  // Waiting for the lock: the signals keep their default action (tierce-lock dies, lockd sees the
  // connection close and withdraws the request).
  tierce::dlm::HeldLock held;
  if (auto failed = acquire(*client, o, &held)) return *failed;
  const uint64_t hold = held.id();
  if (o.verbose)
    std::fprintf(stderr, "tierce-lock: lock '%s' (%s) granted, token %llu\n", o.name.c_str(),
                 std::string(tierce::dlm::to_string(o.mode)).c_str(),
                 (unsigned long long)held.token());

  sigset_t mask, old;
  sigemptyset(&mask);
  for (int s : kForwarded) sigaddset(&mask, s);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, &old);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  int errpipe[2];
  if (sfd < 0 || pipe2(errpipe, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "tierce-lock: signalfd/pipe: %s\n", std::strerror(errno));
    return kExitSoftware;
  }
  setenv("TIERCE_LOCK_NAME", o.name.c_str(), 1);
  setenv("TIERCE_LOCK_MODE", std::string(tierce::dlm::to_string(o.mode)).c_str(), 1);
  setenv("TIERCE_LOCK_TOKEN", std::to_string(held.token()).c_str(), 1);
  std::vector<char*> argv;
  for (auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "tierce-lock: fork: %s\n", std::strerror(errno));
    return kExitSoftware;
  }
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &old, nullptr);
    execvp(argv[0], argv.data());
    int e = errno;
    [[maybe_unused]] ssize_t n = write(errpipe[1], &e, sizeof e);
    _exit(e == ENOENT ? kExitNotFound : kExitCannotRun);
  }
  close(errpipe[1]);
  int exec_errno = 0;
  ssize_t got;
  do {
    got = read(errpipe[0], &exec_errno, sizeof exec_errno);  // EOF: exec succeeded
  } while (got < 0 && errno == EINTR);
  close(errpipe[0]);
  if (got == ssize_t(sizeof exec_errno)) {
    std::fprintf(stderr, "tierce-lock: cannot run '%s': %s\n", o.command[0].c_str(),
                 std::strerror(exec_errno));
    int st;
    while (waitpid(child, &st, 0) < 0 && errno == EINTR) {
    }
    return exec_errno == ENOENT ? kExitNotFound : kExitCannotRun;
  }

  bool lost = false;
  auto check_lost = [&]() {
    std::string why;
    try {
      // Always drain (even once lost): frames left unread would keep event_fd readable.
      for (auto& r : client->revoked())
        if (r.hold == hold) why = r.why;
      if (why.empty() && !client->connected()) why = "the connection to tierce-lockd dropped";
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (why.empty() || lost) return;
    lost = true;
    const char* action = o.on_lost == OnLost::Term   ? "sending SIGTERM to"
                         : o.on_lost == OnLost::Kill ? "sending SIGKILL to"
                                                     : "not signalling (--on-lost=ignore)";
    std::fprintf(stderr,
                 "tierce-lock: lock '%s' was LOST while the command ran: %s; %s the command "
                 "(pid %d)\n",
                 o.name.c_str(), why.c_str(), action, int(child));
    if (o.on_lost == OnLost::Term) kill(child, SIGTERM);
    if (o.on_lost == OnLost::Kill) kill(child, SIGKILL);
  };

  int wstatus = 0;
  for (;;) {
    pollfd p[2] = {{sfd, POLLIN, 0}, {client->event_fd(), POLLIN, 0}};
    int r = poll(p, 2, -1);
    if (r < 0 && errno != EINTR) {
      std::fprintf(stderr, "tierce-lock: poll: %s\n", std::strerror(errno));
      break;
    }
    if (p[1].revents) check_lost();
    bool exited = false;
    if (p[0].revents) {
      signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == ssize_t(sizeof si)) {
        if (int(si.ssi_signo) == SIGCHLD) continue;
        // A terminal signals its whole foreground group: COMMAND got that one already.
        if (si.ssi_code == SI_KERNEL) continue;
        kill(child, int(si.ssi_signo));
      }
      pid_t w;
      while ((w = waitpid(child, &wstatus, WNOHANG)) < 0 && errno == EINTR) {
      }
      exited = w == child;
    }
    if (exited) break;
  }

  check_lost();  // a revocation may have raced with COMMAND's end
  if (!lost) {
    try {
      held.unlock();
    } catch (const LockError& e) {
      // The hold was gone before we released it: COMMAND may have run unprotected at the end.
      lost = true;
      std::fprintf(stderr, "tierce-lock: lock '%s' was lost before the command ended: %s\n",
                   o.name.c_str(), e.what());
    }
  }
  if (lost) {
    std::fprintf(stderr, "tierce-lock: the command %s; exiting with %d (lock lost)\n",
                 describe(wstatus).c_str(), kExitLost);
    return kExitLost;
  }
  return exit_code_of(wstatus);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (o.status) return run_status(o);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tierce-lock: internal error: %s\n", e.what());
    return kExitSoftware;
  }
}
