// tests/agents/memd_core_test.cc — the Memd class in this process: reconciling regions with
// segments (pending, exported, re-created, removed, revoked), following owners, reloading, and
// the memd.list / memd.status services. The process around it is memd_integration_test's job.
#define BOOST_TEST_MODULE memd_core
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <sys/mman.h>

#include <mutex>

#include "agents/memd/memd.h"
#include "memd_test_util.h"

using namespace tierce;
using namespace memd_test;
using fabric::Errc;
using memd::RegionState;

namespace tierce::fabric {
std::ostream& operator<<(std::ostream& o, Errc e) {
  return o << to_string(e);
}
}  // namespace tierce::fabric
namespace tierce::memd {
std::ostream& operator<<(std::ostream& o, RegionState s) {
  return o << to_string(s);
}
}  // namespace tierce::memd

namespace {

using tierce_test::LogCapture;

struct Fixture {
  TempDir dir;
  std::string secret_path = make_secret(dir);
  fabric::Secret secret = fabric::Secret::from_file(secret_path);
  SegmentNames names;
  LogCapture logs;

  memd::Config config(std::vector<memd::RegionConfig> regions) {
    memd::Config c;
    c.node = "core-test";
    c.listen = {"tcp://127.0.0.1:0", "shm://" + (dir / "memd.sock")};
    c.secret_file = secret_path;
    c.heartbeat = std::chrono::milliseconds(10);
    c.lease = std::chrono::milliseconds(200);
    c.rescan = std::chrono::milliseconds(20);
    c.regions = std::move(regions);
    return c;
  }
  std::unique_ptr<memd::Memd> start(std::vector<memd::RegionConfig> regions) {
    return std::make_unique<memd::Memd>(config(std::move(regions)), secret, logs.sink());
  }
  std::unique_ptr<fabric::Connection> connect(const memd::Memd& m, const std::string& scheme) {
    fabric::ClientOptions o;
    o.secret = secret;
    o.op_timeout = std::chrono::milliseconds(2000);
    for (auto& u : m.bound_uris())
      if (u.rfind(scheme + "://", 0) == 0) return fabric::connect(u, o);
    throw std::runtime_error("no " + scheme + " address");
  }
};

memd::RegionStatus status_of(const memd::Memd& m, const std::string& name) {
  for (auto& r : m.regions())
    if (r.config.name == name) return r;
  throw std::runtime_error("no region " + name);
}

// Runs memd's loop until `cond` holds (or 5 s pass).
bool run_until(memd::Memd& m, const std::function<bool()>& cond) {
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!cond()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    m.poll_once(-1, std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(memd_core, Fixture)

BOOST_AUTO_TEST_CASE(pending_until_created_then_exported_with_the_descriptor_peers_get) {
  std::string seg = names.add("versions");
  auto m = start({{"versions", seg, true}});
  m->rescan();
  BOOST_TEST(status_of(*m, "versions").state == RegionState::Pending);
  m->rescan();
  m->rescan();
  BOOST_TEST(logs.count("MEMD0102") == 1u);  // a steady problem is logged once

  auto tcp = connect(*m, "tcp");
  BOOST_TEST(errc_of([&] { tcp->lookup("versions"); }) == Errc::NoSuchRegion);

  auto s = fabric::SharedSegment::create(seg, 4096);
  m->rescan();
  auto st = status_of(*m, "versions");
  BOOST_TEST_REQUIRE(st.state == RegionState::Exported);
  BOOST_TEST(st.incarnation == s.incarnation());
  BOOST_TEST(st.owner == ::getpid());
  BOOST_TEST(st.len == 4096u);
  BOOST_TEST(logs.count("MEMD0101") == 1u);

  fabric::RemoteRegion d = tcp->lookup("versions");
  BOOST_TEST(d.addr == st.addr);
  BOOST_TEST(d.key == st.key);
  BOOST_TEST(d.len == 4096u);

  // One-sided ops on the owner's memory.
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(s.data() + 64)).store(41);
  BOOST_TEST(tcp->faa64(d, 64, 1) == 41u);
  BOOST_TEST(std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(s.data() + 64)).load() == 42u);

  // memd.list: "name addr len key segment incarnation"
  auto body = tcp->call("memd.list", {});
  std::string list(body.begin(), body.end());
  char addr[32], key[32], inc[32];
  std::snprintf(addr, sizeof addr, "0x%016llx", (unsigned long long)d.addr);
  std::snprintf(key, sizeof key, "0x%016llx", (unsigned long long)d.key);
  std::snprintf(inc, sizeof inc, "0x%016llx", (unsigned long long)s.incarnation());
  BOOST_TEST(list ==
             "versions " + std::string(addr) + " 4096 " + key + " " + seg + " " + inc + "\n");

  body = tcp->call("memd.status", {});
  std::string status(body.begin(), body.end());
  BOOST_TEST(status.find("node core-test\n") != std::string::npos);
  BOOST_TEST(status.find("region versions exported segment=" + seg) != std::string::npos);
  BOOST_TEST(status.find("one_sided_ops 1\n") != std::string::npos);
  BOOST_TEST(status.find("owner_watch=pidfd") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(recreated_segment_is_reexported_and_old_descriptors_fail) {
  std::string seg = names.add("recreate");
  auto s1 = fabric::SharedSegment::create(seg, 4096);
  auto m = start({{"v", seg, true}});
  m->rescan();
  auto tcp = connect(*m, "tcp");
  auto shm = connect(*m, "shm");
  fabric::RemoteRegion d1 = tcp->lookup("v");
  fabric::RemoteRegion d1s = shm->lookup("v");
  BOOST_TEST(shm->faa64(d1s, 0, 5) == 0u);  // maps it

  auto s2 = fabric::SharedSegment::create(seg, 8192);
  m->rescan();
  auto st = status_of(*m, "v");
  BOOST_TEST_REQUIRE(st.state == RegionState::Exported);
  BOOST_TEST(st.incarnation == s2.incarnation());
  BOOST_TEST(logs.count("MEMD0105") == 1u);
  BOOST_TEST(m->counters().reexports == 1u);

  fabric::RemoteRegion d2 = tcp->lookup("v");
  BOOST_TEST(d2.len == 8192u);
  BOOST_TEST((d2.addr != d1.addr || d2.key != d1.key));
  Errc old_tcp = errc_of([&] { tcp->faa64(d1, 0, 1); });
  BOOST_TEST((old_tcp == Errc::NoSuchRegion || old_tcp == Errc::BadKey));
  BOOST_TEST(errc_of([&] { shm->faa64(d1s, 0, 1); }) == Errc::Revoked);  // memd revoked the old one
  BOOST_TEST(!s1.live());
  BOOST_TEST(s2.live());
  BOOST_TEST(tcp->faa64(d2, 0, 3) == 0u);
  fabric::RemoteRegion d2s = shm->lookup("v");
  BOOST_TEST(shm->faa64(d2s, 0, 1) == 3u);
}

BOOST_AUTO_TEST_CASE(removed_segment_is_withdrawn_and_comes_back) {
  std::string seg = names.add("removed");
  auto s1 = fabric::SharedSegment::create(seg, 4096);
  auto m = start({{"v", seg, true}});
  m->rescan();
  BOOST_TEST_REQUIRE(status_of(*m, "v").state == RegionState::Exported);
  fabric::SharedSegment::unlink(seg);
  m->rescan();
  BOOST_TEST(status_of(*m, "v").state == RegionState::Pending);
  BOOST_TEST(logs.count("MEMD0107") == 1u);
  BOOST_TEST(!s1.live());
  auto tcp = connect(*m, "tcp");
  BOOST_TEST(errc_of([&] { tcp->lookup("v"); }) == Errc::NoSuchRegion);
  auto s2 = fabric::SharedSegment::create(seg, 4096);
  m->rescan();
  BOOST_TEST(status_of(*m, "v").state == RegionState::Exported);
  BOOST_TEST(tcp->lookup("v").len == 4096u);
}

BOOST_AUTO_TEST_CASE(owner_exit_revokes_and_withdraws) {
  std::string seg = names.add("owned");
  SegmentOwner owner(seg, 4096);
  auto m = start({{"v", seg, true}});
  m->rescan();
  auto st = status_of(*m, "v");
  BOOST_TEST_REQUIRE(st.state == RegionState::Exported);
  BOOST_TEST(st.owner == owner.pid());
  BOOST_TEST(st.owner_watched);
  auto shm = connect(*m, "shm");
  fabric::RemoteRegion d = shm->lookup("v");
  uint8_t b = 0;
  shm->read(d, 0, &b, 1);
  BOOST_TEST(b == 0x5a);

  // No more rescans from here on: only the pidfd can tell memd.
  memd::Config slow = m->config();
  slow.rescan = std::chrono::hours(1);
  m->reload(slow);
  owner.exit_now();
  // Noticed through the pidfd, not a rescan.
  BOOST_TEST(run_until(*m, [&] { return status_of(*m, "v").state == RegionState::Revoked; }));
  BOOST_TEST(logs.count("MEMD0106") == 1u);
  BOOST_TEST(errc_of([&] { shm->read(d, 0, &b, 1); }) == Errc::Revoked);
  BOOST_TEST(errc_of([&] { shm->lookup("v"); }) == Errc::NoSuchRegion);
  BOOST_TEST(m->counters().owner_exits == 1u);

  // The dead object stays revoked across rescans, logged once; a new creation comes back.
  m->rescan();
  m->rescan();
  BOOST_TEST(status_of(*m, "v").state == RegionState::Revoked);
  BOOST_TEST(logs.count("MEMD0106") == 1u);
  auto s2 = fabric::SharedSegment::create(seg, 4096);
  m->rescan();
  BOOST_TEST(status_of(*m, "v").state == RegionState::Exported);
}

BOOST_AUTO_TEST_CASE(segment_of_an_owner_dead_before_memd_started_is_revoked) {
  std::string seg = names.add("orphan");
  {
    SegmentOwner owner(seg, 4096);
    owner.exit_now();
  }
  auto m = start({{"v", seg, true}});
  m->rescan();
  BOOST_TEST(status_of(*m, "v").state == RegionState::Revoked);
  BOOST_TEST(logs.count("MEMD0106") == 1u);
  auto check = fabric::SharedSegment::open(seg);
  BOOST_TEST(!check.live());
}

BOOST_AUTO_TEST_CASE(follow_owner_false_keeps_exporting) {
  std::string seg = names.add("pool");
  SegmentOwner owner(seg, 4096);
  auto m = start({{"pool", seg, false}});
  m->rescan();
  BOOST_TEST_REQUIRE(status_of(*m, "pool").state == RegionState::Exported);
  BOOST_TEST(!status_of(*m, "pool").owner_watched);
  owner.exit_now();
  m->rescan();
  m->check_owners();
  BOOST_TEST(status_of(*m, "pool").state == RegionState::Exported);
  auto tcp = connect(*m, "tcp");
  fabric::RemoteRegion d = tcp->lookup("pool");
  uint8_t b = 0;
  tcp->read(d, 0, &b, 1);
  BOOST_TEST(b == 0x5a);
}

BOOST_AUTO_TEST_CASE(segment_revoked_by_its_owner_is_withdrawn) {
  std::string seg = names.add("selfrevoke");
  auto s = fabric::SharedSegment::create(seg, 4096);
  auto m = start({{"v", seg, true}});
  m->rescan();
  BOOST_TEST_REQUIRE(status_of(*m, "v").state == RegionState::Exported);
  s.revoke();
  m->rescan();
  BOOST_TEST(status_of(*m, "v").state == RegionState::Revoked);
  BOOST_TEST(logs.count("MEMD0108") == 1u);
}

BOOST_AUTO_TEST_CASE(foreign_object_is_not_ready_and_logged_once) {
  std::string seg = names.add("foreign");
  int fd = ::shm_open(seg.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  BOOST_TEST_REQUIRE(fd >= 0);
  BOOST_TEST_REQUIRE(::ftruncate(fd, 8192) == 0);
  ::close(fd);
  auto m = start({{"v", seg, true}});
  for (int i = 0; i < 3; ++i) m->rescan();
  auto st = status_of(*m, "v");
  BOOST_TEST(st.state == RegionState::NotReady);
  BOOST_TEST(st.detail.find("bad header") != std::string::npos);
  BOOST_TEST(logs.count("MEMD0104") == 1u);
}

BOOST_AUTO_TEST_CASE(reload_adds_removes_and_changes_regions) {
  std::string a = names.add("a"), b = names.add("b"), c = names.add("c");
  auto sa = fabric::SharedSegment::create(a, 4096);
  auto sb = fabric::SharedSegment::create(b, 4096);
  auto sc = fabric::SharedSegment::create(c, 4096);
  auto m = start({{"a", a, true}, {"b", b, true}});
  m->rescan();
  auto tcp = connect(*m, "tcp");
  fabric::RemoteRegion da = tcp->lookup("a");

  memd::Config next = m->config();
  next.regions = {{"b", c, true}, {"new", a, false}};  // b moves to segment c; a leaves; new added
  next.listen = {"tcp://127.0.0.1:1"};                 // needs a restart
  next.rescan = std::chrono::milliseconds(30);
  memd::ReloadOutcome out = m->reload(next);
  BOOST_TEST(out.added == std::vector<std::string>{"new"});
  BOOST_TEST(out.removed == std::vector<std::string>{"a"});
  BOOST_TEST(out.changed == std::vector<std::string>{"b"});
  BOOST_TEST(out.need_restart == std::vector<std::string>{"listen"});
  BOOST_TEST(logs.count("MEMD0120 [memd] listen") == 1u);
  BOOST_TEST(m->config().listen.size() == 2u);  // the running value stays
  BOOST_TEST(m->config().rescan.count() == 30);

  BOOST_TEST(errc_of([&] { tcp->lookup("a"); }) == Errc::NoSuchRegion);
  BOOST_TEST(sa.live());  // removal from the configuration does not revoke the owner's segment
  BOOST_TEST(tcp->lookup("b").len == 4096u);
  BOOST_TEST(status_of(*m, "b").incarnation == sc.incarnation());
  BOOST_TEST(status_of(*m, "new").incarnation == sa.incarnation());
  BOOST_TEST(!status_of(*m, "new").config.follow_owner);
  Errc old = errc_of([&] { tcp->faa64(da, 0, 1); });
  BOOST_TEST((old == Errc::NoSuchRegion || old == Errc::BadKey));

  // follow_owner flip on an exported region.
  next.regions = {{"b", c, true}, {"new", a, true}};
  out = m->reload(next);
  BOOST_TEST(out.changed == std::vector<std::string>{"new"});
  BOOST_TEST(status_of(*m, "new").owner_watched);
}

BOOST_AUTO_TEST_CASE(bind_failure_names_the_address) {
  auto m1 = start({});
  std::string tcp_uri;
  for (auto& u : m1->bound_uris())
    if (u.rfind("tcp://", 0) == 0) tcp_uri = u;
  memd::Config c = config({});
  c.listen = {tcp_uri};
  try {
    memd::Memd m2(c, secret, logs.sink());
    BOOST_FAIL("binding a taken port must fail");
  } catch (const fabric::FabricError& e) {
    BOOST_TEST_INFO(e.what());
    BOOST_TEST(std::string(e.what()).find(tcp_uri.substr(6)) != std::string::npos);
  }
}

BOOST_AUTO_TEST_SUITE_END()
