// php_ext/php_db_check.cc — the database server check in the `tierce` PHP extension's glue
// (db_check.h, docs/php_extension.md "The database server check"): on a connection's first
// observed call in a request, two quiet queries through the app's own mysqli / PDO object say
// whether its server may not be the primary; db_check.h judges the answers.
#include <syslog.h>

#include <cctype>

#include "php_ext/php_tierce.h"

namespace tierce::php::glue {

DbCheck g_db;

namespace {


// Runs `sql` on `conn` (mysqli or PDO) quietly; its rows as strings. False when it failed.
bool fetch_rows(zend_object* conn, bool pdo, const char* sql,
                std::vector<std::vector<std::string>>& rows) {
  zval q, res, all, arg[2];
  ZVAL_UNDEF(&res);
  ZVAL_UNDEF(&all);
  ZVAL_STRING(&q, sql);
  bool ok;
  if (pdo) {
    ok = call_quietly(conn, "query", {&q, 1}, &res) && Z_TYPE(res) == IS_OBJECT;
    if (ok) {
      ZVAL_LONG(&arg[0], 3);  // PDO::FETCH_NUM
      ok = call_quietly(Z_OBJ(res), "fetchAll", {arg, 1}, &all);
    }
  } else {
    ZVAL_OBJ(&arg[0], conn);
    ZVAL_COPY_VALUE(&arg[1], &q);
    ok = call_quietly(nullptr, "mysqli_query", {arg, 2}, &res) && Z_TYPE(res) == IS_OBJECT;
    if (ok) {
      ZVAL_COPY_VALUE(&arg[0], &res);
      ZVAL_LONG(&arg[1], 2);  // MYSQLI_NUM
      ok = call_quietly(nullptr, "mysqli_fetch_all", {arg, 2}, &all);
    }
  }
  if (ok && Z_TYPE(all) == IS_ARRAY) {
    zval* row;
    ZEND_HASH_FOREACH_VAL(Z_ARRVAL(all), row) {
      if (Z_TYPE_P(row) != IS_ARRAY) continue;
      std::vector<std::string>& r = rows.emplace_back();
      zval* v;
      ZEND_HASH_FOREACH_VAL(Z_ARRVAL_P(row), v) {
        zend_string* str = zval_get_string(v);
        r.emplace_back(ZSTR_VAL(str), ZSTR_LEN(str));
        zend_string_release(str);
      }
      ZEND_HASH_FOREACH_END();
    }
    ZEND_HASH_FOREACH_END();
  }
  zval_ptr_dtor(&q);
  zval_ptr_dtor(&res);
  zval_ptr_dtor(&all);
  return ok;
}

// A string a call returns (quietly), "" when it fails.
std::string string_of_call(zend_object* obj, const char* name, std::span<zval> args) {
  zval ret;
  ZVAL_UNDEF(&ret);
  std::string out;
  if (call_quietly(obj, name, args, &ret) && Z_TYPE(ret) != IS_NULL) {
    zend_string* str = zval_get_string(&ret);
    out.assign(ZSTR_VAL(str), ZSTR_LEN(str));
    zend_string_release(str);
  }
  zval_ptr_dtor(&ret);
  return out;
}

// The findings of `conn`'s server: from the process's memory for a mysqli connection seen before
// (same host, version, thread id), else from its two queries. Never fails the app's call: a query
// that fails leaves nothing found (counted as db_check_failures).
std::vector<tp::DbFinding> judge_connection(zend_object* conn, bool pdo, std::string& server) {
  tp::ServerFacts facts;
  std::string key;
  zval a[1];
  if (pdo) {
    ZVAL_LONG(&a[0], 4);  // PDO::ATTR_SERVER_VERSION (the handshake's)
    facts.handshake_version = string_of_call(conn, "getAttribute", {a, 1});
    ZVAL_LONG(&a[0], 7);  // PDO::ATTR_CONNECTION_STATUS (host info, no query)
    server = string_of_call(conn, "getAttribute", {a, 1});
  } else {
    ZVAL_OBJ(&a[0], conn);
    facts.handshake_version = string_of_call(nullptr, "mysqli_get_server_info", {a, 1});
    server = string_of_call(nullptr, "mysqli_get_host_info", {a, 1});
    std::string thread = string_of_call(nullptr, "mysqli_thread_id", {a, 1});
    if (!thread.empty() && thread != "0")
      key = server + "|" + facts.handshake_version + "|" + thread;
  }
  server += (server.empty() ? "" : ", ") + facts.handshake_version;
  if (!key.empty())
    if (auto it = g_db.by_connection.find(key); it != g_db.by_connection.end()) return it->second;
  std::vector<std::vector<std::string>> rows;
  bool probed = fetch_rows(conn, pdo, tp::kProxyProbeSql, rows);
  if (probed && !rows.empty() && !rows[0].empty()) facts.probe_comment = rows[0][0];
  rows.clear();
  bool read = fetch_rows(conn, pdo, tp::kVariablesSql, rows);
  for (const auto& r : rows) {
    if (r.size() < 2) continue;
    std::string name = r[0];
    for (char& ch : name) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
    facts.variables[name] = r[1];
  }
  if (!probed && !read) {
    g_counters.db_check_failures++;
    return {};
  }
  g_counters.db_checks++;
  std::vector<tp::DbFinding> found = tp::judge(facts);
  if (!key.empty()) {
    if (g_db.by_connection.size() >= 4096) g_db.by_connection.clear();
    g_db.by_connection.emplace(key, found);
  }
  for (tp::DbFinding f : found) {
    std::string id(tp::id_of(f));
    if (!g_db.warned.insert(id + " " + server).second) continue;
    std::string msg = tp::not_primary_warning(f, facts, server);
    php_log_err_with_severity(msg.c_str(), LOG_WARNING);
    g_db.warnings.push_back(msg);
  }
  return found;
}

}  // namespace

// A page cached from a replica's old rows would stay stale until the next write of its names, long
// after the replica caught up.
void check_connection(zend_object* conn) {
  ConnInfo* info = conn_info(conn);
  if (!info || info->checked) return;
  info->checked = true;
  bool pdo = instance_of(conn, "pdo");
  if (!pdo && !instance_of(conn, "mysqli")) return;
  auto t0 = std::chrono::steady_clock::now();
  std::string server;
  g_db.running = true;
  info->findings = judge_connection(conn, pdo, server);
  g_db.running = false;
  add_us(g_counters.db_check_us, t0);
  if (info->findings.empty() || !g_req.tracker) return;
  g_counters.db_not_primary++;
  g_req.tracker->make_uncacheable(std::string(tp::id_of(info->findings.front())) +
                                  " the database may not be the primary");
  publish();
}

}  // namespace tierce::php::glue
