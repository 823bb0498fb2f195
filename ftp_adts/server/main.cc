// ftp_adts/server/main.cc — tierce-ftpd, the process: command line, configuration, daemon start,
// pid file, the control socket, signals; then the pre-forking master (master.h). docs/ftp.md
// "tierce-ftpd" is the user's reference.
#include <arpa/inet.h>
#include <getopt.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "base/config.h"
#include "base/daemon.h"
#include "base/log.h"
#include "base/signals.h"
#include "ftp_adts/ftp/tls.h"
#include "ftp_adts/server/config.h"
#include "ftp_adts/server/data.h"
#include "ftp_adts/server/master.h"
#include "ftp_adts/server/password.h"
#include "ftp_adts/server/privsep.h"
#include "ftp_adts/server/xferlog.h"

#ifndef TIERCE_VERSION
#define TIERCE_VERSION "0.0.0"
#endif

namespace tierce::ftpd {
namespace {

constexpr const char* kProgram = "tierce-ftpd";
constexpr const char* kDefaultConfig = "/etc/tierce/ftpd.toml";
using base::kExitFailure;
using base::kExitOk;
using base::kExitUsage;

void usage(FILE* out) {
  std::fprintf(
      out,
      "Usage: %s [-c FILE] [--foreground] [--check] [--pid-file FILE]\n"
      "       %s --hash-password < password\n"
      "FTP server (RFC 959, 2228/4217 FTPS, 2428, 3659) with ADTS data sessions (TPRT);\n"
      "see docs/ftp.md.\n"
      "\n"
      "  -c, --config FILE    configuration (default %s)\n"
      "  -f, --foreground     stay in the foreground, log to stderr\n"
      "      --check          validate the configuration, then exit\n"
      "  -p, --pid-file FILE  write and lock a pid file\n"
      "      --hash-password  read a password on stdin, print its crypt(3) hash ($y$ yescrypt)\n"
      "  -V, --version        print the version and exit\n"
      "  -h, --help           print this help and exit\n"
      "\n"
      "Signals: TERM/INT stop (workers are terminated); HUP reloads the configuration: users,\n"
      "         limits, TLS files, ... apply to new sessions; listen, ready_file and xferlog\n"
      "         need a restart; a file with a problem changes nothing.\n"
      "Exit codes: 0 clean stop or --check ok, 1 runtime failure, 2 bad usage or configuration,\n"
      "            3 another tierce-ftpd holds the pid file.\n",
      kProgram, kProgram, kDefaultConfig);
}

struct Options {
  std::string config = kDefaultConfig;
  std::string pid_file;
  bool foreground = false, check = false, hash = false;
};

std::optional<int> parse(int argc, char** argv, Options* o) {
  static const option longopts[] = {{"config", required_argument, nullptr, 'c'},
                                    {"foreground", no_argument, nullptr, 'f'},
                                    {"check", no_argument, nullptr, 'k'},
                                    {"pid-file", required_argument, nullptr, 'p'},
                                    {"hash-password", no_argument, nullptr, 'H'},
                                    {"version", no_argument, nullptr, 'V'},
                                    {"help", no_argument, nullptr, 'h'},
                                    {nullptr, 0, nullptr, 0}};
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":c:fp:Vh", longopts, nullptr)) != -1) {
    switch (c) {
      case 'c': o->config = optarg; break;
      case 'f': o->foreground = true; break;
      case 'k': o->check = true; break;
      case 'p': o->pid_file = optarg; break;
      case 'H': o->hash = true; break;
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
    std::fprintf(stderr, "%s: unexpected argument '%s'; see %s --help\n", kProgram, argv[optind],
                 kProgram);
    return kExitUsage;
  }
  return std::nullopt;
}

int hash_from_stdin() {
  std::string pw;
  if (!std::getline(std::cin, pw) && pw.empty()) {
    std::fprintf(stderr, "%s: --hash-password reads the password on stdin; got nothing\n",
                 kProgram);
    return kExitUsage;
  }
  if (!pw.empty() && pw.back() == '\r') pw.pop_back();
  if (pw.empty()) {
    std::fprintf(stderr, "%s: empty password refused\n", kProgram);
    return kExitUsage;
  }
  try {
    std::printf("%s\n", hash_password(pw).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kProgram, e.what());
    return kExitFailure;
  }
  return kExitOk;
}

// The control socket: bound, listening, non-blocking (workers poll it; see master.h).
int bind_control(const Config& cfg, std::string* err, SockAddr* bound) {
  SockAddr a;
  if (!SockAddr::parse(cfg.listen_host, cfg.listen_port, &a)) {
    *err = "bad listen address " + cfg.listen_host;
    return -1;
  }
  int fd = ::socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *err = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a.ss), a.len) != 0 || ::listen(fd, 128) != 0) {
    *err = "cannot listen on " + cfg.listen_host + ":" + std::to_string(cfg.listen_port) + ": " +
           std::strerror(errno);
    ::close(fd);
    return -1;
  }
  *bound = SockAddr::local_of(fd);
  return fd;
}

// What a reload builds before anything changes: the checked file, its TLS context and accounts.
struct Loaded {
  Config cfg;
  std::shared_ptr<ftp::TlsContext> tls;
  PrivsepPlan privsep;
};

// Reads and checks the file at `path` completely (the TLS files loaded, the accounts resolved when
// privilege separation is on). Throws base::ConfigError listing the problems.
Loaded load_all(const std::string& path, bool privsep_on) {
  Loaded l;
  l.cfg = load_config(path);
  if (l.cfg.tls) {
    try {
      l.tls = ftp::TlsContext::server(l.cfg.tls_cert, l.cfg.tls_key);
    } catch (const std::exception& e) {
      throw ConfigError({l.cfg.source + ": tls.cert/tls.key: " + e.what()});
    }
  }
  if (privsep_on) {
    std::vector<std::string> problems;
    l.privsep = resolve_accounts(l.cfg, &problems);
    if (!problems.empty()) throw ConfigError(problems);
    l.privsep.enabled = true;
  }
  return l;
}

// SIGHUP in the master (master.h MasterEnv::reload): the whole file again; on success the running
// configuration, TLS context and accounts are replaced, except what cannot change without a
// restart (the control socket, the ready file, the open xferlog), which keeps its value and is
// named in the log. The master keeps the user table (workers with privilege separation wipe their
// own copy after a login, never the master's).
class Reload {
 public:
  Reload(Config* cfg, MasterEnv* env, PrivsepPlan* privsep,
         std::shared_ptr<std::atomic<fabric::LogLevel>> level, fabric::LogSink log)
      : cfg_(cfg), env_(env), privsep_(privsep), level_(std::move(level)),
        reloader_(cfg->source, std::move(log), {"FTPD0010", "FTPD0014", "FTPD0015"}) {}

  bool operator()() {
    const bool privsep_on = privsep_->enabled;
    std::function<Loaded()> load = [&] { return load_all(cfg_->source, privsep_on); };
    std::function<std::string(Loaded&)> apply = [&](Loaded& next) {
      std::vector<std::string> restart;
      Config& n = next.cfg;
      auto where = [](const Config& c) { return c.listen_host + ":" + std::to_string(c.listen_port); };
      if (n.listen_host != cfg_->listen_host || n.listen_port != cfg_->listen_port) {
        restart.push_back("listen " + where(*cfg_) + " -> " + where(n));
        n.listen_host = cfg_->listen_host;
        n.listen_port = cfg_->listen_port;
      }
      if (n.ready_file != cfg_->ready_file) {
        restart.push_back("ready_file \"" + cfg_->ready_file + "\" -> \"" + n.ready_file + "\"");
        n.ready_file = cfg_->ready_file;
      }
      if (n.xferlog != cfg_->xferlog) {
        restart.push_back("xferlog \"" + cfg_->xferlog + "\" -> \"" + n.xferlog + "\"");
        n.xferlog = cfg_->xferlog;
      }
      n.source = cfg_->source;
      wipe_user_table(cfg_);  // the old hashes are not left in freed memory
      *cfg_ = std::move(n);
      env_->tls = std::move(next.tls);
      if (privsep_->enabled) *privsep_ = std::move(next.privsep);
      level_->store(cfg_->log_level);
      std::string out = std::to_string(cfg_->users.size()) + " user(s)" +
                        (cfg_->anonymous ? " + anonymous" : "") + ", " +
                        std::to_string(cfg_->workers) + " workers, max " +
                        std::to_string(cfg_->max_sessions) + " sessions, TLS " +
                        (cfg_->tls ? "on" : "off");
      if (!restart.empty()) {
        out += "; restart tierce-ftpd to apply ";
        for (size_t i = 0; i < restart.size(); ++i) out += (i ? ", " : "") + restart[i];
        out += " (the running values stay)";
      }
      return out;
    };
    return reloader_.run(load, apply);
  }
  base::ReloadCounters counters() const { return reloader_.counters(); }

 private:
  Config* cfg_;
  MasterEnv* env_;
  PrivsepPlan* privsep_;
  std::shared_ptr<std::atomic<fabric::LogLevel>> level_;
  base::Reloader reloader_;
};

int run(const Options& o) {
  if (o.hash) return hash_from_stdin();
  Config cfg;
  try {
    cfg = load_config(o.config);
  } catch (const ConfigError& e) {
    for (auto& p : e.problems()) std::fprintf(stderr, "%s: %s\n", kProgram, p.c_str());
    return kExitUsage;
  }
  std::shared_ptr<ftp::TlsContext> tls;
  if (cfg.tls) {
    try {
      tls = ftp::TlsContext::server(cfg.tls_cert, cfg.tls_key);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s: tls.cert/tls.key: %s\n", kProgram, cfg.source.c_str(),
                   e.what());
      return kExitUsage;
    }
  }
  // Privilege separation (privsep.h) whenever started as root. The accounts are resolved here, so
  // a missing one stops the start (and --check says so), not the first login.
  PrivsepPlan privsep;
  const bool root = ::geteuid() == 0;
  if (root || o.check) {
    std::vector<std::string> problems;
    privsep = resolve_accounts(cfg, &problems);
    if (!problems.empty()) {
      for (auto& p : problems) std::fprintf(stderr, "%s: %s\n", kProgram, p.c_str());
      return kExitUsage;
    }
    privsep.enabled = root;
  }
  if (o.check) {
    std::printf("%s: %s is fine: %zu user(s)%s, %u workers, max %u sessions\n", kProgram,
                cfg.source.c_str(), cfg.users.size(), cfg.anonymous ? " + anonymous" : "",
                cfg.workers, cfg.max_sessions);
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
  auto level = std::make_shared<std::atomic<fabric::LogLevel>>(cfg.log_level);
  fabric::LogSink log = base::level_filter(
      o.foreground ? fabric::stderr_sink(kProgram, fabric::LogLevel::Debug)
                   : base::syslog_sink(kProgram),
      level);
  auto fail = [&](int code, const std::string& line) {
    log(fabric::LogLevel::Error, line);
    if (report.detached()) report.failed(code, line);
    return code;
  };
  base::PidFile pid;
  if (!o.pid_file.empty()) {
    pid_t stale = 0;
    try {
      pid = base::PidFile::acquire(o.pid_file, &stale);
    } catch (const base::AlreadyRunning& e) {
      return fail(base::kExitRunning,
                  "FTPD0011 another tierce-ftpd holds " + o.pid_file +
                      (e.pid() > 0 ? " (pid " + std::to_string(e.pid()) + ")" : ""));
    } catch (const std::exception& e) {
      return fail(kExitFailure, std::string("FTPD0011 cannot write the pid file: ") + e.what());
    }
  }
  std::unique_ptr<Xferlog> xferlog;
  try {
    xferlog = std::make_unique<Xferlog>(cfg.xferlog);
  } catch (const std::exception& e) {
    return fail(kExitFailure, std::string("FTPD0012 cannot open the xferlog: ") + e.what());
  }

  base::SignalFd signals;
  try {
    signals = base::SignalFd::take({SIGTERM, SIGINT, SIGHUP, SIGCHLD});
  } catch (const std::system_error& e) {
    return fail(kExitFailure, std::string("FTPD0007 cannot set up signal handling: ") + e.what());
  }

  std::string err;
  SockAddr bound;
  int lfd = bind_control(cfg, &err, &bound);
  if (lfd < 0) return fail(kExitFailure, "FTPD0009 " + err);
  std::string host = bound.host();
  std::string where = (bound.family() == AF_INET6 ? "[" + host + "]" : host) + ":" +
                      std::to_string(bound.port());
  log(fabric::LogLevel::Info, "FTPD0001 listening on " + where + ", " +
                                  std::to_string(cfg.workers) + " workers, max " +
                                  std::to_string(cfg.max_sessions) + " sessions");
  if (o.foreground) {
    std::printf("%s: listening on %s\n", kProgram, where.c_str());
    std::fflush(stdout);
  }
  if (privsep.enabled)
    log(fabric::LogLevel::Info,
        "FTPD0021 privilege separation on: each session runs as its account after login "
        "(anonymous and users without run_as: " + cfg.unprivileged_user + ", uid " +
            std::to_string(privsep.unprivileged.uid) + "), one session per worker");
  else
    log(fabric::LogLevel::Info, "FTPD0020 privilege separation off: not started as root (uid " +
                                    std::to_string(::geteuid()) +
                                    "); every session runs as this user");
  // The ready file last: whoever waits on it finds the startup lines above already logged.
  if (!cfg.ready_file.empty()) {
    try {
      base::write_file_atomically(cfg.ready_file, std::to_string(bound.port()) + "\n");
    } catch (const std::exception& e) {
      return fail(kExitFailure, std::string("FTPD0013 cannot write the ready file: ") + e.what());
    }
  }
  report.ready();
  base::notify_systemd("READY=1\nMAINPID=" + std::to_string(::getpid()));
  MasterEnv env{&cfg, log, tls, xferlog.get(), &privsep, {}, {}, TIERCE_VERSION, where};
  Reload reload(&cfg, &env, &privsep, level, log);
  env.reload = [&reload] { return reload(); };
  env.reload_counters = [&reload] { return reload.counters(); };
  return run_master(env, lfd, signals.fd());
}

}  // namespace
}  // namespace tierce::ftpd

int main(int argc, char** argv) {
  tierce::ftpd::Options o;
  if (auto code = tierce::ftpd::parse(argc, argv, &o)) return *code;
  return tierce::ftpd::run(o);
}
