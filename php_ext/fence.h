// php_ext/fence.h — the database as the fence's arbiter, on the app node's side (issue 29 Part 2;
// docs/php_extension.md, "The fence check"). With an [arbiter] section in the topology, a home that
// gives up on app node N bumps N's row of the arbiter table to 'out' (an X lock) before it vouches
// without N. For that to be safe, every write transaction of N reads N's row with a locking read,
// in that transaction and before its first write, and writes only when the row says 'in':
//
//   SELECT state, epoch, changed_by, changed_at FROM `schema`.`table` WHERE node = 'N'
//     LOCK IN SHARE MODE
//
// The S lock lasts until the transaction ends: a transaction of N either commits before the bump
// (the home catches up on its invalidation) or reads 'out' and writes nothing.
//
// This file is the plain C++ of it (no PHP types; tested alone in tests/php/test_fence.cc): what a
// SQL text means for the fence, the check's SQL and what its answer says, what to do before a
// write given the connection's server status, and the messages. The glue (php_fence.cc) runs the
// queries on the connection through mysqlnd and makes refused writes fail.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sqldeps/deps.h"

namespace tierce::php {

// The server status bits of the last reply on a connection (MySQL protocol, mysqlnd's
// SERVER_STATUS_IN_TRANS and SERVER_STATUS_AUTOCOMMIT).
inline constexpr unsigned kStatusInTrans = 1;
inline constexpr unsigned kStatusAutocommit = 2;
// MariaDB/MySQL: a write in a READ ONLY transaction (how a refused transaction's writes fail).
inline constexpr unsigned kErrReadOnlyTransaction = 1792;

// What one SQL text (one call: possibly several statements) means for the fence.
struct FenceText {
  size_t statements = 0;
  // Some statement writes or may write (INSERT/UPDATE/DELETE/REPLACE, DDL, CALL, unknown).
  bool writes = false;
  // The first write is a statement that may commit by itself (DDL, LOCK TABLES, CALL, a write or
  // statement the classifier cannot read): a READ ONLY transaction does not stop it (its implicit
  // commit ends that transaction first), so a refused one is not run at all.
  bool self_committing = false;
  // Some statement ends or may end the transaction (BEGIN, COMMIT, ROLLBACK, SET autocommit,
  // self-committing statements): what was checked before the call is not this connection's
  // transaction any more after it.
  bool ends_transaction = false;
  // A write comes after such a statement in the same text: the check before the call cannot
  // cover it (it belongs to a later transaction that no check ran in).
  bool write_after_boundary = false;
};
FenceText fence_text(const sqldeps::Compiled& c);
// A statement whose text is not known (a prepared statement made where the observer did not see
// it): it may do anything.
FenceText fence_text_unknown();

// `schema`.`table` from "schema.table" (the topology validated it: letters, digits, '_').
std::string quote_table(std::string_view table);
// The node name as a SQL string literal that means the same in every sql_mode and charset:
// 'name' for names of [A-Za-z0-9_.-] (the topology's node names), else a hex literal X'..'.
std::string sql_literal(std::string_view s);
// The locking read of `node`'s row in `table` ("schema.table").
std::string fence_check_sql(std::string_view table, std::string_view node);

// What the check found.
struct FenceVerdict {
  enum class State : uint8_t { In, Out, Missing, Error } state = State::Error;
  std::string epoch, changed_by, changed_at;  // of the row, when there is one
  std::string error;                          // State::Error: why (the server's error, ...)
  bool admitted() const { return state == State::In; }
};
// From the check's result rows (state, epoch, changed_by, changed_at as text).
FenceVerdict fence_verdict(const std::vector<std::vector<std::string>>& rows);
FenceVerdict fence_failed(unsigned error_no, std::string_view error);

// The message for a verdict that refuses (with its log id):
//   PHPEXT0301  the row says 'out'
//   PHPEXT0302  there is no row for the node
//   PHPEXT0303  the check itself failed
// "" for a verdict that admits.
std::string fence_refusal(const FenceVerdict& v, std::string_view node, std::string_view table);
// The TierceException code of a refusing verdict: its log id's number (301, 302, 303).
int fence_refusal_code(const FenceVerdict& v);
// PHPEXT0304: a text the fence cannot cover (write_after_boundary, or several statements in
// autocommit mode through a call that leaves their results pending).
std::string fence_unfenceable(const FenceText& t, std::string_view node);
// PHPEXT0305: a wrapped autocommit write ran but its COMMIT failed.
std::string fence_commit_failed(std::string_view node, std::string_view error);
// PHPEXT0306: tierce_fence_check() ran outside a transaction (its lock ended with it).
std::string fence_outside_transaction(std::string_view node);
// (PHPEXT0307, in the glue: a wrapped write left results to read; its COMMIT waits for the
// connection's next call.)

// A connection's fence state in this request (the glue keeps one per connection).
struct FenceConn {
  uint64_t thread_id = 0;  // the server connection it belongs to (a reused handle is another)
  bool checked = false;    // the open transaction was checked and admitted
  bool refused = false;    // the open transaction was refused: made READ ONLY
};

// What to do before a call that writes on a connection whose last reply carried `status`.
enum class FenceStep : uint8_t {
  Pass,         // this transaction was checked and admitted already: nothing to send
  Refused,      // this transaction was refused already (it is READ ONLY: the server refuses)
  RefuseUnrun,  // refuse without running the call (fence_unfenceable, or a self-committing
                // write in a refused transaction)
  CheckInTxn,   // run the check in the open transaction (or the one autocommit off opens)
  Wrap,         // autocommit: BEGIN, the check, the call, then COMMIT (or ROLLBACK)
};
// `drains_results`: the call reads every result of a multi-statement text before it returns
// (PDO::exec), so a COMMIT can follow it on the connection.
FenceStep fence_plan(unsigned status, const FenceConn& c, const FenceText& t, bool drains_results);

}  // namespace tierce::php
