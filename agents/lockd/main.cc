// agents/lockd/main.cc — tierce-lockd, the process: command line, daemon start, pid file,
// signals. The agent itself is agents/lockd/lockd.h; docs/dlm.md is the user's reference.
#include <getopt.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "agents/lockd/lockd.h"
#include "base/daemon.h"
#include "base/errors.h"
#include "base/log.h"
#include "base/privileges.h"
#include "base/signals.h"
#include "cluster/topology.h"
#include "fabric/auth.h"
#include "fabric/fabric.h"

#ifndef TIERCE_VERSION
#define TIERCE_VERSION "0.0.0"
#endif

namespace tierce::lockd {
namespace {

constexpr const char* kProgram = "tierce-lockd";
using base::kExitFailure;
using base::kExitOk;
using base::kExitRunning;
using base::kExitUsage;

void usage(FILE* out) {
  std::fprintf(
      out,
      "Usage: %s -t TOPOLOGY -n NODE [options]\n"
      "The node's lock manager agent: serves local clients (tierce-lock, the C/C++ APIs) on a\n"
      "unix socket and runs the distributed lock protocol with the other lockds (docs/dlm.md).\n"
      "\n"
      "  -t, --topology FILE   cluster topology (members: the [[node]]s with lockd = [...];\n"
      "                        algorithm, lease and heartbeat: its [dlm] table)\n"
      "  -n, --node NAME       this node's name in the topology\n"
      "  -s, --socket PATH     local client socket (default /run/tierce/lockd.sock)\n"
      "  -d, --state-dir DIR   where the restart counter (epoch) lives; keep it across restarts:\n"
      "                        fencing tokens stay increasing only with it\n"
      "                        (default /var/lib/tierce/lockd-NODE)\n"
      "  -p, --pid-file FILE   write and lock a pid file\n"
      "      --socket-mode OCT permissions of the socket (default 0660)\n"
      "      --user NAME       started as root: once the socket is bound and the pid file\n"
      "                        written, drop to this account for good (docs/dlm.md)\n"
      "      --max-locks-per-client N   holds + waiting requests of one connection\n"
      "                        (default 4096); beyond: TooMany\n"
      "      --max-locks-per-uid N      the same over all connections of one peer uid\n"
      "                        (default 16384); beyond: TooMany\n"
      "      --max-clients-per-uid N    connections of one peer uid (default 1024)\n"
      "  -f, --foreground      stay in the foreground, log to stderr\n"
      "  -v, --verbose         log debug lines too\n"
      "      --check           validate the topology, the node and the secret, then exit\n"
      "  -V, --version         print the version and exit\n"
      "  -h, --help            print this help and exit\n"
      "\n"
      "Signals: TERM/INT stop (local holds are released, peers see the node leave),\n"
      "         USR1 logs the status.\n"
      "Exit codes: 0 clean stop, 1 runtime failure, 2 bad usage or configuration,\n"
      "            3 another tierce-lockd holds the pid file.\n",
      kProgram);
}

struct Options {
  std::string topology, node, socket = "/run/tierce/lockd.sock", state_dir, pid_file, user;
  mode_t socket_mode = 0660;
  size_t max_locks_per_client = 4096, max_locks_per_uid = 16384, max_clients_per_uid = 1024;
  bool foreground = false, verbose = false, check = false;
};

std::optional<int> parse(int argc, char** argv, Options* o) {
  static const option longopts[] = {
      {"topology", required_argument, nullptr, 't'}, {"node", required_argument, nullptr, 'n'},
      {"socket", required_argument, nullptr, 's'},   {"state-dir", required_argument, nullptr, 'd'},
      {"pid-file", required_argument, nullptr, 'p'}, {"socket-mode", required_argument, nullptr, 'm'},
      {"foreground", no_argument, nullptr, 'f'},     {"verbose", no_argument, nullptr, 'v'},
      {"check", no_argument, nullptr, 'k'},          {"version", no_argument, nullptr, 'V'},
      {"max-locks-per-client", required_argument, nullptr, 'L'},
      {"max-locks-per-uid", required_argument, nullptr, 'U'},
      {"max-clients-per-uid", required_argument, nullptr, 'C'},
      {"user", required_argument, nullptr, 'u'},
      {"help", no_argument, nullptr, 'h'},           {nullptr, 0, nullptr, 0}};
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":t:n:s:d:p:fvVh", longopts, nullptr)) != -1) {
    switch (c) {
      case 't': o->topology = optarg; break;
      case 'n': o->node = optarg; break;
      case 's': o->socket = optarg; break;
      case 'd': o->state_dir = optarg; break;
      case 'p': o->pid_file = optarg; break;
      case 'u':
        if (!*optarg) {
          std::fprintf(stderr, "%s: --user wants an account name\n", kProgram);
          return kExitUsage;
        }
        o->user = optarg;
        break;
      case 'm': {
        char* end = nullptr;
        unsigned long m = std::strtoul(optarg, &end, 8);
        if (!*optarg || *end || m > 0777) {
          std::fprintf(stderr, "%s: --socket-mode wants an octal mode like 0660, not '%s'\n",
                       kProgram, optarg);
          return kExitUsage;
        }
        o->socket_mode = mode_t(m);
        break;
      }
      case 'L':
      case 'U':
      case 'C': {
        char* end = nullptr;
        errno = 0;
        unsigned long long v = std::strtoull(optarg, &end, 10);
        if (!*optarg || *end || errno || v < 1 || v > (1ull << 30) || optarg[0] == '-') {
          const char* name = c == 'L'   ? "--max-locks-per-client"
                             : c == 'U' ? "--max-locks-per-uid"
                                        : "--max-clients-per-uid";
          std::fprintf(stderr, "%s: %s wants a number 1..%llu, not '%s'\n", kProgram, name,
                       1ull << 30, optarg);
          return kExitUsage;
        }
        (c == 'L'   ? o->max_locks_per_client
         : c == 'U' ? o->max_locks_per_uid
                    : o->max_clients_per_uid) = size_t(v);
        break;
      }
      case 'f': o->foreground = true; break;
      case 'v': o->verbose = true; break;
      case 'k': o->check = true; break;
      case 'V': std::printf("%s %s\n", kProgram, TIERCE_VERSION); return kExitOk;
      case 'h': usage(stdout); return kExitOk;
      case ':':
        std::fprintf(stderr, "%s: option %s needs a value; see %s --help\n", kProgram,
                     argv[optind - 1], kProgram);
        return kExitUsage;
      default:
        std::fprintf(stderr, "%s: unknown option '%s'; see %s --help\n", kProgram,
                     argv[optind - 1], kProgram);
        return kExitUsage;
    }
  }
  if (optind < argc) {
    std::fprintf(stderr, "%s: unexpected argument '%s'\n", kProgram, argv[optind]);
    return kExitUsage;
  }
  if (o->topology.empty() || o->node.empty()) {
    std::fprintf(stderr, "%s: -t TOPOLOGY and -n NODE are required; see %s --help\n", kProgram,
                 kProgram);
    return kExitUsage;
  }
  if (o->state_dir.empty()) o->state_dir = "/var/lib/tierce/lockd-" + o->node;
  return std::nullopt;
}

int run(const Options& o) {
  cluster::Topology topo;
  fabric::Secret secret;
  try {
    topo = cluster::Topology::load(o.topology);
    (void)topo.rank_of(o.node);
    for (const auto* n : topo.lockd_nodes()) (void)topo.lockd_uri_of(*n);
    secret = topo.secret();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kProgram, e.what());
    return kExitUsage;
  }
  // --user: resolved now, so an unknown account is a usage error (exit 2) and nothing needs NSS
  // after the drop.
  std::optional<base::Account> user;
  if (!o.user.empty()) {
    base::Account a;
    std::string why;
    if (!base::lookup_account(o.user, &a, &why)) {
      std::fprintf(stderr,
                   "%s: --user \"%s\": %s; create the account (useradd --system %s) or name "
                   "another one\n",
                   kProgram, o.user.c_str(), why.c_str(), o.user.c_str());
      return kExitUsage;
    }
    if (a.uid == 0) {
      std::fprintf(stderr,
                   "%s: --user \"%s\" is root (uid 0): nothing would be dropped; name an "
                   "unprivileged account or leave --user out\n",
                   kProgram, o.user.c_str());
      return kExitUsage;
    }
    user = std::move(a);
  }
  if (o.check) {
    std::printf("%s: %s is fine: node %s is member %u of %zu (%s)\n", kProgram, o.topology.c_str(),
                o.node.c_str(), topo.rank_of(o.node), topo.lockd_nodes().size(),
                std::string(cluster::to_string(topo.dlm.algorithm)).c_str());
    return kExitOk;
  }
  base::StartupReport report;
  if (!o.foreground) {
    try {
      report = base::daemonize(kProgram, false);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: cannot go to the background: %s; try --foreground\n", kProgram,
                   e.what());
      return kExitFailure;
    }
  }
  auto level = std::make_shared<std::atomic<fabric::LogLevel>>(o.verbose ? fabric::LogLevel::Debug
                                                                         : fabric::LogLevel::Info);
  fabric::LogSink log = base::level_filter(
      o.foreground ? fabric::stderr_sink(kProgram, fabric::LogLevel::Debug)
                   : base::syslog_sink(kProgram),
      level);
  auto fail = [&](int code, const std::string& line) {
    log(fabric::LogLevel::Error, line);
    if (report.detached()) report.failed(code, line);
    return code;
  };
  if (user && ::geteuid() != 0) {
    if (!base::running_as(*user))
      return fail(kExitFailure, "LOCKD0040 --user " + user->name + " asks to drop to uid " +
                                    std::to_string(user->uid) + ", but tierce-lockd runs as uid " +
                                    std::to_string(::geteuid()) +
                                    ", not root: start it as root or as " + user->name +
                                    ", or leave --user out");
    user.reset();  // already that user: nothing to drop
  }
  base::PidFile pid;
  if (!o.pid_file.empty()) {
    pid_t stale = 0;
    try {
      pid = base::PidFile::acquire(o.pid_file, &stale);
    } catch (const base::AlreadyRunning& e) {
      return fail(kExitRunning, "LOCKD0006 another tierce-lockd holds " + o.pid_file +
                                    (e.pid() > 0 ? " (pid " + std::to_string(e.pid()) + ")" : ""));
    } catch (const std::exception& e) {
      return fail(kExitFailure, std::string("LOCKD0008 cannot write the pid file: ") + e.what());
    }
  }
  base::SignalFd signals;
  try {
    signals = base::SignalFd::take({SIGTERM, SIGINT, SIGHUP, SIGUSR1});
  } catch (const std::system_error& e) {
    return fail(kExitFailure, std::string("LOCKD0007 cannot set up signal handling: ") + e.what());
  }

  if (user) {
    // Before lockd starts its threads, so that every one of them carries it (per-thread).
    try {
      base::set_no_new_privs();
    } catch (const std::exception& e) {
      return fail(kExitFailure, std::string("LOCKD0041 ") + e.what());
    }
  }
  std::unique_ptr<Lockd> lockd;
  try {
    LockdOptions lo;
    lo.socket_path = o.socket;
    lo.state_dir = o.state_dir;
    lo.ipc.socket_mode = o.socket_mode;
    lo.ipc.max_holds_per_client = o.max_locks_per_client;
    lo.ipc.max_locks_per_uid = o.max_locks_per_uid;
    lo.ipc.max_clients_per_uid = o.max_clients_per_uid;
    lo.log = log;
    lockd = std::make_unique<Lockd>(topo, o.node, secret, lo);
  } catch (const std::exception& e) {
    return fail(kExitFailure, std::string("LOCKD0005 cannot start: ") + e.what());
  }
  if (user) {
    // Everything that needed root is done (socket bound, state dir's epoch written, pid file).
    // The socket keeps its group and mode (who may lock); its owner becomes the user, and so does
    // the pid file's, so both stay the daemon's to write. Removing them at stop needs their
    // directory to be writable by the user; otherwise the pid file is emptied and the socket is
    // left for the next start to replace (docs/dlm.md "Running as a user").
    try {
      pid.chown_to(user->uid, user->gid);
      base::give_to(o.socket, *user, /*keep_group=*/true);
      // The fabric socket of a shm topology too (a sticky directory lets only its owner remove it).
      fabric::Address a = fabric::parse_address(topo.lockd_uri_of(topo.node(o.node)));
      if (a.transport == fabric::Transport::Shm) base::give_to(a.path, *user, true);
      base::drop_to(*user);
    } catch (const std::exception& e) {
      return fail(kExitFailure,
                  "LOCKD0041 cannot drop privileges to user " + user->name + ": " + e.what());
    }
    log(fabric::LogLevel::Info, "LOCKD0042 running as user " + user->name + " (uid " +
                                    std::to_string(user->uid) + ", gid " +
                                    std::to_string(user->gid) + ") from now on");
    for (const std::string& f : {o.pid_file, o.socket}) {
      if (f.empty()) continue;
      size_t slash = f.find_last_of('/');
      std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : f.substr(0, slash);
      if (::access(dir.c_str(), W_OK) != 0)
        log(fabric::LogLevel::Warn,
            "LOCKD0043 user " + user->name + " cannot write " + dir + ": " + f +
                " will not be removed at stop (a pid file is emptied instead); make the "
                "directory the user's (e.g. install -d -o " + user->name + " " + dir + ")");
    }
  }
  report.ready();
  base::notify_systemd("READY=1\nMAINPID=" + std::to_string(::getpid()));
  for (;;) {
    base::Signal sig = signals.wait(-1);
    if (!sig) continue;
    if (sig.number == SIGUSR1) {
      log(fabric::LogLevel::Info, "LOCKD0004 status:\n" + lockd->status_text());
      continue;
    }
    if (sig.number == SIGHUP) {
      log(fabric::LogLevel::Info,
          "LOCKD0009 SIGHUP: tierce-lockd has nothing to reload; membership changes need a "
          "restart of every lockd with the new topology");
      continue;
    }
    log(fabric::LogLevel::Info, std::string("LOCKD0003 received ") +
                                    (sig.number == SIGTERM ? "SIGTERM" : "SIGINT") + " from pid " +
                                    std::to_string(sig.from) + ": stopping");
    break;
  }
  lockd->stop();
  return kExitOk;
}

}  // namespace
}  // namespace tierce::lockd

int main(int argc, char** argv) {
  tierce::lockd::Options o;
  if (auto code = tierce::lockd::parse(argc, argv, &o)) return *code;
  return tierce::lockd::run(o);
}
