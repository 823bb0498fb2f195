// tests/php/test_db_check.cc — php_ext/db_check.h alone: which server answers say that a
// connection may not read the primary (a replica, Galera without causal reads, ProxySQL, MaxScale,
// another proxy), fed as the glue would feed them.
#define BOOST_TEST_MODULE php_db_check
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <algorithm>

#include "php_ext/db_check.h"

using namespace tierce::php;

namespace {

// A primary MariaDB as Debian 12 ships it (wsrep compiled in, off).
ServerFacts primary() {
  ServerFacts f;
  f.handshake_version = "10.11.6-MariaDB-0+deb12u1";
  f.probe_comment = "Debian 12";
  f.variables = {{"read_only", "OFF"},
                 {"innodb_read_only", "OFF"},
                 {"wsrep_on", "OFF"},
                 {"wsrep_sync_wait", "0"},
                 {"version", "10.11.6-MariaDB-0+deb12u1"},
                 {"version_comment", "Debian 12"}};
  return f;
}

bool has(const std::vector<DbFinding>& v, DbFinding f) {
  return std::find(v.begin(), v.end(), f) != v.end();
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_primary_has_no_finding) {
  BOOST_TEST(judge(primary()).empty());
  // MySQL: no wsrep variables at all, super_read_only off
  ServerFacts m = primary();
  m.variables.erase("wsrep_on");
  m.variables.erase("wsrep_sync_wait");
  m.variables["super_read_only"] = "OFF";
  m.handshake_version = m.variables["version"] = "8.0.36";
  m.probe_comment = m.variables["version_comment"] = "MySQL Community Server - GPL";
  BOOST_TEST(judge(m).empty());
  // nothing learnt (every query failed): nothing to say
  BOOST_TEST(judge(ServerFacts{}).empty());
}

BOOST_AUTO_TEST_CASE(a_read_only_server_is_a_replica) {
  ServerFacts f = primary();
  f.variables["read_only"] = "ON";
  auto v = judge(f);
  BOOST_TEST(v.size() == 1u);
  BOOST_TEST(has(v, DbFinding::ReadOnly));
  BOOST_TEST(id_of(DbFinding::ReadOnly) == "PHPEXT0201");
  f = primary();
  f.variables["super_read_only"] = "1";
  BOOST_TEST(has(judge(f), DbFinding::ReadOnly));
  f = primary();
  f.variables["innodb_read_only"] = "ON";
  BOOST_TEST(has(judge(f), DbFinding::InnodbReadOnly));
}

BOOST_AUTO_TEST_CASE(galera_needs_causal_reads) {
  ServerFacts f = primary();
  f.variables["wsrep_on"] = "ON";
  BOOST_TEST(has(judge(f), DbFinding::GaleraWithoutCausalReads));
  f.variables["wsrep_sync_wait"] = "6";  // UPDATE/DELETE and INSERT/REPLACE, not READ
  BOOST_TEST(has(judge(f), DbFinding::GaleraWithoutCausalReads));
  BOOST_TEST(describe(DbFinding::GaleraWithoutCausalReads, f).find("= 6") != std::string::npos);
  f.variables["wsrep_sync_wait"] = "1";
  BOOST_TEST(judge(f).empty());
  f.variables["wsrep_sync_wait"] = "15";
  BOOST_TEST(judge(f).empty());
  f.variables.erase("wsrep_sync_wait");  // not reported: taken as 0
  BOOST_TEST(has(judge(f), DbFinding::GaleraWithoutCausalReads));
}

BOOST_AUTO_TEST_CASE(proxies_are_seen) {
  // ProxySQL answers the probe itself; its backend answers SHOW VARIABLES.
  ServerFacts f = primary();
  f.handshake_version = "8.0.11";
  f.probe_comment = "(ProxySQL)";
  auto v = judge(f);
  BOOST_TEST(v.size() == 1u);
  BOOST_TEST(has(v, DbFinding::ProxySql));
  BOOST_TEST(describe(DbFinding::ProxySql, f).find("(ProxySQL)") != std::string::npos);
  // MaxScale: its version string
  f = primary();
  f.handshake_version = "10.11.6-MariaDB-maxscale";
  BOOST_TEST(has(judge(f), DbFinding::MaxScale));
  f = primary();
  f.variables["version"] = "5.5.5-10.6.12-MariaDB-MaxScale";
  BOOST_TEST(has(judge(f), DbFinding::MaxScale));
  // something else answered the probe than the server whose variables were read
  f = primary();
  f.probe_comment = "some router";
  v = judge(f);
  BOOST_TEST(v.size() == 1u);
  BOOST_TEST(has(v, DbFinding::OtherProxy));
  // a proxy in front of a replica: both
  f = primary();
  f.probe_comment = "(ProxySQL)";
  f.variables["read_only"] = "ON";
  v = judge(f);
  BOOST_TEST(has(v, DbFinding::ProxySql));
  BOOST_TEST(has(v, DbFinding::ReadOnly));
}

BOOST_AUTO_TEST_CASE(every_finding_has_its_own_id) {
  std::vector<std::string_view> ids;
  for (DbFinding f :
       {DbFinding::ReadOnly, DbFinding::InnodbReadOnly, DbFinding::GaleraWithoutCausalReads,
        DbFinding::ProxySql, DbFinding::MaxScale, DbFinding::OtherProxy})
    ids.push_back(id_of(f));
  std::sort(ids.begin(), ids.end());
  BOOST_TEST((std::adjacent_find(ids.begin(), ids.end()) == ids.end()));
}

BOOST_AUTO_TEST_CASE(the_warning_names_its_id_and_server) {
  ServerFacts f = primary();
  f.variables["read_only"] = "ON";
  std::string w = not_primary_warning(DbFinding::ReadOnly, f, "db2 via TCP/IP, 10.11.6-MariaDB");
  BOOST_TEST(w.rfind(std::string(id_of(DbFinding::ReadOnly)) + " " +
                         describe(DbFinding::ReadOnly, f) + " (db2 via TCP/IP, 10.11.6-MariaDB). ",
                     0) == 0u);
  BOOST_TEST(w.find("tierce.db_check = 0") != std::string::npos);
}
