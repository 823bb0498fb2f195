// agents/binlogd/main.cc — tierce-binlogd: invalidation from MariaDB's change log (agent.h), in
// the daemon kit (base/daemon_kit.h: start, pid file, signals, drop, loop).
//
//   tierce-binlogd --config /etc/tierce/binlogd.toml [--foreground] [--check] [--version]
//
// Exit codes (base/daemon.h): 0 stopped cleanly or --check passed, 1 a start that failed, 2 a bad
// command line or configuration, 3 another tierce-binlogd holds the pid file.
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include "agents/binlogd/agent.h"
#include "agents/binlogd/config.h"
#include "base/daemon.h"
#include "base/daemon_kit.h"
#include "base/metrics.h"
#include "base/privileges.h"

#ifndef TIERCE_VERSION
#define TIERCE_VERSION "0.0.0"
#endif

namespace tierce::binlogd {
namespace {

constexpr const char* kProgram = "tierce-binlogd";

struct Options {
  std::string config;
  bool foreground = false, check = false;
};

const char* kUsage =
    "Usage: tierce-binlogd --config FILE [--foreground] [--check]\n"
    "Reads MariaDB's binlog as a replica and invalidates the cached pages that each committed\n"
    "row change touches, through the cluster's invalidation rounds (docs/binlog.md).\n"
    "  -c, --config FILE  the settings ([binlogd], [mariadb], [[table]]; conf/binlogd.toml)\n"
    "  -f, --foreground   stay in the foreground, log to stderr\n"
    "      --check        check the file (and the password file) and exit\n"
    "  -V, --version      print the version and exit\n"
    "  -h, --help         print this help and exit\n";

std::optional<int> parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "-c" || a == "--config") && i + 1 < argc) o.config = argv[++i];
    else if (a.rfind("--config=", 0) == 0) o.config = a.substr(9);
    else if (a == "-f" || a == "--foreground") o.foreground = true;
    else if (a == "--check") o.check = true;
    else if (a == "-V" || a == "--version") {
      std::cout << kProgram << " " << TIERCE_VERSION << "\n";
      return base::kExitOk;
    }
    else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return base::kExitOk;
    } else {
      std::cerr << "tierce-binlogd: " << "BINLOGD0100 unknown argument '" << a << "'\n" << kUsage;
      return base::kExitUsage;
    }
  }
  if (o.config.empty()) {
    std::cerr << "tierce-binlogd: " << "BINLOGD0100 --config FILE is required\n" << kUsage;
    return base::kExitUsage;
  }
  return std::nullopt;
}

base::DaemonMessages messages(const Settings& st) {
  base::DaemonMessages m;
  m.starting = [] { return "BINLOGD0001 starting (pid " + std::to_string(::getpid()) + ")"; };
  m.user_mismatch = [](const base::Account& u) {
    return "BINLOGD0105 user " + u.name + " asks to drop to uid " + std::to_string(u.uid) +
           ", but tierce-binlogd runs as uid " + std::to_string(::geteuid()) +
           ", not root: start it as root or as " + u.name + ", or leave user out";
  };
  m.pid_file_held = [&st](pid_t pid) {
    return "BINLOGD0106 another tierce-binlogd holds " + st.pid_file +
           (pid > 0 ? " (pid " + std::to_string(pid) + ")" : "");
  };
  m.pid_file_failed = [](const std::string& why) {
    return "BINLOGD0107 cannot write the pid file: " + why;
  };
  m.signals_failed = "BINLOGD0108 cannot set up signal handling: ";
  m.no_new_privs_failed = "BINLOGD0109 ";
  m.drop_failed = "BINLOGD0109 cannot drop privileges to user ";
  m.running_as = "BINLOGD0002 running as user ";
  m.stopping = "BINLOGD0003 received ";
  m.stopped = "BINLOGD0004 stopped";
  return m;
}

class Daemon {
 public:
  Daemon(const Options& o, Settings st, std::string password, std::optional<base::Account> user)
      : o_(o), st_(std::move(st)), password_(std::move(password)), user_(std::move(user)) {}

  int run() {
    base::DaemonSpec spec;
    spec.program = kProgram;
    spec.foreground = spec.to_stderr = o_.foreground;
    spec.log_level = st_.log_level;
    spec.user = user_;
    spec.pid_file = st_.pid_file;
    spec.signals = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};
    base::DaemonKit kit(std::move(spec), messages(st_));
    base::DaemonHooks h;
    h.start = [this](base::DaemonKit& k) -> int {
      log_ = k.log();
      try {
        agent_ = std::make_unique<Agent>(st_, password_, log_);
      } catch (const std::exception& e) {
        return k.fail(base::kExitFailure, std::string("BINLOGD0005 cannot start: ") + e.what());
      }
      return base::kExitOk;
    };
    h.hand_over = [this](const base::Account& u) {
      for (const std::string& f : {st_.state_file, st_.state_file + ".tmp"})
        if (::access(f.c_str(), F_OK) == 0) base::give_to(f, u, false);
    };
    h.started = [this](base::DaemonKit&) {
      agent_->start();
      if (!st_.metrics_file.empty())
        metrics_ = std::make_unique<base::TextfileWriter>(
            st_.metrics_file, st_.metrics_interval, [a = agent_.get()] { return a->metrics_text(); },
            log_, "BINLOGD0160");
      log_(base::LogLevel::Info,
           "BINLOGD0006 node " + st_.node + ", state " + st_.state_file + ", databases " +
               (st_.mapping.databases.empty() ? std::string("all") : join(st_.mapping.databases)) +
               ", " + std::to_string(st_.mapping.tables.size()) + " [[table]] mappings, auto names " +
               (st_.mapping.auto_names ? "on" : "off") + ", batches of up to " +
               std::to_string(st_.max_batch_transactions) + " transactions");
      return base::kExitOk;
    };
    h.reload = [this] {
      log_(base::LogLevel::Info,
           "BINLOGD0007 SIGHUP: nothing is reloaded; restart tierce-binlogd to apply a new "
           "configuration (it resumes from its saved position)");
    };
    h.signal = [this](base::Signal sig) {
      if (sig.number == SIGUSR1) log_(base::LogLevel::Info, "BINLOGD0008 status: " + agent_->status_text());
    };
    h.stop = [this] { stop(); };
    int code = kit.run(h);
    stop();
    return code;
  }

 private:
  static std::string join(const std::vector<std::string>& v) {
    std::string o;
    for (const auto& x : v) o += (o.empty() ? "" : ",") + x;
    return o;
  }
  void stop() {
    if (agent_) agent_->stop();
    metrics_.reset();
    agent_.reset();
  }

  const Options& o_;
  Settings st_;
  std::string password_;
  std::optional<base::Account> user_;
  base::LogSink log_;
  std::unique_ptr<Agent> agent_;
  std::unique_ptr<base::TextfileWriter> metrics_;
};

}  // namespace
}  // namespace tierce::binlogd

int main(int argc, char** argv) {
  using namespace tierce;
  using namespace tierce::binlogd;
  Options o;
  if (auto code = parse(argc, argv, o)) return *code;
  Settings st;
  try {
    st = load_config_file(o.config);
  } catch (const std::exception& e) {
    std::cerr << "tierce-binlogd: " << "BINLOGD0100 " << e.what() << "\n";
    return base::kExitUsage;
  }
  auto password = read_password_file(st.password_file);
  if (!password) {
    std::cerr << "tierce-binlogd: " << password.status().to_string() << "\n";
    return base::kExitUsage;
  }
  std::optional<base::Account> user;
  if (!st.user.empty()) {
    auto a = base::lookup_account(st.user);
    if (!a) {
      std::cerr << "tierce-binlogd: " << "BINLOGD0105 user = \"" << st.user << "\": " << a.message() << "\n";
      return base::kExitUsage;
    }
    user = *a;
  }
  if (o.check) {
    std::cout << "tierce-binlogd: " << o.config << " is valid\n";
    return base::kExitOk;
  }
  return Daemon(o, std::move(st), std::move(*password), std::move(user)).run();
}
