// tests/appversion/test_appversion_config.cc — mod_appversion's configuration as logic.h resolves
// it: location merging, the node check of AppVersionTopology/AppVersionNode, the values that must
// agree with the topology, and the start-up resolution (appversion::resolve_server_config) with
// each refusal and its message id — what post_config refuses before httpd starts.
#define BOOST_TEST_MODULE appversion_config
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <memory>
#include <string>
#include <vector>

#include "coherence/layout.h"
#include "mod_appversion/logic.h"
#include "tests/support/topology.h"
#include "tests/test_util.h"

namespace av = tierce::appversion;
namespace co = tierce::coherence;
using tierce_test::TempDir;
using tierce_test::write_file;

namespace {

// Two app nodes and a proxy; `coherence` is the [coherence] section ("" for the defaults).
struct Cluster {
  TempDir dir;
  std::string path = dir / "cluster.toml";
  explicit Cluster(const std::string& coherence = "", const std::string& transport = "tcp",
                   const std::string& secret_file = "") {
    std::string secret = secret_file.empty() ? tierce_test::make_secret(dir) : secret_file;
    using tierce_test::topology_node;
    std::string t = tierce_test::topology_head(secret, transport, coherence);
    auto node = topology_node;
    t += node("app1", "app", 17111) + node("app2", "app", 17112) + node("proxy1", "proxy", 17211);
    write_file(path, t);
  }
  av::ServerSettings settings(const std::string& node = "app1") const {
    av::ServerSettings s;
    s.topology_path = path;
    s.node = node;
    return s;
  }
  co::Topology topology() const { return co::Topology::load(path); }
};

std::string refusal(const av::ServerSettings& s) {
  auto r = av::resolve_server_config(s);
  BOOST_TEST(!r.ok());
  return r.message();
}
bool starts(const std::string& msg, const std::string& id) {
  return msg.rfind(id + " ", 0) == 0;
}
bool has(const std::string& msg, const std::string& part) {
  return msg.find(part) != std::string::npos;
}

}  // namespace

// ---- locations ----------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(the_inner_location_wins_and_unset_settings_are_inherited) {
  av::DirSettings outer;
  outer.enabled = 1;
  outer.dependency_headers =
      std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"X-Deps"});
  av::DirSettings inner;  // sets nothing
  av::DirSettings m = av::merge_dir(outer, inner);
  BOOST_TEST(av::enabled(m));
  BOOST_TEST(av::dependency_headers(m) == std::vector<std::string>{"X-Deps"});
  inner.enabled = 0;
  inner.dependency_headers =
      std::make_shared<const std::vector<std::string>>(std::vector<std::string>{"A", "B"});
  m = av::merge_dir(outer, inner);
  BOOST_TEST(!av::enabled(m));
  BOOST_TEST((av::dependency_headers(m) == std::vector<std::string>{"A", "B"}));
  // Off outside, On inside.
  BOOST_TEST(av::enabled(av::merge_dir(inner, outer)));
}

BOOST_AUTO_TEST_CASE(unset_everywhere_is_off_with_the_default_dependency_header) {
  av::DirSettings none = av::merge_dir({}, {});
  BOOST_TEST(none.enabled == -1);
  BOOST_TEST(!av::enabled(none));
  BOOST_TEST(av::dependency_headers(none) == std::vector<std::string>{av::kDependsHeader});
}

// ---- the node and the values that must agree with the topology ----------------------------------

BOOST_AUTO_TEST_CASE(the_node_must_be_an_app_node_of_the_topology) {
  Cluster c;
  co::Topology t = c.topology();
  BOOST_TEST(av::check_node_in_topology(t, c.path, "app2") == "");
  std::string why = av::check_node_in_topology(t, c.path, "app9");
  BOOST_TEST(why == "node 'app9' is not in the topology " + c.path +
                        "; name one of its [[node]] entries with role = \"app\"");
  why = av::check_node_in_topology(t, c.path, "proxy1");
  BOOST_TEST(why == "node 'proxy1' has role proxy in " + c.path +
                        "; mod_appversion runs on an app node (role = \"app\")");
}

BOOST_AUTO_TEST_CASE(scheme_and_ack_timeout_must_agree_with_the_topology) {
  Cluster c("[coherence]\nscheme = \"invalidate-all\"\nlease_ms = 1000\nclock_skew_ms = 50\n");
  co::Topology t = c.topology();
  BOOST_TEST(av::check_against_topology(t, c.path, {}, {}) == "");
  BOOST_TEST(av::check_against_topology(t, c.path, {{"invalidate-all", "a.conf:3"}},
                                        {{"1050", "a.conf:4"}}) == "");
  std::string why = av::check_against_topology(t, c.path, {{"dependency-lists", "a.conf:7"}}, {});
  BOOST_TEST(starts(why, "APPVER0023"), why);
  BOOST_TEST(has(why,
                 "AppVersionScheme dependency-lists (a.conf:7) differs from the cluster's "
                 "scheme invalidate-all"),
             why);
  why = av::check_against_topology(t, c.path, {}, {{"2000", "a.conf:1"}, {"1049", "b.conf:9"}});
  BOOST_TEST(starts(why, "APPVER0024"), why);
  BOOST_TEST(has(why,
                 "AppVersionAckTimeout 1049 (b.conf:9) is shorter than the fence bound "
                 "1050 ms ([coherence] lease_ms 1000 + clock_skew_ms 50 in " +
                     c.path),
             why);
}

// ---- the start-up resolution --------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_complete_configuration_resolves) {
  Cluster c;
  av::ServerSettings s = c.settings("app2");
  s.op_timeout_ms = 50;
  s.any_enabled = true;
  auto r = av::resolve_server_config(s);
  BOOST_REQUIRE_MESSAGE(r.ok(), r.message());
  BOOST_REQUIRE(r->has_value());
  const av::ModuleConfig& m = **r;
  BOOST_TEST(m.node == "app2");
  BOOST_TEST(m.topology.name == "t");
  BOOST_TEST(m.writer_segment == std::string("/tierce.t.app2") + co::kWriterSuffix);
  BOOST_TEST(m.tuning.op_timeout.count() == 50);
  BOOST_TEST(m.tuning.connect_timeout.count() == 200);  // at least 200 ms to connect
  s.op_timeout_ms = 700;
  BOOST_TEST((*av::resolve_server_config(s))->tuning.connect_timeout.count() == 700);
}

BOOST_AUTO_TEST_CASE(not_configured_is_idle_unless_appversion_on_is_used) {
  av::ServerSettings s;
  auto r = av::resolve_server_config(s);
  BOOST_REQUIRE(r.ok());
  BOOST_TEST(!r->has_value());
  s.any_enabled = true;
  std::string m = refusal(s);
  BOOST_TEST(m ==
             "APPVER0004 AppVersion On is set but AppVersionTopology and AppVersionNode are "
             "not: add both to the main server configuration");
}

BOOST_AUTO_TEST_CASE(each_missing_or_wrong_setting_is_refused_with_its_id) {
  Cluster c;
  av::ServerSettings s = c.settings();
  s.node.clear();
  std::string m = refusal(s);
  BOOST_TEST(starts(m, "APPVER0004"), m);
  BOOST_TEST(has(m, "AppVersionNode is missing"), m);
  s = c.settings();
  s.topology_path.clear();
  m = refusal(s);
  BOOST_TEST(has(m, "APPVER0004 AppVersionTopology is missing"), m);
  s = c.settings();
  s.topology_path = c.dir / "missing.toml";
  m = refusal(s);
  BOOST_TEST(has(m, "APPVER0001 cannot load the topology " + s.topology_path + ": "), m);
  m = refusal(c.settings("app9"));
  BOOST_TEST(m == "APPVER0002 AppVersionNode app9: is not a node in " + c.path +
                      "; name a [[node]] with role = \"app\"");
  m = refusal(c.settings("proxy1"));
  BOOST_TEST(has(m, "APPVER0002 AppVersionNode proxy1: has role proxy in "), m);
}

BOOST_AUTO_TEST_CASE(an_unreadable_secret_or_a_disagreeing_directive_is_refused) {
  TempDir elsewhere;
  Cluster no_secret("", "tcp", elsewhere / "missing.key");
  std::string m = refusal(no_secret.settings());
  BOOST_TEST(starts(m, "APPVER0003"), m);
  BOOST_TEST(has(m, "cannot read the cluster secret " + (elsewhere / "missing.key") + " named by " +
                        no_secret.path),
             m);
  Cluster c;  // dependency-lists, the default
  av::ServerSettings s = c.settings();
  s.schemes = {{"invalidate-all", "x.conf:2"}};
  BOOST_TEST(starts(refusal(s), "APPVER0023"));
  s = c.settings();
  s.ack_timeouts = {{"1", "x.conf:3"}};
  BOOST_TEST(starts(refusal(s), "APPVER0024"));
}

BOOST_AUTO_TEST_CASE(app_nodes_need_a_memd_of_the_clusters_transport) {
  // shm transport, but the app nodes list only tcp memd URIs.
  Cluster c("", "shm");
  std::string m = refusal(c.settings());
  BOOST_TEST(m.rfind("APPVER0001 topology " + c.path + ": ", 0) == 0, m);
  BOOST_TEST(has(m, "(every app node needs a memd URI of the cluster's transport)"), m);
}
