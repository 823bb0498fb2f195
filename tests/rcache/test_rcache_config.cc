// mod_rcache's configuration as rcache_logic resolves it: the start-up check
// (rcache::resolve_server_config: what RCache On runs with, the defaults filled in, each refusal
// with its message id — the same checks `httpd -t` runs), each directive's argument, the merging
// of vhosts and locations, and the status pages' snapshot.
#define BOOST_TEST_MODULE rcache_config
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <string>

#include "mod_rcache/rcache_logic.h"
#include "tests/support/topology.h"
#include "tests/test_util.h"

namespace co = tierce::coherence;
namespace rc = tierce::rcache;
using tierce_test::TempDir;
using tierce_test::write_file;

namespace {

// A topology with two app nodes and two proxies; `extra_node` appended as given.
struct Cluster {
  TempDir dir;
  std::string path = dir / "cluster.toml";
  explicit Cluster(const std::string& extra_node = "", bool with_apps = true) {
    std::string secret = tierce_test::make_secret(dir);
    std::string t = tierce_test::topology_head(secret);
    auto node = tierce_test::topology_node;
    if (with_apps) t += node("app1", "app", 17101) + node("app2", "app", 17102);
    t += node("proxy1", "proxy", 17201) + node("proxy2", "proxy", 17202) + extra_node;
    write_file(path, t);
  }
  rc::ServerSettings settings(const std::string& node = "proxy1") const {
    rc::ServerSettings s;
    s.topology = path;
    s.node = node;
    return s;
  }
};

std::string refusal(const rc::ServerSettings& s) {
  auto r = rc::resolve_server_config(s);
  BOOST_TEST(!r.ok());
  return r.message();
}

bool starts(const std::string& msg, const std::string& id) {
  return msg.rfind(id + " ", 0) == 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_defaults_fill_what_is_not_set) {
  Cluster c;
  auto r = rc::resolve_server_config(c.settings());
  BOOST_REQUIRE_MESSAGE(r.ok(), r.message());
  BOOST_TEST(r->node == "proxy1");
  BOOST_TEST(r->segment == "/tierce.t.proxy1.arena");
  BOOST_TEST(r->size == rc::kDefaultArenaSize);
  BOOST_TEST(r->max_entry == rc::kDefaultMaxEntry);
  BOOST_TEST(r->retry_after_ms == uint32_t(rc::kDefaultRetryAfterMs));
  BOOST_TEST(r->version_timeout_ms == r->topo.op_timeout_ms);  // the topology's op timeout
  BOOST_TEST((r->coop == co::CoopScheme::Off));
  BOOST_TEST(r->coop_pool.empty());
}

BOOST_AUTO_TEST_CASE(given_settings_win_over_the_defaults) {
  Cluster c;
  auto s = c.settings();
  s.size = 64ull << 20;
  s.max_entry = 4ull << 20;
  s.version_timeout_ms = 7;
  s.retry_after_ms = 0;
  s.coop = int(co::CoopScheme::MTACC);
  s.coop_threshold = 4096;
  s.coop_pool_slabs = 3;
  auto r = rc::resolve_server_config(s);
  BOOST_REQUIRE_MESSAGE(r.ok(), r.message());
  BOOST_TEST(r->size == (64ull << 20));
  BOOST_TEST(r->max_entry == (4ull << 20));
  BOOST_TEST(r->version_timeout_ms == 7u);
  BOOST_TEST(r->retry_after_ms == 0u);
  BOOST_TEST(r->coop_threshold == 4096u);
  BOOST_TEST(r->coop_pool_slabs == 3u);
  // MTACC without RCacheCoopPool: every app node donates.
  BOOST_TEST(r->coop_pool == (std::vector<std::string>{"app1", "app2"}));
}

BOOST_AUTO_TEST_CASE(each_missing_or_wrong_setting_is_refused_with_its_id) {
  Cluster c;
  auto s = c.settings();
  s.topology.clear();
  BOOST_TEST(starts(refusal(s), "RCACHE0001"));
  s = c.settings("");
  BOOST_TEST(starts(refusal(s), "RCACHE0002"));
  s = c.settings();
  s.topology = c.dir / "missing.toml";
  BOOST_TEST(starts(refusal(s), "RCACHE0003"));
  BOOST_TEST(starts(refusal(c.settings("proxy9")), "RCACHE0004"));
  s = c.settings();
  s.size = 1ull << 20;
  s.max_entry = 1ull << 20;  // more than size / 4
  std::string m = refusal(s);
  BOOST_TEST(starts(m, "RCACHE0007"), m);
  BOOST_TEST(m.find("lower it or raise RCacheSize") != std::string::npos, m);
}

BOOST_AUTO_TEST_CASE(the_cooperative_cache_needs_a_proxy_and_a_pool_of_memd_nodes) {
  Cluster c;
  auto s = c.settings("app1");
  s.coop = int(co::CoopScheme::BCC);
  BOOST_TEST(starts(refusal(s), "RCACHE0012"));
  s = c.settings();
  s.coop = int(co::CoopScheme::HYBCC);
  s.coop_pool = std::vector<std::string>{"app1", "nosuch"};
  std::string m = refusal(s);
  BOOST_TEST(starts(m, "RCACHE0015"), m);
  BOOST_TEST(m.find("nosuch: no node of that name") != std::string::npos, m);
  s.coop = int(co::CoopScheme::BCC);  // a pool given to a scheme that uses none
  s.coop_pool = std::vector<std::string>{"app1"};
  m = refusal(s);
  BOOST_TEST(m.find("uses no pool memory") != std::string::npos, m);
}

// (RCACHE0004's second case, a node without segment_prefix, cannot be written: the topology
// loader names one after the cluster and the node.)
BOOST_AUTO_TEST_CASE(a_topology_without_app_nodes_secret_or_pool_memd_is_refused) {
  // Without app nodes nothing could prove a page current: the loader already refuses such a
  // topology (RCACHE0005 stays for a loader that would not).
  Cluster no_apps("", false);
  std::string m = refusal(no_apps.settings());
  BOOST_TEST(starts(m, "RCACHE0003"), m);
  BOOST_TEST(m.find("no node has role = \"app\"") != std::string::npos, m);
  // The fabric secret must be readable.
  Cluster c;
  std::string t = tierce_test::read_file(c.path);
  auto at = t.find("secret_file = \"");
  auto end = t.find('"', at + 15);
  t.replace(at, end - at + 1, "secret_file = \"" + (c.dir / "missing.key") + "\"");
  write_file(c.path, t);
  m = refusal(c.settings());
  BOOST_TEST(starts(m, "RCACHE0006"), m);
  // A pool donor must have a memd: a lock-manager-only node has none.
  Cluster locks(
      "[[node]]\nname = \"locks\"\nrole = \"proxy\"\nlockd = [\"tcp://127.0.0.1:17301\"]\n");
  auto s = locks.settings();
  s.coop = int(co::CoopScheme::MTACC);
  s.coop_pool = std::vector<std::string>{"app1", "locks"};
  m = refusal(s);
  BOOST_TEST(starts(m, "RCACHE0015"), m);
  BOOST_TEST(m.find("locks: the node has no memd address") != std::string::npos, m);
}

// ---- one directive's argument ----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(each_directive_argument_is_taken_or_refused_with_its_text) {
  BOOST_TEST(*rc::arena_size_arg("256M") == 256ull << 20);
  BOOST_TEST(*rc::arena_size_arg("1M") == 1ull << 20);
  BOOST_TEST(*rc::arena_size_arg("1024G") == 1ull << 40);
  for (const char* bad : {"", "1023K", "1025G", "12X", "-1"}) {
    auto r = rc::arena_size_arg(bad);
    BOOST_TEST(!r.ok(), bad);
    BOOST_TEST(r.message() == "RCacheSize: '" + std::string(bad) +
                                  "' is not allowed: give the arena size in bytes with an "
                                  "optional K, M or G suffix, between 1M and 1024G (e.g. "
                                  "RCacheSize 256M)");
  }
  BOOST_TEST(*rc::max_entry_arg("1K") == 1024u);
  BOOST_TEST(rc::max_entry_arg("1023").message().rfind(
                 "RCacheMaxEntrySize: '1023' is not allowed", 0) == 0);
  BOOST_TEST(*rc::version_timeout_arg("50") == 50);
  BOOST_TEST(!rc::version_timeout_arg("0").ok());
  BOOST_TEST(!rc::version_timeout_arg("60001").ok());
  BOOST_TEST(*rc::retry_after_arg("0") == 0);
  BOOST_TEST(rc::retry_after_arg("600001").message() ==
             "RCacheRetryAfter: '600001' is not allowed: give milliseconds from 0 to 600000 (e.g. "
             "RCacheRetryAfter 100)");
  BOOST_TEST(*rc::max_age_arg("0") == 0);
  BOOST_TEST(*rc::max_age_arg("31536000") == rc::kMaxMaxAgeSeconds);
  BOOST_TEST(rc::max_age_arg("31536001").message() ==
             "RCacheMaxAge: '31536001' is not allowed: give seconds from 1 to 31536000, or 0 for "
             "no limit (e.g. RCacheMaxAge 600)");
  BOOST_TEST(int(*rc::coop_arg("HYBCC")) == int(co::CoopScheme::HYBCC));
  BOOST_TEST(rc::coop_arg("ZZ").message().rfind("RCacheCoop: 'ZZ' is not a scheme: give Off", 0) ==
             0);
  BOOST_TEST(*rc::coop_threshold_arg("16K") == 16384u);
  BOOST_TEST(!rc::coop_threshold_arg("0").ok());
  BOOST_TEST(!rc::coop_threshold_arg("2G").ok());
  BOOST_TEST(*rc::coop_pool_slabs_arg("65536") == 65536);
  BOOST_TEST(!rc::coop_pool_slabs_arg("0").ok());
  BOOST_TEST(int(*rc::coop_placement_arg("power_of_two")) == int(co::Placement::PowerOfTwo));
  BOOST_TEST(rc::coop_placement_arg("random").message() ==
             "RCacheCoopPlacement: 'random' is not a policy: give local_first, most_free or "
             "power_of_two");
}

// ---- merging -----------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(unset_policy_switches_take_their_defaults) {
  rc::Policy p = rc::resolve_policy(rc::PolicySettings{});
  BOOST_TEST(!p.store_set_cookie);
  BOOST_TEST(!p.store_authorized);
  BOOST_TEST(!p.store_cookie_requests);
  BOOST_TEST(p.require_tag);
  BOOST_TEST(p.max_age_s == rc::kDefaultMaxAgeSeconds);
  BOOST_TEST(rc::strips_protocol_headers(rc::PolicySettings{}));
  rc::PolicySettings off;
  off.require_tag = 0;
  off.strip_protocol_headers = 0;
  off.max_age_s = 0;
  p = rc::resolve_policy(off);
  BOOST_TEST(!p.require_tag);
  BOOST_TEST(p.max_age_s == 0);  // no limit, not the default
  BOOST_TEST(!rc::strips_protocol_headers(off));
}

BOOST_AUTO_TEST_CASE(a_vhost_switch_wins_over_the_main_servers_and_unset_inherits) {
  rc::PolicySettings main;
  main.store_set_cookie = 1;
  main.store_authorized = 1;
  main.require_tag = 0;
  main.max_age_s = 30;
  main.strip_protocol_headers = 1;
  rc::PolicySettings vhost;  // sets two, leaves the rest
  vhost.store_authorized = 0;
  vhost.strip_protocol_headers = 0;
  vhost.store_cookie_requests = 1;
  rc::PolicySettings m = rc::merge_policy(main, vhost);
  BOOST_TEST(m.store_set_cookie == 1);       // inherited
  BOOST_TEST(m.store_authorized == 0);       // the vhost's
  BOOST_TEST(m.require_tag == 0);            // inherited
  BOOST_TEST(m.store_cookie_requests == 1);  // the vhost's
  BOOST_TEST(m.max_age_s == 30);             // inherited
  BOOST_TEST(m.strip_protocol_headers == 0); // the vhost's
  rc::PolicySettings age0;
  age0.max_age_s = 0;  // 0 (no limit) is a setting, not "unset"
  BOOST_TEST(rc::merge_policy(main, age0).max_age_s == 0);
  // Nothing set on either side: the defaults.
  rc::PolicySettings none = rc::merge_policy({}, {});
  BOOST_TEST(none.require_tag == -1);
  BOOST_TEST(rc::resolve_policy(none).require_tag);
}

BOOST_AUTO_TEST_CASE(the_innermost_rcache_setting_wins) {
  BOOST_TEST(rc::merge_enabled(-1, -1) == -1);
  BOOST_TEST(!rc::cache_enabled(rc::merge_enabled(-1, -1)));  // unset everywhere: Off
  BOOST_TEST(rc::merge_enabled(1, -1) == 1);                  // inherited On
  BOOST_TEST(rc::merge_enabled(1, 0) == 0);                   // Off inside On
  BOOST_TEST(rc::merge_enabled(0, 1) == 1);                   // On inside Off
  BOOST_TEST(rc::cache_enabled(1));
  BOOST_TEST(!rc::cache_enabled(0));
}

// ---- the status pages' numbers -----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(without_an_arena_the_snapshot_shows_the_configuration_only) {
  Cluster c;
  auto r = rc::resolve_server_config(c.settings());
  BOOST_REQUIRE_MESSAGE(r.ok(), r.message());
  rc::StatusSnapshot s = rc::status_snapshot(*r, nullptr, nullptr);
  BOOST_TEST(s.node == "proxy1");
  BOOST_TEST(s.topology_path == c.path);
  BOOST_TEST(s.cluster == "t");
  BOOST_TEST(s.homes.empty());
  BOOST_TEST(s.coop.scheme == "off");
  BOOST_TEST(s.hits == 0u);
}

BOOST_AUTO_TEST_CASE(the_snapshot_reads_the_arena_counters_and_this_childs_home_reach) {
  Cluster c;
  auto s = c.settings();
  s.coop = int(co::CoopScheme::BCC);
  auto r = rc::resolve_server_config(s);
  BOOST_REQUIRE_MESSAGE(r.ok(), r.message());
  auto arena = co::CacheArena::create_anonymous(1ull << 20);
  arena->counters().hits.fetch_add(3);
  arena->counters().home[0].lookups.fetch_add(2);
  arena->counters().coop.remote_hits.fetch_add(5);
  std::atomic<int> reach[4];  // app1, app2, proxy1, proxy2
  reach[0] = 1;
  reach[1] = 2;
  reach[2] = 0;
  reach[3] = 0;
  rc::StatusSnapshot snap = rc::status_snapshot(*r, arena.get(), reach);
  BOOST_TEST(snap.hits == 3u);
  BOOST_TEST(snap.max_entry_bytes == rc::kDefaultMaxEntry);
  BOOST_REQUIRE(snap.homes.size() == 2u);  // the app nodes only
  BOOST_TEST(snap.homes[0].name == "app1");
  BOOST_TEST(snap.homes[0].state == "ok");
  BOOST_TEST(snap.homes[0].lookups == 2u);
  BOOST_TEST(snap.homes[1].state == "failed");
  BOOST_TEST(rc::status_snapshot(*r, arena.get(), nullptr).homes[0].state == "unknown");
  BOOST_TEST(snap.coop.scheme == "bcc");
  bool remote_hits = false;
  for (const auto& [name, v] : snap.coop.counters)
    if (name == "remote_hits") remote_hits = v == 5u;
  BOOST_TEST(remote_hits);
}
