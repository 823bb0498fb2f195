// php_ext/php_functions.cc — the PHP functions of the `tierce` extension (docs/php_extension.md):
// tierce_depends() / tierce_invalidate() (dependency names by hand), tierce_lock() / trylock() /
// unlock() (lockd over its local socket), tierce_fence_check() (the fence on demand) and
// tierce_status(); their arginfo and the function table the module entry names.
#include <unistd.h>

#include "php_ext/php_tierce.h"

namespace tierce::php::glue {

Locks g_locks;

tierce::dlm::LockClient& Locks::get() {
  if (!client || pid != getpid()) {
    if (client && pid != getpid()) (void)client.release();  // the parent's connection
    const char* sock = INI_STR(const_cast<char*>("tierce.lockd_socket"));
    std::string path = sock && *sock ? sock : tierce::dlm::LockClient::default_socket();
    client = std::make_unique<tierce::dlm::LockClient>(path);
    pid = getpid();
  }
  return *client;
}

}  // namespace tierce::php::glue

// The PHP functions are global (zif_*), as PHP_FUNCTION declares them; the glue's names are theirs.
using namespace tierce::php::glue;

namespace {

// Checks a name as coherence::parse_dependencies would take it (tracker.h).
bool check_name(zend_string* s, uint32_t argn) {
  const char* why = tp::dependency_name_problem(std::string_view(ZSTR_VAL(s), ZSTR_LEN(s)));
  if (why) {
    zend_argument_value_error(argn, "must be a dependency name such as \"item:42\"; it %s", why);
    return false;
  }
  return true;
}

}  // namespace

// ---- PHP functions ------------------------------------------------------------------------------

PHP_FUNCTION(tierce_depends) {
  zval* args = nullptr;
  int argc = 0;
  ZEND_PARSE_PARAMETERS_START(0, -1)
    Z_PARAM_VARIADIC('+', args, argc)
  ZEND_PARSE_PARAMETERS_END();
  for (int i = 0; i < argc; ++i) {
    if (Z_TYPE(args[i]) != IS_STRING) {
      zend_argument_type_error(i + 1, "must be of type string, %s given", zend_zval_type_name(&args[i]));
      RETURN_THROWS();
    }
    if (!check_name(Z_STR(args[i]), i + 1)) RETURN_THROWS();
  }
  if (tp::RequestTracker* t = tracker()) {
    for (int i = 0; i < argc; ++i) t->add_depends(std::string_view(Z_STRVAL(args[i]), Z_STRLEN(args[i])));
    publish();
  }
}

PHP_FUNCTION(tierce_invalidate) {
  zval* args = nullptr;
  int argc = 0;
  ZEND_PARSE_PARAMETERS_START(0, -1)
    Z_PARAM_VARIADIC('+', args, argc)
  ZEND_PARSE_PARAMETERS_END();
  std::vector<std::string> names;
  for (int i = 0; i < argc; ++i) {
    if (Z_TYPE(args[i]) != IS_STRING) {
      zend_argument_type_error(i + 1, "must be of type string, %s given", zend_zval_type_name(&args[i]));
      RETURN_THROWS();
    }
    if (!check_name(Z_STR(args[i]), i + 1)) RETURN_THROWS();
    names.emplace_back(Z_STRVAL(args[i]), Z_STRLEN(args[i]));
  }
  if (names.empty()) return;
  if (g_in_apache) {
    // mod_appversion invalidates before the response leaves (and waits for every home).
    if (tp::RequestTracker* t = tracker()) {
      for (const std::string& n : names) t->add_invalidates(n);
      publish();
    }
    return;
  }
  // Outside httpd (CLI, cron, embed): straight to the homes, now.
  if (!g_engine) {
    zend_throw_exception_ex(g_exception_ce, 0,
                            "tierce_invalidate: no cluster to invalidate in (%s)",
                            g_engine_error.empty()
                                ? "set tierce.topology and tierce.node in php.ini"
                                : g_engine_error.c_str());
    RETURN_THROWS();
  }
  tp::RoundResult r = g_engine->invalidate(names, false);
  if (!r.sent) {
    zend_throw_exception_ex(g_exception_ce, 0, "tierce_invalidate: not sent: %s", r.error.c_str());
    RETURN_THROWS();
  }
  if (!r.complete)
    php_error_docref(nullptr, E_WARNING,
                     "returned after the fence bound: these homes did not acknowledge and stop "
                     "vouching for their pages until they hold it: %s",
                     r.error.c_str());
}

namespace {
bool lock_common(INTERNAL_FUNCTION_PARAMETERS, bool try_only) {
  zend_string* name;
  zend_long mode = static_cast<zend_long>(tierce::dlm::Mode::Exclusive);
  double timeout = -1;
  ZEND_PARSE_PARAMETERS_START(1, try_only ? 2 : 3)
    Z_PARAM_STR(name)
    Z_PARAM_OPTIONAL
    Z_PARAM_LONG(mode)
    Z_PARAM_DOUBLE(timeout)
  ZEND_PARSE_PARAMETERS_END_EX(return false);
  if (mode != 1 && mode != 2) {
    zend_argument_value_error(2, "must be TIERCE_LOCK_SHARED or TIERCE_LOCK_EXCLUSIVE");
    return false;
  }
  if (ZSTR_LEN(name) == 0 || ZSTR_LEN(name) > 255) {
    zend_argument_value_error(1, "must be a lock name of 1 to 255 bytes");
    return false;
  }
  namespace dl = tierce::dlm;
  try {
    dl::LockClient& c = g_locks.get();
    std::string n(ZSTR_VAL(name), ZSTR_LEN(name));
    auto m = static_cast<dl::Mode>(mode);
    if (try_only) {
      std::optional<dl::HeldLock> h = c.try_lock(n, m);
      if (!h) { RETVAL_FALSE; return true; }
      g_locks.held.emplace(n, std::move(*h));
    } else {
      auto ms = timeout < 0 ? std::chrono::milliseconds(-1)
                            : std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000.0));
      g_locks.held.emplace(n, c.lock(n, m, ms));
    }
    RETVAL_TRUE;
  } catch (const dl::LockError& e) {
    if (e.status() == dl::Status::Timeout || e.status() == dl::Status::WouldBlock) {
      RETVAL_FALSE;
      return true;
    }
    if (e.status() == dl::Status::Internal) g_locks.client.reset();  // reconnect next time
    zend_throw_exception_ex(g_exception_ce, static_cast<zend_long>(e.status()), "tierce lock '%s': %s",
                            ZSTR_VAL(name), e.what());
  } catch (const std::exception& e) {
    g_locks.client.reset();
    zend_throw_exception_ex(g_exception_ce, 0, "tierce lock '%s': %s", ZSTR_VAL(name), e.what());
  }
  return true;
}
}  // namespace

PHP_FUNCTION(tierce_lock) { lock_common(INTERNAL_FUNCTION_PARAM_PASSTHRU, false); }
PHP_FUNCTION(tierce_trylock) { lock_common(INTERNAL_FUNCTION_PARAM_PASSTHRU, true); }

PHP_FUNCTION(tierce_unlock) {
  zend_string* name;
  ZEND_PARSE_PARAMETERS_START(1, 1)
    Z_PARAM_STR(name)
  ZEND_PARSE_PARAMETERS_END();
  auto it = g_locks.held.find(std::string(ZSTR_VAL(name), ZSTR_LEN(name)));
  if (it == g_locks.held.end()) RETURN_FALSE;
  try {
    it->second.unlock();
  } catch (const std::exception& e) {
    g_locks.held.erase(it);
    zend_throw_exception_ex(g_exception_ce, 0, "tierce_unlock '%s': %s", ZSTR_VAL(name), e.what());
    RETURN_THROWS();
  }
  g_locks.held.erase(it);
  RETURN_TRUE;
}

PHP_FUNCTION(tierce_fence_check) {
  zend_object* obj;
  ZEND_PARSE_PARAMETERS_START(1, 1)
    Z_PARAM_OBJ(obj)
  ZEND_PARSE_PARAMETERS_END();
  bool pdo = instance_of(obj, "pdo");
  if (!pdo && !instance_of(obj, "mysqli")) {
    zend_argument_type_error(1, "must be of type mysqli|PDO, %s given", ZSTR_VAL(obj->ce->name));
    RETURN_THROWS();
  }
  if (!g_fence.enabled) {
    if (g_fence.error.empty()) RETURN_TRUE;  // no [arbiter]: nothing fences this node's writes
    fence_warn("PHPEXT0308 tierce_fence_check(): the topology could not be read (" +
               g_fence.error + "): whether this node's writes are fenced is unknown");
    RETURN_FALSE;
  }
  if (pdo) {
    pdo_dbh_t* dbh = php_pdo_dbh_fetch_inner(obj);
    if (dbh->driver && (dbh->driver->driver_name_len != 5 ||
                        memcmp(dbh->driver->driver_name, "mysql", 5) != 0)) {
      zend_argument_value_error(1, "must be a MariaDB/MySQL connection (PDO driver mysql)");
      RETURN_THROWS();
    }
  }
  MYSQLND_CONN_DATA* d = mysqlnd_connection_of(obj);
  if (!d) {
    fence_warn(tp::fence_refusal(tp::fence_failed(0, "the connection is not open"), g_fence.node,
                                 g_fence.table));
    RETURN_FALSE;
  }
  auto t0 = std::chrono::steady_clock::now();
  FenceConnState& fc = fence_state(d);
  if (fc.refused && (nd_status(d) & tp::kStatusInTrans)) {  // READ ONLY since: no write can pass
    fence_warn(fc.refusal + " (this transaction was refused before and stays read-only: end it "
                            "and check in the next one)");
    RETURN_FALSE;
  }
  AppView view(d);  // a query of the extension's: the app's last results stay its own
  tp::FenceVerdict v = fence_check(d);
  unsigned status = nd_status(d);
  view.restore(d);
  add_us(g_counters.fence_us, t0);
  if (!v.admitted()) {
    fence_warn(tp::fence_refusal(v, g_fence.node, g_fence.table));
    RETURN_FALSE;
  }
  if (!(status & tp::kStatusInTrans)) {
    fence_warn(tp::fence_outside_transaction(g_fence.node));
    RETURN_FALSE;
  }
  fc.checked = true;  // the observer need not check this transaction again
  RETURN_TRUE;
}

namespace {
void add_names(zval* arr, const char* key, const tp::NameSet& s) {
  zval list;
  array_init(&list);
  for (const std::string& n : s.names()) add_next_index_stringl(&list, n.data(), n.size());
  add_assoc_zval(arr, key, &list);
}
}  // namespace

PHP_FUNCTION(tierce_status) {
  ZEND_PARSE_PARAMETERS_NONE();
  array_init(return_value);
  add_assoc_string(return_value, "version", const_cast<char*>(kVersion));
  add_assoc_bool(return_value, "auto", INI_BOOL(const_cast<char*>("tierce.auto")));
  add_assoc_bool(return_value, "linearizable", INI_BOOL(const_cast<char*>("tierce.linearizable")));
  add_assoc_bool(return_value, "cluster", g_engine != nullptr);
  add_assoc_string(return_value, "cluster_error", const_cast<char*>(g_engine_error.c_str()));
  add_assoc_string(return_value, "schema_error", const_cast<char*>(g_schema_error.c_str()));
  add_assoc_string(return_value, "sapi", const_cast<char*>(sapi_module.name));
  zval c;
  array_init(&c);
  const tp::Counters& k = g_counters;
  add_assoc_long(&c, "statements", k.statements);
  add_assoc_long(&c, "reads", k.reads);
  add_assoc_long(&c, "writes", k.writes);
  add_assoc_long(&c, "neutral", k.neutral);
  add_assoc_long(&c, "exact", k.exact);
  add_assoc_long(&c, "table_level", k.table_level);
  add_assoc_long(&c, "conservative", k.conservative);
  add_assoc_long(&c, "uncacheable_reads", k.uncacheable_reads);
  add_assoc_long(&c, "invalidate_all", k.invalidate_all);
  add_assoc_long(&c, "commits", k.commits);
  add_assoc_long(&c, "rollbacks", k.rollbacks);
  add_assoc_long(&c, "pends", k.pends);
  add_assoc_long(&c, "pend_failures", k.pend_failures);
  add_assoc_long(&c, "pend_us", k.pend_us);
  add_assoc_long(&c, "releases", k.releases);
  add_assoc_long(&c, "release_failures", k.release_failures);
  add_assoc_long(&c, "writes_refused", k.writes_refused);
  add_assoc_long(&c, "db_checks", k.db_checks);
  add_assoc_long(&c, "db_check_failures", k.db_check_failures);
  add_assoc_long(&c, "db_check_us", k.db_check_us);
  add_assoc_long(&c, "db_not_primary", k.db_not_primary);
  add_assoc_long(&c, "fence_checks", k.fence_checks);
  add_assoc_long(&c, "fence_check_failures", k.fence_check_failures);
  add_assoc_long(&c, "fence_refused", k.fence_refused);
  add_assoc_long(&c, "fence_wraps", k.fence_wraps);
  add_assoc_long(&c, "fence_us", k.fence_us);
  add_assoc_long(&c, "observed", k.observed);
  add_assoc_long(&c, "observe_ns", k.observe_ns);
  add_assoc_long(&c, "compiled_cached", g_compiled.texts());
  add_assoc_long(&c, "shapes_cached", g_compiled.shapes());
  add_assoc_zval(return_value, "counters", &c);
  zval fence;
  array_init(&fence);
  add_assoc_bool(&fence, "enabled", g_fence.enabled);
  add_assoc_stringl(&fence, "table", g_fence.table.data(), g_fence.table.size());
  add_assoc_stringl(&fence, "node", g_fence.node.data(), g_fence.node.size());
  add_assoc_stringl(&fence, "error", g_fence.error.data(), g_fence.error.size());
  add_assoc_zval(return_value, "fence", &fence);
  zval dbw;
  array_init(&dbw);
  for (const std::string& w : g_db.warnings) add_next_index_stringl(&dbw, w.data(), w.size());
  add_assoc_zval(return_value, "db_warnings", &dbw);
  zval r;
  array_init(&r);
  if (tp::RequestTracker* t = tracker()) {
    add_names(&r, "depends", t->depends());
    add_names(&r, "invalidates", t->invalidates());
    add_assoc_bool(&r, "invalidate_all", t->invalidates().all());
    add_assoc_bool(&r, "uncacheable", t->uncacheable());
    add_assoc_string(&r, "uncacheable_reason", const_cast<char*>(t->uncacheable_reason().c_str()));
    add_assoc_long(&r, "open_transactions", t->open_transactions());
  }
  zval locks;
  array_init(&locks);
  for (const auto& [n, h] : g_locks.held) add_next_index_stringl(&locks, n.data(), n.size());
  add_assoc_zval(&r, "locks", &locks);
  add_assoc_zval(return_value, "request", &r);
}

// ---- arginfo ------------------------------------------------------------------------------------

ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_tierce_names, 0, 0, IS_VOID, 0)
  ZEND_ARG_VARIADIC_TYPE_INFO(0, names, IS_STRING, 0)
ZEND_END_ARG_INFO()
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_tierce_lock, 0, 1, _IS_BOOL, 0)
  ZEND_ARG_TYPE_INFO(0, name, IS_STRING, 0)
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, mode, IS_LONG, 0, "TIERCE_LOCK_EXCLUSIVE")
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, timeout, IS_DOUBLE, 0, "-1.0")
ZEND_END_ARG_INFO()
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_tierce_trylock, 0, 1, _IS_BOOL, 0)
  ZEND_ARG_TYPE_INFO(0, name, IS_STRING, 0)
  ZEND_ARG_TYPE_INFO_WITH_DEFAULT_VALUE(0, mode, IS_LONG, 0, "TIERCE_LOCK_EXCLUSIVE")
ZEND_END_ARG_INFO()
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_tierce_unlock, 0, 1, _IS_BOOL, 0)
  ZEND_ARG_TYPE_INFO(0, name, IS_STRING, 0)
ZEND_END_ARG_INFO()
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_tierce_status, 0, 0, IS_ARRAY, 0)
ZEND_END_ARG_INFO()
ZEND_BEGIN_ARG_WITH_RETURN_TYPE_INFO_EX(arginfo_tierce_fence_check, 0, 1, _IS_BOOL, 0)
  ZEND_ARG_OBJ_TYPE_MASK(0, conn, mysqli|PDO, 0, NULL)
ZEND_END_ARG_INFO()

namespace tierce::php::glue {

const zend_function_entry tierce_functions[] = {
    PHP_FE(tierce_depends, arginfo_tierce_names)
    PHP_FE(tierce_invalidate, arginfo_tierce_names)
    PHP_FE(tierce_lock, arginfo_tierce_lock)
    PHP_FE(tierce_trylock, arginfo_tierce_trylock)
    PHP_FE(tierce_unlock, arginfo_tierce_unlock)
    PHP_FE(tierce_status, arginfo_tierce_status)
    PHP_FE(tierce_fence_check, arginfo_tierce_fence_check)
    PHP_FE_END};

}  // namespace tierce::php::glue
