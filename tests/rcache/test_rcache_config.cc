// mod_rcache's start-up configuration (rcache::resolve_server_config): what RCache On runs with,
// the defaults filled in, and each refusal with its message id — the same checks `httpd -t` runs.
#define BOOST_TEST_MODULE rcache_config
#include <boost/test/unit_test.hpp>

#include <string>

#include "mod_rcache/rcache_logic.h"
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
    std::string t = "[cluster]\nname = \"t\"\nsecret_file = \"" + secret + "\"\ntransport = \"tcp\"\n";
    auto node = [](const std::string& name, const std::string& role, int port) {
      return "[[node]]\nname = \"" + name + "\"\nrole = \"" + role + "\"\nmemd = [\"tcp://127.0.0.1:" +
             std::to_string(port) + "\"]\nsegment_prefix = \"/tierce.t." + name + "\"\n";
    };
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
