// The database as the fence's arbiter (issue 29 Part 2, docs/coherence.md "A lost node: the
// database as the arbiter"): two real tierce-memd homes with writer agents and a real MariaDB
// (private instance, unix socket). A home that cannot read an app node's writer counter drops it
// in the database (epoch+1, out) — after that node's open write transactions end — catches up and
// vouches without it; the homes re-admit it together once they all read it again, never the node
// by itself; a database that does not answer drops nobody (the home stays fenced).
#define BOOST_TEST_MODULE coherence_arbiter
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <sstream>
#include <thread>

#include "agents/memd/arbiter_db.h"
#include "coherence/client.h"
#include "coherence/key.h"
#include "coherence/layout.h"
#include "coherence/protocol.h"
#include "tests/agents/memd_test_util.h"

using namespace tierce;
using namespace tierce::coherence;
using namespace memd_test;
using namespace std::chrono_literals;
using tierce_test::eventually;
using tierce_test::free_port;
using tierce_test::TempDir;
using tierce_test::write_file;

namespace {

constexpr int kLeaseMs = 300;
constexpr int kDropAfterMs = 900;  // 3 x lease

std::string tail_of(const std::string& path) {
  std::string s = tierce_test::read_file(path);
  return s.size() > 3000 ? s.substr(s.size() - 3000) : s;
}

// A private MariaDB on a unix socket, with database `tierce` (the arbiter's tables go there).
struct Db {
  TempDir& dir;
  std::string sock, log;
  Child proc;
  explicit Db(TempDir& d) : dir(d) {
    std::string base = dir / "db";
    ::mkdir(base.c_str(), 0755);
    // A private tmpdir: bootstraps running at once in one /tmp collide on temporary table names.
    std::string tmp = base + "/tmp";
    ::mkdir(tmp.c_str(), 0755);
    sock = base + "/mysqld.sock";
    log = dir / "mariadb.log";
    Child inst = spawn_binary("/usr/bin/mariadb-install-db",
                              {"--no-defaults", "--user=root", "--datadir=" + base + "/data",
                               "--tmpdir=" + tmp, "--auth-root-authentication-method=socket",
                               "--skip-test-db"},
                              log);
    BOOST_REQUIRE_MESSAGE(inst.wait_exit(120s) == 0, "mariadb-install-db failed:\n" << tail_of(log));
    proc = spawn_binary("/usr/sbin/mariadbd",
                        {"--no-defaults", "--user=root", "--datadir=" + base + "/data",
                         "--tmpdir=" + tmp, "--socket=" + sock, "--skip-networking", "--innodb-buffer-pool-size=32M",
                         "--pid-file=" + base + "/mysqld.pid"},
                        log);
    BOOST_REQUIRE_MESSAGE(eventually([&] { return sql("SELECT 1") == 0; }, 60s),
                          "MariaDB did not start:\n" << tail_of(log));
    BOOST_REQUIRE(sql("CREATE DATABASE tierce") == 0);
  }
  int sql(const std::string& q, std::chrono::milliseconds limit = 30s) const {
    Child c = spawn_binary("/usr/bin/mariadb", {"--no-defaults", "-S", sock, "-uroot", "-e", q},
                           dir / "sql.log");
    return c.wait_exit(limit);
  }
  // The first value `q` returns, "" when it fails.
  std::string value(const std::string& q) const {
    std::string out = dir / "value.out";
    ::unlink(out.c_str());
    Child c = spawn_binary("/usr/bin/mariadb",
                           {"--no-defaults", "-S", sock, "-uroot", "-N", "-B", "-e", q}, out);
    if (c.wait_exit(30s) != 0) return "";
    std::string v = tierce_test::read_file(out);
    while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
    return v;
  }
  std::string row(const std::string& node) const {
    return value("SELECT CONCAT(state, ' ', epoch) FROM tierce.fence WHERE node = '" + node + "'");
  }
};

struct Cluster {
  TempDir dir;
  Db db{dir};
  std::string secret = tierce_test::make_secret(dir);
  std::string topo_path = dir / "cluster.toml";
  std::string prefix = "/tierce.arb" + std::to_string(::getpid());
  std::vector<std::string> names{"app1", "app2"};
  std::vector<std::string> tcp, wtcp;
  std::vector<Child> memd{2}, writer{2};

  Cluster() {
    for (size_t i = 0; i < names.size(); ++i) {
      tcp.push_back("tcp://127.0.0.1:" + std::to_string(free_port()));
      wtcp.push_back("tcp://127.0.0.1:" + std::to_string(free_port()));
    }
    std::string t = "[cluster]\nname = \"arb\"\nsecret_file = \"" + secret +
                    "\"\ntransport = \"tcp\"\nversion_slots = 4096\n[coherence]\nlease_ms = " +
                    std::to_string(kLeaseMs) + "\nclock_skew_ms = 20\n[arbiter]\ntable = "
                    "\"tierce.fence\"\nsocket = \"" + db.sock + "\"\nuser = \"root\"\n"
                    "drop_after_ms = " + std::to_string(kDropAfterMs) + "\n";
    for (size_t i = 0; i < names.size(); ++i)
      t += "[[node]]\nname = \"" + names[i] + "\"\nrole = \"app\"\nmemd = [\"" + tcp[i] +
           "\"]\nwriter = [\"" + wtcp[i] + "\"]\nsegment_prefix = \"" + prefix + "." + names[i] +
           "\"\n";
    write_file(topo_path, t);
    for (size_t i = 0; i < names.size(); ++i) {
      write_file(dir / (names[i] + ".toml"),
                 "[memd]\nnode = \"" + names[i] + "\"\nlisten = [\"" + tcp[i] +
                     "\"]\nsecret_file = \"" + secret + "\"\nready_file = \"" + dir.path() + "/" +
                     names[i] + ".ready\"\nlog_level = \"info\"\n[coherence]\ntopology = \"" +
                     topo_path + "\"\nlog_entries = 1024\n");
      write_file(dir / (names[i] + "-writer.toml"),
                 "[memd]\nnode = \"" + names[i] + "\"\nlisten = [\"" + wtcp[i] +
                     "\"]\nsecret_file = \"" + secret + "\"\nready_file = \"" + dir.path() + "/" +
                     names[i] + "-writer.ready\"\nlog_level = \"warn\"\n[writer]\ntopology = \"" +
                     topo_path + "\"\n");
    }
    for (size_t i = 0; i < names.size(); ++i) {
      start_writer(i);
      start(i);
    }
  }
  ~Cluster() {
    for (auto& c : memd) c.kill_now();
    for (auto& c : writer) c.kill_now();
    for (auto& n : names)
      for (const char* r : {kVersionsSuffix, kAcksSuffix, kWriterSuffix})
        fabric::SharedSegment::unlink(prefix + "." + n + r);
  }
  Child spawn(const std::string& cfg, const std::string& ready) {
    ::unlink((dir / ready).c_str());
    Child c = spawn_binary(TIERCE_MEMD_BINARY, {"--foreground", "-c", dir / cfg},
                           dir / (cfg + ".log"));
    BOOST_REQUIRE_MESSAGE(eventually([&] { return ::access((dir / ready).c_str(), F_OK) == 0; }, 10s),
                          cfg << " did not become ready:\n" << tail_of(dir / (cfg + ".log")));
    return c;
  }
  void start(size_t i) { memd[i] = spawn(names[i] + ".toml", names[i] + ".ready"); }
  void start_writer(size_t i) {
    writer[i] = spawn(names[i] + "-writer.toml", names[i] + "-writer.ready");
  }
  std::string log(size_t i) const { return tierce_test::read_file(dir / (names[i] + ".toml.log")); }
  ClusterClient client() const {
    ClientTuning t;
    t.op_timeout = 200ms;
    t.connect_timeout = 200ms;
    t.retry_after = 0ms;
    return ClusterClient(Topology::load(topo_path), fabric::Secret::from_file(secret), t, nullptr);
  }
  bool vouches(ClusterClient& cl, const std::string& home) { return cl.read_seq(home).has_value(); }
  std::map<std::string, std::string> status(size_t i) const {
    fabric::ClientOptions o;
    o.secret = fabric::Secret::from_file(secret);
    auto conn = fabric::connect(tcp[i], o);
    auto b = conn->call(kStatusService, {});
    std::istringstream in(std::string(b.begin(), b.end()));
    std::map<std::string, std::string> m;
    for (std::string line; std::getline(in, line);) {
      auto sp = line.find(' ');
      if (sp == std::string::npos) continue;
      std::string k = line.substr(0, sp), v = line.substr(sp + 1);
      if (k == "arbiter_node") {  // "arbiter_node app2 state=out epoch=2 ..."
        auto sp2 = v.find(' ');
        k += "_" + v.substr(0, sp2);
        v = v.substr(sp2 + 1);
      }
      m[k] = v;
    }
    return m;
  }
  // Both rows in, both homes vouching.
  bool settled(ClusterClient& cl, std::chrono::milliseconds limit = 15s) {
    return eventually([&] {
      return db.row("app1").rfind("in ", 0) == 0 && db.row("app2").rfind("in ", 0) == 0 &&
             vouches(cl, "app1") && vouches(cl, "app2");
    }, limit);
  }
  void kill_node(size_t i) {
    memd[i].kill_now();
    writer[i].kill_now();
  }
};

uint64_t key_homed_at(const Topology& t, const std::string& home) {
  for (int i = 0;; ++i) {
    uint64_t k = hash64("/page?" + std::to_string(i));
    if (t.home_of(k).name == home) return k;
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_homes_admit_every_node_once_they_all_read_it) {
  Cluster c;
  auto cl = c.client();
  BOOST_TEST_REQUIRE(c.settled(cl), "rows: app1 " << c.db.row("app1") << ", app2 " << c.db.row("app2")
                                                  << "\n" << c.log(0));
  // Created out at epoch 1, admitted at that epoch by the last home to record it.
  BOOST_TEST(c.db.row("app1") == "in 1");
  BOOST_TEST(c.db.row("app2") == "in 1");
  BOOST_TEST(c.db.value("SELECT COUNT(*) FROM tierce.fence_track WHERE epoch = 1") == "4");
  auto st = c.status(0);
  BOOST_TEST(st.at("arbiter_node_app2").find("state=tracked epoch=1 tracked_epoch=1") == 0u);
  BOOST_TEST(st.at("arbiter_drops") == "0");
}

BOOST_AUTO_TEST_CASE(a_lost_node_is_dropped_in_the_database_and_the_other_home_vouches_without_it) {
  Cluster c;
  auto cl = c.client();
  BOOST_TEST_REQUIRE(c.settled(cl));
  const auto& topo = cl.topology();
  uint64_t k = key_homed_at(topo, "app1");
  auto seq = cl.read_seq("app1");
  BOOST_TEST_REQUIRE(seq.has_value());
  std::vector<uint64_t> deps{dependency_hash("item:1")};
  auto reg = cl.register_page("app1", k, *seq, deps);
  BOOST_TEST_REQUIRE(reg.cacheable());
  const uint64_t catch_ups = std::stoull(c.status(0).at("fence_catch_ups"));

  auto t0 = std::chrono::steady_clock::now();
  c.kill_node(1);  // host loss: its home and its writer agent
  BOOST_TEST(eventually([&] { return !c.vouches(cl, "app1"); }, 3s),
             "app1 kept vouching without reading app2's counter");
  BOOST_TEST(c.db.row("app2") == "in 1");  // not before drop_after
  BOOST_TEST_REQUIRE(eventually([&] { return c.vouches(cl, "app1"); }, 10s),
                     "app1 never vouched again:\n" << c.log(0));
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  BOOST_TEST_MESSAGE("app1 vouched again " << took.count() << " ms after app2 died (drop_after "
                                           << kDropAfterMs << " ms)");
  BOOST_TEST(took.count() >= kDropAfterMs);
  BOOST_TEST(c.db.row("app2") == "out 2");
  BOOST_TEST(c.db.value("SELECT changed_by FROM tierce.fence WHERE node = 'app2'") == "app1");
  auto st = c.status(0);
  BOOST_TEST(st.at("arbiter_node_app2").find("state=out epoch=2") == 0u);
  BOOST_TEST(st.at("arbiter_drops") == "1");
  // The drop caught up (every page registered here, like the one above, was invalidated).
  BOOST_TEST(std::stoull(st.at("fence_catch_ups")) > catch_ups);
  BOOST_TEST(c.log(0).find("COH0226") != std::string::npos);
  BOOST_TEST(c.db.row("app1") == "in 1");  // the living node is untouched

  // The node comes back: the homes (app1, and app2's new incarnation) re-admit it together.
  c.start_writer(1);
  c.start(1);
  BOOST_TEST(eventually([&] { return c.db.row("app2") == "in 2"; }, 15s),
             "app2 not re-admitted: " << c.db.row("app2") << "\n" << c.log(0));
  BOOST_TEST(c.settled(cl));
  BOOST_TEST(c.status(0).at("arbiter_node_app2").find("state=tracked epoch=2 tracked_epoch=2") == 0u);
}

BOOST_AUTO_TEST_CASE(a_node_cut_off_from_one_home_is_dropped_and_readmitted_only_by_the_homes) {
  Cluster c;
  auto cl = c.client();
  BOOST_TEST_REQUIRE(c.settled(cl));
  // app2's writer agent gone: app1 cannot read app2's counter; app2's own home still does (its
  // own segment) — app2 is alive and could still reach the database.
  c.writer[1].kill_now();
  BOOST_TEST_REQUIRE(eventually([&] { return c.db.row("app2") == "out 2"; }, 10s),
                     c.db.row("app2") << "\n" << c.log(0));
  BOOST_TEST(eventually([&] { return c.vouches(cl, "app1") && c.vouches(cl, "app2"); }, 5s));
  // app2's home records that it reads app2 at epoch 2: not enough, the row stays out.
  BOOST_TEST(eventually([&] {
    return c.db.value("SELECT epoch FROM tierce.fence_track WHERE node='app2' AND home='app2'") == "2";
  }, 5s));
  std::this_thread::sleep_for(std::chrono::milliseconds(3 * kLeaseMs));
  BOOST_TEST(c.db.row("app2") == "out 2");
  BOOST_TEST(c.db.value("SELECT COUNT(*) FROM tierce.fence_track WHERE node='app2' AND "
                        "home='app1' AND epoch=2") == "0");
  // Readable again: app1 reads it (a catch-up), records it, and that completes the admission.
  const uint64_t catch_ups = std::stoull(c.status(0).at("fence_catch_ups"));
  const uint64_t admissions = std::stoull(c.status(0).at("arbiter_admissions"));
  c.start_writer(1);
  BOOST_TEST(eventually([&] { return c.db.row("app2") == "in 2"; }, 10s),
             c.db.row("app2") << "\n" << c.log(0));
  BOOST_TEST(std::stoull(c.status(0).at("fence_catch_ups")) > catch_ups);
  BOOST_TEST(c.log(0).find("COH0228") != std::string::npos);
  BOOST_TEST(std::stoull(c.status(0).at("arbiter_admissions")) == admissions + 1);
}

BOOST_AUTO_TEST_CASE(two_live_nodes_that_lose_each_other_drop_one_not_both) {
  Cluster c;
  auto cl = c.client();
  BOOST_TEST_REQUIRE(c.settled(cl));
  // Both writer agents gone: each home reads its own counter but not the other's (a partition
  // between two live nodes that both reach the database).
  c.writer[0].kill_now();
  c.writer[1].kill_now();
  auto out = [&] { return int(c.db.row("app1").rfind("out", 0) == 0) + int(c.db.row("app2").rfind("out", 0) == 0); };
  BOOST_TEST_REQUIRE(eventually([&] { return out() >= 1; }, 10s), c.log(0) << c.log(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * kDropAfterMs));
  BOOST_TEST(out() == 1, "rows: app1 " << c.db.row("app1") << ", app2 " << c.db.row("app2"));
  const size_t winner = c.db.row("app1").rfind("in", 0) == 0 ? 0 : 1;
  BOOST_TEST_MESSAGE("app" << winner + 1 << " dropped the other");
  // The winner vouches without the loser; the loser cannot read the winner, which still writes.
  BOOST_TEST(eventually([&] { return c.vouches(cl, c.names[winner]); }, 5s));
  BOOST_TEST(!c.vouches(cl, c.names[1 - winner]));
  BOOST_TEST(c.status(1 - winner).at("arbiter_errors") != "0");  // it tried, and was refused
}

BOOST_AUTO_TEST_CASE(a_drop_waits_for_the_lost_nodes_open_write_transaction) {
  Cluster c;
  auto cl = c.client();
  BOOST_TEST_REQUIRE(c.settled(cl));
  // A write transaction of app2 that passed its check (the S lock) and has not committed: the
  // drop must wait for it (it may still commit; the home catches up after the drop, not before).
  Child holder = spawn_binary(
      "/usr/bin/mariadb",
      {"--no-defaults", "-S", c.db.sock, "-uroot", "-e",
       "START TRANSACTION; SELECT state FROM tierce.fence WHERE node='app2' LOCK IN SHARE MODE; "
       "SELECT SLEEP(4); COMMIT;"},
      c.dir / "holder.log");
  std::this_thread::sleep_for(300ms);
  auto t0 = std::chrono::steady_clock::now();
  c.kill_node(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(kDropAfterMs + 1500));
  BOOST_TEST(c.db.row("app2") == "in 1", "dropped while app2's transaction was open");
  BOOST_TEST(!c.vouches(cl, "app1"), "app1 vouched without app2 before the drop");
  BOOST_TEST(holder.wait_exit(10s) == 0);
  BOOST_TEST(eventually([&] { return c.db.row("app2") == "out 2"; }, 10s),
             c.db.row("app2") << "\n" << c.log(0));
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  BOOST_TEST(took.count() >= 3500, "the drop did not wait for the transaction (" << took.count() << " ms)");
  BOOST_TEST(eventually([&] { return c.vouches(cl, "app1"); }, 5s));
}

BOOST_AUTO_TEST_CASE(a_database_that_does_not_answer_drops_nobody) {
  Cluster c;
  auto cl = c.client();
  BOOST_TEST_REQUIRE(c.settled(cl));
  c.db.proc.signal(SIGSTOP);  // frozen: calls end at their deadlines (memd: 2 s io + 3 s lock wait)
  c.kill_node(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(kDropAfterMs + 6500));
  BOOST_TEST(!c.vouches(cl, "app1"), "app1 vouched without app2 and without the database");
  c.db.proc.signal(SIGCONT);
  BOOST_TEST(eventually([&] { return c.db.row("app2") == "out 2"; }, 20s),
             c.db.row("app2") << "\n" << c.log(0));
  BOOST_TEST(eventually([&] { return c.vouches(cl, "app1"); }, 5s));
  BOOST_TEST(c.log(0).find("COH0229") != std::string::npos);
  BOOST_TEST(std::stoull(c.status(0).at("arbiter_errors")) >= 1u);
}

BOOST_AUTO_TEST_CASE(the_arbiter_in_the_database_alone) {
  // MariaDbArbiter against the database directly: drop, track, admission, errors.
  TempDir dir;
  Db db(dir);
  cluster::ArbiterSettings s;
  s.table = "tierce.fence";
  s.socket = db.sock;
  s.user = "root";
  memd::MariaDbArbiter a(s, 3, 1);
  a.ensure({"n1", "n2"});
  a.ensure({"n1", "n2"});  // idempotent
  auto rows = a.rows();
  BOOST_TEST(rows.size() == 2u);
  BOOST_TEST(!rows.at("n1").in);
  BOOST_TEST(rows.at("n1").epoch == 1u);
  std::vector<std::string> homes{"n1", "n2"};
  BOOST_TEST(!a.track("n1", "n1", 1, homes).in);  // one home of two
  BOOST_TEST(!a.track("n1", "n1", 1, homes).in);  // again: still one
  BOOST_TEST(a.track("n1", "n2", 1, homes).in);   // the last: admitted
  // A home whose own node is out drops nobody (n2 is out: never admitted).
  try {
    a.drop("n1", "n2");
    BOOST_ERROR("n2, out itself, dropped n1");
  } catch (const ArbiterError& e) {
    BOOST_TEST(std::string(e.what()).find("n2 is out itself") != std::string::npos, e.what());
  }
  BOOST_TEST(a.track("n2", "n1", 1, homes).in == false);
  BOOST_TEST(a.track("n2", "n2", 1, homes).in);
  BOOST_TEST(a.drop("n1", "n2") == 2u);
  auto r = a.rows().at("n1");
  BOOST_TEST((!r.in && r.epoch == 2u && r.changed_by == "n2"));
  BOOST_TEST(a.track("n1", "n1", 1, homes).epoch == 2u);  // a stale epoch records nothing
  BOOST_TEST(!a.rows().at("n1").in);
  BOOST_TEST(a.track("n1", "n1", 2, homes).in == false);
  BOOST_TEST(a.track("n1", "n2", 2, homes).in);
  // A node name that needs quoting is quoted.
  a.ensure({"o'brien"});
  BOOST_TEST(a.rows().count("o'brien") == 1u);
  // A lock held by the node's transaction: the drop gives up after its lock wait (1 s) and says so.
  Child holder = spawn_binary("/usr/bin/mariadb",
                              {"--no-defaults", "-S", db.sock, "-uroot", "-e",
                               "START TRANSACTION; SELECT state FROM tierce.fence WHERE node='n2' "
                               "LOCK IN SHARE MODE; SELECT SLEEP(3); COMMIT;"},
                              dir / "holder.log");
  std::this_thread::sleep_for(500ms);
  try {
    a.drop("n2", "n1");
    BOOST_ERROR("the drop did not wait for the open transaction");
  } catch (const ArbiterError& e) {
    BOOST_TEST(std::string(e.what()).find("Lock wait timeout") != std::string::npos, e.what());
  }
  BOOST_TEST(holder.wait_exit(10s) == 0);
  BOOST_TEST(a.drop("n2", "n1") == 2u);  // the connection was re-opened after the timeout
  // A missing row and an unreachable server are errors, not hangs.
  BOOST_CHECK_THROW(a.drop("nosuch", "n1"), ArbiterError);
  cluster::ArbiterSettings bad = s;
  bad.socket = dir / "nosuch.sock";
  memd::MariaDbArbiter b(bad, 1, 1);
  BOOST_CHECK_THROW(b.rows(), ArbiterError);
}
