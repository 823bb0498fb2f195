// php_ext/tracker.h — what the tierce PHP extension does with the SQL a request runs, as plain
// C++ (no PHP types; tested alone in tests/php/test_tracker.cc):
//   - reads add to the page's dependencies (tierce-depends), or make it uncacheable;
//   - writes add to the request's invalidations (tierce-invalidate) once they are committed —
//     per connection: autocommit statements at once, transactions at COMMIT, dropped at ROLLBACK;
//   - in linearizable mode, a write's names are marked *pending* at every home before the
//     statement (autocommit) or the COMMIT is sent, and released after it returned
//     (docs/php_extension.md, "Linearizable mode"). A Pend that does not reach every home within
//     tierce.pend_timeout_ms refuses the call: the ticket says so, the glue does not run it (and
//     rolls the transaction back), and the marks already placed are released.
// Connections are identified by an opaque id the glue chooses (the connection object).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "sqldeps/deps.h"

namespace tierce::php {

// Hashes std::string and std::string_view alike (lookups without a temporary string).
struct TransparentHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// A set of dependency names in the order they were first seen, or "everything".
class NameSet {
 public:
  bool add(std::string_view name);  // true when new
  void add_all(const NameSet& o);
  void set_all() { all_ = true; }
  bool all() const { return all_; }
  bool empty() const { return !all_ && list_.empty(); }
  const std::vector<std::string>& names() const { return list_; }
  void clear();
  std::string joined() const;  // space-separated ("" when empty)

 private:
  std::vector<std::string> list_;
  std::unordered_set<std::string, TransparentHash, std::equal_to<>> seen_;
  bool all_ = false;
};

// Why `name` is not one dependency name as coherence::parse_dependencies takes it (empty, longer
// than 256 bytes, a blank, comma or control character), nullptr when it is one. The words finish
// "it ...": tierce_depends() / tierce_invalidate() put them in their error.
const char* dependency_name_problem(std::string_view name);

struct Settings {
  bool auto_mode = false;     // tierce.auto: derive dependencies from SQL
  bool linearizable = false;  // tierce.linearizable: pending marks around commits
  uint32_t pending_ttl_ms = 30000;
  // How long a Pend may wait for the homes' acknowledgements before the write is refused (well
  // below the fence bound: a COMMIT waits for it with the transaction's row locks held).
  uint32_t pend_timeout_ms = 200;
};

// Process-wide counters (tierce_status()["counters"]).
struct Counters {
  uint64_t statements = 0, reads = 0, writes = 0, neutral = 0, exact = 0, table_level = 0,
           conservative = 0, uncacheable_reads = 0, invalidate_all = 0, commits = 0, rollbacks = 0,
           pends = 0, pend_failures = 0, pend_us = 0, releases = 0, release_failures = 0,
           observe_ns = 0, observed = 0,
           writes_refused = 0,  // linearizable: a Pend did not reach every home in time
      // the database server check (db_check.h): servers checked, checks whose queries both
      // failed, their time, requests made uncacheable because a server may not be the primary
      db_checks = 0, db_check_failures = 0, db_check_us = 0, db_not_primary = 0,
      // the fence (fence.h): locking reads of this node's row, those that failed, writes and
      // transactions refused, autocommit writes wrapped in a checked transaction, time spent in
      // the fence's queries (BEGIN, check, COMMIT / ROLLBACK)
      fence_checks = 0, fence_check_failures = 0, fence_refused = 0, fence_wraps = 0, fence_us = 0;
};

// Where pending marks go (the Engine; a recorder in tests).
//   pend: true when EVERY home acknowledged the Pend within `timeout_ms`; false (with `error`:
//     which homes, why) when the round was not sent or gave up on some home — the caller then
//     does not commit. Never waits for the fence bound.
//   release: `give_up_ms` 0 after a commit: until every home applied it or the fence bound (the
//     rule); nonzero for the marks of a refused commit (nothing was committed: nothing to wait
//     for). False with `error` set when the round was not sent.
struct MarkSink {
  virtual ~MarkSink() = default;
  virtual bool pend(const NameSet& names, uint64_t token, uint32_t ttl_ms, uint32_t timeout_ms,
                    std::string& error, uint64_t& micros) = 0;
  virtual bool release(const NameSet& names, uint64_t token, uint32_t give_up_ms,
                       std::string& error) = 0;
};

class RequestTracker {
 public:
  using ConnId = uint64_t;
  // `marks` may be null (no cluster configured: linearizable mode degrades to auto mode, with a
  // warning through `warn`).
  RequestTracker(Settings s, Counters& counters, MarkSink* marks,
                 std::function<void(const std::string&)> warn);

  void start_request();
  // The request is over: writes of transactions left open are invalidated (a persistent
  // connection may commit them later, where no tracker sees them), marks still held released.
  void end_request();

  // What a statement (or an API call such as mysqli::commit) is about to do; `after` gets it
  // back with whether the call succeeded.
  struct Ticket {
    bool active = false;
    ConnId conn = 0;
    enum class What : uint8_t { None, Statement, Commit, Rollback, Begin } what = What::None;
    NameSet commit_names;  // names committed by this call (released/invalidated in after)
    uint64_t token = 0;    // nonzero: marked pending before the call
    // Linearizable mode: a Pend did not reach every home. The call must NOT run (the glue skips
    // it and raises `refusal`); the tracker's connection state is as before the call.
    bool refused = false;
    std::string refusal;    // what to tell the app (with its log id)
    bool rollback = false;  // the connection has a transaction open: roll it back (its locks)
    NameSet rolled_back;    // a ROLLBACK's names: pending again if it failed (state unknown)
    // Locking reads keyed by a primary key in an open transaction: their result rows become
    // facts (record_fact); the glue keeps these with the result until it is fetched.
    std::vector<sqldeps::LockedRow> locked;
    uint64_t txn = 0;                          // the transaction they were locked in
    std::vector<sqldeps::WrittenRow> written;  // applied to the facts when the call succeeded
    std::vector<std::string> unkeyed;          // tables whose facts go when the call succeeded
    bool forget_facts = false;                 // the call may change anything: drop every fact
  };
  Ticket before_statement(ConnId conn, const sqldeps::Compiled& c, const sqldeps::Params& p);
  Ticket before_commit(ConnId conn);
  Ticket before_begin(ConnId conn);  // BEGIN in a transaction commits it first (MySQL)
  Ticket before_rollback(ConnId conn);
  Ticket before_autocommit(ConnId conn, bool on);  // autocommit(true) commits an open transaction
  void after(Ticket& t, bool ok);
  // A value of a row a locking read returned (LockedRow from a Ticket): a fact about that row
  // until the transaction ends (sqldeps::RowFacts). `raw` as the result holds it.
  // Ignored unless the connection is still in transaction `txn` (Ticket::txn).
  void record_fact(ConnId conn, uint64_t txn, const sqldeps::LockedRow& row,
                   std::string_view column, std::string_view raw);
  size_t facts(ConnId conn) const;

  // tierce_depends / tierce_invalidate.
  void add_depends(std::string_view name) { depends_.add(name); }
  void add_invalidates(std::string_view name) { invalidates_.add(name); }
  void invalidate_all() { invalidates_.set_all(); }
  // The page must not be cached (whatever the mode): `reason` says why (tierce-nocache).
  void make_uncacheable(std::string_view reason) {
    if (uncacheable_) return;
    uncacheable_ = true;
    uncacheable_reason_ = reason;
  }

  const NameSet& depends() const { return depends_; }
  const NameSet& invalidates() const { return invalidates_; }
  bool uncacheable() const { return uncacheable_; }
  const std::string& uncacheable_reason() const { return uncacheable_reason_; }
  const Settings& settings() const { return s_; }
  size_t open_transactions() const;

 private:
  struct Facts : sqldeps::RowFacts {
    std::unordered_map<std::string, std::string> values;  // "T\nK\nC" -> value part
    static std::string key(std::string_view t, std::string_view k, std::string_view c);
    const std::string* value(std::string_view t, std::string_view k,
                             std::string_view c) const override;
    void erase_row(std::string_view t, std::string_view k);
    void erase_table(std::string_view t);
  };
  struct Conn {
    bool in_txn = false;        // BEGIN seen (or autocommit off)
    bool autocommit = true;
    NameSet pending;            // names written in the open transaction
    Facts facts;                // of rows locked in the open transaction
    uint64_t txn = 1;           // which transaction (a new number whenever one may have ended)
    void end_txn() {
      facts.values.clear();
      ++txn;
    }
  };
  Conn& conn(ConnId id) { return conns_[id]; }
  void commit_prepare(Ticket& t, Conn& c);  // moves c.pending into t, pends when linearizable
  // The connection as a call found it: a refused call did not run, so it goes back to this.
  struct Before {
    bool in_txn = false, autocommit = true;
    NameSet pending;  // kept only in linearizable mode (the only one that refuses)
  };
  Before before(const Conn& c) const;
  // A refused ticket: `c` back to `b`; the glue rolls back an open transaction (t.rollback).
  void refuse_restore(Ticket& t, Conn& c, Before& b);
  void rollback_prepare(Ticket& t, Conn& c);  // moves c.pending into t.rolled_back
  void committed(Ticket& t);

  Settings s_;
  Counters& counters_;
  MarkSink* marks_;
  std::function<void(const std::string&)> warn_;
  std::unordered_map<ConnId, Conn> conns_;
  NameSet depends_, invalidates_;
  bool uncacheable_ = false;
  std::string uncacheable_reason_;
};

}  // namespace tierce::php
