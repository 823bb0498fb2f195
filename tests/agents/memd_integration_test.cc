// tests/agents/memd_integration_test.cc — the real tierce-memd binary as a process: started with a
// private config (ephemeral tcp port, a shm socket in a temp dir, a 0600 secret, a ready file),
// driven by signals, checked from this process through the fabric as a peer would.
//
// Every child process is killed at test end, whatever happened (Child / DaemonGuard); segment
// names and directories are unique per run, so runs can overlap.
#define BOOST_TEST_MODULE memd_integration
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <pwd.h>
#include <sys/mman.h>

#include <atomic>

#include "memd_test_util.h"

#ifndef TIERCE_MEMD_BINARY
#error "TIERCE_MEMD_BINARY must name the tierce-memd executable"
#endif

using namespace tierce;
using namespace memd_test;
using fabric::Errc;

namespace tierce::fabric {
std::ostream& operator<<(std::ostream& o, Errc e) {
  return o << to_string(e);
}
}  // namespace tierce::fabric

namespace {

constexpr auto kStartLimit = 10s;

// Starts tierce-memd with `args`, its output appended to `log_path`.
Child spawn_memd(const std::vector<std::string>& args, const std::string& log_path) {
  return spawn_binary(TIERCE_MEMD_BINARY, args, log_path);
}

// A process that is not our child (a daemon): SIGKILLed at scope end unless it is gone.
struct DaemonGuard {
  pid_t pid = 0;
  ~DaemonGuard() {
    if (pid > 0) ::kill(pid, SIGKILL);
  }
};

bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

struct Region {
  std::string name, segment;
  bool follow_owner = true;
};

struct Fixture {
  TempDir dir;
  std::string secret_path = make_secret(dir);
  fabric::Secret secret = fabric::Secret::from_file(secret_path);
  SegmentNames names;
  std::string config_path = dir / "memd.toml";
  std::string log_path = dir / "memd.log";
  std::string pid_path = dir / "memd.pid";
  std::string ready_path = dir / "memd.ready";
  std::string sock_path = dir / "memd.sock";
  Child memd;

  std::string config_text(const std::vector<Region>& regions, const std::string& extra = "") {
    std::string s =
        "[memd]\n"
        "node = \"itest\"\n"
        "listen = [\"tcp://127.0.0.1:0\", \"shm://" +
        sock_path +
        "\"]\n"
        "secret_file = \"" +
        secret_path +
        "\"\n"
        "pid_file = \"" +
        pid_path +
        "\"\n"
        "ready_file = \"" +
        ready_path +
        "\"\n"
        "log = \"stderr\"\n"
        "log_level = \"debug\"\n"
        "heartbeat_ms = 10\n"
        "lease_ms = 200\n"
        "rescan_ms = 50\n" +
        extra + "\n";
    for (auto& r : regions)
      s += "[[region]]\nname = \"" + r.name + "\"\nsegment = \"" + r.segment +
           "\"\nfollow_owner = " + (r.follow_owner ? "true" : "false") + "\n";
    return s;
  }
  void write_config(const std::vector<Region>& regions, const std::string& extra = "") {
    write_file(config_path, config_text(regions, extra));
  }
  std::string log() { return read_file(log_path); }

  // Starts memd in the foreground and waits for its ready file.
  void start() {
    memd = spawn_memd({"--foreground", "-c", config_path}, log_path);
    bool ready = eventually(
        [&] {
          if (::access(ready_path.c_str(), F_OK) == 0) return true;
          memd.wait_exit(0ms);  // reaps it if it exited (then running() is false)
          if (!memd.running())
            throw std::runtime_error("tierce-memd exited during startup:\n" + log());
          return false;
        },
        kStartLimit);
    BOOST_TEST_INFO("memd log:\n" << log());
    BOOST_TEST_REQUIRE(ready);
  }

  std::vector<std::string> uris() {
    std::vector<std::string> v;
    std::istringstream in(read_file(ready_path));
    for (std::string l; std::getline(in, l);)
      if (!l.empty()) v.push_back(l);
    return v;
  }
  std::string uri(const std::string& scheme) {
    for (auto& u : uris())
      if (u.rfind(scheme + "://", 0) == 0) return u;
    throw std::runtime_error("memd's ready file has no " + scheme + " address:\n" +
                             read_file(ready_path));
  }
  std::unique_ptr<fabric::Connection> connect(const std::string& scheme) {
    fabric::ClientOptions o;
    o.secret = secret;
    o.op_timeout = 2000ms;
    return fabric::connect(uri(scheme), o);
  }
  // Looks `name` up until it succeeds (memd rescans every 50 ms).
  fabric::RemoteRegion lookup_eventually(fabric::Connection& c, const std::string& name) {
    fabric::RemoteRegion d;
    bool ok = eventually([&] {
      try {
        d = c.lookup(name);
        return true;
      } catch (const fabric::FabricError& e) {
        if (e.code() != Errc::NoSuchRegion && e.code() != Errc::Revoked) throw;
        return false;
      }
    });
    BOOST_TEST_INFO("memd log:\n" << log());
    BOOST_TEST_REQUIRE(ok);
    return d;
  }
};

uint64_t& word(fabric::SharedSegment& s, size_t off) {
  return *reinterpret_cast<uint64_t*>(s.data() + off);
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(memd_integration, Fixture)

BOOST_AUTO_TEST_CASE(lookup_and_one_sided_ops_over_tcp_and_shm) {
  std::string seg = names.add("versions");
  auto s = fabric::SharedSegment::create(seg, 1 << 16);
  write_config({{"versions", seg}});
  start();
  BOOST_TEST(uris().size() == 2u);
  BOOST_TEST(uri("tcp").find(":0") == std::string::npos);  // the ephemeral port actually bound

  for (const char* scheme : {"tcp", "shm"}) {
    BOOST_TEST_CONTEXT("over " << scheme) {
      auto c = connect(scheme);
      BOOST_TEST(c->peer_name() == "itest");
      fabric::RemoteRegion d = c->lookup("versions");
      BOOST_TEST(d.len == uint64_t(1 << 16));
      // The test process's own writes, seen by one-sided reads...
      std::atomic_ref<uint64_t>(word(s, 128)).store(1000, std::memory_order_release);
      std::memcpy(s.data() + 256, "hello, peer", 11);
      uint64_t v = 0;
      c->read(d, 128, &v, 8);
      BOOST_TEST(v == 1000u);
      char buf[11];
      c->read(d, 256, buf, sizeof buf);
      BOOST_TEST(std::string(buf, 11) == "hello, peer");
      // ...and one-sided atomics seen by the owner's memory.
      BOOST_TEST(c->faa64(d, 128, 7) == 1000u);
      BOOST_TEST(std::atomic_ref<uint64_t>(word(s, 128)).load(std::memory_order_acquire) == 1007u);
      BOOST_TEST(c->cas64(d, 128, 1007, 5) == 1007u);
      BOOST_TEST(std::atomic_ref<uint64_t>(word(s, 128)).load() == 5u);
      BOOST_TEST(errc_of([&] { c->lookup("nope"); }) == Errc::NoSuchRegion);
      BOOST_TEST(errc_of([&] { c->faa64(d, 4, 1); }) == Errc::Misaligned);
    }
  }

  auto tcp = connect("tcp");
  auto body = tcp->call("memd.list", {});
  std::string list(body.begin(), body.end());
  fabric::RemoteRegion d = tcp->lookup("versions");
  char expect[128];
  std::snprintf(expect, sizeof expect, "versions 0x%016llx 65536 0x%016llx %s 0x%016llx\n",
                (unsigned long long)d.addr, (unsigned long long)d.key, seg.c_str(),
                (unsigned long long)s.incarnation());
  BOOST_TEST(list == expect);
  body = tcp->call("memd.status", {});
  std::string status(body.begin(), body.end());
  BOOST_TEST(status.find("node itest\n") != std::string::npos);
  BOOST_TEST(status.find("pid " + std::to_string(memd.pid()) + "\n") != std::string::npos);
  BOOST_TEST(status.find("region versions exported") != std::string::npos);
  BOOST_TEST(status.find("listen " + uri("tcp") + "\n") != std::string::npos);

  // A wrong secret is refused.
  fabric::ClientOptions bad;
  bad.secret = fabric::Secret(std::string(32, 'x'));
  BOOST_TEST(errc_of([&] { fabric::connect(uri("tcp"), bad); }) == Errc::AuthFailed);

  // USR1 writes the status to the log.
  memd.signal(SIGUSR1);
  BOOST_TEST(eventually(
      [&] { return log().find("MEMD0014 status region versions exported") != std::string::npos; }));
}

BOOST_AUTO_TEST_CASE(segment_created_after_start_becomes_visible) {
  std::string seg = names.add("late");
  write_config({{"late", seg}});
  start();
  auto tcp = connect("tcp");
  BOOST_TEST(errc_of([&] { tcp->lookup("late"); }) == Errc::NoSuchRegion);
  BOOST_TEST(log().find("MEMD0102") != std::string::npos);
  auto s = fabric::SharedSegment::create(seg, 4096);
  fabric::RemoteRegion d = lookup_eventually(*tcp, "late");
  std::atomic_ref<uint64_t>(word(s, 0)).store(77);
  uint64_t v = 0;
  tcp->read(d, 0, &v, 8);
  BOOST_TEST(v == 77u);
}

BOOST_AUTO_TEST_CASE(hup_reload_adds_and_removes_regions) {
  std::string a = names.add("a"), b = names.add("b");
  auto sa = fabric::SharedSegment::create(a, 4096);
  auto sb = fabric::SharedSegment::create(b, 4096);
  write_config({{"a", a}});
  start();
  auto tcp = connect("tcp");
  tcp->lookup("a");
  BOOST_TEST(errc_of([&] { tcp->lookup("b"); }) == Errc::NoSuchRegion);

  write_config({{"b", b}});
  memd.signal(SIGHUP);
  lookup_eventually(*tcp, "b");
  BOOST_TEST(eventually([&] { return errc_of([&] { tcp->lookup("a"); }) == Errc::NoSuchRegion; }));
  BOOST_TEST(eventually([&] {
    return log().find("MEMD0013 reload done: 1 region(s) added, 1 removed") != std::string::npos;
  }));

  // A bad file on HUP: logged with the key, the running configuration stays.
  write_file(config_path, config_text({{"a", a}}, "rescan_ms = \"often\""));
  memd.signal(SIGHUP);
  BOOST_TEST(eventually([&] { return log().find("MEMD0011") != std::string::npos; }));
  BOOST_TEST(log().find("rescan_ms") != std::string::npos);
  tcp->lookup("b");
  BOOST_TEST(errc_of([&] { tcp->lookup("a"); }) == Errc::NoSuchRegion);

  // A listen change needs a restart, and says so.
  std::string moved = config_text({{"b", b}});
  moved.replace(moved.find("tcp://127.0.0.1:0"), 17, "tcp://127.0.0.1:1");
  write_file(config_path, moved);
  memd.signal(SIGHUP);
  BOOST_TEST(eventually(
      [&] { return log().find("MEMD0120 [memd] listen changed") != std::string::npos; }));
  BOOST_TEST(memd.running());
  tcp->lookup("b");
}

BOOST_AUTO_TEST_CASE(recreated_segment_gets_a_new_descriptor_and_the_old_one_fails) {
  std::string seg = names.add("recreate");
  auto s1 = fabric::SharedSegment::create(seg, 4096);
  write_config({{"v", seg}});
  start();
  auto tcp = connect("tcp");
  auto shm = connect("shm");
  fabric::RemoteRegion d1 = tcp->lookup("v");
  fabric::RemoteRegion d1s = shm->lookup("v");
  BOOST_TEST(shm->faa64(d1s, 0, 1) == 0u);  // maps the old incarnation

  auto s2 = fabric::SharedSegment::create(seg, 4096);  // the owner re-creates it
  fabric::RemoteRegion d2;
  BOOST_TEST(eventually([&] {
    // Between the owner's unlink and create memd may find no segment: NoSuchRegion for a moment.
    if (errc_of([&] { d2 = tcp->lookup("v"); }) != Errc::Ok) return false;
    return d2.addr != d1.addr || d2.key != d1.key;
  }));
  Errc old_tcp = errc_of([&] { tcp->faa64(d1, 0, 1); });
  BOOST_TEST((old_tcp == Errc::BadKey || old_tcp == Errc::NoSuchRegion));
  // shm peers lose the old incarnation within the lease (200 ms) at the latest.
  Errc old_shm = Errc::Ok;
  BOOST_TEST(eventually(
      [&] {
        old_shm = errc_of([&] { shm->faa64(d1s, 0, 1); });
        return old_shm != Errc::Ok;
      },
      2000ms));
  BOOST_TEST((old_shm == Errc::PeerDead || old_shm == Errc::Revoked));
  // The new descriptor works on both, on the new memory.
  BOOST_TEST(tcp->faa64(d2, 0, 10) == 0u);
  fabric::RemoteRegion d2s = shm->lookup("v");
  BOOST_TEST(shm->faa64(d2s, 0, 1) == 10u);
  BOOST_TEST(std::atomic_ref<uint64_t>(word(s2, 0)).load() == 11u);
  BOOST_TEST(eventually([&] { return log().find("MEMD0105") != std::string::npos; }));
}

BOOST_AUTO_TEST_CASE(owner_exit_revokes_the_region) {
  std::string seg = names.add("owned");
  SegmentOwner owner(seg, 4096);
  write_config({{"v", seg, true}, {"kept", names.add("none"), false}});
  start();
  auto shm = connect("shm");
  fabric::RemoteRegion d = shm->lookup("v");
  uint8_t b = 0;
  shm->read(d, 0, &b, 1);
  BOOST_TEST(b == 0x5a);
  owner.exit_now();
  BOOST_TEST(eventually([&] { return errc_of([&] { shm->lookup("v"); }) == Errc::NoSuchRegion; }));
  Errc e = errc_of([&] { shm->read(d, 0, &b, 1); });
  BOOST_TEST((e == Errc::Revoked || e == Errc::PeerDead));
  BOOST_TEST(eventually([&] { return log().find("MEMD0106") != std::string::npos; }));
}

BOOST_AUTO_TEST_CASE(term_stops_cleanly_and_removes_the_pid_file) {
  std::string seg = names.add("term");
  auto s = fabric::SharedSegment::create(seg, 4096);
  write_config({{"v", seg}});
  start();
  BOOST_TEST(std::stol(read_file(pid_path)) == long(memd.pid()));
  auto shm = connect("shm");
  fabric::RemoteRegion d = shm->lookup("v");
  shm->faa64(d, 0, 1);

  memd.signal(SIGTERM);
  int code = memd.wait_exit(5000ms);
  BOOST_TEST_INFO("memd log:\n" << log());
  BOOST_TEST(code == 0);
  BOOST_TEST(::access(pid_path.c_str(), F_OK) != 0);
  BOOST_TEST(::access(ready_path.c_str(), F_OK) != 0);
  BOOST_TEST(::access(sock_path.c_str(), F_OK) != 0);
  BOOST_TEST(log().find("MEMD0004 stopped") != std::string::npos);
  // A clean stop withdraws memd's word at once: shm peers fail now, not after the lease.
  BOOST_TEST(errc_of([&] { shm->faa64(d, 0, 1); }) == Errc::PeerDead);
  BOOST_TEST(s.live());  // the owner's segment is not revoked: a restarted memd exports it again

  // SIGINT is a clean stop too.
  start();
  memd.signal(SIGINT);
  BOOST_TEST(memd.wait_exit(5000ms) == 0);
}

BOOST_AUTO_TEST_CASE(second_memd_with_the_same_pid_file_exits_3) {
  write_config({});
  start();
  std::string log2 = dir / "second.log";
  Child second = spawn_memd({"--foreground", "-c", config_path}, log2);
  int code = second.wait_exit(5000ms);
  BOOST_TEST_INFO("second memd's output:\n" << read_file(log2));
  BOOST_TEST(code == 3);
  BOOST_TEST(read_file(log2).find("MEMD0006 another tierce-memd is already running (pid " +
                                  std::to_string(memd.pid()) + ")") != std::string::npos);
  // The first one is unharmed: its shm socket and pid file are still its own.
  BOOST_TEST(std::stol(read_file(pid_path)) == long(memd.pid()));
  connect("shm")->ping();
  connect("tcp")->ping();

  // A pid file left by a killed memd is taken over.
  memd.kill_now();
  BOOST_TEST(::access(pid_path.c_str(), F_OK) == 0);
  ::unlink(ready_path.c_str());
  start();
  BOOST_TEST(log().find("MEMD0007") != std::string::npos);
  BOOST_TEST(std::stol(read_file(pid_path)) == long(memd.pid()));
}

BOOST_AUTO_TEST_CASE(bad_configuration_exits_2_naming_the_key) {
  write_config({}, "max_connections = \"many\"");
  Child c = spawn_memd({"--foreground", "-c", config_path}, log_path);
  BOOST_TEST(c.wait_exit(5000ms) == 2);
  std::string out = log();
  BOOST_TEST_INFO(out);
  BOOST_TEST(out.find("[memd] max_connections") != std::string::npos);
  BOOST_TEST(out.find(config_path + ":") != std::string::npos);
  BOOST_TEST(::access(pid_path.c_str(), F_OK) != 0);

  auto run = [&](std::vector<std::string> args, const std::string& out_name) {
    Child p = spawn_memd(args, dir / out_name);
    return p.wait_exit(5000ms);
  };
  // --check: 0 on a good file, 2 on a bad one, with the key.
  write_config({{"v", "/tierce.x"}});
  BOOST_TEST(run({"--check", "-c", config_path}, "check-good.log") == 0);
  BOOST_TEST(read_file(dir / "check-good.log").find("configuration OK") != std::string::npos);
  write_file(config_path, config_text({}) + "[[region]]\nname = \"v\"\nsegmnt = \"/x\"\n");
  BOOST_TEST(run({"--check", "-c", config_path}, "check-bad.log") == 2);
  BOOST_TEST(read_file(dir / "check-bad.log").find("segmnt") != std::string::npos);
  // A secret file readable by others is refused, naming the key.
  write_config({});
  ::chmod(secret_path.c_str(), 0644);
  BOOST_TEST(run({"--check", "-c", config_path}, "check-secret.log") == 2);
  BOOST_TEST(read_file(dir / "check-secret.log").find("secret_file") != std::string::npos);
  ::chmod(secret_path.c_str(), 0600);
  // Bad usage.
  BOOST_TEST(run({"--bogus"}, "usage.log") == 2);
  BOOST_TEST(run({"-c"}, "usage2.log") == 2);
  BOOST_TEST(run({"-c", dir / "missing.toml"}, "missing.log") == 2);
  BOOST_TEST(run({"--version"}, "version.log") == 0);
  BOOST_TEST(read_file(dir / "version.log").find("tierce-memd ") == 0u);
  BOOST_TEST(run({"--help"}, "help.log") == 0);
}

BOOST_AUTO_TEST_CASE(runtime_failure_exits_1) {
  // The tcp port is taken by a first memd: the second cannot bind.
  write_config({});
  start();
  std::string port_uri = uri("tcp");
  std::string cfg2 = dir / "second.toml";
  std::string text = config_text({});
  text.replace(text.find("tcp://127.0.0.1:0"), 17, port_uri);
  text.replace(text.find(pid_path), pid_path.size(), dir / "second.pid");
  text.replace(text.find(ready_path), ready_path.size(), dir / "second.ready");
  text.replace(text.find(sock_path), sock_path.size(), dir / "second.sock");
  write_file(cfg2, text);
  Child c = spawn_memd({"--foreground", "-c", cfg2}, dir / "second.log");
  BOOST_TEST(c.wait_exit(5000ms) == 1);
  std::string out = read_file(dir / "second.log");
  BOOST_TEST_INFO(out);
  BOOST_TEST(out.find("MEMD0005") != std::string::npos);
  BOOST_TEST(::access((dir / "second.pid").c_str(), F_OK) != 0);  // removed on the way out
}

BOOST_AUTO_TEST_CASE(daemon_mode_reports_readiness_and_stops_on_term) {
  std::string seg = names.add("daemon");
  auto s = fabric::SharedSegment::create(seg, 4096);
  write_config({{"v", seg}});
  Child starter = spawn_memd({"-c", config_path}, log_path);
  int code = starter.wait_exit(kStartLimit);
  BOOST_TEST_INFO("log:\n" << log());
  BOOST_TEST_REQUIRE(code == 0);  // returns only once the daemon serves
  DaemonGuard daemon;
  daemon.pid = pid_t(std::stol(read_file(pid_path)));
  BOOST_TEST(daemon.pid != starter.pid());
  BOOST_TEST(!process_gone(daemon.pid));
  BOOST_TEST(::access(ready_path.c_str(), F_OK) == 0);
  auto tcp = connect("tcp");
  tcp->lookup("v");

  // A second daemon: the starter reports the daemon's exit code and message.
  Child second = spawn_memd({"-c", config_path}, dir / "second.log");
  BOOST_TEST(second.wait_exit(kStartLimit) == 3);
  BOOST_TEST(read_file(dir / "second.log").find("already running") != std::string::npos);

  ::kill(daemon.pid, SIGTERM);
  BOOST_TEST(eventually([&] { return process_gone(daemon.pid); }));
  BOOST_TEST(eventually([&] { return ::access(pid_path.c_str(), F_OK) != 0; }));
  BOOST_TEST(log().find("MEMD0004 stopped") != std::string::npos);
  daemon.pid = 0;
}


// [memd] user (docs/memd.md "Running as a user"). Started as root, memd binds and creates its
// files as root, then drops to the user for good; it still serves, and a clean stop removes what
// it created. Needs root: skipped, saying so, without it.
boost::test_tools::assertion_result needs_root(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result r(::geteuid() == 0);
  r.message() << "skipped: starting memd as root to see it drop to a user needs root";
  return r;
}

BOOST_AUTO_TEST_CASE(started_as_root_drops_to_user_and_still_serves,
                     *boost::unit_test::precondition(needs_root)) {
  passwd* pw = ::getpwnam("nobody");
  BOOST_TEST_REQUIRE(pw);
  const uid_t uid = pw->pw_uid;
  const gid_t gid = pw->pw_gid;
  // The user removes its pid file, ready file and socket at stop: their directory is its.
  BOOST_TEST_REQUIRE(::chown(dir.path().c_str(), uid, gid) == 0);
  std::string seg = names.add("user");
  auto s = fabric::SharedSegment::create(seg, 4096);
  // memd opens owners' segments with the user's rights: the owner lets it.
  BOOST_TEST_REQUIRE(::fchown(s.fd(), uid, gid) == 0);
  write_config({{"v", seg}}, "user = \"nobody\"\n[pool]\nbytes = 2097152\nslab_bytes = 1048576");
  start();
  // The ready file is written while still root (its directory may be root's), the drop follows:
  // wait for the drop's log line before looking at the ids.
  BOOST_TEST_REQUIRE(eventually(
      [&] { return log().find("MEMD0042 running as user nobody") != std::string::npos; }, 5s));

  // All four of real, effective, saved and filesystem ids are nobody's.
  std::string status = read_file("/proc/" + std::to_string(memd.pid()) + "/status");
  BOOST_TEST_INFO(status);
  const std::string u = std::to_string(uid), g = std::to_string(gid);
  BOOST_TEST(status.find("\nUid:\t" + u + "\t" + u + "\t" + u + "\t" + u + "\n") !=
             std::string::npos);
  BOOST_TEST(status.find("\nGid:\t" + g + "\t" + g + "\t" + g + "\t" + g + "\n") !=
             std::string::npos);
  BOOST_TEST(status.find("\nNoNewPrivs:\t1\n") != std::string::npos);


  // Still serving: a fabric client reads the owner's region over tcp and shm, and the pool.
  std::atomic_ref<uint64_t>(word(s, 64)).store(4242);
  for (const char* scheme : {"tcp", "shm"}) {
    BOOST_TEST_CONTEXT("over " << scheme) {
      auto c = connect(scheme);
      fabric::RemoteRegion d = lookup_eventually(*c, "v");
      uint64_t v = 0;
      c->read(d, 64, &v, 8);
      BOOST_TEST(v == 4242u);
      BOOST_TEST(c->lookup("pool").len == uint64_t(2097152));
    }
  }

  memd.signal(SIGTERM);
  BOOST_TEST(memd.wait_exit(5000ms) == 0);
  BOOST_TEST_INFO("memd log:\n" << log());
  BOOST_TEST(::access(pid_path.c_str(), F_OK) != 0);
  BOOST_TEST(::access(ready_path.c_str(), F_OK) != 0);
  BOOST_TEST(::access(sock_path.c_str(), F_OK) != 0);
  // The pool segment was given to the user, who could remove it from /dev/shm (sticky).
  BOOST_TEST(::access("/dev/shm/tierce.itest.pool", F_OK) != 0);
  BOOST_TEST(log().find("MEMD0004 stopped") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(user_errors, *boost::unit_test::precondition(needs_root)) {
  // An unknown account: exit 2, naming it (also with --check).
  std::string bad = "tierce-no-such-user-" + random_suffix();
  write_config({}, "user = \"" + bad + "\"");
  Child c = spawn_memd({"--foreground", "-c", config_path}, log_path);
  BOOST_TEST(c.wait_exit(5000ms) == 2);
  BOOST_TEST_INFO(log());
  BOOST_TEST(log().find("[memd] user: \"" + bad + "\": no such account") != std::string::npos);
  Child k = spawn_memd({"--check", "-c", config_path}, dir / "check.log");
  BOOST_TEST(k.wait_exit(5000ms) == 2);

  // Started as another user than root or the one named: exit 1 (runtime), saying why. Started as
  // that user: fine, nothing to drop.
  passwd* pw = ::getpwnam("nobody");
  BOOST_TEST_REQUIRE(pw);
  if (::access("/usr/bin/setpriv", X_OK) != 0) {
    BOOST_TEST_MESSAGE("setpriv(1) missing: the not-root cases are skipped");
    return;
  }
  BOOST_TEST_REQUIRE(::chown(dir.path().c_str(), pw->pw_uid, pw->pw_gid) == 0);
  BOOST_TEST_REQUIRE(::chown(secret_path.c_str(), pw->pw_uid, pw->pw_gid) == 0);
  auto as_nobody = [&](const std::string& log_name) {
    return spawn_binary("/usr/bin/setpriv",
                        {"--reuid=" + std::to_string(pw->pw_uid),
                         "--regid=" + std::to_string(pw->pw_gid), "--clear-groups",
                         TIERCE_MEMD_BINARY, "--foreground", "-c", config_path},
                        dir / log_name);
  };
  write_config({}, "user = \"root\"");
  Child r = spawn_memd({"--check", "-c", config_path}, dir / "root.log");
  BOOST_TEST(r.wait_exit(5000ms) == 2);  // root: nothing would be dropped
  write_config({}, "user = \"daemon\"");
  Child n = as_nobody("not-root.log");
  BOOST_TEST(n.wait_exit(5000ms) == 1);
  BOOST_TEST_INFO(read_file(dir / "not-root.log"));
  BOOST_TEST(read_file(dir / "not-root.log").find("MEMD0040") != std::string::npos);
  write_config({}, "user = \"nobody\"");
  memd = as_nobody("same-user.log");
  BOOST_TEST(eventually([&] { return ::access(ready_path.c_str(), F_OK) == 0; }));
  memd.signal(SIGTERM);
  BOOST_TEST(memd.wait_exit(5000ms) == 0);
}

BOOST_AUTO_TEST_SUITE_END()
