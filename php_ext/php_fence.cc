// php_ext/php_fence.cc — the fence in the `tierce` PHP extension's glue (fence.h, docs/
// php_extension.md "The fence check"): with an [arbiter] in the topology, a locking read of this
// node's row in each write transaction before its first write, autocommit writes wrapped in a
// transaction with it, refused writes made to fail. Its queries run through mysqlnd itself, under
// the connection of the app's mysqli / PDO object; fence.h decides what to send and what the
// answers mean.
#include <syslog.h>

#include <cstring>

#include "php_ext/php_tierce.h"

namespace tierce::php::glue {

FenceConfig g_fence;

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

AppView::AppView(MYSQLND_CONN_DATA* d)
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

void AppView::restore(MYSQLND_CONN_DATA* d) const {
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

FenceConnState& fence_state(MYSQLND_CONN_DATA* d) {
  FenceConnState& fc = g_req.fence[d];
  if (fc.thread_id != d->thread_id) {  // another server connection behind a reused handle
    fc = FenceConnState{};
    fc.thread_id = d->thread_id;
  }
  return fc;
}

tp::FenceVerdict fence_check(MYSQLND_CONN_DATA* d) {
  g_counters.fence_checks++;
  std::vector<std::vector<std::string>> rows;
  if (!nd_rows(d, tp::fence_check_sql(g_fence.table, g_fence.node), rows)) {
    g_counters.fence_check_failures++;
    return tp::fence_failed(d->error_info->error_no, d->error_info->error);
  }
  return tp::fence_verdict(rows);
}

namespace {

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
  zend_long code = tp::fence_refusal_code(v);
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

}  // namespace

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

// (A user error handler is not called while an exception is pending, so the exception waits
// meanwhile; one the handler throws comes first, with the call's as its previous.)
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

}  // namespace tierce::php::glue
