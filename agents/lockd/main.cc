// agents/lockd/main.cc — tierce-lockd, the process: command line, then what lockd brings to the
// daemon kit (base/daemon_kit.h: start, pid file, signals, loop). The agent itself is
// agents/lockd/lockd.h; docs/dlm.md is the user's reference.
#include <getopt.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agents/lockd/config.h"
#include "agents/lockd/lockd.h"
#include "base/config.h"
#include "base/daemon.h"
#include "base/daemon_kit.h"
#include "base/errors.h"
#include "base/log.h"
#include "base/metrics.h"
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
      "       %s --config FILE [options]\n"
      "The node's lock manager agent: serves local clients (tierce-lock, the C/C++ APIs) on a\n"
      "unix socket and runs the distributed lock protocol with the other lockds (docs/dlm.md).\n"
      "\n"
      "  -c, --config FILE     settings file (TOML, a [lockd] table; see docs/dlm.md and\n"
      "                        conf/lockd.toml): every setting below has a key of the same name\n"
      "                        (max_locks_per_uid, ...); a flag given here overrides the file\n"
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
      "      --protection P    fabric tcp frames between lockds: mac (default), encrypt, none\n"
      "      --max-preauth-frame N      fabric: bytes a frame may claim before authentication\n"
      "                        (64..65536, default 256)\n"
      "      --max-connections N        fabric: connections served at once (default 4096)\n"
      "      --max-connections-per-ip N fabric tcp: connections from one address (default 1024,\n"
      "                        0 = no limit)\n"
      "      --spin-us N       after a frame, poll this long for the next one before\n"
      "                        sleeping (0..10000, default 50; 0 when many lockds share\n"
      "                        few CPUs)\n"
      "      --metrics-file FILE        write the metrics (Prometheus text) to FILE for\n"
      "                        node-exporter's textfile collector; removed at a clean stop\n"
      "      --metrics-interval-ms N    how often it is rewritten (1000..3600000,\n"
      "                        default 15000)\n"
      "  -f, --foreground      stay in the foreground, log to stderr\n"
      "  -v, --verbose         log debug lines too (log_level = \"debug\")\n"
      "      --check           validate the settings, the topology, the node and the secret, then\n"
      "                        exit\n"
      "  -V, --version         print the version and exit\n"
      "  -h, --help            print this help and exit\n"
      "\n"
      "Signals: TERM/INT stop (local holds are released, peers see the node leave),\n"
      "         HUP reloads the --config file: the three quotas, log_level and the metrics\n"
      "         file apply at once, other changes are logged as needing a restart; a file\n"
      "         with a problem changes nothing. USR1 logs the status.\n"
      "Exit codes: 0 clean stop, 1 runtime failure, 2 bad usage or configuration,\n"
      "            3 another tierce-lockd holds the pid file.\n",
      kProgram, kProgram);
}

struct Options {
  std::string config;  // --config: "" = none
  Layer flags;         // the settings given on the command line
  std::string user;    // --user: drop to this account once set up (command line only)
  bool foreground = false, check = false;
};

// The long options without a short one (the others are their letter).
enum LongOnly {
  kSocketMode = 'm', kPerClient = 'L', kPerUid = 'U', kClientsPerUid = 'C',
  kProtection = 1000, kPreauth, kConns, kConnsPerIp, kMetricsFile, kMetricsInterval, kSpin
};

// optarg as a number lo..hi for the option `name`; nullopt (after the message) when it is not one.
std::optional<size_t> number(const char* name, unsigned long long lo, unsigned long long hi) {
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(optarg, &end, 10);
  if (!*optarg || *end || errno || x < lo || x > hi || optarg[0] == '-') {
    std::fprintf(stderr, "%s: %s wants a number %llu..%llu, not '%s'\n", kProgram, name, lo, hi,
                 optarg);
    return std::nullopt;
  }
  return size_t(x);
}

enum class Took { Yes, No, Bad };  // an option that sets a setting: taken, not one, bad value

// The options that set a setting (a key of the [lockd] table, or --user).
Took take_setting(int c, Options* o) {
  Settings& v = o->flags.values;
  auto given = [&](const char* key) { o->flags.given.insert(key); };
  // A numeric option into `field`, remembered as `key`.
  auto count = [&](const char* name, unsigned long long lo, unsigned long long hi, size_t* field,
                   const char* key) {
    auto x = number(name, lo, hi);
    if (!x) return Took::Bad;
    *field = *x;
    given(key);
    return Took::Yes;
  };
  switch (c) {
    case 't': v.topology = optarg; given("topology"); return Took::Yes;
    case 'n': v.node = optarg; given("node"); return Took::Yes;
    case 's': v.socket = optarg; given("socket"); return Took::Yes;
    case 'd': v.state_dir = optarg; given("state_dir"); return Took::Yes;
    case 'p': v.pid_file = optarg; given("pid_file"); return Took::Yes;
    case 'v': v.log_level = base::LogLevel::Debug; given("log_level"); return Took::Yes;
    case 'u':
      if (!*optarg) {
        std::fprintf(stderr, "%s: --user wants an account name\n", kProgram);
        return Took::Bad;
      }
      o->user = optarg;
      return Took::Yes;
    case kSocketMode: {
      char* end = nullptr;
      unsigned long m = std::strtoul(optarg, &end, 8);
      if (!*optarg || *end || m > 0777) {
        std::fprintf(stderr, "%s: --socket-mode wants an octal mode like 0660, not '%s'\n",
                     kProgram, optarg);
        return Took::Bad;
      }
      v.socket_mode = mode_t(m);
      given("socket_mode");
      return Took::Yes;
    }
    case kPerClient:
      return count("--max-locks-per-client", 1, Settings::kMaxQuota, &v.max_locks_per_client,
                   "max_locks_per_client");
    case kPerUid:
      return count("--max-locks-per-uid", 1, Settings::kMaxQuota, &v.max_locks_per_uid,
                   "max_locks_per_uid");
    case kClientsPerUid:
      return count("--max-clients-per-uid", 1, Settings::kMaxQuota, &v.max_clients_per_uid,
                   "max_clients_per_uid");
    case kProtection:
      try {
        v.protection = fabric::parse_protection(optarg);
        given("protection");
        return Took::Yes;
      } catch (const std::exception&) {
        std::fprintf(stderr, "%s: --protection wants mac, encrypt or none, not '%s'\n", kProgram,
                     optarg);
        return Took::Bad;
      }
    case kPreauth:
      return count("--max-preauth-frame", 64, 65536, &v.max_preauth_frame, "max_preauth_frame");
    case kConns:
      return count("--max-connections", 1, 1'000'000, &v.max_connections, "max_connections");
    case kConnsPerIp:
      return count("--max-connections-per-ip", 0, 1'000'000, &v.max_connections_per_ip,
                   "max_connections_per_ip");
    case kMetricsFile:
      if (!*optarg) {
        std::fprintf(stderr, "%s: --metrics-file wants a file name\n", kProgram);
        return Took::Bad;
      }
      v.metrics_file = optarg;
      given("metrics_file");
      return Took::Yes;
    case kMetricsInterval:
      return count("--metrics-interval-ms", Settings::kMinMetricsIntervalMs,
                   Settings::kMaxMetricsIntervalMs, &v.metrics_interval_ms, "metrics_interval_ms");
    case kSpin:
      return count("--spin-us", 0, Settings::kMaxSpinUs, &v.spin_us, "spin_us");
    default:
      return Took::No;
  }
}

std::optional<int> parse(int argc, char** argv, Options* o) {
  static const option longopts[] = {
      {"config", required_argument, nullptr, 'c'},
      {"topology", required_argument, nullptr, 't'}, {"node", required_argument, nullptr, 'n'},
      {"socket", required_argument, nullptr, 's'},   {"state-dir", required_argument, nullptr, 'd'},
      {"pid-file", required_argument, nullptr, 'p'},
      {"socket-mode", required_argument, nullptr, kSocketMode},
      {"foreground", no_argument, nullptr, 'f'},     {"verbose", no_argument, nullptr, 'v'},
      {"check", no_argument, nullptr, 'k'},          {"version", no_argument, nullptr, 'V'},
      {"max-locks-per-client", required_argument, nullptr, kPerClient},
      {"max-locks-per-uid", required_argument, nullptr, kPerUid},
      {"max-clients-per-uid", required_argument, nullptr, kClientsPerUid},
      {"protection", required_argument, nullptr, kProtection},
      {"max-preauth-frame", required_argument, nullptr, kPreauth},
      {"max-connections", required_argument, nullptr, kConns},
      {"max-connections-per-ip", required_argument, nullptr, kConnsPerIp},
      {"user", required_argument, nullptr, 'u'},
      {"metrics-file", required_argument, nullptr, kMetricsFile},
      {"metrics-interval-ms", required_argument, nullptr, kMetricsInterval},
      {"spin-us", required_argument, nullptr, kSpin},
      {"help", no_argument, nullptr, 'h'},           {nullptr, 0, nullptr, 0}};
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":c:t:n:s:d:p:fvVh", longopts, nullptr)) != -1) {
    switch (c) {
      case 'c': o->config = optarg; break;
      case 'f': o->foreground = true; break;
      case 'k': o->check = true; break;
      case 'V': std::printf("%s %s\n", kProgram, TIERCE_VERSION); return kExitOk;
      case 'h': usage(stdout); return kExitOk;
      case ':':
        std::fprintf(stderr, "%s: option %s needs a value; see %s --help\n", kProgram,
                     argv[optind - 1], kProgram);
        return kExitUsage;
      default:
        if (Took t = take_setting(c, o); t != Took::No) {
          if (t == Took::Bad) return kExitUsage;
          break;
        }
        std::fprintf(stderr, "%s: unknown option '%s'; see %s --help\n", kProgram,
                     argv[optind - 1], kProgram);
        return kExitUsage;
    }
  }
  if (optind < argc) {
    std::fprintf(stderr, "%s: unexpected argument '%s'\n", kProgram, argv[optind]);
    return kExitUsage;
  }
  // Absolute: the daemon changes to / and reads the file again on SIGHUP.
  if (!o->flags.values.metrics_file.empty()) {
    std::error_code ec;
    auto abs = std::filesystem::absolute(o->flags.values.metrics_file, ec);
    if (!ec) o->flags.values.metrics_file = abs.lexically_normal().string();
  }
  if (!o->config.empty()) {
    std::error_code ec;
    auto abs = std::filesystem::absolute(o->config, ec);
    if (!ec) o->config = abs.lexically_normal().string();
  }
  return std::nullopt;
}

// The settings: the --config file (if any) under the command line. Prints the problems and
// returns kExitUsage on failure.
std::optional<int> settle(const Options& o, Settings* s) {
  std::optional<Layer> file;
  if (!o.config.empty()) {
    try {
      file = load_config_file(o.config);
    } catch (const base::ConfigError& e) {
      std::fprintf(stderr, "%s: the configuration has %zu problem(s):\n", kProgram,
                   e.problems().size());
      for (auto& p : e.problems()) std::fprintf(stderr, "  %s\n", p.c_str());
      return kExitUsage;
    }
  }
  *s = combine(file ? &*file : nullptr, o.flags);
  if (s->topology.empty() || s->node.empty()) {
    std::fprintf(stderr,
                 "%s: the topology and the node are required: -t TOPOLOGY -n NODE, or topology = "
                 "and node = in the [lockd] table of --config; see %s --help\n",
                 kProgram, kProgram);
    return kExitUsage;
  }
  return std::nullopt;
}

std::string join_pairs(const std::vector<std::pair<std::string, std::string>>& v) {
  std::string s;
  for (auto& [k, d] : v) s += (s.empty() ? "" : ", ") + k + " " + d;
  return s;
}

// SIGHUP with --config: the file again, under the same command line (a flag still wins). Applies
// the reloadable keys (quotas, log_level); reports the others as needing a restart.
class Reload {
 public:
  // `restart_metrics`: called after running_'s metrics_file or metrics_interval_ms changed.
  Reload(const Options& o, Settings* running, Lockd* lockd,
         std::shared_ptr<std::atomic<fabric::LogLevel>> level, fabric::LogSink log,
         std::function<void()> restart_metrics)
      : o_(o), running_(running), lockd_(lockd), level_(std::move(level)), log_(log),
        restart_metrics_(std::move(restart_metrics)),
        reloader_(o.config, log, {"LOCKD0013", "LOCKD0014", "LOCKD0015"}) {}

  void operator()() {
    bool metrics_moved = false;
    std::function<Settings()> load = [this] {
      Layer file = load_config_file(o_.config);
      Settings next = combine(&file, o_.flags);
      if (next.topology.empty() || next.node.empty())
        throw base::ConfigError({o_.config + ": [lockd] topology and node are required (they were "
                                             "removed from the file)"});
      for (const std::string& k : reloadable_keys())
        if (o_.flags.given.count(k) && file.given.count(k))
          log_(fabric::LogLevel::Info, "LOCKD0016 " + k +
                                           ": the command line's value stays (a flag overrides "
                                           "the file)");
      return next;
    };
    std::function<std::string(Settings&)> apply = [this, &metrics_moved](Settings& next) {
      auto diff = differences(*running_, next);
      const auto& live = reloadable_keys();
      std::vector<std::pair<std::string, std::string>> applied, restart;
      for (auto& d : diff)
        (std::find(live.begin(), live.end(), d.first) != live.end() ? applied : restart)
            .push_back(d);
      running_->max_locks_per_client = next.max_locks_per_client;
      running_->max_locks_per_uid = next.max_locks_per_uid;
      running_->max_clients_per_uid = next.max_clients_per_uid;
      running_->log_level = next.log_level;
      lockd_->set_quotas(next.max_locks_per_client, next.max_locks_per_uid,
                         next.max_clients_per_uid);
      level_->store(next.log_level);
      if (next.metrics_file != running_->metrics_file ||
          next.metrics_interval_ms != running_->metrics_interval_ms) {
        running_->metrics_file = next.metrics_file;
        running_->metrics_interval_ms = next.metrics_interval_ms;
        metrics_moved = true;  // restarted below, once the reload is counted
      }
      std::string out = applied.empty() ? "no reloadable setting changed"
                                        : "applied " + join_pairs(applied);
      if (!restart.empty())
        out += "; restart tierce-lockd to apply " + join_pairs(restart) +
               " (the running values stay)";
      return out;
    };
    reloader_.run(load, apply);
    lockd_->note_reloads(reloader_.counters().reloads, reloader_.counters().failed);
    if (metrics_moved) restart_metrics_();
  }

  // For the status report (USR1).
  std::string counters() const {
    return "reloads " + std::to_string(reloader_.counters().reloads) + "\nfailed_reloads " +
           std::to_string(reloader_.counters().failed) + "\n";
  }

 private:
  const Options& o_;
  Settings* running_;
  Lockd* lockd_;
  std::shared_ptr<std::atomic<fabric::LogLevel>> level_;
  fabric::LogSink log_;
  std::function<void()> restart_metrics_;
  base::Reloader reloader_;
};

// What the start needs, checked before anything runs.
struct Prepared {
  Settings st;
  cluster::Topology topo;
  fabric::Secret secret;
  fabric::NodeKey node_key;  // node_key (read before the drop, like the secret)
  std::optional<base::Account> user;  // --user
};

// The settings, the topology (this node, every member's address) and --user; prints the problem
// and returns its exit code, or kExitOk after --check.
std::optional<int> prepare(const Options& o, Prepared* p) {
  if (auto code = settle(o, &p->st)) return *code;
  const Settings& st = p->st;
  try {
    p->topo = cluster::Topology::load(st.topology);
    (void)p->topo.rank_of(st.node);
    for (const auto* n : p->topo.lockd_nodes()) (void)p->topo.lockd_uri_of(*n);
    p->secret = p->topo.secret();
    const cluster::NodeInfo& me = p->topo.node(st.node);
    if (!st.node_key.empty()) p->node_key = fabric::NodeKey::from_file(st.node_key);
    if (me.public_key && p->node_key.empty())
      throw std::runtime_error("the topology gives node " + st.node +
                               " a public_key: set node_key = \"FILE\" to its key, or the other "
                               "lockds refuse this one");
    if (me.public_key && *me.public_key != p->node_key.public_key())
      throw std::runtime_error("node_key " + st.node_key + " is not the key of node " + st.node +
                               " (its public key is " +
                               fabric::format_public_key(p->node_key.public_key()) +
                               ", the topology's " + fabric::format_public_key(*me.public_key) +
                               ")");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kProgram, e.what());
    return kExitUsage;
  }
  // --user: resolved now, so an unknown account is a usage error (exit 2) and nothing needs NSS
  // after the drop.
  if (!o.user.empty()) {
    base::Result<base::Account> found = base::lookup_account(o.user);
    if (!found.ok()) {
      std::fprintf(stderr,
                   "%s: --user \"%s\": %s; create the account (useradd --system %s) or name "
                   "another one\n",
                   kProgram, o.user.c_str(), found.message().c_str(), o.user.c_str());
      return kExitUsage;
    }
    base::Account a = std::move(found).value();
    if (a.uid == 0) {
      std::fprintf(stderr,
                   "%s: --user \"%s\" is root (uid 0): nothing would be dropped; name an "
                   "unprivileged account or leave --user out\n",
                   kProgram, o.user.c_str());
      return kExitUsage;
    }
    p->user = std::move(a);
  }
  if (o.check) {
    std::printf("%s: %s is fine: node %s is member %u of %zu (%s)\n", kProgram, st.topology.c_str(),
                st.node.c_str(), p->topo.rank_of(st.node), p->topo.lockd_nodes().size(),
                std::string(cluster::to_string(p->topo.dlm.algorithm)).c_str());
    return kExitOk;
  }
  return std::nullopt;
}

LockdOptions lockd_options(const Prepared& p, fabric::LogSink log) {
  const Settings& st = p.st;
  LockdOptions lo;
  lo.node_key = p.node_key;
  lo.socket_path = st.socket;
  lo.state_dir = st.state_dir;
  lo.ipc.socket_mode = st.socket_mode;
  lo.ipc.max_holds_per_client = st.max_locks_per_client;
  lo.ipc.max_locks_per_uid = st.max_locks_per_uid;
  lo.ipc.max_clients_per_uid = st.max_clients_per_uid;
  lo.protection = st.protection;
  lo.max_preauth_frame = st.max_preauth_frame;
  lo.max_connections = st.max_connections;
  lo.max_connections_per_ip = st.max_connections_per_ip;
  lo.spin = std::chrono::microseconds(st.spin_us);
  lo.ipc.spin = lo.spin;
  lo.log = std::move(log);
  return lo;
}

base::DaemonMessages messages(const Settings& st) {
  base::DaemonMessages m;
  m.user_mismatch = [](const base::Account& u) {
    return "LOCKD0040 --user " + u.name + " asks to drop to uid " + std::to_string(u.uid) +
           ", but tierce-lockd runs as uid " + std::to_string(::geteuid()) +
           ", not root: start it as root or as " + u.name + ", or leave --user out";
  };
  m.pid_file_held = [&st](pid_t pid) {
    return "LOCKD0006 another tierce-lockd holds " + st.pid_file +
           (pid > 0 ? " (pid " + std::to_string(pid) + ")" : "");
  };
  m.pid_file_failed = [](const std::string& why) {
    return "LOCKD0008 cannot write the pid file: " + why;
  };
  m.signals_failed = "LOCKD0007 cannot set up signal handling: ";
  m.no_new_privs_failed = "LOCKD0041 ";
  m.drop_failed = "LOCKD0041 cannot drop privileges to user ";
  m.running_as = "LOCKD0042 running as user ";
  m.stopping = "LOCKD0003 received ";
  return m;
}

// The running agent, in the daemon kit (base/daemon_kit.h).
class Daemon {
 public:
  Daemon(const Options& o, Prepared p) : o_(o), p_(std::move(p)) {}

  int run() {
    base::DaemonSpec spec;
    spec.program = kProgram;
    spec.foreground = spec.to_stderr = o_.foreground;
    spec.log_level = p_.st.log_level;
    spec.user = p_.user;
    spec.pid_file = p_.st.pid_file;
    spec.signals = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};
    base::DaemonKit kit(std::move(spec), messages(p_.st));
    base::DaemonHooks h;
    h.start = [this](base::DaemonKit& k) -> int {
      log_ = k.log();
      try {
        lockd_ =
            std::make_unique<Lockd>(p_.topo, p_.st.node, p_.secret, lockd_options(p_, log_));
      } catch (const std::exception& e) {
        return k.fail(kExitFailure, std::string("LOCKD0005 cannot start: ") + e.what());
      }
      return kExitOk;
    };
    h.hand_over = [this](const base::Account& u) { hand_over(u); };
    h.started = [this](base::DaemonKit& k) { return started(k); };
    h.reload = [this] {
      if (o_.config.empty())
        log_(fabric::LogLevel::Info,
             "LOCKD0009 SIGHUP: tierce-lockd has nothing to reload (started without --config); "
             "membership changes need a restart of every lockd with the new topology");
      else
        (*reload_)();
    };
    h.signal = [this](base::Signal sig) {
      if (sig.number == SIGUSR1)
        log_(fabric::LogLevel::Info,
             "LOCKD0004 status:\n" + lockd_->status_text() + reload_->counters());
    };
    h.stop = [this] { stop(); };
    int code = kit.run(h);
    stop();  // a start that failed: lockd goes before the pid file (the kit's)
    return code;
  }

 private:
  // Everything that needed root is done (socket bound, state dir's epoch written, pid file).
  // The socket keeps its group and mode (who may lock); its owner becomes the user, and so does
  // the pid file's, so both stay the daemon's to write. Removing them at stop needs their
  // directory to be writable by the user; otherwise the pid file is emptied and the socket is
  // left for the next start to replace (docs/dlm.md "Running as a user").
  void hand_over(const base::Account& u) {
    base::give_to(p_.st.socket, u, /*keep_group=*/true);
    // The fabric socket of a shm topology too (a sticky directory lets only its owner remove it).
    fabric::Address a = fabric::parse_address(p_.topo.lockd_uri_of(p_.topo.node(p_.st.node)));
    if (a.transport == fabric::Transport::Shm) base::give_to(a.path, u, true);
  }

  int started(base::DaemonKit& k) {
    const Settings& st = p_.st;
    if (k.user()) {
      for (const std::string& f : {st.pid_file, st.socket}) {
        std::string dir = base::DaemonKit::unwritable_dir(f);
        if (!dir.empty())
          log_(fabric::LogLevel::Warn,
               "LOCKD0043 user " + k.user()->name + " cannot write " + dir + ": " + f +
                   " will not be removed at stop (a pid file is emptied instead); make the "
                   "directory the user's (e.g. install -d -o " + k.user()->name + " " + dir + ")");
      }
    }
    log_(fabric::LogLevel::Info,
         "LOCKD0017 settings: " +
             (o_.config.empty() ? std::string("command line only")
                                : "file " + o_.config + " under the command line") +
             "; max_locks_per_client " + std::to_string(st.max_locks_per_client) +
             ", max_locks_per_uid " + std::to_string(st.max_locks_per_uid) +
             ", max_clients_per_uid " + std::to_string(st.max_clients_per_uid) +
             ", protection " + std::string(fabric::to_string(st.protection)) + ", spin_us " +
             std::to_string(st.spin_us));
    start_metrics();
    reload_ = std::make_unique<Reload>(o_, &p_.st, lockd_.get(), k.level(), log_,
                                       [this] { start_metrics(); });
    return kExitOk;
  }

  // metrics_file: rewritten every metrics_interval_ms as lockd's user (after the drop: its
  // directory must be writable by that user; LOCKD0050 says so once if it is not); removed at a
  // clean stop. Restarted by a reload that changes either key.
  void start_metrics() {
    const Settings& st = p_.st;
    metrics_.reset();
    if (st.metrics_file.empty()) return;
    metrics_ = std::make_unique<base::TextfileWriter>(
        st.metrics_file, std::chrono::milliseconds(st.metrics_interval_ms),
        [l = lockd_.get()] { return l->metrics_text(); }, log_, "LOCKD0050");
    log_(fabric::LogLevel::Info, "LOCKD0051 metrics written to " + st.metrics_file + " every " +
                                     std::to_string(st.metrics_interval_ms) + " ms");
  }

  void stop() {
    metrics_.reset();  // removes the file before lockd's numbers stop moving
    if (lockd_) lockd_->stop();
    reload_.reset();
    lockd_.reset();
  }

  const Options& o_;
  Prepared p_;
  fabric::LogSink log_;
  std::unique_ptr<Lockd> lockd_;
  std::unique_ptr<base::TextfileWriter> metrics_;
  std::unique_ptr<Reload> reload_;
};

}  // namespace
}  // namespace tierce::lockd

int main(int argc, char** argv) {
  using namespace tierce::lockd;
  Options o;
  if (auto code = parse(argc, argv, &o)) return *code;
  Prepared p;
  if (auto code = prepare(o, &p)) return *code;
  return Daemon(o, std::move(p)).run();
}
