// php_ext/php_observer.cc — the observers of the `tierce` PHP extension's glue (PHP 8.2 observer
// API, internal functions): mysqli and mysqli_stmt methods and their procedural twins (query,
// real_query, multi_query, execute_query, prepare, stmt prepare / bind_param / execute,
// begin_transaction, commit, rollback, autocommit), PDO (exec, query, prepare, beginTransaction,
// commit, rollBack, setAttribute(ATTR_AUTOCOMMIT)) and PDOStatement (bindValue, bindParam,
// execute), and mysqli::change_user / refresh (the fence only). Before each call they hand its SQL
// and bound parameters to RequestTracker (tracker.h) and the fence (php_fence.cc); after it, the
// outcome. A statement object's SQL and bound parameters are kept in a weak map (zend_weakrefs):
// the entry dies with the object. A call refused before it runs (linearizable mode's Pend, the
// fence) is replaced in execute_internal by a TierceException.
#include <syslog.h>

#include "php_ext/php_tierce.h"

namespace tierce::php::glue {

int g_slot = -1;
void (*g_prev_execute_internal)(zend_execute_data*, zval*) = nullptr;
zend_execute_data* g_refused_call = nullptr;

namespace {

// The TierceException code of a call linearizable mode refused (the fence's are 301 to 305).
constexpr zend_long kRefusedCode = 101;

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

// ---- which calls are observed -------------------------------------------------------------------

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
// reserved slot of this extension when PHP has one left (g_slot), else in a map.
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

// ---- before an observed call --------------------------------------------------------------------

// One observed call being begun (auto mode or the fence): what the helpers by call kind share.
struct Begin {
  zend_execute_data* ex;
  const HookSpec& h;
  zend_object* obj;  // the connection or statement object the call is on
  uint32_t first;    // the index of its first real argument
  bool track;        // auto mode: names from SQL
  bool fence;        // the fence: this node's writes checked
  tp::RequestTracker& tr;
  CallState call;
  std::chrono::nanoseconds fence_ns{0};  // the fence's queries: not the observer's own cost

  void fence_before(const tp::FenceText* text) {
    auto f0 = std::chrono::steady_clock::now();
    fence_begin(ex, h, obj, text, call.fence);
    fence_ns += std::chrono::steady_clock::now() - f0;
  }
};

// query / real_query / multi_query / PDO::exec / PDO::query (sql), execute_query(sql, params).
void begin_query(Begin& b) {
  std::string_view sql;
  if (!string_arg(b.ex, b.first, sql)) return;
  sd::Params p;
  std::shared_ptr<const sd::Compiled> c = g_compiled.get(sql, &p);
  if (b.fence) {
    tp::FenceText ft = tp::fence_text(*c);
    b.fence_before(&ft);
    if (b.call.fence.unrun) return;  // not run: nothing for the tracker
  }
  if (!b.track) return;
  if (b.h.hook == Hook::ExecuteQuery) params_from_array(arg(b.ex, b.first + 1), p);
  b.call.ticket = b.tr.before_statement(conn_id(b.obj), *c, p);
}

// mysqli_stmt::__construct(link, sql) / mysqli_stmt::prepare(sql): the statement's SQL.
void begin_stmt_prepare(Begin& b) {
  std::string_view sql;
  StmtInfo* s = stmt_info(b.obj, true);
  uint32_t sql_arg = b.first;
  if (b.h.hook == Hook::StmtConstruct) {
    zval* link = arg(b.ex, 1);
    if (s && link && Z_TYPE_P(link) == IS_OBJECT) s->conn = conn_id(Z_OBJ_P(link));
    sql_arg = 2;
  }
  if (s && string_arg(b.ex, sql_arg, sql)) {
    s->compiled = g_compiled.get(sql);
    s->clear_binds();
  }
}

// mysqli_stmt::bind_param(types, &...vars).
void begin_bind_param(Begin& b) {
  StmtInfo* s = stmt_info(b.obj, true);
  if (!s) return;
  s->clear_binds();
  uint32_t n = ZEND_CALL_NUM_ARGS(b.ex);
  for (uint32_t i = b.first + 1; i <= n; ++i) {
    zval z;
    ZVAL_COPY(&z, ZEND_CALL_ARG(b.ex, i));  // a reference: its value is read at execute
    s->positional.push_back(z);
  }
}

// PDOStatement::bindValue / bindParam (param, value).
void begin_pdo_bind(Begin& b) {
  StmtInfo* s = stmt_info(b.obj, true);
  zval* key = arg(b.ex, 1);
  zval* val = arg(b.ex, 2);
  if (!s || !key || !val) return;
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
}

// mysqli_stmt::execute([params]) / PDOStatement::execute([params]).
void begin_execute(Begin& b) {
  StmtInfo* s = stmt_info(b.obj, false);
  std::shared_ptr<const sd::Compiled> compiled = s ? s->compiled : nullptr;
  uint64_t conn = s ? s->conn : 0;
  if (!compiled) {
    // A PDOStatement made some way we did not see: its queryString says what it runs.
    zval rv;
    zval* qs = zend_read_property(b.obj->ce, b.obj, "queryString", sizeof("queryString") - 1,
                                  /*silent*/ 1, &rv);
    if (qs && Z_TYPE_P(qs) == IS_STRING)
      compiled = g_compiled.get(std::string_view(Z_STRVAL_P(qs), Z_STRLEN_P(qs)));
  }
  if (b.fence) {
    tp::FenceText ft = compiled ? tp::fence_text(*compiled) : tp::fence_text_unknown();
    b.fence_before(&ft);
    if (b.call.fence.unrun) return;
  }
  if (!b.track) return;
  if (!compiled) {
    // Not knowing what it runs: conservative.
    b.tr.invalidate_all();
    g_counters.conservative++;
    return;
  }
  sd::Params p;
  zval* params = arg(b.ex, b.first);
  if (params && Z_TYPE_P(params) == IS_ARRAY) params_from_array(params, p);
  else if (s) params_from_binds(*s, p);
  b.call.ticket = b.tr.before_statement(conn, *compiled, p);
}

// Calls that send no statement of the app's but end (or may end) its transaction: begin, commit,
// rollback, change_user / refresh, autocommit(bool), PDO::setAttribute(ATTR_AUTOCOMMIT, bool).
void begin_transaction_call(Begin& b) {
  uint64_t conn = conn_id(b.obj);
  switch (b.h.hook) {
    case Hook::Begin:
    case Hook::Commit:
    case Hook::Rollback:
    case Hook::Session:
      if (b.fence) b.fence_before(nullptr);
      if (!b.track) return;
      if (b.h.hook == Hook::Begin) b.call.ticket = b.tr.before_begin(conn);
      if (b.h.hook == Hook::Commit) b.call.ticket = b.tr.before_commit(conn);
      if (b.h.hook == Hook::Rollback) b.call.ticket = b.tr.before_rollback(conn);
      return;
    case Hook::Autocommit: {
      if (b.fence) b.fence_before(nullptr);
      zval* on = arg(b.ex, b.first);
      if (b.track && on) b.call.ticket = b.tr.before_autocommit(conn, zend_is_true(on));
      return;
    }
    case Hook::PdoSetAttribute: {
      zval* attr = arg(b.ex, 1);
      zval* val = arg(b.ex, 2);
      // PDO::ATTR_AUTOCOMMIT is 0.
      if (attr && val && Z_TYPE_P(attr) == IS_LONG && Z_LVAL_P(attr) == 0) {
        if (b.fence) b.fence_before(nullptr);
        if (b.track) b.call.ticket = b.tr.before_autocommit(conn, zend_is_true(val));
      }
      return;
    }
    default:
      return;
  }
}

void begin_call(Begin& b) {
  switch (b.h.hook) {
    case Hook::Query:
    case Hook::ExecuteQuery:
      begin_query(b);
      break;
    case Hook::StmtConstruct:
    case Hook::StmtPrepare:
      begin_stmt_prepare(b);
      break;
    case Hook::BindParam:
      if (b.track) begin_bind_param(b);
      break;
    case Hook::PdoBind:
      if (b.track) begin_pdo_bind(b);
      break;
    case Hook::Execute:
      begin_execute(b);
      break;
    case Hook::Begin:
    case Hook::Commit:
    case Hook::Rollback:
    case Hook::Session:
    case Hook::Autocommit:
    case Hook::PdoSetAttribute:
      begin_transaction_call(b);
      break;
    case Hook::Prepare:    // at the end (the statement object is the return value)
    case Hook::GetResult:  // at the end (the result)
    case Hook::Fetch:
      break;
  }
}

void observer_begin(zend_execute_data* ex) {
  const HookSpec* hs = hook_of(ex->func);
  if (g_db.running) {  // the server check's own queries: not the app's
    push_call(CallState{});
    return;
  }
  if (hs && g_req.active && g_req.tracker && g_db.enabled && !EG(exception))
    if (zend_object* c = connection_of(ex, *hs)) check_connection(c);
  // auto mode: names from SQL; the fence: this node's writes checked (both need the SQL texts)
  bool track = hs && g_req.active && g_req.tracker && g_req.tracker->settings().auto_mode;
  bool fence = hs && g_req.active && g_req.tracker && g_fence.enabled && !EG(exception);
  if (!track && !fence) {  // explicit mode without a fence: nothing to do
    push_call(CallState{});
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  uint32_t first = 1;
  zend_object* obj = subject(ex, *hs, first);
  Begin b{ex, *hs, obj, first, track, fence, *g_req.tracker, CallState{}};
  if (obj) begin_call(b);
  if (track) {
    g_counters.observed++;
    g_counters.observe_ns += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0 -
                                                             b.fence_ns)
            .count());
  }
  // execute_internal runs refuse() instead of the call
  if (b.call.ticket.refused || b.call.fence.unrun) g_refused_call = ex;
  push_call(std::move(b.call));
}

// ---- refused calls (linearizable mode, the fence) -----------------------------------------------

// Rolls back `conn`'s open transaction (mysqli or PDO) through the observed API, so the tracker
// follows. False when it could not.
bool rollback_connection(zend_object* conn) {
  zval ret;
  ZVAL_UNDEF(&ret);
  bool ok = false;
  if (instance_of(conn, "pdo")) {
    if (call_quietly(conn, "inTransaction", {}, &ret) && zend_is_true(&ret)) {
      zval_ptr_dtor(&ret);
      ZVAL_UNDEF(&ret);
      ok = call_quietly(conn, "rollBack", {}, &ret);
    } else {
      ok = Z_TYPE(ret) != IS_UNDEF;  // none open: nothing to roll back
    }
  } else if (instance_of(conn, "mysqli")) {
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

}  // namespace

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

namespace {

// ---- after an observed call ---------------------------------------------------------------------

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

}  // namespace

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

}  // namespace tierce::php::glue
