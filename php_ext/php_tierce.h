// php_ext/php_tierce.h — what the files of the `tierce` PHP extension's glue share (private to
// the extension; docs/php_extension.md): the Zend headers, the process and request state, and the
// functions one file calls in another.
//   php_tierce.cc     module entry, ini settings, MINIT / MSHUTDOWN / RINIT / RSHUTDOWN / MINFO,
//                     the state below, request notes, calling PHP from the extension
//   php_functions.cc  the PHP functions (tierce_depends, tierce_invalidate, tierce_lock, ...)
//   php_observer.cc   the observers on mysqli and PDO calls, refused calls (execute_internal)
//   php_fence.cc      the fence around this node's writes (fence.h) through mysqlnd
//   php_db_check.cc   the database server check of each connection (db_check.h)
// The glue decides nothing itself: the plain C++ beside it (tracker.h, fence.h, db_check.h,
// engine.h, compiled_cache.h) does, tested alone.
#pragma once
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

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dlm/client.h"
#include "php_ext/compiled_cache.h"
#include "php_ext/db_check.h"
#include "php_ext/engine.h"
#include "php_ext/fence.h"
#include "php_ext/tracker.h"
#include "sqldeps/deps.h"

namespace tierce::php::glue {

namespace tp = tierce::php;
namespace sd = tierce::sqldeps;

inline constexpr const char* kVersion = "0.1.0";

// ---- process state (php_tierce.cc) --------------------------------------------------------------

extern tp::Counters g_counters;
extern std::unique_ptr<tp::Engine> g_engine;  // tierce.topology + tierce.node (MINIT)
extern std::string g_engine_error;            // why there is none, when configured
extern sd::Schema g_schema;                   // tierce.schema (MINIT)
extern std::string g_schema_error;
extern tp::CompiledCache g_compiled;  // over g_schema
extern zend_class_entry* g_exception_ce;
extern bool g_in_apache;  // sapi apache2handler: notes through apache_note()

// The fence (fence.h): on when the topology has an [arbiter] and tierce.node is one of its app
// nodes (MINIT).
struct FenceConfig {
  bool enabled = false;
  std::string table, node;
  std::string error;  // tierce.topology set but not read: whether it has an arbiter is unknown
};
extern FenceConfig g_fence;

// ---- locks (lockd over its local socket; php_functions.cc) --------------------------------------

struct Locks {
  std::unique_ptr<tierce::dlm::LockClient> client;
  int pid = 0;
  std::multimap<std::string, tierce::dlm::HeldLock> held;  // this request's
  tierce::dlm::LockClient& get();  // connected in this process (a child does not use its parent's)
};

// ---- per request --------------------------------------------------------------------------------

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
};
extern Request g_req;

// The database server check (php_db_check.cc).
struct DbCheck {
  bool enabled = true;   // tierce.db_check (this request)
  bool running = false;  // its own queries are under way: the observers ignore them
  // mysqli connections by "host|server version|thread id" (a persistent connection is checked
  // once, not in every request that uses it): what was found. Bounded.
  std::unordered_map<std::string, std::vector<tp::DbFinding>> by_connection;
  std::set<std::string> warned;       // "id server": logged once per process
  std::vector<std::string> warnings;  // the lines logged (tierce_status()["db_warnings"])
};
extern DbCheck g_db;

// ---- php_tierce.cc ------------------------------------------------------------------------------

void warn(const std::string& msg);  // the app's E_WARNING
// This request's entry of a connection / statement object (weak: it dies with the object); null
// outside a request, and for a statement not seen when `create` is false.
ConnInfo* conn_info(zend_object* obj);
StmtInfo* stmt_info(zend_object* obj, bool create);
inline uint64_t conn_id(zend_object* obj) { return reinterpret_cast<uintptr_t>(obj); }
// Publishes what changed in the tracker since the last time in the request notes.
void publish();
tp::RequestTracker* tracker();  // this request's, null outside a request

// Calls method `name` of `obj`, or function `name` when obj is null, with `args`, quietly: no
// warning shown, an exception it throws is dropped (the app's own call comes next and meets the
// same state). False when it failed, threw or returned false.
bool call_quietly(zend_object* obj, const char* name, std::span<zval> args, zval* ret);
// Whether `obj` is an instance of the internal class `lower` (lower-case name; false when that
// class is not loaded).
bool instance_of(zend_object* obj, const char* lower);

inline void add_us(uint64_t& counter, std::chrono::steady_clock::time_point t0) {
  counter += static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                       std::chrono::steady_clock::now() - t0)
                                       .count());
}

// ---- php_functions.cc ---------------------------------------------------------------------------

extern const zend_function_entry tierce_functions[];  // the module's functions, with arginfo
extern Locks g_locks;

// ---- php_observer.cc ----------------------------------------------------------------------------

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

extern int g_slot;  // this extension's reserved slot in internal functions (MINIT), or -1
extern void (*g_prev_execute_internal)(zend_execute_data*, zval*);
// The observed call refused before it runs (linearizable mode's Pend did not reach every home, or
// the fence): observer_begin sets it, execute_internal raises the refusal instead of the call.
extern zend_execute_data* g_refused_call;
// Registered in MINIT: which calls are observed; runs a refused call's refusal instead of it.
zend_observer_fcall_handlers observer_init(zend_execute_data* ex);
void tierce_execute_internal(zend_execute_data* ex, zval* rv);

// ---- php_fence.cc -------------------------------------------------------------------------------

// The mysqlnd connection a mysqli, mysqli_stmt, PDO (mysql driver) or PDOStatement object works
// on; null for other objects and for ones not connected / prepared / open.
MYSQLND_CONN_DATA* mysqlnd_connection_of(zend_object* obj);
unsigned nd_status(MYSQLND_CONN_DATA* d);  // the server status of its last reply
FenceConnState& fence_state(MYSQLND_CONN_DATA* d);
// The locking read of this node's row, in the connection's transaction.
tp::FenceVerdict fence_check(MYSQLND_CONN_DATA* d);

// What the app can read of its last call on a connection (affected rows, insert id, warnings,
// info, error): kept across the fence's COMMIT / ROLLBACK after that call, which would replace it.
struct AppView {
  uint64_t affected_rows, last_insert_id;
  unsigned warning_count, field_count, error_no;
  enum_mysqlnd_query_type query_type;
  std::string error, sqlstate;
  MYSQLND_STRING message;

  explicit AppView(MYSQLND_CONN_DATA* d);
  void restore(MYSQLND_CONN_DATA* d) const;
};

// Before an observed call on `obj`'s connection. `text` null: a call that sends no statement of
// the app's but may end its transaction (begin/commit/rollback/autocommit/change_user).
void fence_begin(zend_execute_data* ex, const HookSpec& h, zend_object* obj,
                 const tp::FenceText* text, FenceCall& call);
// After the call: the wrapped write's COMMIT (or ROLLBACK), the connection's state, the warning.
void fence_end(FenceCall& call, bool ok, zval* retval);
// The operator's log line, and the app's warning (also when the call threw).
void fence_warn(const std::string& msg);

// ---- php_db_check.cc ----------------------------------------------------------------------------

// On a connection's first observed call in this request: checks its server (once) and, when it may
// not be the primary, makes the page uncacheable.
void check_connection(zend_object* conn);

}  // namespace tierce::php::glue
