// php_ext/tracker.cc — see tracker.h.
#include "php_ext/tracker.h"

#include <sys/random.h>

#include <chrono>

namespace tierce::php {

namespace sd = tierce::sqldeps;

const char* dependency_name_problem(std::string_view name) {
  if (name.empty()) return "is empty";
  if (name.size() > 256) return "is longer than 256 bytes";
  for (char ch : name) {
    auto c = static_cast<unsigned char>(ch);
    if (c < 0x21 || c == 0x7f || c == ',') return "contains a blank, comma or control character";
  }
  return nullptr;
}

bool NameSet::add(std::string_view name) {
  if (all_ || seen_.find(name) != seen_.end()) return false;
  auto it = seen_.emplace(name).first;
  list_.push_back(*it);
  return true;
}

void NameSet::add_all(const NameSet& o) {
  if (o.all_) all_ = true;
  for (const std::string& n : o.list_) add(n);
}

void NameSet::clear() {
  list_.clear();
  seen_.clear();
  all_ = false;
}

std::string NameSet::joined() const {
  std::string s;
  for (const std::string& n : list_) {
    if (!s.empty()) s += ' ';
    s += n;
  }
  return s;
}

namespace {
uint64_t fresh_token() {
  uint64_t t = 0;
  while (t == 0)
    if (getrandom(&t, sizeof t, 0) != sizeof t) t = static_cast<uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count()) | 1;
  return t;
}
}  // namespace

std::string RequestTracker::Facts::key(std::string_view t, std::string_view k,
                                       std::string_view c) {
  std::string s;
  s.reserve(t.size() + k.size() + c.size() + 2);
  s.append(t).append(1, '\n').append(k).append(1, '\n').append(c);
  return s;
}

const std::string* RequestTracker::Facts::value(std::string_view t, std::string_view k,
                                                std::string_view c) const {
  auto it = values.find(key(t, k, c));
  return it == values.end() ? nullptr : &it->second;
}

void RequestTracker::Facts::erase_row(std::string_view t, std::string_view k) {
  std::string prefix = key(t, k, "");
  for (auto it = values.begin(); it != values.end();)
    it = it->first.rfind(prefix, 0) == 0 ? values.erase(it) : std::next(it);
}

void RequestTracker::Facts::erase_table(std::string_view t) {
  std::string prefix = std::string(t) + '\n';
  for (auto it = values.begin(); it != values.end();)
    it = it->first.rfind(prefix, 0) == 0 ? values.erase(it) : std::next(it);
}

void RequestTracker::record_fact(ConnId id, uint64_t txn, const sd::LockedRow& row,
                                 std::string_view column, std::string_view raw) {
  auto it = conns_.find(id);
  if (it == conns_.end() || !it->second.in_txn || it->second.txn != txn || !row.columns) return;
  for (const auto& [name, type] : *row.columns) {
    if (name != column) continue;
    if (auto v = sd::fact_value(raw, type))
      it->second.facts.values[Facts::key(row.table, row.key, name)] = std::move(*v);
    else
      it->second.facts.values.erase(Facts::key(row.table, row.key, name));
  }
}

size_t RequestTracker::facts(ConnId id) const {
  auto it = conns_.find(id);
  return it == conns_.end() ? 0 : it->second.facts.values.size();
}

RequestTracker::RequestTracker(Settings s, Counters& counters, MarkSink* marks,
                               std::function<void(const std::string&)> warn)
    : s_(s), counters_(counters), marks_(marks), warn_(std::move(warn)) {}

void RequestTracker::start_request() {
  conns_.clear();
  depends_.clear();
  invalidates_.clear();
  uncacheable_ = false;
  uncacheable_reason_.clear();
}

size_t RequestTracker::open_transactions() const {
  size_t n = 0;
  for (const auto& [id, c] : conns_) n += c.in_txn && !c.pending.empty();
  return n;
}

void RequestTracker::end_request() {
  for (auto& [id, c] : conns_) {
    // A transaction left open: the server rolls it back when the connection closes, but a
    // persistent connection may commit it in a later request. Invalidate (conservative).
    if (!c.pending.empty()) invalidates_.add_all(c.pending);
    c.pending.clear();
    c.in_txn = !c.autocommit;
  }
}

void RequestTracker::commit_prepare(Ticket& t, Conn& c) {
  if (t.refused) return;  // the call does not run: nothing more to commit
  t.commit_names.add_all(c.pending);
  c.pending.clear();
  c.end_txn();
  if (!s_.linearizable || t.commit_names.empty()) return;
  if (!marks_) {
    counters_.pend_failures++;
    if (warn_) warn_("tierce: linearizable mode without a cluster (set tierce.topology and "
                     "tierce.node): writes are invalidated after their commit only");
    return;
  }
  std::string error;
  uint64_t us = 0;
  // One token per call: a second commit point of the same call (multi_query) marks again with it,
  // so that one Release lifts every mark of the call.
  if (t.token == 0) t.token = fresh_token();
  if (marks_->pend(t.commit_names, t.token, s_.pending_ttl_ms, s_.pend_timeout_ms, error, us)) {
    counters_.pends++;
    counters_.pend_us += us;
    return;
  }
  // Not every home holds the mark: committing now would let a home that missed it validate or
  // register a page without the write while another serves one with it (the inversion this mode
  // exists to close). Waiting for the fence bound instead would hold the transaction's row locks
  // for it. So the commit is refused: the call does not run. The homes that did acknowledge hold
  // marks of t.token: after() releases them.
  counters_.pend_failures++;
  counters_.writes_refused++;
  t.refused = true;
  t.refusal =
      "PHPEXT0101 linearizable mode: write refused before its commit: its pending mark "
      "did not reach every home within tierce.pend_timeout_ms = " +
      std::to_string(s_.pend_timeout_ms) + " (" + error + "); nothing was committed";
}

RequestTracker::Before RequestTracker::before(const Conn& c) const {
  Before b;
  b.in_txn = c.in_txn;
  b.autocommit = c.autocommit;
  if (s_.linearizable) b.pending = c.pending;
  return b;
}

void RequestTracker::refuse_restore(Ticket& t, Conn& c, Before& b) {
  // Nothing of the call ran (not even its statements before the commit point): the connection is
  // as it was, its open transaction (if any) still holds its writes and locks until rolled back.
  c.in_txn = b.in_txn;
  c.autocommit = b.autocommit;
  c.pending = std::move(b.pending);
  c.end_txn();  // facts recorded meanwhile are dropped (fewer facts is conservative)
  t.rollback = b.in_txn;
  t.written.clear();
  t.unkeyed.clear();
  t.locked.clear();
  t.forget_facts = true;
}

void RequestTracker::rollback_prepare(Ticket& t, Conn& c) {
  t.rolled_back.add_all(c.pending);
  c.pending.clear();
  c.end_txn();
}

void RequestTracker::committed(Ticket& t) {
  if (t.commit_names.empty()) return;
  if (t.token != 0) {
    std::string error;
    // After a commit: the rule (every home applied it, or the fence bound passed).
    if (marks_ && marks_->release(t.commit_names, t.token, 0, error)) {
      counters_.releases++;
      return;  // the release is the final invalidation (bump + log at every home)
    }
    counters_.release_failures++;
    if (warn_) warn_("tierce: could not release pending marks after the commit (" + error +
                     "): the homes expire them after tierce.pending_ttl; invalidating through "
                     "the response as well");
  }
  invalidates_.add_all(t.commit_names);
}

RequestTracker::Ticket RequestTracker::before_statement(ConnId id, const sd::Compiled& compiled,
                                                        const sd::Params& params) {
  Ticket t;
  t.active = true;
  t.conn = id;
  t.what = Ticket::What::Statement;
  Conn& c = conn(id);
  Before b = before(c);
  for (size_t si = 0; si < compiled.statements.size() && !t.refused; ++si) {
    const sd::Statement& st = compiled.statements[si];
    counters_.statements++;
    switch (st.precision) {
      case sd::Precision::Exact: counters_.exact++; break;
      case sd::Precision::TableLevel: counters_.table_level++; break;
      case sd::Precision::Conservative: counters_.conservative++; break;
    }
    switch (st.kind) {
      case sd::Kind::Begin:
        // BEGIN inside a transaction commits it (implicit commit).
        if (c.in_txn && !c.pending.empty()) commit_prepare(t, c);
        c.end_txn();
        c.in_txn = true;
        continue;
      case sd::Kind::Commit:
        commit_prepare(t, c);
        c.in_txn = !c.autocommit;
        counters_.commits++;
        continue;
      case sd::Kind::Rollback:
        rollback_prepare(t, c);
        c.in_txn = !c.autocommit;
        counters_.rollbacks++;
        continue;
      case sd::Kind::Savepoint:
        continue;
      case sd::Kind::RollbackToSavepoint:  // keeps what it may undo (conservative); values revert
        t.forget_facts = true;
        c.end_txn();
        continue;
      case sd::Kind::Neutral:
        counters_.neutral++;
        if (st.autocommit) {
          if (*st.autocommit && !c.autocommit) {  // SET autocommit=1 commits
            commit_prepare(t, c);
            c.in_txn = false;
          }
          c.autocommit = *st.autocommit;
          if (!c.autocommit) c.in_txn = true;
        }
        continue;
      default:
        break;
    }
    sd::Derived d;
    sd::derive(compiled, si, params, d, c.in_txn ? &c.facts : nullptr);
    if (c.in_txn) {
      for (auto& l : d.locked) t.locked.push_back(std::move(l));
      t.txn = c.txn;
    }
    for (auto& w : d.written) t.written.push_back(std::move(w));
    for (auto& u : d.unkeyed_writes) t.unkeyed.push_back(std::move(u));
    if (d.invalidate_all || d.uncacheable) t.forget_facts = true;
    if (!d.depends.empty() || d.uncacheable) {
      counters_.reads++;
      if (s_.auto_mode) {
        for (const std::string& n : d.depends) depends_.add(n);
        if (d.uncacheable && !uncacheable_) {
          uncacheable_ = true;
          uncacheable_reason_ = st.reason;
          counters_.uncacheable_reads++;
        }
      }
    }
    if (!d.invalidates.empty() || d.invalidate_all) {
      counters_.writes++;
      if (!s_.auto_mode) continue;
      NameSet names;
      for (const std::string& n : d.invalidates) names.add(n);
      if (d.invalidate_all) {
        names.set_all();
        counters_.invalidate_all++;
      }
      if (c.in_txn && !d.invalidate_all) {
        c.pending.add_all(names);
      } else {
        // Autocommit, or a statement that commits implicitly (DDL): now, with what was open.
        c.pending.add_all(names);
        commit_prepare(t, c);
        if (d.invalidate_all) c.in_txn = !c.autocommit;
      }
    }
  }
  if (t.refused) refuse_restore(t, c, b);
  return t;
}

RequestTracker::Ticket RequestTracker::before_commit(ConnId id) {
  Ticket t;
  t.active = true;
  t.conn = id;
  t.what = Ticket::What::Commit;
  Conn& c = conn(id);
  Before b = before(c);
  commit_prepare(t, c);
  c.in_txn = !c.autocommit;
  counters_.commits++;
  if (t.refused) refuse_restore(t, c, b);
  return t;
}

RequestTracker::Ticket RequestTracker::before_begin(ConnId id) {
  Ticket t;
  t.active = true;
  t.conn = id;
  t.what = Ticket::What::Begin;
  Conn& c = conn(id);
  Before b = before(c);
  if (c.in_txn && !c.pending.empty()) commit_prepare(t, c);
  c.end_txn();
  c.in_txn = true;
  if (t.refused) refuse_restore(t, c, b);
  return t;
}

RequestTracker::Ticket RequestTracker::before_rollback(ConnId id) {
  Ticket t;
  t.active = true;
  t.conn = id;
  t.what = Ticket::What::Rollback;
  Conn& c = conn(id);
  rollback_prepare(t, c);
  c.in_txn = !c.autocommit;
  counters_.rollbacks++;
  return t;
}

RequestTracker::Ticket RequestTracker::before_autocommit(ConnId id, bool on) {
  Ticket t;
  t.active = true;
  t.conn = id;
  t.what = Ticket::What::Commit;
  Conn& c = conn(id);
  Before b = before(c);
  if (on && !c.autocommit) {
    commit_prepare(t, c);
    c.in_txn = false;
  }
  c.end_txn();
  c.autocommit = on;
  if (!on) c.in_txn = true;
  if (t.refused) refuse_restore(t, c, b);
  return t;
}

void RequestTracker::after(Ticket& t, bool ok) {
  if (!t.active) return;
  t.active = false;
  if (t.refused) {
    // The call did not run: no fact changed, nothing was committed, nothing to invalidate. The
    // homes that acknowledged the Pend hold marks of the token: lift them now, without waiting for
    // the others (they never got the Pend, or get it late and expire it after
    // tierce.pending_ttl_ms, which counts as one more invalidation: safe).
    std::string error;
    if (t.token != 0 && marks_) {
      if (marks_->release(t.commit_names, t.token, s_.pend_timeout_ms, error)) {
        counters_.releases++;
      } else {
        counters_.release_failures++;
        if (warn_)
          warn_("PHPEXT0102 could not release the pending marks of a refused write (" + error +
                "): the homes expire them after tierce.pending_ttl_ms");
      }
    }
    return;
  }
  // The facts follow the rows this call changed: only if it succeeded (a failed UPDATE left the
  // row as it was; when unsure, forget).
  auto it = conns_.find(t.conn);
  if (it != conns_.end() && !ok && !t.rolled_back.empty()) {
    // A ROLLBACK that failed may have left the transaction open (say a refused write's rollback,
    // or commands out of sync): its writes stay pending, so that a later COMMIT pends and
    // invalidates them, or the end of the request does.
    it->second.pending.add_all(t.rolled_back);
    it->second.in_txn = true;
  }
  if (it != conns_.end()) {
    Facts& f = it->second.facts;
    if (!ok || t.forget_facts) {
      f.values.clear();
    } else {
      for (const auto& u : t.unkeyed) f.erase_table(u);
      for (const auto& w : t.written) {
        if (w.deleted) {
          f.erase_row(w.table, w.key);
          continue;
        }
        for (const auto& [col, v] : w.set) {
          if (v) f.values[Facts::key(w.table, w.key, col)] = *v;
          else f.values.erase(Facts::key(w.table, w.key, col));
        }
      }
    }
  }
  // Whether or not the call succeeded: a failed COMMIT may have committed (connection lost while
  // it ran), a failed autocommit statement may have changed rows (non-transactional tables).
  (void)ok;
  committed(t);
}

}  // namespace tierce::php
