// agents/memd/main.cc — tierce-memd, the process: command line, then what memd brings to the
// daemon kit (base/daemon_kit.h: start, pid file, signals, loop). The logic it runs is
// agents/memd/memd.h; docs/memd.md is the user's reference.
#include <getopt.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "agents/memd/config.h"
#include "agents/memd/memd.h"
#include "base/config.h"
#include "base/daemon.h"
#include "base/daemon_kit.h"
#include "base/errors.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/privileges.h"
#include "base/signals.h"
#include "fabric/auth.h"
#include "fabric/errors.h"

#ifndef TIERCE_VERSION
#define TIERCE_VERSION "0.0.0"
#endif

namespace tierce::memd {
namespace {

using namespace tierce::base;  // the daemon kit: exit codes, daemonize, pid file, log sinks

constexpr const char* kProgram = "tierce-memd";
constexpr const char* kDefaultConfig = "/etc/tierce/memd.toml";

void usage(FILE* out) {
  std::fprintf(
      out,
      "Usage: %s [-c FILE] [--foreground] [--check | --status | --metrics]\n"
      "Exports this node's shared segments through the Tierce fabric and answers\n"
      "\"region name -> descriptor\" lookups (see docs/memd.md).\n"
      "\n"
      "  -c, --config FILE   configuration file (default %s)\n"
      "  -f, --foreground    stay in the foreground; log to stderr unless log = \"syslog\"\n"
      "      --check         validate the configuration and the secret file, then exit\n"
      "      --status        ask the running memd of this configuration for memd.status, print it\n"
      "      --metrics       ask it for memd.metrics (Prometheus text), print it\n"
      "  -V, --version       print the version and exit\n"
      "  -h, --help          print this help and exit\n"
      "\n"
      "Signals: TERM/INT stop cleanly, HUP reloads the configuration, USR1 logs the status.\n"
      "Exit codes: 0 clean stop, 1 runtime failure, 2 bad usage or configuration,\n"
      "            3 another tierce-memd holds the pid file.\n",
      kProgram, kDefaultConfig);
}

struct Options {
  std::string config = kDefaultConfig;
  bool foreground = false;
  bool check = false;
  const char* query = nullptr;  // --status / --metrics: the service to call on the running memd
};

// Returns an exit code when the command line says to stop here (help, version, bad usage).
std::optional<int> parse_options(int argc, char** argv, Options* o) {
  static const option longopts[] = {
      {"config", required_argument, nullptr, 'c'}, {"foreground", no_argument, nullptr, 'f'},
      {"check", no_argument, nullptr, 'k'},        {"version", no_argument, nullptr, 'V'},
      {"status", no_argument, nullptr, 's'},       {"metrics", no_argument, nullptr, 'm'},
      {"help", no_argument, nullptr, 'h'},         {nullptr, 0, nullptr, 0}};
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":c:fVh", longopts, nullptr)) != -1) {
    switch (c) {
      case 'c':
        o->config = optarg;
        break;
      case 'f':
        o->foreground = true;
        break;
      case 'k':
        o->check = true;
        break;
      case 's':
        o->query = "memd.status";
        break;
      case 'm':
        o->query = "memd.metrics";
        break;
      case 'V':
        std::printf("%s %s\n", kProgram, TIERCE_VERSION);
        return kExitOk;
      case 'h':
        usage(stdout);
        return kExitOk;
      case ':':
        std::fprintf(stderr, "%s: option %s needs a value (e.g. -c /etc/tierce/memd.toml)\n",
                     kProgram, argv[optind - 1]);
        return kExitUsage;
      default:
        std::fprintf(stderr, "%s: unknown option '%s'; see %s --help\n", kProgram, argv[optind - 1],
                     kProgram);
        return kExitUsage;
    }
  }
  if (optind < argc) {
    std::fprintf(stderr, "%s: unexpected argument '%s'; the configuration file goes after -c\n",
                 kProgram, argv[optind]);
    return kExitUsage;
  }
  return std::nullopt;
}

// Loads the configuration and the secret; prints the problems and returns kExitUsage on failure.
std::optional<int> load(const std::string& path, Config* cfg, fabric::Secret* secret) {
  try {
    *cfg = load_config(path);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "%s: the configuration has %zu problem(s):\n", kProgram,
                 e.problems().size());
    for (auto& p : e.problems()) std::fprintf(stderr, "  %s\n", p.c_str());
    return kExitUsage;
  }
  try {
    *secret = fabric::Secret::from_file(cfg->secret_file);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s: [memd] secret_file: %s\n", kProgram, cfg->source.c_str(),
                 e.what());
    return kExitUsage;
  }
  if (!cfg->node_key_file.empty()) {
    try {
      cfg->node_key = fabric::NodeKey::from_file(cfg->node_key_file);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s: [memd] node_key: %s\n", kProgram, cfg->source.c_str(),
                   e.what());
      return kExitUsage;
    }
  }
  return std::nullopt;
}

// [memd] user: the account memd drops to after its setup. Prints the problem and returns
// kExitUsage when it does not exist or is root (nothing would be dropped).
std::optional<int> resolve_user(const Config& cfg, std::optional<Account>* out) {
  if (cfg.user.empty()) return std::nullopt;
  base::Result<Account> found = lookup_account(cfg.user);
  if (!found.ok()) {
    std::fprintf(stderr,
                 "%s: %s: [memd] user: \"%s\": %s; create the account (useradd --system %s) or "
                 "name another one\n",
                 kProgram, cfg.source.c_str(), cfg.user.c_str(), found.message().c_str(),
                 cfg.user.c_str());
    return kExitUsage;
  }
  Account a = std::move(found).value();
  if (a.uid == 0) {
    std::fprintf(stderr,
                 "%s: %s: [memd] user: \"%s\" is root (uid 0): nothing would be dropped; name an "
                 "unprivileged account or leave the key out\n",
                 kProgram, cfg.source.c_str(), cfg.user.c_str());
    return kExitUsage;
  }
  *out = std::move(a);
  return std::nullopt;
}

// --status / --metrics: calls `service` on the memd this configuration describes (the URIs of its
// ready file, else its listen addresses) and prints the reply. Exit 0, or 1 when unreachable.
int query_running(const Config& cfg, const fabric::Secret& secret, const std::string& service) {
  std::vector<std::string> uris;
  if (!cfg.ready_file.empty()) {
    std::ifstream in(cfg.ready_file);
    for (std::string l; std::getline(in, l);)
      if (!l.empty()) uris.push_back(l);
  }
  if (uris.empty()) uris = cfg.listen;
  std::string errors;
  for (auto& u : uris) {
    try {
      fabric::ClientOptions o;
      o.secret = secret;
      auto c = fabric::connect(u, o);
      auto body = c->call(service, {});
      std::fwrite(body.data(), 1, body.size(), stdout);
      return kExitOk;
    } catch (const std::exception& e) {
      errors += "\n  " + u + ": " + e.what();
    }
  }
  std::fprintf(stderr, "%s: cannot ask the running memd of %s for %s:%s\n", kProgram,
               cfg.source.c_str(), service.c_str(), errors.c_str());
  return kExitFailure;
}

std::string join_lines(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

class Daemon {
 public:
  Daemon(Options opts, Config cfg, fabric::Secret secret, std::optional<Account> user)
      : opts_(std::move(opts)),
        cfg_(std::move(cfg)),
        secret_(std::move(secret)),
        user_(std::move(user)) {}

  int run() {
    LogTarget target = cfg_.log;
    if (target == LogTarget::Auto)
      target = opts_.foreground ? LogTarget::Stderr : LogTarget::Syslog;
    DaemonSpec spec;
    spec.program = kProgram;
    spec.foreground = opts_.foreground;
    spec.to_stderr = target == LogTarget::Stderr;
    spec.log_level = cfg_.log_level;
    spec.user = user_;  // [memd] user: memd sets up as root, then drops to it
    spec.pid_file = cfg_.pid_file;
    spec.ready_file = cfg_.ready_file;
    spec.clear_ready_file = true;
    // With `user` the ready file is written before the drop (its directory is usually root's),
    // so it appears just before the first rescan instead of just after it.
    spec.ready_before_drop = true;
    spec.remove_ready_file = true;
    spec.notify_stopping = true;
    spec.signals = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};
    DaemonKit kit(std::move(spec), messages());
    DaemonHooks h;
    h.start = [this](DaemonKit& k) { return start(k); };
    h.hand_over = [this](const Account& u) {
      for (const std::string& f : memd_->created_files()) give_to(f, u);  // shm sockets, segments
    };
    h.started = [this](DaemonKit& k) { return started(k); };
    h.ready_text = [this] { return join_lines(memd_->bound_uris(), "\n") + "\n"; };
    h.wait = [this](int fd) { return memd_->poll_once(fd, std::chrono::milliseconds(1000)); };
    h.reload = [this] { reload(); };
    h.signal = [this](Signal sig) {
      if (sig.number != SIGUSR1) return;
      std::istringstream in(memd_->status_text());
      for (std::string line; std::getline(in, line);)
        log_(fabric::LogLevel::Info, "MEMD0014 status " + line);
    };
    h.stop = [this] { stop(); };
    int code = kit.run(h);
    metrics_.reset();  // a start that failed: the server goes before the pid file (the kit's)
    memd_.reset();
    return code;
  }

 private:
  DaemonMessages messages() const {
    DaemonMessages m;
    m.starting = [this] {
      return std::string("MEMD0001 ") + kProgram + " " + TIERCE_VERSION + " starting (config " +
             cfg_.source + ", pid " + std::to_string(::getpid()) + ")";
    };
    m.user_mismatch = [this](const Account& u) {
      return "MEMD0040 [memd] user = \"" + u.name + "\" asks to drop to uid " +
             std::to_string(u.uid) + ", but memd runs as uid " + std::to_string(::geteuid()) +
             ", not root: start it as root or as " + u.name + ", or remove user from " +
             cfg_.source;
    };
    m.pid_file_held = [this](pid_t pid) {
      return "MEMD0006 another tierce-memd is already running" +
             (pid > 0 ? " (pid " + std::to_string(pid) + ")" : std::string()) + " with pid file " +
             cfg_.pid_file + "; stop it first (kill -TERM " +
             (pid > 0 ? std::to_string(pid) : std::string("PID")) +
             ") or give this one another pid_file";
    };
    m.pid_file_failed = [](const std::string& why) {
      return "MEMD0008 cannot write the pid file: " + why +
             "; create its directory (writable by memd's user) or change pid_file";
    };
    m.pid_file_stale = [this](pid_t stale) {
      return "MEMD0007 pid file " + cfg_.pid_file + " named pid " + std::to_string(stale) +
             ", which no longer runs tierce-memd (unclean stop?); taken over";
    };
    m.signals_failed = "MEMD0012 cannot set up signal handling: ";
    m.no_new_privs_failed = "MEMD0041 ";
    m.drop_failed = "MEMD0041 cannot drop privileges to user ";
    m.running_as = "MEMD0042 running as user ";
    m.ready_file_failed = [](const std::string& why) {
      return "MEMD0009 cannot write the ready file: " + why +
             "; create its directory (writable by memd's user) or change ready_file";
    };
    m.stopping = "MEMD0003 received ";
    m.stopped = "MEMD0004 stopped";
    m.unexpected = [](const std::string& what) {
      return "MEMD0016 unexpected failure, stopping: " + what +
             "; please report it with the log lines before this one";
    };
    return m;
  }

  // As root (before the drop): the server, its sockets bound; segments are opened only by the
  // first rescan, with the user's rights.
  int start(DaemonKit& kit) {
    log_ = kit.log();
    level_ = kit.level();
    reloader_ = Reloader(cfg_.source, log_, {"MEMD0010", "MEMD0011", "MEMD0013"});
    try {
      memd_ = std::make_unique<Memd>(cfg_, secret_, log_);
    } catch (const fabric::FabricError& e) {
      // The file passed its checks, so what fails here is the environment (address or socket in
      // use, name resolution, no RDMA device): a runtime failure, exit 1.
      return kit.fail(kExitFailure, std::string("MEMD0005 cannot start serving: ") + e.what() +
                                        "; free the address (ss -ltnp / ss -lxp), create the "
                                        "socket's directory, or change [memd] listen in " +
                                        cfg_.source);
    } catch (const std::exception& e) {
      return kit.fail(kExitFailure, std::string("MEMD0005 cannot start serving: ") + e.what());
    }
    return kExitOk;
  }

  int started(DaemonKit& kit) {
    if (kit.user()) warn_what_the_user_cannot(*kit.user());
    memd_->rescan();
    start_metrics();
    size_t exported = 0;
    for (auto& r : memd_->regions()) exported += r.state == RegionState::Exported;
    log_(fabric::LogLevel::Info, "MEMD0002 node " + cfg_.node + " serving on " +
                                     join_lines(memd_->bound_uris(), ", ") + "; " +
                                     std::to_string(exported) + " of " +
                                     std::to_string(cfg_.regions.size()) + " region(s) exported");
    return kExitOk;
  }

  // After the drop: what the user can no longer do, said once now rather than at the first
  // SIGHUP or stop.
  void warn_what_the_user_cannot(const Account& u) {
    if (::access(cfg_.source.c_str(), R_OK) != 0) {
      int e = errno;
      log_(fabric::LogLevel::Warn,
           "MEMD0043 user " + u.name + " cannot read " + cfg_.source + " (" + errno_text(e) +
               "): SIGHUP reloads will fail; make it readable by the user "
               "(e.g. chgrp " + u.name + " FILE; chmod 640 FILE)");
    }
    for (const std::string& f : {cfg_.pid_file, cfg_.ready_file}) {
      std::string dir = DaemonKit::unwritable_dir(f);
      if (!dir.empty())
        log_(fabric::LogLevel::Warn,
             "MEMD0043 user " + u.name + " cannot write " + dir + ": " + f +
                 " will be emptied, not removed, at stop; make the directory the user's "
                 "(e.g. install -d -o " + u.name + " " + dir + ")");
    }
  }

  // SIGHUP: the whole file is read and checked first (base::Reloader); the running configuration
  // changes only when it passed (MEMD0010, MEMD0011 per problem, MEMD0013).
  void reload() {
    std::function<Config()> load = [this] { return load_config(cfg_.source); };
    std::function<std::string(Config&)> apply = [this](Config& next) { return apply_reload(next); };
    if (!reloader_.run(load, apply)) memd_->note_failed_reload();
  }

  std::string apply_reload(Config& next) {
    try {
      fabric::Secret s = fabric::Secret::from_file(next.secret_file);
      if (next.secret_file == cfg_.secret_file && !(s == secret_))
        log_(fabric::LogLevel::Warn,
             "MEMD0015 the secret in " + next.secret_file +
                 " changed; the running secret stays in effect: restart memd (and its "
                 "peers) to apply it");
    } catch (const std::exception& e) {
      log_(fabric::LogLevel::Warn, std::string("MEMD0015 [memd] secret_file: ") + e.what() +
                                       "; the running secret stays in effect");
    }
    ReloadOutcome out = memd_->reload(next);
    level_->store(next.log_level);
    cfg_.rescan = next.rescan;
    cfg_.log_level = next.log_level;
    cfg_.regions = next.regions;
    if (next.metrics_file != cfg_.metrics_file || next.metrics_interval != cfg_.metrics_interval) {
      cfg_.metrics_file = next.metrics_file;
      cfg_.metrics_interval = next.metrics_interval;
      start_metrics();
    }
    return std::to_string(out.added.size()) + " region(s) added, " +
           std::to_string(out.removed.size()) + " removed, " + std::to_string(out.changed.size()) +
           " changed" +
           (out.need_restart.empty() ? std::string()
                                     : "; restart memd to apply " + join_lines(out.need_restart, ", "));
  }

  // [memd] metrics_file: the textfile node-exporter reads, rewritten every metrics_interval_ms
  // (as memd's user, after the drop: its directory must be writable by that user; MEMD0050 says
  // so once if it is not). Removed at a clean stop.
  void start_metrics() {
    metrics_.reset();
    if (cfg_.metrics_file.empty()) return;
    metrics_ = std::make_unique<base::TextfileWriter>(
        cfg_.metrics_file, cfg_.metrics_interval, [this] { return memd_->metrics_text(); }, log_,
        "MEMD0050");
    log_(fabric::LogLevel::Info, "MEMD0051 metrics written to " + cfg_.metrics_file + " every " +
                                     std::to_string(cfg_.metrics_interval.count()) + " ms");
  }

  void stop() {
    metrics_.reset();
    if (memd_) memd_->stop();
    memd_.reset();
  }

  Options opts_;
  Config cfg_;
  fabric::Secret secret_;
  std::optional<Account> user_;  // [memd] user
  std::shared_ptr<std::atomic<fabric::LogLevel>> level_;
  fabric::LogSink log_;
  std::unique_ptr<base::TextfileWriter> metrics_;
  std::unique_ptr<Memd> memd_;
  Reloader reloader_;
};

}  // namespace
}  // namespace tierce::memd

int main(int argc, char** argv) {
  using namespace tierce::memd;
  using namespace tierce::base;
  Options opts;
  if (auto code = parse_options(argc, argv, &opts)) return *code;
  Config cfg;
  tierce::fabric::Secret secret;
  if (auto code = load(opts.config, &cfg, &secret)) return *code;
  std::optional<Account> user;
  if (auto code = resolve_user(cfg, &user)) return *code;
  if (opts.check) {
    std::string roles;
    if (cfg.pool.enabled)
      roles += ", pool of " + std::to_string(cfg.pool.bytes / cfg.pool.slab_bytes) + " slabs of " +
               std::to_string(cfg.pool.slab_bytes) + " bytes";
    if (cfg.coop.enabled)
      roles += ", coop directory of " + std::to_string(cfg.coop.buckets) + " buckets";
    if (user) roles += ", drops to user " + user->name;
    std::printf("%s: %s: configuration OK (node %s, %zu listen address(es), %zu region(s)%s)\n",
                kProgram, cfg.source.c_str(), cfg.node.c_str(), cfg.listen.size(),
                cfg.regions.size(), roles.c_str());
    return kExitOk;
  }
  if (opts.query) return query_running(cfg, secret, opts.query);
  Daemon d(std::move(opts), std::move(cfg), std::move(secret), std::move(user));
  return d.run();
}
