// tests/coherence/cluster_fixture.h — two app nodes' real tierce-memd with [coherence] (and, with
// ClusterOptions, writer agents and their agent sockets) in a private directory, for the tests
// that run coherence over real processes (test_cluster.cc, test_agent_socket.cc). The transport
// comes from the test's --transport=tcp|shm argument. One test executable includes it once.
#pragma once

#include <boost/test/unit_test.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <thread>

#include "coherence/client.h"
#include "coherence/key.h"
#include "coherence/layout.h"
#include "coherence/protocol.h"
#include "coherence/writer.h"
#include "tests/agents/memd_test_util.h"

using namespace tierce;
using namespace tierce::coherence;
using namespace memd_test;
using namespace std::chrono_literals;

namespace cluster_fixture {

inline std::string transport_arg() {
  auto& mts = boost::unit_test::framework::master_test_suite();
  for (int i = 1; i < mts.argc; ++i) {
    std::string a = mts.argv[i];
    if (a.rfind("--transport=", 0) == 0) return a.substr(12);
  }
  return "tcp";
}

constexpr int kLeaseMs = 300;  // the fence lease of these tests (the default is 1000)
constexpr int kSkewMs = 20;
constexpr auto kBound = std::chrono::milliseconds(kLeaseMs + kSkewMs);

struct ClusterOptions {
  int ack_slots = 4096;
  // Each app node also runs a writer agent (a second memd with [writer], listed as the node's
  // `writer` in the topology): the homes read the writer counters there, not at the memd.
  bool writer_agents = false;
  // Each writer agent also serves its agent socket (DIR/<node>-agent.sock, [writer] socket):
  // what the app tier's httpd children use instead of the secret (needs writer_agents).
  bool agent_sockets = false;
};

struct Cluster {
  TempDir dir;
  std::string secret = make_secret(dir);
  std::string topo_path = dir / "cluster.toml";
  std::string prefix = "/tierce.t" + std::to_string(::getpid()) + random_suffix().substr(0, 6);
  std::vector<std::string> names{"app1", "app2"};
  std::vector<std::string> tcp, shm, wtcp, wshm;
  std::vector<Child> memd{2}, writer_agent{2};
  ClusterOptions opts;

  explicit Cluster(ClusterOptions o = {}) : opts(o) {
    for (auto& n : names) {
      tcp.push_back("tcp://127.0.0.1:" + std::to_string(free_port()));
      shm.push_back("shm://" + dir.path() + "/" + n + ".sock");
      wtcp.push_back("tcp://127.0.0.1:" + std::to_string(free_port()));
      wshm.push_back("shm://" + dir.path() + "/" + n + "-writer.sock");
    }
    write_file(topo_path, topology(transport_arg(), {}));
    for (size_t i = 0; i < names.size(); ++i) {
      std::string cfg = "[memd]\nnode = \"" + names[i] + "\"\nlisten = [\"" + tcp[i] + "\", \"" +
                        shm[i] + "\"]\nsecret_file = \"" + secret + "\"\nready_file = \"" +
                        dir.path() + "/" + names[i] + ".ready\"\nlog_level = \"warn\"\n" +
                        "[coherence]\ntopology = \"" + topo_path + "\"\nlog_entries = 1024\n" +
                        "ack_slots = " + std::to_string(opts.ack_slots) + "\n";
      write_file(dir / (names[i] + ".toml"), cfg);
      write_file(dir / (names[i] + "-writer.toml"),
                 "[memd]\nnode = \"" + names[i] + "\"\nlisten = [\"" + wtcp[i] + "\", \"" +
                     wshm[i] + "\"]\nsecret_file = \"" + secret + "\"\nready_file = \"" +
                     dir.path() + "/" + names[i] +
                     "-writer.ready\"\nlog_level = \"warn\"\n[writer]\ntopology = \"" + topo_path +
                     "\"\n" + (opts.agent_sockets ? "socket = \"" + agent_socket(i) + "\"\n" : ""));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      if (opts.writer_agents) start_writer_agent(i);
      start(i);
    }
    BOOST_REQUIRE_MESSAGE(both_vouch(), "the homes did not start vouching (fence renewal)");
  }
  ~Cluster() {
    for (auto& c : memd) c.kill_now();
    for (auto& c : writer_agent) c.kill_now();
    for (auto& n : names)
      for (const char* r : {kVersionsSuffix, kAcksSuffix, kWriterSuffix})
        fabric::SharedSegment::unlink(prefix + "." + n + r);
  }
  // A topology file: `uris` overrides a node's memd URIs (a writer cut off from it), `extra`
  // goes into [cluster].
  std::string topology(const std::string& transport, std::map<std::string, std::string> uris,
                       const std::string& extra = "") const {
    std::string t = "[cluster]\nname = \"t\"\nsecret_file = \"" + secret + "\"\ntransport = \"" +
                    transport + "\"\nversion_slots = 4096\n" + extra +
                    "[coherence]\nlease_ms = " + std::to_string(kLeaseMs) +
                    "\nclock_skew_ms = " + std::to_string(kSkewMs) + "\n";
    for (size_t i = 0; i < names.size(); ++i) {
      const auto& n = names[i];
      std::string m = uris.count(n) ? uris.at(n) : "\"" + tcp[i] + "\", \"" + shm[i] + "\"";
      t += "[[node]]\nname = \"" + n + "\"\nrole = \"app\"\nmemd = [" + m +
           "]\nsegment_prefix = \"" + prefix + "." + n + "\"\n";
      if (opts.writer_agents) {
        std::string wk = n + "-writer";
        t += "writer = [" +
             (uris.count(wk) ? uris.at(wk) : "\"" + wtcp[i] + "\", \"" + wshm[i] + "\"") + "]\n";
      }
    }
    return t;
  }
  std::string agent_socket(size_t i) const { return dir / (names[i] + "-agent.sock"); }
  void start(size_t i) { memd[i] = spawn_memd(names[i] + ".toml", names[i] + ".ready", "memd"); }
  void start_writer_agent(size_t i) {
    writer_agent[i] = spawn_memd(names[i] + "-writer.toml", names[i] + "-writer.ready", "writer agent");
  }
  // A tierce-memd with the file `cfg` of dir, once its ready file is there.
  Child spawn_memd(const std::string& cfg_name, const std::string& ready_name, const char* what) {
    std::string ready = dir / ready_name;
    ::unlink(ready.c_str());
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid == 0) {
      tierce_test::die_with_parent(parent);
      std::string cfg = dir / cfg_name;
      ::execl(TIERCE_MEMD_BINARY, "tierce-memd", "--foreground", "-c", cfg.c_str(), nullptr);
      ::_exit(127);
    }
    Child c(pid);
    BOOST_REQUIRE_MESSAGE(eventually([&] { return ::access(ready.c_str(), F_OK) == 0; }, 10s),
                          what << " " << cfg_name << " did not become ready");
    return c;
  }
  ClusterClient client(std::chrono::milliseconds op = 500ms,
                       std::chrono::milliseconds retry_after = 50ms,
                       const std::string& path = "") const {
    ClientTuning t;
    t.op_timeout = op;
    t.connect_timeout = 500ms;
    t.retry_after = retry_after;
    return ClusterClient(Topology::load(path.empty() ? topo_path : path),
                         fabric::Secret::from_file(secret), t, nullptr);
  }
  // What app `node`'s httpd numbers its invalidations with.
  WriterLog writer(const std::string& node) const {
    return WriterLog(prefix + "." + node + kWriterSuffix,
                     Topology::load(topo_path).coherence_digest());
  }
  // A home vouches when its sequence can be read (a fenced table refuses every read).
  bool both_vouch(std::chrono::milliseconds limit = 5s) const {
    auto cl = client(200ms, 0ms);
    return eventually([&] { return cl.read_seq("app1") && cl.read_seq("app2"); }, limit);
  }
  // memd's coherence.status as a map.
  std::map<std::string, std::string> status(size_t i) const {
    fabric::ClientOptions o;
    o.secret = fabric::Secret::from_file(secret);
    auto conn = fabric::connect(tcp[i], o);
    auto b = conn->call(kStatusService, {});
    std::istringstream in(std::string(b.begin(), b.end()));
    std::map<std::string, std::string> m;
    for (std::string line; std::getline(in, line);) {
      auto sp = line.find(' ');
      if (sp != std::string::npos) m[line.substr(0, sp)] = line.substr(sp + 1);
    }
    return m;
  }
  uint64_t stat(size_t i, const std::string& key) const { return std::stoull(status(i).at(key)); }
};

// A key whose home is `home`.
inline uint64_t key_homed_at(const Topology& t, const std::string& home, int salt = 0) {
  for (int i = 0;; ++i) {
    uint64_t k = hash64("/page?" + std::to_string(salt) + "-" + std::to_string(i));
    if (t.home_of(k).name == home) return k;
  }
}

inline std::vector<uint64_t> deps(std::initializer_list<const char*> names) {
  std::vector<uint64_t> v;
  for (auto n : names) v.push_back(dependency_hash(n));
  return v;
}

// A page registered at `home` (as a render would: sequence first).
inline RegisterResult register_at(ClusterClient& cl, const std::string& home, uint64_t key,
                           std::initializer_list<const char*> d) {
  auto seq = cl.read_seq(home);
  BOOST_REQUIRE_MESSAGE(seq.has_value(), "sequence of " << home << " not readable");
  return cl.register_page(home, key, *seq, deps(d));
}

// SIGSTOP, and returns once every thread of the process has stopped (a message taken by one of its
// threads in the meantime would otherwise still be applied and acknowledged).
inline void freeze(const Child& c) {
  c.signal(SIGSTOP);
  int st = 0;
  ::waitpid(c.pid(), &st, WUNTRACED);
}

inline std::chrono::milliseconds ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
}

}  // namespace cluster_fixture

using namespace cluster_fixture;
