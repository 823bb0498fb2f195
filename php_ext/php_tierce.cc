// php_ext/php_tierce.cc — the `tierce` PHP extension's module (docs/php_extension.md): its entry,
// ini settings, MINIT (schema, cluster, fence, observers) / MSHUTDOWN / RINIT / RSHUTDOWN / MINFO,
// the process and request state the other files share (php_tierce.h), and the request notes for
// mod_appversion (tierce-depends, tierce-invalidate, tierce-invalidate-all, tierce-nocache)
// through apache_note(). The PHP functions are in php_functions.cc, the observers on mysqli and
// PDO in php_observer.cc, the fence in php_fence.cc, the database server check in
// php_db_check.cc.
#include "php_ext/php_tierce.h"

#include <cstring>
#include <stdexcept>

namespace tierce::php::glue {

// ---- process state ------------------------------------------------------------------------------

tp::Counters g_counters;
std::unique_ptr<tp::Engine> g_engine;
std::string g_engine_error;
sd::Schema g_schema;
std::string g_schema_error;
tp::CompiledCache g_compiled{g_schema};
zend_class_entry* g_exception_ce = nullptr;
bool g_in_apache = false;
Request g_req;

namespace {

// ---- the engine as the tracker's MarkSink -------------------------------------------------------

struct EngineMarks : tp::MarkSink {
  bool pend(const tp::NameSet& names, uint64_t token, uint32_t ttl_ms, uint32_t timeout_ms,
            std::string& error, uint64_t& micros) override {
    tp::RoundResult r = g_engine->pend(names.names(), names.all(), token, ttl_ms,
                                       std::chrono::milliseconds(timeout_ms));
    micros = r.micros;
    if (!r.sent)
      error = "not sent: " + r.error;
    else if (!r.complete)
      error = "not acknowledged by " + r.error;
    return r.sent && r.complete;
  }
  bool release(const tp::NameSet& names, uint64_t token, uint32_t give_up_ms,
               std::string& error) override {
    tp::RoundResult r =
        g_engine->release(names.names(), names.all(), token, std::chrono::milliseconds(give_up_ms));
    if (!r.sent) error = r.error;
    return r.sent;
  }
} g_engine_marks;

void stmt_dtor(zval* zv) { delete static_cast<StmtInfo*>(Z_PTR_P(zv)); }
void conn_dtor(zval* zv) {
  delete static_cast<ConnInfo*>(Z_PTR_P(zv));
}

// Unregisters every weak entry of `t` (the objects outlive the table), then destroys it.
void drop_weak_table(HashTable* t) {
  std::vector<zend_object*> objs;
  zend_ulong key;
  ZEND_HASH_FOREACH_NUM_KEY(t, key) {
    objs.push_back(zend_weakref_key_to_object(key));
  }
  ZEND_HASH_FOREACH_END();
  for (zend_object* o : objs) zend_weakrefs_hash_del(t, o);
  zend_hash_destroy(t);
}

// apache_note(name, value) when running under httpd's mod_php.
void apache_note(const char* name, const std::string& value) {
  if (!g_in_apache) return;
  zval fn, ret, args[2];
  ZVAL_STRING(&fn, "apache_note");
  ZVAL_STRING(&args[0], name);
  ZVAL_STRINGL(&args[1], value.data(), value.size());
  if (call_user_function(nullptr, nullptr, &fn, &ret, 2, args) == SUCCESS) zval_ptr_dtor(&ret);
  zval_ptr_dtor(&fn);
  zval_ptr_dtor(&args[0]);
  zval_ptr_dtor(&args[1]);
}

}  // namespace

// ---- per request --------------------------------------------------------------------------------

void warn(const std::string& msg) { php_error_docref(nullptr, E_WARNING, "%s", msg.c_str()); }

ConnInfo* conn_info(zend_object* obj) {
  if (!g_req.stmts_init) return nullptr;
  zval* zv = zend_hash_index_find(&g_req.conns, zend_object_to_weakref_key(obj));
  if (zv) return static_cast<ConnInfo*>(Z_PTR_P(zv));
  auto* info = new ConnInfo();
  zend_weakrefs_hash_add_ptr(&g_req.conns, obj, info);
  return info;
}

StmtInfo* stmt_info(zend_object* obj, bool create) {
  if (!g_req.stmts_init) return nullptr;
  zval* zv = zend_hash_index_find(&g_req.stmts, zend_object_to_weakref_key(obj));
  if (zv) return static_cast<StmtInfo*>(Z_PTR_P(zv));
  if (!create) return nullptr;
  auto* info = new StmtInfo();
  zend_weakrefs_hash_add_ptr(&g_req.stmts, obj, info);
  return info;
}

// Publishes what changed since the last time. The sets only grow during a request, so their
// sizes tell whether anything changed (no string is built otherwise).
void publish() {
  if (!g_in_apache || !g_req.tracker) return;
  const tp::RequestTracker& t = *g_req.tracker;
  if (t.uncacheable() && !g_req.published_nocache) {
    g_req.published_nocache = true;
    apache_note("tierce-nocache", t.uncacheable_reason().empty() ? "1" : t.uncacheable_reason());
  }
  if (t.depends().names().size() != g_req.published_depends) {
    g_req.published_depends = t.depends().names().size();
    apache_note("tierce-depends", t.depends().joined());
  }
  if (t.invalidates().all() && !g_req.published_all) {
    g_req.published_all = true;
    apache_note("tierce-invalidate-all", "1");
  }
  if (t.invalidates().names().size() != g_req.published_invalidates) {
    g_req.published_invalidates = t.invalidates().names().size();
    apache_note("tierce-invalidate", t.invalidates().joined());
  }
}


tp::RequestTracker* tracker() { return g_req.active ? g_req.tracker.get() : nullptr; }

// ---- calling PHP from the extension -------------------------------------------------------------

bool call_quietly(zend_object* obj, const char* name, std::span<zval> args, zval* ret) {
  zval self, fn;
  if (obj) ZVAL_OBJ(&self, obj);
  ZVAL_STRING(&fn, name);
  int saved_reporting = EG(error_reporting);
  EG(error_reporting) = 0;
  zend_object* pending = EG(exception);  // none in practice: checked by the callers
  bool ok = call_user_function(nullptr, obj ? &self : nullptr, &fn, ret,
                               static_cast<uint32_t>(args.size()), args.data()) == SUCCESS;
  EG(error_reporting) = saved_reporting;
  zval_ptr_dtor(&fn);
  if (EG(exception) && EG(exception) != pending) {
    zend_clear_exception();
    ok = false;
  }
  return ok && Z_TYPE_P(ret) != IS_FALSE && Z_TYPE_P(ret) != IS_UNDEF;
}

bool instance_of(zend_object* obj, const char* lower) {
  auto* ce = static_cast<zend_class_entry*>(
      zend_hash_str_find_ptr(CG(class_table), lower, strlen(lower)));
  return ce && instanceof_function(obj->ce, ce);
}

}  // namespace tierce::php::glue

// ---- the module ---------------------------------------------------------------------------------

// The module's callbacks are global, as PHP_*_FUNCTION declares them; the glue's names are theirs.
using namespace tierce::php::glue;

PHP_INI_BEGIN()
  PHP_INI_ENTRY("tierce.auto", "0", PHP_INI_PERDIR | PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.linearizable", "0", PHP_INI_PERDIR | PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.pending_ttl_ms", "30000", PHP_INI_PERDIR | PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.pend_timeout_ms", "200", PHP_INI_PERDIR | PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.db_check", "1", PHP_INI_PERDIR | PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.topology", "", PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.node", "", PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.agent", "", PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.node_key", "", PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.schema", "", PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.lockd_socket", "", PHP_INI_SYSTEM, nullptr)
PHP_INI_END()

static PHP_MINIT_FUNCTION(tierce) {
  REGISTER_INI_ENTRIES();
  REGISTER_LONG_CONSTANT("TIERCE_LOCK_SHARED", 1, CONST_CS | CONST_PERSISTENT);
  REGISTER_LONG_CONSTANT("TIERCE_LOCK_EXCLUSIVE", 2, CONST_CS | CONST_PERSISTENT);
  zend_class_entry ce;
  INIT_CLASS_ENTRY(ce, "TierceException", nullptr);
  g_exception_ce = zend_register_internal_class_ex(&ce, zend_ce_exception);
  g_in_apache = sapi_module.name && strcmp(sapi_module.name, "apache2handler") == 0;
  g_slot = zend_get_resource_handle("tierce");
  zend_observer_fcall_register(observer_init);

  const char* schema = INI_STR(const_cast<char*>("tierce.schema"));
  if (schema && *schema) {
    try {
      zend_string* text = nullptr;
      php_stream* st = php_stream_open_wrapper(const_cast<char*>(schema), "rb", REPORT_ERRORS, nullptr);
      if (!st) throw std::runtime_error("cannot open it");
      text = php_stream_copy_to_mem(st, PHP_STREAM_COPY_ALL, 0);
      php_stream_close(st);
      std::string ddl = text ? std::string(ZSTR_VAL(text), ZSTR_LEN(text)) : std::string();
      if (text) zend_string_release(text);
      g_schema = sd::Schema::parse_sql(ddl);
    } catch (const std::exception& e) {
      g_schema_error = std::string("tierce.schema ") + schema + ": " + e.what();
      php_error_docref(nullptr, E_WARNING, "%s (dependencies are derived without it: table level "
                       "where a value would do)", g_schema_error.c_str());
    }
  }
  const char* topo = INI_STR(const_cast<char*>("tierce.topology"));
  const char* node = INI_STR(const_cast<char*>("tierce.node"));
  if (topo && *topo) {
    try {
      if (!node || !*node) throw std::runtime_error("tierce.node is not set (name this app node)");
      const char* agent = INI_STR(const_cast<char*>("tierce.agent"));
      const char* key = INI_STR(const_cast<char*>("tierce.node_key"));
      g_engine = std::make_unique<tp::Engine>(topo, node, agent ? agent : "", key ? key : "");
    } catch (const std::exception& e) {
      g_engine_error = e.what();
      php_error_docref(nullptr, E_WARNING, "tierce: %s; linearizable mode and tierce_invalidate() "
                       "outside httpd are unavailable", g_engine_error.c_str());
    }
  }
  if (topo && *topo) {  // the fence: on with an [arbiter] (fence.h)
    try {
      tierce::cluster::Topology t = tierce::cluster::Topology::load(topo);
      if (t.arbiter.enabled()) {
        const tierce::cluster::NodeInfo* self = node && *node ? t.find(node) : nullptr;
        if (!self || self->role != tierce::cluster::Role::App)
          throw std::runtime_error(std::string("tierce.node \"") + (node ? node : "") +
                                   "\" is not an app node of " + topo);
        g_fence.enabled = true;
        g_fence.table = t.arbiter.table;
        g_fence.node = node;
      }
    } catch (const std::exception& e) {
      g_fence.error = e.what();
    }
  }
  // Linearizable mode and the fence may refuse calls: run them through execute_internal.
  if (g_engine || g_fence.enabled) {
    g_prev_execute_internal = zend_execute_internal;
    zend_execute_internal = tierce_execute_internal;
  }
  return SUCCESS;
}

static PHP_MSHUTDOWN_FUNCTION(tierce) {
  UNREGISTER_INI_ENTRIES();
  if (zend_execute_internal == tierce_execute_internal)
    zend_execute_internal = g_prev_execute_internal;
  g_engine.reset();
  return SUCCESS;
}

static PHP_RINIT_FUNCTION(tierce) {
  (void)type;
  (void)module_number;
#if defined(ZTS) && defined(COMPILE_DL_TIERCE)
  ZEND_TSRMLS_CACHE_UPDATE();
#endif
  tp::Settings s;
  s.auto_mode = INI_BOOL(const_cast<char*>("tierce.auto"));
  s.linearizable = INI_BOOL(const_cast<char*>("tierce.linearizable"));
  if (s.linearizable) s.auto_mode = true;
  zend_long ttl = INI_INT(const_cast<char*>("tierce.pending_ttl_ms"));
  s.pending_ttl_ms = static_cast<uint32_t>(ttl < 1 ? 30000 : ttl > 600000 ? 600000 : ttl);
  zend_long pt = INI_INT(const_cast<char*>("tierce.pend_timeout_ms"));
  s.pend_timeout_ms = static_cast<uint32_t>(pt < 1 ? 200 : pt > 60000 ? 60000 : pt);
  g_req.tracker = std::make_unique<tp::RequestTracker>(
      s, g_counters, g_engine ? &g_engine_marks : nullptr, warn);
  g_req.tracker->start_request();
  zend_hash_init(&g_req.stmts, 8, nullptr, stmt_dtor, 0);
  zend_hash_init(&g_req.conns, 4, nullptr, conn_dtor, 0);
  g_req.stmts_init = true;
  g_db.enabled = INI_BOOL(const_cast<char*>("tierce.db_check"));
  g_req.tickets.clear();
  g_req.fence.clear();
  g_refused_call = nullptr;
  g_req.published_depends = g_req.published_invalidates = 0;
  g_req.published_all = g_req.published_nocache = false;
  g_req.active = true;
  return SUCCESS;
}

static PHP_RSHUTDOWN_FUNCTION(tierce) {
  (void)type;
  (void)module_number;
  if (g_req.tracker) {
    g_req.tracker->end_request();
    publish();
  }
  for (auto& [n, h] : g_locks.held) {
    php_error_docref(nullptr, E_NOTICE, "lock '%s' still held at the end of the request: released",
                     n.c_str());
    try {
      h.unlock();
    } catch (const std::exception&) {
    }
  }
  g_locks.held.clear();
  if (g_req.stmts_init) {
    drop_weak_table(&g_req.stmts);
    drop_weak_table(&g_req.conns);
    g_req.stmts_init = false;
  }
  g_req.tickets.clear();
  g_req.fence.clear();
  g_req.active = false;
  return SUCCESS;
}

static PHP_MINFO_FUNCTION(tierce) {
  php_info_print_table_start();
  php_info_print_table_header(2, "tierce support", "enabled");
  php_info_print_table_row(2, "Version", kVersion);
  php_info_print_table_row(2, "Cluster", g_engine ? g_engine->node().c_str()
                                                  : (g_engine_error.empty() ? "not configured"
                                                                            : g_engine_error.c_str()));
  std::string fence = g_fence.enabled ? g_fence.table + " (node " + g_fence.node + ")"
                                      : g_fence.error.empty() ? "no [arbiter]" : g_fence.error;
  php_info_print_table_row(2, "Fence", fence.c_str());
  php_info_print_table_end();
  DISPLAY_INI_ENTRIES();
}

static const zend_module_dep tierce_deps[] = {
    ZEND_MOD_OPTIONAL("mysqli") ZEND_MOD_OPTIONAL("pdo") ZEND_MOD_END};

zend_module_entry tierce_module_entry = {
    STANDARD_MODULE_HEADER_EX, nullptr, tierce_deps, "tierce", tierce_functions,
    PHP_MINIT(tierce), PHP_MSHUTDOWN(tierce), PHP_RINIT(tierce), PHP_RSHUTDOWN(tierce),
    PHP_MINFO(tierce), kVersion, STANDARD_MODULE_PROPERTIES};

extern "C" __attribute__((visibility("default"))) zend_module_entry* get_module() {
  return &tierce_module_entry;
}
