// ftp_adts/server/main.cc — tierce-ftpd, the process: command line, configuration, the control
// socket, what ftpd brings to the daemon kit (base/daemon_kit.h: start, pid file, signals); then
// the pre-forking master (master.h). docs/ftp.md "tierce-ftpd" is the user's reference.
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
#include "base/daemon_kit.h"
#include "base/log.h"
#include "base/signals.h"
#include "base/status.h"
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

// The control socket: bound, listening, non-blocking (workers poll it; see master.h). Its
// descriptor; *bound the address it is bound to.
base::Result<int> bind_control(const Config& cfg, SockAddr* bound) {
  SockAddr a;
  if (!SockAddr::parse(cfg.listen_host, cfg.listen_port, &a))
    return base::Status(base::Code::InvalidArgument, "bad listen address " + cfg.listen_host);
  int fd = ::socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return base::Status(base::Code::Internal, std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a.ss), a.len) != 0 || ::listen(fd, 128) != 0) {
    std::string why = "cannot listen on " + cfg.listen_host + ":" +
                      std::to_string(cfg.listen_port) + ": " + std::strerror(errno);
    ::close(fd);
    return base::Status(base::Code::Unavailable, std::move(why));
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

// What the start needs, checked before anything runs.
struct Prepared {
  Config cfg;
  std::shared_ptr<ftp::TlsContext> tls;
  PrivsepPlan privsep;
};

// The configuration, its TLS files and accounts; prints the problems and returns their exit
// code, or kExitOk after --check.
std::optional<int> prepare(const Options& o, Prepared* p) {
  Config& cfg = p->cfg;
  try {
    cfg = load_config(o.config);
  } catch (const ConfigError& e) {
    for (auto& problem : e.problems()) std::fprintf(stderr, "%s: %s\n", kProgram, problem.c_str());
    return kExitUsage;
  }
  if (cfg.tls) {
    try {
      p->tls = ftp::TlsContext::server(cfg.tls_cert, cfg.tls_key);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s: tls.cert/tls.key: %s\n", kProgram, cfg.source.c_str(),
                   e.what());
      return kExitUsage;
    }
  }
  // Privilege separation (privsep.h) whenever started as root. The accounts are resolved here, so
  // a missing one stops the start (and --check says so), not the first login.
  const bool root = ::geteuid() == 0;
  if (root || o.check) {
    std::vector<std::string> problems;
    p->privsep = resolve_accounts(cfg, &problems);
    if (!problems.empty()) {
      for (auto& problem : problems) std::fprintf(stderr, "%s: %s\n", kProgram, problem.c_str());
      return kExitUsage;
    }
    p->privsep.enabled = root;
  }
  if (o.check) {
    std::printf("%s: %s is fine: %zu user(s)%s, %u workers, max %u sessions\n", kProgram,
                cfg.source.c_str(), cfg.users.size(), cfg.anonymous ? " + anonymous" : "",
                cfg.workers, cfg.max_sessions);
    return kExitOk;
  }
  return std::nullopt;
}

base::DaemonMessages messages(const Options& o) {
  base::DaemonMessages m;
  m.pid_file_held = [&o](pid_t pid) {
    return "FTPD0011 another tierce-ftpd holds " + o.pid_file +
           (pid > 0 ? " (pid " + std::to_string(pid) + ")" : "");
  };
  m.pid_file_failed = [](const std::string& why) {
    return "FTPD0011 cannot write the pid file: " + why;
  };
  m.signals_failed = "FTPD0007 cannot set up signal handling: ";
  m.ready_file_failed = [](const std::string& why) {
    return "FTPD0013 cannot write the ready file: " + why;
  };
  return m;
}

// The master in the daemon kit (base/daemon_kit.h): the kit starts it; run_master (master.h)
// then has the signals and the workers.
class Daemon {
 public:
  Daemon(const Options& o, Prepared p) : o_(o), p_(std::move(p)) {}

  int run() {
    base::DaemonSpec spec;
    spec.program = kProgram;
    spec.foreground = spec.to_stderr = o_.foreground;
    spec.log_level = p_.cfg.log_level;
    spec.pid_file = o_.pid_file;
    spec.ready_file = p_.cfg.ready_file;  // written last: the startup lines are logged already
    spec.signals = {SIGTERM, SIGINT, SIGHUP, SIGCHLD};
    base::DaemonKit kit(std::move(spec), messages(o_));
    base::DaemonHooks h;
    h.start = [this](base::DaemonKit& k) { return start(k); };
    h.ready_text = [this] { return std::to_string(bound_.port()) + "\n"; };
    h.serve = [this](base::DaemonKit& k) {
      MasterEnv env{&p_.cfg, k.log(), p_.tls, xferlog_.get(), &p_.privsep, {}, {},
                    TIERCE_VERSION, where_};
      Reload reload(&p_.cfg, &env, &p_.privsep, k.level(), k.log());
      env.reload = [&reload] { return reload(); };
      env.reload_counters = [&reload] { return reload.counters(); };
      return run_master(env, lfd_, k.signals().fd());
    };
    return kit.run(h);
  }

 private:
  int start(base::DaemonKit& k) {
    const Config& cfg = p_.cfg;
    try {
      xferlog_ = std::make_unique<Xferlog>(cfg.xferlog);
    } catch (const std::exception& e) {
      return k.fail(kExitFailure, std::string("FTPD0012 cannot open the xferlog: ") + e.what());
    }
    base::Result<int> bound = bind_control(cfg, &bound_);
    if (!bound.ok()) return k.fail(kExitFailure, "FTPD0009 " + bound.message());
    lfd_ = *bound;
    std::string host = bound_.host();
    where_ = (bound_.family() == AF_INET6 ? "[" + host + "]" : host) + ":" +
             std::to_string(bound_.port());
    k.log()(fabric::LogLevel::Info, "FTPD0001 listening on " + where_ + ", " +
                                        std::to_string(cfg.workers) + " workers, max " +
                                        std::to_string(cfg.max_sessions) + " sessions");
    if (o_.foreground) {
      std::printf("%s: listening on %s\n", kProgram, where_.c_str());
      std::fflush(stdout);
    }
    if (p_.privsep.enabled)
      k.log()(fabric::LogLevel::Info,
              "FTPD0021 privilege separation on: each session runs as its account after login "
              "(anonymous and users without run_as: " + cfg.unprivileged_user + ", uid " +
                  std::to_string(p_.privsep.unprivileged.uid) + "), one session per worker");
    else
      k.log()(fabric::LogLevel::Info, "FTPD0020 privilege separation off: not started as root "
                                      "(uid " + std::to_string(::geteuid()) +
                                          "); every session runs as this user");
    return kExitOk;
  }

  const Options& o_;
  Prepared p_;
  std::unique_ptr<Xferlog> xferlog_;
  int lfd_ = -1;  // the control socket (bind_control)
  SockAddr bound_;
  std::string where_;  // its address, as logged
};

}  // namespace
}  // namespace tierce::ftpd

int main(int argc, char** argv) {
  using namespace tierce::ftpd;
  Options o;
  if (auto code = parse(argc, argv, &o)) return *code;
  if (o.hash) return hash_from_stdin();
  Prepared p;
  if (auto code = prepare(o, &p)) return *code;
  return Daemon(o, std::move(p)).run();
}
