// php_ext/db_check.h — is a database connection's server one whose reads a cached page may be
// built from? Tierce's coherence argument needs every render to read the PRIMARY
// (docs/coherence.md, "What the database must give"): a render that read its rows before an update
// committed also read seq_start before that update's invalidation. A replica (it applies the update
// later), a read/write-splitting proxy (ProxySQL, MaxScale: reads may go to a replica) and Galera
// without causal reads (wsrep_sync_wait) break it: a page rendered from them can be cached with old
// rows after the invalidation, and stay so until the next write of its names.
//
// What can be seen from a connection, as plain C++ (tested alone in tests/php/test_db_check.cc);
// the glue (php_db_check.cc) runs the two queries on a connection's first observed call and feeds
// the answers here:
//   kProxyProbeSql   exactly the query ProxySQL answers itself ("(ProxySQL)"), not its backend;
//   kVariablesSql    the server's own variables (SHOW VARIABLES works on MariaDB and MySQL alike,
//                    also where a variable such as wsrep_on does not exist).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tierce::php {

inline constexpr const char* kProxyProbeSql = "select @@version_comment limit 1";
inline constexpr const char* kVariablesSql =
    "SHOW VARIABLES WHERE Variable_name IN ('read_only', 'super_read_only', 'innodb_read_only', "
    "'wsrep_on', 'wsrep_sync_wait', 'version', 'version_comment')";

// What one connection tells about its server.
struct ServerFacts {
  std::string handshake_version;                 // the connection's server_info (no query)
  std::optional<std::string> probe_comment;      // the answer to kProxyProbeSql
  std::map<std::string, std::string> variables;  // kVariablesSql: lower-case name -> value
};

// Why a server's reads may miss committed writes (each with its log id, db_check.cc).
enum class DbFinding : uint8_t {
  ReadOnly,                  // PHPEXT0201 @@read_only / @@super_read_only: a replica
  InnodbReadOnly,            // PHPEXT0202 @@innodb_read_only: a read-only copy
  GaleraWithoutCausalReads,  // PHPEXT0203 @@wsrep_on with bit 1 of @@wsrep_sync_wait clear
  ProxySql,                  // PHPEXT0204 ProxySQL answered the probe: it may route reads anywhere
  MaxScale,                  // PHPEXT0205 MaxScale's version string
  OtherProxy,                // PHPEXT0206 the probe's answer is not the server's version_comment
};
std::string_view id_of(DbFinding f);
// One sentence: what was seen and why it matters (without the id).
std::string describe(DbFinding f, const ServerFacts& facts);

// Every finding, in the order above; empty: nothing says this is not the primary (which does not
// prove that it is: an asynchronous replica with read_only off looks like a primary).
std::vector<DbFinding> judge(const ServerFacts& facts);

// The operator's log line for a finding on `server` (its host and version, as the glue names it),
// with the finding's id first.
std::string not_primary_warning(DbFinding f, const ServerFacts& facts, std::string_view server);

}  // namespace tierce::php
