// tests/dlm/lockd_config_test.cc — the real tierce-lockd with --config FILE (a [lockd] table):
// the quotas of the file take effect and a flag overrides them, a bad file stops the start with
// exit code 2, SIGHUP raises and lowers a quota, and a broken file on SIGHUP keeps the old one.
// One node, tcp on 127.0.0.1; clients through dlm::LockClient.
#define BOOST_TEST_MODULE lockd_config
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <boost/test/unit_test.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fabric/identity.h"
#include "dlm/client.h"
#include "tests/test_util.h"

using namespace tierce_test;
using tierce::dlm::HeldLock;
using tierce::dlm::LockClient;
using tierce::dlm::LockError;
using tierce::dlm::Mode;
using tierce::dlm::Status;

namespace {

struct Node {
  TempDir dir;
  std::string topology = dir / "cluster.toml";
  std::string config = dir / "lockd.toml";
  std::string socket = dir / "ipc.sock";
  std::string log = dir / "lockd.log";
  pid_t pid = -1;

  Node() {
    std::string secret = make_secret(dir);
    write_file(topology, "[cluster]\nname = \"t\"\nsecret_file = \"" + secret +
                             "\"\ntransport = \"tcp\"\n[dlm]\nalgorithm = \"ncosed\"\n"
                             "[[node]]\nname = \"a\"\nlockd = [\"tcp://127.0.0.1:" +
                             std::to_string(free_port()) + "\"]\n");
  }
  ~Node() { stop(); }

  // The [lockd] table with `extra` lines; topology, node, socket and state_dir set.
  void write_config(const std::string& extra) {
    write_file(config,
               "[lockd]\ntopology = \"cluster.toml\"\nnode = \"a\"\nsocket = \"ipc.sock\"\n"
               "state_dir = \"state\"\n" +
                   extra);
  }

  // Runs tierce-lockd in the foreground with `args`, stdout+stderr to `log`; returns at once.
  void start(std::vector<std::string> args) {
    pid_t parent = ::getpid();
    pid = ::fork();
    BOOST_REQUIRE(pid >= 0);
    if (pid == 0) {
      die_with_parent(parent);
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> argv{const_cast<char*>(TIERCE_LOCKD_BINARY)};
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(TIERCE_LOCKD_BINARY, argv.data());
      ::_exit(127);
    }
  }
  bool logged(const std::string& s, size_t times = 1) {
    std::string t = read_file(log);
    size_t n = 0;
    for (size_t at = t.find(s); at != std::string::npos; at = t.find(s, at + 1)) ++n;
    return n >= times;
  }
  void start_serving(std::vector<std::string> args) {
    start(std::move(args));
    BOOST_REQUIRE_MESSAGE(eventually([&] { return logged("LOCKD0017"); }, 10000ms),
                          "lockd did not start:\n" + read_file(log));
  }
  // Waits for the exit of a lockd that should stop by itself; its exit code.
  int wait_exit() {
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  void hup_and_wait(const std::string& id) {
    std::string t = read_file(log);
    size_t before = 0;
    for (size_t at = t.find(id); at != std::string::npos; at = t.find(id, at + 1)) ++before;
    ::kill(pid, SIGHUP);
    BOOST_REQUIRE_MESSAGE(eventually([&] { return logged(id, before + 1); }, 5000ms),
                          "no " + id + " after SIGHUP:\n" + read_file(log));
  }
  void stop() {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);
    int status;
    ::waitpid(pid, &status, 0);
    pid = -1;
  }
};

// How many locks one new client gets before TooMany (up to `limit`).
size_t locks_granted(const std::string& socket, size_t limit) {
  LockClient c(socket);
  std::vector<HeldLock> held;
  for (size_t i = 0; i < limit; ++i) {
    try {
      held.push_back(c.lock("q" + std::to_string(i) + "-" + random_suffix(), Mode::Exclusive,
                            std::chrono::milliseconds(2000)));
    } catch (const LockError& e) {
      BOOST_TEST((e.status() == Status::TooMany), e.what());
      BOOST_TEST(std::string(e.what()).find("max_holds_per_client") != std::string::npos, e.what());
      return held.size();
    }
  }
  return held.size();
}

}  // namespace

BOOST_AUTO_TEST_CASE(quotas_from_the_file_and_a_flag_overrides) {
  {
    Node n;
    n.write_config(
        "max_locks_per_client = 2\nmax_locks_per_uid = 100\nprotection = \"encrypt\"\n"
        "max_preauth_frame = 128\nmax_connections_per_ip = 16\nspin_us = 0\n");
    n.start_serving({"--config", n.config, "-f"});
    BOOST_TEST(locks_granted(n.socket, 10) == 2u);
    BOOST_TEST(n.logged("max_locks_per_client 2, max_locks_per_uid 100"), read_file(n.log));
    BOOST_TEST(n.logged("protection encrypt, spin_us 0"), read_file(n.log));
  }
  {
    Node n;
    n.write_config("max_locks_per_client = 2\nspin_us = 0\n");
    n.start_serving({"--config", n.config, "--max-locks-per-client", "3", "--spin-us", "200",
                     "-f"});
    BOOST_TEST(locks_granted(n.socket, 10) == 3u);
    BOOST_TEST(n.logged("spin_us 200"), read_file(n.log));
  }
  {
    Node n;  // the default
    n.write_config("");
    n.start_serving({"--config", n.config, "-f"});
    BOOST_TEST(n.logged("spin_us 50"), read_file(n.log));
  }
}

BOOST_AUTO_TEST_CASE(a_bad_file_stops_the_start_with_exit_code_2) {
  Node n;
  n.write_config("max_locks_per_clent = 2\nmax_locks_per_uid = 0\nspin_us = 10001\n");
  n.start({"--config", n.config, "-f"});
  BOOST_TEST(n.wait_exit() == 2);
  std::string out = read_file(n.log);
  BOOST_TEST(out.find("lockd.toml:8:") != std::string::npos, out);
  BOOST_TEST(out.find("spin_us: 10001 is out of range") != std::string::npos, out);
  BOOST_TEST(out.find("lockd.toml:6:1: [lockd] max_locks_per_clent: unknown key; did you mean "
                      "'max_locks_per_client'?") != std::string::npos,
             out);
  BOOST_TEST(out.find("lockd.toml:7:") != std::string::npos, out);
  BOOST_TEST(out.find("max_locks_per_uid: 0 is out of range") != std::string::npos, out);

  Node f;  // a flag with a bad value
  f.write_config("");
  f.start({"--config", f.config, "--spin-us", "fast", "-f"});
  BOOST_TEST(f.wait_exit() == 2);
  BOOST_TEST(read_file(f.log).find("--spin-us wants a number 0..10000, not 'fast'") !=
                 std::string::npos,
             read_file(f.log));

  Node m;
  m.start({"--config", m.dir / "missing.toml", "-f"});
  BOOST_TEST(m.wait_exit() == 2);
  BOOST_TEST(read_file(m.log).find("missing.toml: cannot read the configuration file") !=
                 std::string::npos,
             read_file(m.log));

  Node s;
  s.write_config("[lockd]\n");  // a syntax error: the table twice
  s.start({"--config", s.config, "-f"});
  BOOST_TEST(s.wait_exit() == 2);
  BOOST_TEST(read_file(s.log).find("lockd.toml:6:") != std::string::npos, read_file(s.log));
  BOOST_TEST(read_file(s.log).find("not valid TOML") != std::string::npos, read_file(s.log));
}

// A keyed topology (issue 32, node identity): lockd starts only with the key the topology names
// for its node; without one, or with another, it stops with exit code 2 and says which.
BOOST_AUTO_TEST_CASE(a_keyed_topology_needs_this_nodes_key) {
  auto keyed = [](Node& n, const tierce::fabric::NodeKey& k) {
    std::string t = read_file(n.topology);
    write_file(n.topology, t + "public_key = \"" + tierce::fabric::format_public_key(k.public_key()) +
                               "\"\n");
  };
  const auto key = tierce::fabric::NodeKey::generate();
  Node none;
  keyed(none, key);
  none.write_config("");
  none.start({"--config", none.config, "-f"});
  BOOST_TEST(none.wait_exit() == 2);
  BOOST_TEST(read_file(none.log).find("set node_key") != std::string::npos, read_file(none.log));

  Node wrong;
  keyed(wrong, key);
  tierce::fabric::NodeKey::generate().write_file(wrong.dir / "other.key");
  wrong.write_config("node_key = \"other.key\"\n");
  wrong.start({"--config", wrong.config, "-f"});
  BOOST_TEST(wrong.wait_exit() == 2);
  BOOST_TEST(read_file(wrong.log).find("is not the key of node a") != std::string::npos,
             read_file(wrong.log));

  Node right;
  keyed(right, key);
  key.write_file(right.dir / "a.key");
  right.write_config("node_key = \"a.key\"\n");
  right.start_serving({"--config", right.config, "-f"});
  BOOST_TEST(locks_granted(right.socket, 1) == 1u);
}

BOOST_AUTO_TEST_CASE(sighup_raises_and_lowers_a_quota_and_a_broken_file_keeps_it) {
  Node n;
  n.write_config("max_locks_per_client = 2\n");
  n.start_serving({"--config", n.config, "-f"});
  BOOST_TEST(locks_granted(n.socket, 10) == 2u);

  n.write_config("max_locks_per_client = 4\n");
  n.hup_and_wait("LOCKD0015");
  BOOST_TEST(n.logged("LOCKD0015 reload done: applied max_locks_per_client 2 -> 4"),
             read_file(n.log));
  BOOST_TEST(locks_granted(n.socket, 10) == 4u);

  // Lowered, plus a key that needs a restart: reported, not applied (the socket stays).
  n.write_config("max_locks_per_client = 1\nsocket_mode = \"0600\"\n");
  n.hup_and_wait("LOCKD0015");
  BOOST_TEST(n.logged("applied max_locks_per_client 4 -> 1; restart tierce-lockd to apply "
                      "socket_mode 0660 -> 0600"),
             read_file(n.log));
  BOOST_TEST(locks_granted(n.socket, 10) == 1u);

  // A held lock beyond a lowered quota is kept; the next one is refused.
  {
    n.write_config("max_locks_per_client = 3\n");
    n.hup_and_wait("LOCKD0015");
    LockClient c(n.socket);
    auto a = c.lock("keep-a", Mode::Exclusive, std::chrono::milliseconds(2000));
    auto b = c.lock("keep-b", Mode::Exclusive, std::chrono::milliseconds(2000));
    n.write_config("max_locks_per_client = 1\n");
    n.hup_and_wait("LOCKD0015");
    BOOST_CHECK_THROW(c.lock("keep-c", Mode::Exclusive, std::chrono::milliseconds(2000)),
                      LockError);
    a.unlock();
    b.unlock();
  }

  // Broken: every problem logged, the running quota (1) stays.
  n.write_config("max_locks_per_client = \"many\"\n");
  n.hup_and_wait("LOCKD0014");
  BOOST_TEST(n.logged("LOCKD0014 reload failed, the running configuration stays in effect: "),
             read_file(n.log));
  BOOST_TEST(n.logged("max_locks_per_client: expected an integer"), read_file(n.log));
  BOOST_TEST(locks_granted(n.socket, 10) == 1u);
  ::unlink(n.config.c_str());
  n.hup_and_wait("LOCKD0014");
  BOOST_TEST(locks_granted(n.socket, 10) == 1u);
  // Still serving, still reloading.
  n.write_config("max_locks_per_client = 2\n");
  n.hup_and_wait("LOCKD0015");
  BOOST_TEST(locks_granted(n.socket, 10) == 2u);
  // The status report (USR1) counts them: 5 applied, 2 refused.
  ::kill(n.pid, SIGUSR1);
  BOOST_TEST(eventually([&] { return n.logged("reloads 5\nfailed_reloads 2\n"); }, 5000ms),
             read_file(n.log));
}

BOOST_AUTO_TEST_CASE(sighup_without_a_file_has_nothing_to_reload) {
  Node n;
  n.start_serving({"-t", n.topology, "-n", "a", "-s", n.socket, "-d", n.dir / "state", "-f",
                   "--max-locks-per-client", "2"});
  n.hup_and_wait("LOCKD0009");
  BOOST_TEST(locks_granted(n.socket, 10) == 2u);
}

// conf/lockd.toml, the installed sample, is a valid file (its topology and node overridden by
// flags, as a flag overrides any key).
BOOST_AUTO_TEST_CASE(the_sample_file_is_valid) {
  Node n;
  n.start({"--config", std::string(TIERCE_SOURCE_DIR) + "/conf/lockd.toml", "-t", n.topology, "-n",
           "a", "-s", n.socket, "-d", n.dir / "state", "-p", n.dir / "pid", "--check"});
  BOOST_TEST(n.wait_exit() == 0, read_file(n.log));
  BOOST_TEST(n.logged("is fine: node a is member 1 of 1"), read_file(n.log));
}

// metrics_file / metrics_interval_ms: a relative path is the file's directory's, the interval is
// checked, a reload moves the file (the old one removed), and a clean stop removes it.
BOOST_AUTO_TEST_CASE(metrics_file_from_the_file_reloaded_and_removed_at_stop) {
  Node bad;
  bad.write_config("metrics_interval_ms = 10\n");
  bad.start({"--config", bad.config, "-f"});
  BOOST_TEST(bad.wait_exit() == 2);
  BOOST_TEST(read_file(bad.log).find("metrics_interval_ms: 10 is out of range 1000..3600000") !=
                 std::string::npos,
             read_file(bad.log));

  Node n;
  n.write_config("metrics_file = \"lockd.prom\"\nmetrics_interval_ms = 1000\n");
  n.start_serving({"--config", n.config, "-f"});
  const std::string prom = n.dir / "lockd.prom", moved = n.dir / "moved.prom";
  // LOCKD0051 comes after LOCKD0017, which is all start_serving waits for.
  BOOST_TEST(eventually([&] { return n.logged("LOCKD0051 metrics written to " + prom + " every 1000 ms"); },
                        5000ms),
             read_file(n.log));
  BOOST_REQUIRE(eventually([&] { return ::access(prom.c_str(), F_OK) == 0; }, 5000ms));
  BOOST_TEST(read_file(prom).find("tierce_lockd_info{node=\"a\"") != std::string::npos,
             read_file(prom));
  n.write_config("metrics_file = \"moved.prom\"\n");
  n.hup_and_wait("LOCKD0015");
  BOOST_TEST(n.logged("metrics_file \"" + prom + "\" -> \"" + moved + "\""), read_file(n.log));
  BOOST_REQUIRE(eventually([&] { return ::access(moved.c_str(), F_OK) == 0; }, 5000ms));
  BOOST_TEST(::access(prom.c_str(), F_OK) != 0);
  BOOST_TEST(read_file(moved).find("tierce_lockd_reloads_total{node=\"a\"} 1\n") !=
                 std::string::npos,
             read_file(moved));
  n.stop();
  BOOST_TEST(::access(moved.c_str(), F_OK) != 0);
}
