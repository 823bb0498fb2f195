// php_ext/php_tierce.cc — the `tierce` PHP extension's glue (docs/php_extension.md): ini
// settings, the PHP functions, and the observers on mysqli and PDO that feed RequestTracker
// (tracker.h). It decides nothing itself: it turns PHP calls into tracker calls and the tracker's
// results into request notes for mod_appversion (tierce-depends, tierce-invalidate,
// tierce-invalidate-all, tierce-nocache) through apache_note().
//
// Observed (PHP 8.2 observer API, internal functions): mysqli and mysqli_stmt methods and their
// procedural twins (query, real_query, multi_query, execute_query, prepare, stmt prepare /
// bind_param / execute, begin_transaction, commit, rollback, autocommit), PDO (exec, query,
// prepare, beginTransaction, commit, rollBack, setAttribute(ATTR_AUTOCOMMIT)) and PDOStatement
// (bindValue, bindParam, execute), and mysqli::change_user / refresh (the fence only). A
// statement object's SQL and bound parameters are kept in a weak map (zend_weakrefs): the entry
// dies with the object.
//
// With an [arbiter] in the topology, the same observers fence this node's writes (fence.h): a
// locking read of the node's row in each write transaction before its first write, autocommit
// writes wrapped in a transaction with it, refused writes made to fail (docs/php_extension.md,
// "The fence check"); tierce_fence_check() runs it on demand.
extern "C" {
#include "php.h"
#include "SAPI.h"
#include "ext/standard/info.h"
#include "zend_exceptions.h"
#include "zend_extensions.h"
#include "zend_interfaces.h"
#include "zend_observer.h"
#include "zend_weakrefs.h"
// The fence check (fence.h) runs its queries through mysqlnd itself, under the connection of a
// mysqli / mysqli_stmt / PDO / PDOStatement object: the layouts of PHP 8.2's mysqli, PDO and
// mysqlnd (the extension is built against the same PHP).
#include "ext/mysqli/php_mysqli_structs.h"
#include "ext/mysqlnd/mysqlnd_connection.h"
#include "ext/pdo/php_pdo_driver.h"
}

#include <syslog.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "dlm/client.h"
#include "php_ext/db_check.h"
#include "php_ext/engine.h"
#include "php_ext/fence.h"
#include "php_ext/tracker.h"
#include "sqldeps/deps.h"
#include "sqldeps/shape.h"

namespace tp = tierce::php;
namespace sd = tierce::sqldeps;

namespace {

constexpr const char* kVersion = "0.1.0";

// ---- process state ---------------------------------------------------------------------------

tp::Counters g_counters;
std::unique_ptr<tp::Engine> g_engine;     // tierce.topology + tierce.node (MINIT)
std::string g_engine_error;               // why there is none, when configured
sd::Schema g_schema;                      // tierce.schema (MINIT)
std::string g_schema_error;
zend_class_entry* g_exception_ce = nullptr;
bool g_in_apache = false;                 // sapi apache2handler: notes through apache_note()
// The observed call whose Pend did not reach every home (observer_begin sets it, execute_internal
// runs refuse() instead of the call). The code of the TierceException it raises:
zend_execute_data* g_refused_call = nullptr;
constexpr zend_long kRefusedCode = 101;

// The fence (fence.h): on when the topology has an [arbiter] and tierce.node is one of its app
// nodes (MINIT).
struct FenceConfig {
  bool enabled = false;
  std::string table, node;
  std::string error;  // tierce.topology set but not read: whether it has an arbiter is unknown
} g_fence;

// Compiled SQL by text (prepared statements, texts without literals), and by shape
// (sqldeps/shape.h) for query() texts with inlined values: a text with literals is never kept
// by itself (apps that inline values make most texts new), it costs one pass of the lexer and
// a lookup of its shape, not a classification.
struct CompiledCache {
  static constexpr size_t kMax = 4096;
  using Map = std::unordered_map<std::string, std::shared_ptr<const sd::Compiled>,
                                 tp::TransparentHash, std::equal_to<>>;
  Map map;     // by text as written
  Map shapes;  // by shape
  // `values` null: the text as written (a prepared statement's: its values come at execute);
  // else the text's literals are put in `values` when it is compiled by its shape.
  std::shared_ptr<const sd::Compiled> get(std::string_view sql, sd::Params* values = nullptr) {
    auto it = map.find(sql);
    if (it != map.end()) return it->second;
    if (values) {
      if (std::optional<sd::Shape> sh = sd::shape_of(sql)) {
        auto si = shapes.find(sh->text);
        if (si == shapes.end()) {
          if (shapes.size() >= kMax) shapes.clear();
          auto c = std::make_shared<const sd::Compiled>(sd::compile(sh->text, g_schema));
          si = shapes.emplace(std::move(sh->text), std::move(c)).first;
        }
        *values = std::move(sh->values);
        return si->second;
      }
    }
    if (map.size() >= kMax) map.clear();
    return map.emplace(std::string(sql),
                       std::make_shared<const sd::Compiled>(sd::compile(sql, g_schema)))
        .first->second;
  }
} g_compiled;

// ---- locks (lockd over its local socket) --------------------------------------------------------

struct Locks {
  std::unique_ptr<tierce::dlm::LockClient> client;
  int pid = 0;
  std::multimap<std::string, tierce::dlm::HeldLock> held;  // this request's
  tierce::dlm::LockClient& get() {
    if (!client || pid != getpid()) {
      if (client && pid != getpid()) (void)client.release();  // the parent's connection
      const char* sock = INI_STR(const_cast<char*>("tierce.lockd_socket"));
      std::string path = sock && *sock ? sock : tierce::dlm::LockClient::default_socket();
      client = std::make_unique<tierce::dlm::LockClient>(path);
      pid = getpid();
    }
    return *client;
  }
} g_locks;

// ---- the engine as the tracker's MarkSink ---------------------------------------------------------

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

// ---- per request -------------------------------------------------------------------------------

struct StmtInfo {  // a statement object, or a result object (compiled null)
  uint64_t conn = 0;
  std::shared_ptr<const sd::Compiled> compiled;
  std::vector<sd::LockedRow> locked;  // its last execution's locking reads: rows become facts
  uint64_t txn = 0;                   // ... in this transaction of its connection
  std::vector<zval> positional;                    // bound (references for bind_param/bindParam)
  std::vector<std::pair<std::string, zval>> named;
  ~StmtInfo() {
    for (zval& z : positional) zval_ptr_dtor(&z);
    for (auto& [n, z] : named) zval_ptr_dtor(&z);
  }
  void clear_binds() {
    for (zval& z : positional) zval_ptr_dtor(&z);
    for (auto& [n, z] : named) zval_ptr_dtor(&z);
    positional.clear();
    named.clear();
  }
};

// A database connection object of this request: whether its server was checked (db_check.h).
struct ConnInfo {
  bool checked = false;
  std::vector<tp::DbFinding> findings;
};

// What the fence did before an observed call, for after it (fence_begin / fence_end).
struct FenceCall {
  MYSQLND_CONN_DATA* conn = nullptr;  // the call's connection, when the fence looks at it
  bool wrapped = false;  // autocommit write: the fence opened the transaction; it ends it after
  bool refused = false;  // the write is refused: its transaction is READ ONLY (the server fails it)
  bool unrun = false;    // refused without running (execute_internal throws `message`)
  bool ends_transaction = false;  // the call ends (or may end) the connection's transaction
  zend_long code = 0;             // unrun: the TierceException's code (the log id's number)
  std::string message;            // refused: the warning (after the call) or the exception
};

// One observed call in progress: the tracker's ticket and the fence's part.
struct CallState {
  tp::RequestTracker::Ticket ticket;
  FenceCall fence;
};

// The fence's state of a connection in this request, by its mysqlnd connection.
struct FenceConnState : tp::FenceConn {
  bool commit_pending = false;  // a wrapped write's COMMIT could not be sent after it (results
                                // still pending): sent before the connection's next call
  std::string refusal;          // why its transaction was refused
  zend_long refusal_code = 0;   // ... as a TierceException code
};

struct Request {
  bool active = false;
  std::unique_ptr<tp::RequestTracker> tracker;
  HashTable stmts;                           // weak: statement object -> StmtInfo*
  bool stmts_init = false;
  HashTable conns;                                  // weak: connection object -> ConnInfo*
  std::vector<CallState> tickets;                   // one per observed call in progress
  std::unordered_map<const MYSQLND_CONN_DATA*, FenceConnState> fence;  // this request's
  size_t published_depends = 0, published_invalidates = 0;  // names already in the notes
  bool published_all = false, published_nocache = false;
} g_req;

void warn(const std::string& msg) { php_error_docref(nullptr, E_WARNING, "%s", msg.c_str()); }

void stmt_dtor(zval* zv) { delete static_cast<StmtInfo*>(Z_PTR_P(zv)); }
void conn_dtor(zval* zv) {
  delete static_cast<ConnInfo*>(Z_PTR_P(zv));
}

ConnInfo* conn_info(zend_object* obj) {
  if (!g_req.stmts_init) return nullptr;
  zval* zv = zend_hash_index_find(&g_req.conns, zend_object_to_weakref_key(obj));
  if (zv) return static_cast<ConnInfo*>(Z_PTR_P(zv));
  auto* info = new ConnInfo();
  zend_weakrefs_hash_add_ptr(&g_req.conns, obj, info);
  return info;
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

StmtInfo* stmt_info(zend_object* obj, bool create) {
  if (!g_req.stmts_init) return nullptr;
  zval* zv = zend_hash_index_find(&g_req.stmts, zend_object_to_weakref_key(obj));
  if (zv) return static_cast<StmtInfo*>(Z_PTR_P(zv));
  if (!create) return nullptr;
  auto* info = new StmtInfo();
  zend_weakrefs_hash_add_ptr(&g_req.stmts, obj, info);
  return info;
}

uint64_t conn_id(zend_object* obj) { return reinterpret_cast<uintptr_t>(obj); }

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

// ---- parameters ---------------------------------------------------------------------------------

sd::Value value_of(zval* z) {
  ZVAL_DEREF(z);
  switch (Z_TYPE_P(z)) {
    case IS_LONG: return std::to_string(Z_LVAL_P(z));
    case IS_STRING: return std::string(Z_STRVAL_P(z), Z_STRLEN_P(z));
    case IS_TRUE: return std::string("1");
    case IS_FALSE: return std::string("0");
    case IS_DOUBLE: {
      double d = Z_DVAL_P(z);
      if (d == static_cast<double>(static_cast<int64_t>(d)) && d > -9e15 && d < 9e15)
        return std::to_string(static_cast<int64_t>(d));
      return std::nullopt;
    }
    default: return std::nullopt;
  }
}

// execute([...]) / execute_query($sql, [...]): a PHP array of values, positional or named.
void params_from_array(zval* arr, sd::Params& p) {
  if (!arr || Z_TYPE_P(arr) != IS_ARRAY) return;
  zend_string* key;
  zend_ulong idx;
  zval* v;
  ZEND_HASH_FOREACH_KEY_VAL(Z_ARRVAL_P(arr), idx, key, v) {
    if (key) {
      std::string k(ZSTR_VAL(key), ZSTR_LEN(key));
      if (!k.empty() && k[0] == ':') k.erase(0, 1);
      p.named.emplace_back(std::move(k), value_of(v));
    } else {
      if (idx >= 65536) continue;
      if (p.positional.size() <= idx) p.positional.resize(idx + 1);
      p.positional[idx] = value_of(v);
    }
  }
  ZEND_HASH_FOREACH_END();
}

void params_from_binds(const StmtInfo& s, sd::Params& p) {
  for (const zval& z : s.positional) p.positional.push_back(value_of(const_cast<zval*>(&z)));
  for (const auto& [n, z] : s.named) {
    std::string k = n;
    if (!k.empty() && k[0] == ':') k.erase(0, 1);
    p.named.emplace_back(std::move(k), value_of(const_cast<zval*>(&z)));
  }
}

// ---- observers -----------------------------------------------------------------------------------

enum class Hook : uint8_t {
  Query,          // (sql) on the connection: mysqli::query/real_query/multi_query, PDO::exec/query
  ExecuteQuery,   // mysqli::execute_query(sql, params)
  Prepare,        // mysqli::prepare / PDO::prepare: returns the statement
  StmtPrepare,    // mysqli_stmt::prepare(sql) / mysqli_stmt::__construct(link, sql)
  StmtConstruct,
  BindParam,      // mysqli_stmt::bind_param(types, &...vars)
  PdoBind,        // PDOStatement::bindValue / bindParam (param, value)
  Execute,        // mysqli_stmt::execute([params]) / PDOStatement::execute([params])
  Begin, Commit, Rollback,
  Autocommit,     // mysqli::autocommit(bool)
  PdoSetAttribute,
  GetResult,      // mysqli_stmt::get_result(): the result of a locking read carries its rows
  Fetch,          // mysqli_result / PDOStatement fetches: locked rows' values become facts
  Session,        // mysqli::change_user / refresh: the server ends the open transaction (fence)
};

struct HookSpec {
  Hook hook;
  bool procedural;  // the object is the first argument, not $this
};

const std::map<std::string, HookSpec>& hook_table() {
  static const std::map<std::string, HookSpec> t = {
      {"mysqli::query", {Hook::Query, false}},
      {"mysqli::real_query", {Hook::Query, false}},
      {"mysqli::multi_query", {Hook::Query, false}},
      {"mysqli::execute_query", {Hook::ExecuteQuery, false}},
      {"mysqli::prepare", {Hook::Prepare, false}},
      {"mysqli::begin_transaction", {Hook::Begin, false}},
      {"mysqli::commit", {Hook::Commit, false}},
      {"mysqli::rollback", {Hook::Rollback, false}},
      {"mysqli::autocommit", {Hook::Autocommit, false}},
      {"mysqli_query", {Hook::Query, true}},
      {"mysqli_real_query", {Hook::Query, true}},
      {"mysqli_multi_query", {Hook::Query, true}},
      {"mysqli_execute_query", {Hook::ExecuteQuery, true}},
      {"mysqli_prepare", {Hook::Prepare, true}},
      {"mysqli_begin_transaction", {Hook::Begin, true}},
      {"mysqli_commit", {Hook::Commit, true}},
      {"mysqli_rollback", {Hook::Rollback, true}},
      {"mysqli_autocommit", {Hook::Autocommit, true}},
      {"mysqli_stmt::__construct", {Hook::StmtConstruct, false}},
      {"mysqli_stmt::prepare", {Hook::StmtPrepare, false}},
      {"mysqli_stmt::bind_param", {Hook::BindParam, false}},
      {"mysqli_stmt::execute", {Hook::Execute, false}},
      {"mysqli_stmt_prepare", {Hook::StmtPrepare, true}},
      {"mysqli_stmt_bind_param", {Hook::BindParam, true}},
      {"mysqli_stmt_execute", {Hook::Execute, true}},
      {"pdo::exec", {Hook::Query, false}},
      {"pdo::query", {Hook::Query, false}},
      {"pdo::prepare", {Hook::Prepare, false}},
      {"pdo::begintransaction", {Hook::Begin, false}},
      {"pdo::commit", {Hook::Commit, false}},
      {"pdo::rollback", {Hook::Rollback, false}},
      {"pdo::setattribute", {Hook::PdoSetAttribute, false}},
      {"pdostatement::bindvalue", {Hook::PdoBind, false}},
      {"pdostatement::bindparam", {Hook::PdoBind, false}},
      {"pdostatement::execute", {Hook::Execute, false}},
      {"mysqli_stmt::get_result", {Hook::GetResult, false}},
      {"mysqli_stmt_get_result", {Hook::GetResult, true}},
      {"mysqli_result::fetch_assoc", {Hook::Fetch, false}},
      {"mysqli_result::fetch_array", {Hook::Fetch, false}},
      {"mysqli_result::fetch_all", {Hook::Fetch, false}},
      {"mysqli_fetch_assoc", {Hook::Fetch, true}},
      {"mysqli_fetch_array", {Hook::Fetch, true}},
      {"mysqli_fetch_all", {Hook::Fetch, true}},
      {"pdostatement::fetch", {Hook::Fetch, false}},
      {"pdostatement::fetchall", {Hook::Fetch, false}},
      {"mysqli::change_user", {Hook::Session, false}},
      {"mysqli_change_user", {Hook::Session, true}},
      {"mysqli::refresh", {Hook::Session, false}},
      {"mysqli_refresh", {Hook::Session, true}},
  };
  return t;
}

// Hooks by zend_function (filled by observer_init, read by the handlers): in the function's
// reserved slot of this extension when PHP has one left, else in a map.
int g_slot = -1;
std::unordered_map<const zend_function*, const HookSpec*> g_hooks;

const HookSpec* hook_of(const zend_function* f) {
  if (g_slot >= 0 && f->type == ZEND_INTERNAL_FUNCTION)
    return static_cast<const HookSpec*>(f->internal_function.reserved[g_slot]);
  auto it = g_hooks.find(f);
  return it == g_hooks.end() ? nullptr : it->second;
}

std::string lower(const char* s, size_t n) {
  std::string o(s, n);
  for (char& c : o) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return o;
}

zval* arg(zend_execute_data* ex, uint32_t n) {  // 1-based; nullptr when absent
  return n <= ZEND_CALL_NUM_ARGS(ex) ? ZEND_CALL_ARG(ex, n) : nullptr;
}

// The connection / statement object and the index of the first real argument.
zend_object* subject(zend_execute_data* ex, const HookSpec& h, uint32_t& first) {
  if (h.procedural) {
    first = 2;
    zval* a = arg(ex, 1);
    return a && Z_TYPE_P(a) == IS_OBJECT ? Z_OBJ_P(a) : nullptr;
  }
  first = 1;
  return Z_TYPE(ex->This) == IS_OBJECT ? Z_OBJ(ex->This) : nullptr;
}

bool string_arg(zend_execute_data* ex, uint32_t n, std::string_view& out) {
  zval* a = arg(ex, n);
  if (!a) return false;
  ZVAL_DEREF(a);
  if (Z_TYPE_P(a) != IS_STRING) return false;
  out = std::string_view(Z_STRVAL_P(a), Z_STRLEN_P(a));
  return true;
}

void push_call(CallState c) { g_req.tickets.push_back(std::move(c)); }

// Calls method `name` of `obj`, or function `name` when obj is null, with `args`, quietly: no
// warning shown, an exception it throws is dropped (the app's own call comes next and meets the
// same state). False when it failed, threw or returned false.
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

bool is_a(zend_object* obj, const char* lower_class) {
  auto* ce = static_cast<zend_class_entry*>(
      zend_hash_str_find_ptr(CG(class_table), lower_class, strlen(lower_class)));
  return ce && instanceof_function(obj->ce, ce);
}

// ---- the database server check (db_check.h)
// ----------------------------------------------------------

struct DbCheck {
  bool enabled = true;   // tierce.db_check (this request)
  bool running = false;  // its own queries are under way: the observers ignore them
  // mysqli connections by "host|server version|thread id" (a persistent connection is checked
  // once, not in every request that uses it): what was found. Bounded.
  std::unordered_map<std::string, std::vector<tp::DbFinding>> by_connection;
  std::set<std::string> warned;       // "id server": logged once per process
  std::vector<std::string> warnings;  // the lines logged (tierce_status()["db_warnings"])
} g_db;

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
    std::string msg = id + " " + tp::describe(f, facts) + " (" + server +
                      "). Tierce needs the pages it caches to be rendered from the primary "
                      "(docs/coherence.md, \"What the database must give\"): pages that use this "
                      "connection are not cached. Set tierce.db_check = 0 only if every read "
                      "really goes to the primary. Logged once per process.";
    php_log_err_with_severity(msg.c_str(), LOG_WARNING);
    g_db.warnings.push_back(msg);
  }
  return found;
}

// On a connection's first observed call in this request: checks its server (once) and, when it may
// not be the primary, makes the page uncacheable (a page cached from a replica's old rows would
// stay stale until the next write of its names, long after the replica caught up).
void check_connection(zend_object* conn) {
  ConnInfo* info = conn_info(conn);
  if (!info || info->checked) return;
  info->checked = true;
  bool pdo = is_a(conn, "pdo");
  if (!pdo && !is_a(conn, "mysqli")) return;
  auto t0 = std::chrono::steady_clock::now();
  std::string server;
  g_db.running = true;
  info->findings = judge_connection(conn, pdo, server);
  g_db.running = false;
  g_counters.db_check_us += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  if (info->findings.empty() || !g_req.tracker) return;
  g_counters.db_not_primary++;
  g_req.tracker->make_uncacheable(std::string(tp::id_of(info->findings.front())) +
                                  " the database may not be the primary");
  publish();
}

// The connection object a call runs on, for the hooks that have one.
zend_object* connection_of(zend_execute_data* ex, const HookSpec& h) {
  uint32_t first = 1;
  switch (h.hook) {
    case Hook::Query:
    case Hook::ExecuteQuery:
    case Hook::Prepare:
    case Hook::Begin:
    case Hook::Commit:
    case Hook::Rollback:
    case Hook::Autocommit:
    case Hook::PdoSetAttribute:
      return subject(ex, h, first);
    case Hook::StmtConstruct: {
      zval* link = arg(ex, 1);
      return link && Z_TYPE_P(link) == IS_OBJECT ? Z_OBJ_P(link) : nullptr;
    }
    default:
      return nullptr;
  }
}

// ---- the fence (fence.h)
// ------------------------------------------------------------------------------------

// Internal classes by lower-case name (they live as long as the process), null when not loaded.
zend_class_entry* class_named(const char* lower) {
  return static_cast<zend_class_entry*>(
      zend_hash_str_find_ptr(CG(class_table), lower, strlen(lower)));
}
bool instance_of(zend_object* obj, const char* lower) {
  zend_class_entry* ce = class_named(lower);
  return ce && instanceof_function(obj->ce, ce);
}

// Whether pdo_mysql runs on mysqlnd (its handle's first member is then a MYSQLND*): its client
// version says so. Asked once per process.
bool pdo_mysql_on_mysqlnd(pdo_dbh_t* dbh) {
  static int known = -1;
  if (known >= 0) return known == 1;
  zval v;
  ZVAL_UNDEF(&v);
  bool yes = false;
  if (dbh->methods && dbh->methods->get_attribute &&
      dbh->methods->get_attribute(dbh, PDO_ATTR_CLIENT_VERSION, &v) == 1 && Z_TYPE(v) == IS_STRING)
    yes = strncmp(Z_STRVAL(v), "mysqlnd", 7) == 0;
  zval_ptr_dtor(&v);
  known = yes ? 1 : 0;
  return yes;
}

MYSQLND_CONN_DATA* pdo_connection(pdo_dbh_t* dbh) {
  if (!dbh || dbh->is_closed || !dbh->driver || !dbh->driver_data ||
      dbh->driver->driver_name_len != 5 || memcmp(dbh->driver->driver_name, "mysql", 5) != 0)
    return nullptr;  // not MariaDB/MySQL (sqlite, pgsql, ...): not fenced
  if (!pdo_mysql_on_mysqlnd(dbh)) return nullptr;
  MYSQLND* nd = *static_cast<MYSQLND**>(dbh->driver_data);  // pdo_mysql_db_handle::server
  return nd ? nd->data : nullptr;
}

// The mysqlnd connection a mysqli, mysqli_stmt, PDO (mysql driver) or PDOStatement object works
// on; null for other objects and for ones not connected / prepared / open.
MYSQLND_CONN_DATA* mysqlnd_connection_of(zend_object* obj) {
  if (!obj) return nullptr;
  if (instance_of(obj, "mysqli") || instance_of(obj, "mysqli_stmt")) {
    auto* m = reinterpret_cast<mysqli_object*>(reinterpret_cast<char*>(obj) -
                                               XtOffsetOf(mysqli_object, zo));
    auto* res = static_cast<MYSQLI_RESOURCE*>(m->ptr);
    if (!res || res->status < MYSQLI_STATUS_VALID || !res->ptr) return nullptr;
    if (instance_of(obj, "mysqli_stmt")) {
      auto* st = static_cast<MY_STMT*>(res->ptr);
      return st->stmt && st->stmt->data ? st->stmt->data->conn : nullptr;
    }
    auto* my = static_cast<MY_MYSQL*>(res->ptr);
    return my->mysql ? my->mysql->data : nullptr;
  }
  if (instance_of(obj, "pdo")) return pdo_connection(php_pdo_dbh_fetch_inner(obj));
  if (instance_of(obj, "pdostatement")) return pdo_connection(php_pdo_stmt_fetch_object(obj)->dbh);
  return nullptr;
}

unsigned nd_status(MYSQLND_CONN_DATA* d) { return d->m->get_server_status(d); }
bool nd_ready(MYSQLND_CONN_DATA* d) { return GET_CONNECTION_STATE(&d->state) == CONN_READY; }
std::string nd_error(MYSQLND_CONN_DATA* d) {
  return std::to_string(d->error_info->error_no) + ": " + d->error_info->error;
}

// Runs `sql` on the connection (a result set, if any, is read and dropped). False on error.
bool nd_exec(MYSQLND_CONN_DATA* d, std::string_view sql) {
  if (d->m->query(d, sql.data(), sql.size()) != PASS) return false;
  if (d->m->get_field_count(d) > 0)
    if (MYSQLND_RES* r = d->m->store_result(d)) r->m.free_result(r, false);
  return true;
}

// Runs `sql` and reads its rows as text. False on error.
bool nd_rows(MYSQLND_CONN_DATA* d, std::string_view sql,
             std::vector<std::vector<std::string>>& rows) {
  if (d->m->query(d, sql.data(), sql.size()) != PASS) return false;
  MYSQLND_RES* r = d->m->store_result(d);
  if (!r) return false;
  for (;;) {
    zval row;
    ZVAL_UNDEF(&row);
    r->m.fetch_into(r, MYSQLND_FETCH_NUM, &row ZEND_FILE_LINE_CC);
    if (Z_TYPE(row) != IS_ARRAY) {
      zval_ptr_dtor(&row);
      break;
    }
    std::vector<std::string>& out = rows.emplace_back();
    zval* v;
    ZEND_HASH_FOREACH_VAL(Z_ARRVAL(row), v) {
      if (Z_TYPE_P(v) == IS_NULL) {
        out.emplace_back();
        continue;
      }
      zend_string* str = zval_get_string(v);
      out.emplace_back(ZSTR_VAL(str), ZSTR_LEN(str));
      zend_string_release(str);
    }
    ZEND_HASH_FOREACH_END();
    zval_ptr_dtor(&row);
  }
  r->m.free_result(r, false);
  return true;
}

// What the app can read of its last call on a connection (affected rows, insert id, warnings,
// info, error): kept across the fence's COMMIT / ROLLBACK after that call, which would replace it.
struct AppView {
  uint64_t affected_rows, last_insert_id;
  unsigned warning_count, field_count, error_no;
  enum_mysqlnd_query_type query_type;
  std::string error, sqlstate;
  MYSQLND_STRING message;

  explicit AppView(MYSQLND_CONN_DATA* d)
      : affected_rows(d->upsert_status->affected_rows),
        last_insert_id(d->upsert_status->last_insert_id),
        warning_count(d->upsert_status->warning_count),
        field_count(d->field_count),
        error_no(d->error_info->error_no),
        query_type(d->last_query_type),
        error(d->error_info->error),
        sqlstate(d->error_info->sqlstate),
        message(d->last_message) {
    d->last_message = {nullptr, 0};  // out of mysqlnd's reach while the fence's query runs
  }
  void restore(MYSQLND_CONN_DATA* d) const {
    d->upsert_status->affected_rows = affected_rows;
    d->upsert_status->last_insert_id = last_insert_id;
    d->upsert_status->warning_count = warning_count;  // server_status stays the newest
    d->field_count = field_count;
    d->last_query_type = query_type;
    if (error_no)
      d->error_info->m->set_client_error(d->error_info, error_no, sqlstate.c_str(), error.c_str());
    else
      d->error_info->m->reset(d->error_info);
    // COMMIT and ROLLBACK answer without a message: the app's comes back. (Were there one, the
    // app's would be dropped rather than freed with an allocator that is not ours to call.)
    if (!d->last_message.s) d->last_message = message;
  }
};

FenceConnState& fence_state(MYSQLND_CONN_DATA* d) {
  FenceConnState& fc = g_req.fence[d];
  if (fc.thread_id != d->thread_id) {  // another server connection behind a reused handle
    fc = FenceConnState{};
    fc.thread_id = d->thread_id;
  }
  return fc;
}

void add_us(uint64_t& counter, std::chrono::steady_clock::time_point t0) {
  counter += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                       std::chrono::steady_clock::now() - t0)
                                       .count());
}

// The locking read of this node's row, in the connection's transaction.
tp::FenceVerdict fence_check(MYSQLND_CONN_DATA* d) {
  g_counters.fence_checks++;
  std::vector<std::vector<std::string>> rows;
  if (!nd_rows(d, tp::fence_check_sql(g_fence.table, g_fence.node), rows)) {
    g_counters.fence_check_failures++;
    return tp::fence_failed(d->error_info->error_no, d->error_info->error);
  }
  return tp::fence_verdict(rows);
}

zend_long fence_code(const tp::FenceVerdict& v) {
  switch (v.state) {
    case tp::FenceVerdict::State::Out: return 301;
    case tp::FenceVerdict::State::Missing: return 302;
    default: return 303;
  }
}

void fence_unrun(FenceCall& call, std::string message, zend_long code) {
  call.unrun = true;
  call.message = std::move(message);
  call.code = code;
  g_counters.fence_refused++;
}

// The check said no (before the call's first write): the write must not happen and the app must
// see it fail. A plain write is left to the server: the transaction is rolled back (it wrote
// nothing) and goes on READ ONLY, so this write and every later one of the transaction fail with
// error 1792 and its COMMIT commits nothing. A statement that may commit by itself would end a
// READ ONLY transaction and run outside it: it is not run at all (an explicit transaction still
// goes on READ ONLY for the writes after it).
void fence_refuse(MYSQLND_CONN_DATA* d, FenceConnState& fc, const tp::FenceText& t,
                  const tp::FenceVerdict& v, FenceCall& call, bool wrapped) {
  std::string msg = tp::fence_refusal(v, g_fence.node, g_fence.table);
  zend_long code = fence_code(v);
  bool rolled_back = nd_exec(d, "ROLLBACK");
  if (wrapped && t.self_committing) {  // autocommit: nothing left open, the call is not run
    fence_unrun(call, msg, code);
    return;
  }
  bool read_only = rolled_back && nd_exec(d, "START TRANSACTION READ ONLY");
  if (read_only && !wrapped) {
    fc.refused = true;
    fc.checked = false;
    fc.refusal = msg;
    fc.refusal_code = code;
  }
  if (!read_only) {
    fence_unrun(call, msg + " (the transaction could not be made read-only: " + nd_error(d) + ")",
                code);
    return;
  }
  if (t.self_committing) {
    fence_unrun(call, msg, code);
    return;
  }
  g_counters.fence_refused++;
  call.refused = true;
  call.wrapped = wrapped;  // autocommit: the READ ONLY transaction is rolled back after the call
  call.message = msg;
}

// Before an observed call on `obj`'s connection. `text` null: a call that sends no statement of
// the app's but may end its transaction (begin/commit/rollback/autocommit/change_user).
void fence_begin(zend_execute_data* ex, const HookSpec& h, zend_object* obj,
                 const tp::FenceText* text, FenceCall& call) {
  MYSQLND_CONN_DATA* d = mysqlnd_connection_of(obj);
  if (!d) return;
  auto t0 = std::chrono::steady_clock::now();
  FenceConnState& fc = fence_state(d);
  call.conn = d;
  if (fc.commit_pending && nd_ready(d)) {
    fc.commit_pending = false;
    if (!nd_exec(d, "COMMIT")) {
      std::string msg = tp::fence_commit_failed(g_fence.node, nd_error(d));
      php_log_err_with_severity(msg.c_str(), LOG_WARNING);
      warn(msg);
    }
  }
  if (!text) {
    call.ends_transaction = true;
    add_us(g_counters.fence_us, t0);
    return;
  }
  call.ends_transaction = text->ends_transaction;
  if (!text->writes) return;  // reads are never checked
  // PDO::exec reads every result of a multi-statement text: a COMMIT can follow it.
  bool drains = h.hook == Hook::Query && !h.procedural && ex->func->common.function_name &&
                zend_string_equals_literal_ci(ex->func->common.function_name, "exec");
  unsigned status = nd_status(d);
  tp::FenceStep step = tp::fence_plan(status, fc, *text, drains);
  if (step == tp::FenceStep::CheckInTxn) {
    tp::FenceVerdict v = fence_check(d);
    unsigned after = nd_status(d);
    if (!(after & tp::kStatusInTrans) && (after & tp::kStatusAutocommit)) {
      // No transaction after all (an error had ended it where the status could not tell): the
      // check ran alone and its lock is gone. Wrap the write instead.
      fc.checked = fc.refused = false;
      status = after;
      step = tp::fence_plan(status, fc, *text, drains);
    } else {
      if (v.admitted())
        fc.checked = true;
      else
        fence_refuse(d, fc, *text, v, call, false);
      add_us(g_counters.fence_us, t0);
      return;
    }
  }
  switch (step) {
    case tp::FenceStep::Refused:  // READ ONLY: the server refuses it
      g_counters.fence_refused++;
      break;
    case tp::FenceStep::Pass:
    case tp::FenceStep::CheckInTxn:
      break;
    case tp::FenceStep::RefuseUnrun:
      if (!text->write_after_boundary && (status & tp::kStatusInTrans) && fc.refused)
        fence_unrun(call, fc.refusal, fc.refusal_code);  // self-committing, refused transaction
      else
        fence_unrun(call, tp::fence_unfenceable(*text, g_fence.node), 304);
      break;
    case tp::FenceStep::Wrap: {
      g_counters.fence_wraps++;
      if (!nd_exec(d, "START TRANSACTION")) {
        fence_unrun(call,
                    tp::fence_refusal(tp::fence_failed(d->error_info->error_no,
                                                       d->error_info->error),
                                      g_fence.node, g_fence.table),
                    303);
        break;
      }
      tp::FenceVerdict v = fence_check(d);
      if (v.admitted())
        call.wrapped = true;
      else
        fence_refuse(d, fc, *text, v, call, true);
      break;
    }
  }
  add_us(g_counters.fence_us, t0);
}

// The operator's log line, and the app's warning (also when the call threw: a user error handler
// is not called while an exception is pending, so the exception waits meanwhile; one the handler
// throws comes first, with the call's as its previous).
void fence_warn(const std::string& msg) {
  php_log_err_with_severity(msg.c_str(), LOG_WARNING);
  if (!EG(exception)) {
    warn(msg);
    return;
  }
  zend_exception_save();
  warn(msg);
  zend_exception_restore();
}

// After the call: the wrapped write's COMMIT (or ROLLBACK), the connection's state, the warning.
void fence_end(FenceCall& call, bool ok, zval* retval) {
  MYSQLND_CONN_DATA* d = call.conn;
  auto t0 = std::chrono::steady_clock::now();
  FenceConnState& fc = fence_state(d);
  std::string commit_error;
  if (call.wrapped) {
    // Admitted: COMMIT whatever the call's outcome, as autocommit would have. A statement that
    // failed was rolled back by the server itself (statement-level), the ones before it in a
    // multi-statement text stay; a call that threw after its statement succeeded (mysqli's
    // MYSQLI_REPORT_INDEX) keeps its write. Refused: the READ ONLY transaction is rolled back.
    AppView view(d);
    if (call.refused) {
      nd_exec(d, "ROLLBACK");
    } else if (!nd_ready(d)) {
      fc.commit_pending = true;  // a result still to be read (unbuffered RETURNING, async)
      fence_warn("PHPEXT0307 app node " + g_fence.node +
                 ": an autocommit write left results to read, so the fence's COMMIT after it "
                 "waits for the connection's next call (the write is not committed before)");
    } else if (!nd_exec(d, "COMMIT") && ok) {
      commit_error = nd_error(d);  // (a call that failed: the app knows already)
    }
    view.restore(d);
  }
  unsigned status = nd_status(d);
  // (a call that was not run changed nothing)
  if (!(status & tp::kStatusInTrans) || (call.ends_transaction && !call.unrun)) {
    fc.checked = fc.refused = false;
    fc.refusal.clear();
  } else if (!ok && !call.unrun) {
    // An error may have ended the transaction without a status to say so (deadlock, timeout):
    // check again before the next write. A write refused as READ ONLY left it as it was.
    fc.checked = false;
    if (d->error_info->error_no != tp::kErrReadOnlyTransaction) fc.refused = false;
  }
  if (call.refused && !call.unrun) fence_warn(call.message);
  if (!commit_error.empty()) {
    std::string msg = tp::fence_commit_failed(g_fence.node, commit_error);
    php_log_err_with_severity(msg.c_str(), LOG_WARNING);
    if (!EG(exception)) {
      if (retval) {  // the call's result is not the app's any more: it gets the exception
        zval_ptr_dtor(retval);
        ZVAL_NULL(retval);
      }
      zend_throw_exception_ex(g_exception_ce, 305, "%s", msg.c_str());
    }
  }
  add_us(g_counters.fence_us, t0);
}

void observer_begin(zend_execute_data* ex) {
  const HookSpec* hs = hook_of(ex->func);
  CallState call;
  if (g_db.running) {  // the server check's own queries: not the app's
    push_call(std::move(call));
    return;
  }
  if (hs && g_req.active && g_req.tracker && g_db.enabled && !EG(exception))
    if (zend_object* c = connection_of(ex, *hs)) check_connection(c);
  // auto mode: names from SQL; the fence: this node's writes checked (both need the SQL texts)
  bool track = hs && g_req.active && g_req.tracker && g_req.tracker->settings().auto_mode;
  bool fence = hs && g_req.active && g_req.tracker && g_fence.enabled && !EG(exception);
  if (!track && !fence) {  // explicit mode without a fence: nothing to do
    push_call(std::move(call));
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  const HookSpec& h = *hs;
  uint32_t first = 1;
  zend_object* obj = subject(ex, h, first);
  tp::RequestTracker& tr = *g_req.tracker;
  tp::RequestTracker::Ticket ticket;
  FenceCall& fc = call.fence;
  std::chrono::nanoseconds fence_ns{0};  // the fence's queries: not the observer's own cost
  auto fence_before = [&](const tp::FenceText* text) {
    auto f0 = std::chrono::steady_clock::now();
    fence_begin(ex, h, obj, text, fc);
    fence_ns += std::chrono::steady_clock::now() - f0;
  };
  if (obj) {
    switch (h.hook) {
      case Hook::Query:
      case Hook::ExecuteQuery: {
        std::string_view sql;
        if (!string_arg(ex, first, sql)) break;
        sd::Params p;
        std::shared_ptr<const sd::Compiled> c = g_compiled.get(sql, &p);
        if (fence) {
          tp::FenceText ft = tp::fence_text(*c);
          fence_before(&ft);
          if (fc.unrun) break;  // not run: nothing for the tracker
        }
        if (!track) break;
        if (h.hook == Hook::ExecuteQuery) params_from_array(arg(ex, first + 1), p);
        ticket = tr.before_statement(conn_id(obj), *c, p);
        break;
      }
      case Hook::Prepare:
        break;  // handled at the end (the statement object is the return value)
      case Hook::StmtConstruct: {
        std::string_view sql;
        zval* link = arg(ex, 1);
        StmtInfo* s = stmt_info(obj, true);
        if (s && link && Z_TYPE_P(link) == IS_OBJECT) s->conn = conn_id(Z_OBJ_P(link));
        if (s && string_arg(ex, 2, sql)) {
          s->compiled = g_compiled.get(sql);
          s->clear_binds();
        }
        break;
      }
      case Hook::StmtPrepare: {
        std::string_view sql;
        StmtInfo* s = stmt_info(obj, true);
        if (s && string_arg(ex, first, sql)) {
          s->compiled = g_compiled.get(sql);
          s->clear_binds();
        }
        break;
      }
      case Hook::BindParam: {
        if (!track) break;
        StmtInfo* s = stmt_info(obj, true);
        if (!s) break;
        s->clear_binds();
        uint32_t n = ZEND_CALL_NUM_ARGS(ex);
        for (uint32_t i = first + 1; i <= n; ++i) {
          zval z;
          ZVAL_COPY(&z, ZEND_CALL_ARG(ex, i));  // a reference: its value is read at execute
          s->positional.push_back(z);
        }
        break;
      }
      case Hook::PdoBind: {
        if (!track) break;
        StmtInfo* s = stmt_info(obj, true);
        zval* key = arg(ex, 1);
        zval* val = arg(ex, 2);
        if (!s || !key || !val) break;
        zval z;
        ZVAL_COPY(&z, val);
        if (Z_TYPE_P(key) == IS_LONG && Z_LVAL_P(key) >= 1 && Z_LVAL_P(key) <= 65535) {
          size_t i = static_cast<size_t>(Z_LVAL_P(key) - 1);
          if (s->positional.size() <= i) {
            zval undef;
            ZVAL_NULL(&undef);
            s->positional.resize(i + 1, undef);
          }
          zval_ptr_dtor(&s->positional[i]);
          s->positional[i] = z;
        } else if (Z_TYPE_P(key) == IS_STRING) {
          s->named.emplace_back(std::string(Z_STRVAL_P(key), Z_STRLEN_P(key)), z);
        } else {
          zval_ptr_dtor(&z);
        }
        break;
      }
      case Hook::Execute: {
        StmtInfo* s = stmt_info(obj, false);
        std::shared_ptr<const sd::Compiled> compiled = s ? s->compiled : nullptr;
        uint64_t conn = s ? s->conn : 0;
        if (!compiled) {
          // A PDOStatement made some way we did not see: its queryString says what it runs.
          zval rv;
          zval* qs = zend_read_property(obj->ce, obj, "queryString", sizeof("queryString") - 1,
                                        /*silent*/ 1, &rv);
          if (qs && Z_TYPE_P(qs) == IS_STRING)
            compiled = g_compiled.get(std::string_view(Z_STRVAL_P(qs), Z_STRLEN_P(qs)));
        }
        if (fence) {
          tp::FenceText ft = compiled ? tp::fence_text(*compiled) : tp::fence_text_unknown();
          fence_before(&ft);
          if (fc.unrun) break;
        }
        if (!track) break;
        if (!compiled) {
          // Not knowing what it runs: conservative.
          tr.invalidate_all();
          g_counters.conservative++;
          break;
        }
        sd::Params p;
        zval* params = arg(ex, first);
        if (params && Z_TYPE_P(params) == IS_ARRAY) params_from_array(params, p);
        else if (s) params_from_binds(*s, p);
        ticket = tr.before_statement(conn, *compiled, p);
        break;
      }
      case Hook::Begin:
      case Hook::Commit:
      case Hook::Rollback:
      case Hook::Session:
        if (fence) fence_before(nullptr);  // the transaction ends (or may)
        if (!track) break;
        if (h.hook == Hook::Begin) ticket = tr.before_begin(conn_id(obj));
        if (h.hook == Hook::Commit) ticket = tr.before_commit(conn_id(obj));
        if (h.hook == Hook::Rollback) ticket = tr.before_rollback(conn_id(obj));
        break;
      case Hook::Autocommit: {
        if (fence) fence_before(nullptr);
        zval* on = arg(ex, first);
        if (track && on) ticket = tr.before_autocommit(conn_id(obj), zend_is_true(on));
        break;
      }
      case Hook::GetResult:
      case Hook::Fetch:
        break;  // at the end (the result)
      case Hook::PdoSetAttribute: {
        zval* attr = arg(ex, 1);
        zval* val = arg(ex, 2);
        // PDO::ATTR_AUTOCOMMIT is 0.
        if (attr && val && Z_TYPE_P(attr) == IS_LONG && Z_LVAL_P(attr) == 0) {
          if (fence) fence_before(nullptr);
          if (track) ticket = tr.before_autocommit(conn_id(obj), zend_is_true(val));
        }
        break;
      }
    }
  }
  if (track) {
    g_counters.observed++;
    g_counters.observe_ns += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0 -
                                                             fence_ns)
            .count());
  }
  // execute_internal runs refuse() instead of the call
  if (ticket.refused || fc.unrun) g_refused_call = ex;
  call.ticket = std::move(ticket);
  push_call(std::move(call));
}

// ---- refused writes (linearizable mode)
// ------------------------------------------------------------

// Rolls back `conn`'s open transaction (mysqli or PDO) through the observed API, so the tracker
// follows. False when it could not.
bool rollback_connection(zend_object* conn) {
  zval ret;
  ZVAL_UNDEF(&ret);
  bool ok = false;
  if (is_a(conn, "pdo")) {
    if (call_quietly(conn, "inTransaction", {}, &ret) && zend_is_true(&ret)) {
      zval_ptr_dtor(&ret);
      ZVAL_UNDEF(&ret);
      ok = call_quietly(conn, "rollBack", {}, &ret);
    } else {
      ok = Z_TYPE(ret) != IS_UNDEF;  // none open: nothing to roll back
    }
  } else if (is_a(conn, "mysqli")) {
    zval link;
    ZVAL_OBJ(&link, conn);
    ok = call_quietly(nullptr, "mysqli_rollback", {&link, 1}, &ret);
  }
  zval_ptr_dtor(&ret);
  return ok;
}

// Instead of a call whose Pend did not reach every home: the call does not run; an open
// transaction is rolled back (its row locks go now, not when the connection closes); the app
// gets a TierceException. The marks are released in observer_end (tracker after()).
void refuse(zend_execute_data* ex) {
  if (g_req.tickets.empty()) return;
  if (const FenceCall& f = g_req.tickets.back().fence; f.unrun) {  // the fence refused it
    php_log_err_with_severity(f.message.c_str(), LOG_WARNING);
    zend_throw_exception_ex(g_exception_ce, f.code, "%s", f.message.c_str());
    return;
  }
  tp::RequestTracker::Ticket& t = g_req.tickets.back().ticket;
  std::string msg = t.refusal;
  if (t.rollback) {
    const HookSpec* hs = hook_of(ex->func);
    uint32_t first = 1;
    zend_object* conn = hs && hs->hook != Hook::Execute ? subject(ex, *hs, first) : nullptr;
    if (conn && rollback_connection(conn))
      msg += "; the transaction was rolled back";
    else
      msg += "; the transaction could NOT be rolled back here: roll it back (it holds its locks)";
  }
  php_log_err_with_severity(msg.c_str(), LOG_WARNING);
  zend_throw_exception_ex(g_exception_ce, kRefusedCode, "%s", msg.c_str());
}

void (*g_prev_execute_internal)(zend_execute_data*, zval*) = nullptr;

void tierce_execute_internal(zend_execute_data* ex, zval* rv) {
  if (UNEXPECTED(g_refused_call != nullptr) && g_refused_call == ex) {
    g_refused_call = nullptr;
    refuse(ex);
    return;
  }
  if (g_prev_execute_internal)
    g_prev_execute_internal(ex, rv);
  else
    ex->func->internal_function.handler(ex, rv);
}

// One fetched row (an array with column-name keys) of a locking read: its values are facts.
void record_row(uint64_t conn, uint64_t txn, const std::vector<sd::LockedRow>& locked, zval* row) {
  ZVAL_DEREF(row);
  if (Z_TYPE_P(row) != IS_ARRAY) return;
  zend_string* key;
  zval* v;
  ZEND_HASH_FOREACH_STR_KEY_VAL(Z_ARRVAL_P(row), key, v) {
    if (!key) continue;
    sd::Value raw = value_of(v);
    if (!raw) continue;
    for (const auto& l : locked)
      g_req.tracker->record_fact(conn, txn, l, std::string_view(ZSTR_VAL(key), ZSTR_LEN(key)), *raw);
  }
  ZEND_HASH_FOREACH_END();
}

// Locking reads: their results (and then the rows fetched from them) carry what they locked.
void capture(zend_execute_data* ex, const HookSpec& h, zval* retval,
             const tp::RequestTracker::Ticket& ticket) {
  uint32_t first = 1;
  zend_object* obj = subject(ex, h, first);
  switch (h.hook) {
    case Hook::Query:
    case Hook::ExecuteQuery:
      if (!ticket.locked.empty() && Z_TYPE_P(retval) == IS_OBJECT)
        if (StmtInfo* r = stmt_info(Z_OBJ_P(retval), true)) {
          r->conn = ticket.conn;
          r->locked = ticket.locked;
          r->txn = ticket.txn;
        }
      break;
    case Hook::Execute:
      if (obj)
        if (StmtInfo* s = stmt_info(obj, false)) {
          s->locked = ticket.locked;
          s->txn = ticket.txn;
        }
      break;
    case Hook::GetResult:
      if (obj && Z_TYPE_P(retval) == IS_OBJECT)
        if (StmtInfo* s = stmt_info(obj, false); s && !s->locked.empty())
          if (StmtInfo* r = stmt_info(Z_OBJ_P(retval), true)) {
            r->conn = s->conn;
            r->locked = s->locked;
            r->txn = s->txn;
          }
      break;
    case Hook::Fetch: {
      StmtInfo* r = obj ? stmt_info(obj, false) : nullptr;
      if (!r || r->locked.empty()) break;
      // fetch_all / fetchAll: a list of rows; the others: one row
      bool all = ex->func->common.function_name &&
                 (zend_string_equals_literal_ci(ex->func->common.function_name, "fetch_all") ||
                  zend_string_equals_literal_ci(ex->func->common.function_name, "fetchall") ||
                  zend_string_equals_literal_ci(ex->func->common.function_name, "mysqli_fetch_all"));
      if (!all) {
        record_row(r->conn, r->txn, r->locked, retval);
      } else if (Z_TYPE_P(retval) == IS_ARRAY) {
        zval* row;
        ZEND_HASH_FOREACH_VAL(Z_ARRVAL_P(retval), row) { record_row(r->conn, r->txn, r->locked, row); }
        ZEND_HASH_FOREACH_END();
      }
      break;
    }
    default:
      break;
  }
}

void observer_end(zend_execute_data* ex, zval* retval) {
  if (g_req.tickets.empty()) return;
  CallState call = std::move(g_req.tickets.back());
  g_req.tickets.pop_back();
  tp::RequestTracker::Ticket& ticket = call.ticket;
  if (g_db.running) return;
  bool ok = retval && !EG(exception) && Z_TYPE_P(retval) != IS_FALSE;
  // First the fence: a wrapped autocommit write commits here, before the tracker releases its
  // pending marks (linearizable mode) or invalidates.
  if (call.fence.conn) fence_end(call.fence, ok, retval);
  if (!g_req.active || !g_req.tracker) return;
  bool track = g_req.tracker->settings().auto_mode;
  if (!track && !g_fence.enabled) return;
  if (EG(exception)) ok = false;  // (fence_end may have thrown)
  const HookSpec* hs = hook_of(ex->func);
  if (hs && hs->hook == Hook::Prepare && ok && Z_TYPE_P(retval) == IS_OBJECT) {
    uint32_t first = 1;
    zend_object* conn = subject(ex, *hs, first);
    std::string_view sql;
    StmtInfo* s = stmt_info(Z_OBJ_P(retval), true);
    if (s && string_arg(ex, first, sql)) {
      s->compiled = g_compiled.get(sql);
      s->clear_binds();
      s->conn = conn ? conn_id(conn) : 0;
    }
  }
  if (!track) return;
  if (hs && ok) capture(ex, *hs, retval, ticket);
  if (ticket.active) g_req.tracker->after(ticket, ok);
  publish();
}

zend_observer_fcall_handlers observer_init(zend_execute_data* ex) {
  zend_function* f = ex->func;
  if (!f || f->type != ZEND_INTERNAL_FUNCTION || !f->common.function_name) return {nullptr, nullptr};
  std::string name;
  if (f->common.scope) {
    name = lower(ZSTR_VAL(f->common.scope->name), ZSTR_LEN(f->common.scope->name)) + "::";
  }
  name += lower(ZSTR_VAL(f->common.function_name), ZSTR_LEN(f->common.function_name));
  auto it = hook_table().find(name);
  if (it == hook_table().end()) {
    // A subclass of mysqli / PDO: the method's own scope is the base class, so nothing else.
    return {nullptr, nullptr};
  }
  if (g_slot >= 0) f->internal_function.reserved[g_slot] = const_cast<HookSpec*>(&it->second);
  else g_hooks[f] = &it->second;
  return {observer_begin, observer_end};
}

// ---- dependency names from PHP ---------------------------------------------------------------------

// Checks a name as coherence::parse_dependencies would take it (one name: no blanks, no commas).
bool check_name(zend_string* s, uint32_t argn) {
  size_t n = ZSTR_LEN(s);
  const unsigned char* p = reinterpret_cast<const unsigned char*>(ZSTR_VAL(s));
  const char* why = nullptr;
  if (n == 0) why = "is empty";
  else if (n > 256) why = "is longer than 256 bytes";
  for (size_t i = 0; !why && i < n; ++i)
    if (p[i] < 0x21 || p[i] == 0x7f || p[i] == ',') why = "contains a blank, comma or control character";
  if (why) {
    zend_argument_value_error(argn, "must be a dependency name such as \"item:42\"; it %s", why);
    return false;
  }
  return true;
}

tp::RequestTracker* tracker() { return g_req.active ? g_req.tracker.get() : nullptr; }

}  // namespace

// ---- PHP functions ----------------------------------------------------------------------------------

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
  add_assoc_long(&c, "compiled_cached", g_compiled.map.size());
  add_assoc_long(&c, "shapes_cached", g_compiled.shapes.size());
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

// ---- arginfo and module ------------------------------------------------------------------------------

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

static const zend_function_entry tierce_functions[] = {
    PHP_FE(tierce_depends, arginfo_tierce_names)
    PHP_FE(tierce_invalidate, arginfo_tierce_names)
    PHP_FE(tierce_lock, arginfo_tierce_lock)
    PHP_FE(tierce_trylock, arginfo_tierce_trylock)
    PHP_FE(tierce_unlock, arginfo_tierce_unlock)
    PHP_FE(tierce_status, arginfo_tierce_status)
    PHP_FE(tierce_fence_check, arginfo_tierce_fence_check)
    PHP_FE_END};

PHP_INI_BEGIN()
  PHP_INI_ENTRY("tierce.auto", "0", PHP_INI_PERDIR | PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.linearizable", "0", PHP_INI_PERDIR | PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.pending_ttl_ms", "30000", PHP_INI_PERDIR | PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.pend_timeout_ms", "200", PHP_INI_PERDIR | PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.db_check", "1", PHP_INI_PERDIR | PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.topology", "", PHP_INI_SYSTEM, nullptr)
  PHP_INI_ENTRY("tierce.node", "", PHP_INI_SYSTEM, nullptr)
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
      g_engine = std::make_unique<tp::Engine>(topo, node);
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
