// coherence/home.cc — the home node's dependency index and invalidation log (see home.h).
#include "coherence/home.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "base/check.h"
#include "coherence/key.h"
#include "coherence/layout.h"
#include "fabric/random.h"

namespace tierce::coherence {

std::string_view to_string(Refusal r) {
  switch (r) {
    case Refusal::None: return "registered";
    case Refusal::Race: return "an invalidation of its dependencies passed while it was rendered";
    case Refusal::LogTooShort:
      return "the invalidation log no longer reaches back to the render's start";
    case Refusal::OtherIncarnation: return "the render read another incarnation of the home";
    case Refusal::Fenced: return "the home is fenced (it cannot prove it holds every invalidation)";
    case Refusal::OtherTopology: return "the request was made from another topology";
    case Refusal::NotHome: return "this node is not the key's home";
    case Refusal::Evicted: return "evicted at once (max_keys)";
    case Refusal::NoDependencies: return "no dependency (the scheme is dependency-lists)";
    case Refusal::BadRequest: return "malformed request";
    case Refusal::Unreachable: return "the home did not answer";
    case Refusal::Pending:
      return "a write of one of its dependencies is pending (its commit has not been released)";
  }
  return "?";
}

std::string_view to_string(MarkOp op) {
  switch (op) {
    case MarkOp::None: return "none";
    case MarkOp::Pend: return "pend";
    case MarkOp::Release: return "release";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& o, MarkOp op) { return o << to_string(op); }

uint32_t effective_ttl_ms(uint32_t ttl_ms) {
  if (ttl_ms == 0) return kDefaultMarkTtlMs;
  return std::min(ttl_ms, kMaxMarkTtlMs);
}

std::ostream& operator<<(std::ostream& o, Refusal r) { return o << to_string(r); }

namespace {
// kAll (0) marks an invalidate-all in the log; a real dependency that hashes to 0 becomes 1.
uint64_t norm(uint64_t dep) { return dep == HomeState::kAll ? 1 : dep; }

uint64_t steady_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}
}  // namespace

HomeState::HomeState(void* versions, uint64_t slots, HomeLimits limits, bool init, uint64_t digest,
                     Scheme scheme, uint64_t node)
    : versions_(versions), slots_(slots), limits_(limits), scheme_(scheme), now_ns_(steady_ns) {
  if (slots_ == 0) throw std::invalid_argument("version table with no slots");
  if (limits_.log_entries == 0) limits_.log_entries = 1;
  if (init) {
    // Random bases: a restarted home never re-issues a version (or a sequence) a proxy or a
    // render still holds from the previous incarnation. Top bit clear: no wrap in practice.
    uint64_t base = fabric::random_u64() >> 1;
    uint64_t seq = fabric::random_u64() >> 1;
    word_at(versions_, 0).store(kVersionsMagic, std::memory_order_relaxed);
    word_at(versions_, kSlotCountOffset).store(slots_, std::memory_order_relaxed);
    word_at(versions_, kBaseOffset).store(base, std::memory_order_relaxed);
    word_at(versions_, kDigestOffset).store(digest, std::memory_order_relaxed);
    word_at(versions_, kHomeNodeOffset).store(node, std::memory_order_relaxed);
    for (uint64_t i = 0; i < slots_; ++i)
      word_at(versions_, slot_offset(i)).store(base, std::memory_order_relaxed);
    word_at(versions_, kSeqOffset).store(seq, std::memory_order_release);
  }
  log_floor_ = seq();
}

void HomeState::set_clock(NowNs now_ns) {
  std::lock_guard lk(mu_);
  now_ns_ = now_ns ? std::move(now_ns) : NowNs(steady_ns);
}

uint64_t HomeState::seq() const {
  return word_at(versions_, kSeqOffset).load(std::memory_order_acquire);
}

uint64_t HomeState::version(uint64_t slot) const {
  return word_at(versions_, slot_offset(slot % slots_)).load(std::memory_order_acquire);
}

uint64_t HomeState::bump_locked(uint64_t slot) {
  return word_at(versions_, slot_offset(slot)).fetch_add(1, std::memory_order_acq_rel) + 1;
}

void HomeState::drop_key_locked(uint64_t key, const Key& k) {
  for (uint64_t d : k.deps) {
    auto it = deps_.find(d);
    if (it == deps_.end()) continue;
    it->second.erase(key);
    if (it->second.empty()) deps_.erase(it);
  }
  keys_.erase(key);
}

void HomeState::evict_locked() {
  while (keys_.size() > limits_.max_keys && !order_.empty()) {
    auto [order, key] = order_.front();
    order_.pop_front();
    auto it = keys_.find(key);
    if (it == keys_.end() || it->second.order != order) continue;  // stale queue entry
    // Forgetting a key's dependencies would leave its cached copies valid for ever: bump it.
    bump_locked(it->second.slot);
    Key k = std::move(it->second);
    drop_key_locked(key, k);
    ++stats_.evictions;
  }
  // Every key has a live entry in order_ (pushed when it was first registered, kept when the
  // queue is compacted), so the queue runs dry only once the keys are within the limit.
  TIERCE_CHECK(keys_.size() <= limits_.max_keys, "every key is in the eviction order");
}

RegisterResult HomeState::register_page(uint64_t key, uint64_t seq_start,
                                        std::span<const uint64_t> dependencies) {
  std::lock_guard lk(mu_);
  RegisterResult res;
  const uint64_t slot = slot_of(key, slots_);
  res.slot = slot;
  auto refuse = [&](Refusal r, uint64_t& counter) {
    res.refusal = r;
    res.reason = std::string(to_string(r));
    ++counter;
    return res;
  };
  // An expired mark is an invalidation of its dependencies: logged before the checks below, so
  // a render that started before the expiry is refused (Race) and one after it registers.
  const uint64_t t = now_ns_();
  expire_locked(t);
  if (scheme_ == Scheme::DependencyLists && dependencies.empty())
    return refuse(Refusal::NoDependencies, stats_.refused_other);
  uint64_t now = seq();
  if (seq_start > now) return refuse(Refusal::OtherIncarnation, stats_.refused_log);
  if (seq_start < log_floor_) return refuse(Refusal::LogTooShort, stats_.refused_log);
  // Invalidations newer than the render's start: did one touch what the page depends on?
  for (auto it = log_.rbegin(); it != log_.rend() && it->first > seq_start; ++it) {
    bool hit = it->second == kAll;
    for (uint64_t d : dependencies) hit = hit || norm(d) == it->second;
    if (hit) return refuse(Refusal::Race, stats_.refused_race);
  }
  // A write of one of its dependencies is between its Pend and its Release: the page may hold
  // rows another proxy's reader cannot see yet (or the reverse). Not cacheable until released.
  if (marked_locked(dependencies, t)) return refuse(Refusal::Pending, stats_.refused_pending);
  auto [it, fresh] = keys_.try_emplace(key);
  Key& k = it->second;
  if (fresh) {
    k.slot = slot;
    k.order = next_order_++;
    order_.emplace_back(k.order, key);
  }
  for (uint64_t d0 : dependencies) {
    uint64_t d = norm(d0);
    if (std::find(k.deps.begin(), k.deps.end(), d) == k.deps.end()) k.deps.push_back(d);
    deps_[d].insert(key);
  }
  ++stats_.registrations;
  res.refusal = Refusal::None;
  res.version = version(slot);
  evict_locked();
  if (order_.size() > 2 * keys_.size() + 1024) {  // drop stale queue entries now and then
    std::deque<std::pair<uint64_t, uint64_t>> keep;
    for (auto& e : order_) {
      auto f = keys_.find(e.second);
      if (f != keys_.end() && f->second.order == e.first) keep.push_back(e);
    }
    order_.swap(keep);
  }
  // The page may have been evicted at once (max_keys tiny): then its version just moved on.
  if (!keys_.count(key)) {
    res.refusal = Refusal::Evicted;
    res.reason = std::string(to_string(Refusal::Evicted));
  }
  return res;
}

InvalidateResult HomeState::apply_locked(std::span<const uint64_t> dependencies, bool all) {
  InvalidateResult res;
  std::vector<uint64_t> victims;
  if (all) {
    for (auto& [key, k] : keys_) victims.push_back(key);
  } else {
    for (uint64_t d0 : dependencies) {
      auto it = deps_.find(norm(d0));
      if (it == deps_.end()) continue;
      victims.insert(victims.end(), it->second.begin(), it->second.end());
    }
  }
  std::unordered_set<uint64_t> slots;
  for (uint64_t key : victims) {
    auto it = keys_.find(key);
    if (it == keys_.end()) continue;  // listed under two of the dependencies
    slots.insert(it->second.slot);
    Key k = std::move(it->second);
    drop_key_locked(key, k);
    ++res.keys_bumped;
  }
  for (uint64_t s : slots) bump_locked(s);  // once per slot, however many keys matched
  res.slots_bumped = slots.size();

  // Log it, then publish the new sequence. A render that read the old sequence finds this entry
  // when it registers (same mutex); one that reads the new one started after the commit.
  res.seq = seq() + 1;
  TIERCE_DCHECK(log_.empty() || log_.back().first < res.seq,
                "the log's sequence numbers grow with each invalidation");
  if (all) {
    log_.emplace_back(res.seq, kAll);
  } else {
    for (uint64_t d : dependencies) log_.emplace_back(res.seq, norm(d));
    if (dependencies.empty()) log_.emplace_back(res.seq, uint64_t(1));  // keeps seq continuity
  }
  while (log_.size() > limits_.log_entries) {
    log_floor_ = std::max(log_floor_, log_.front().first);
    log_.pop_front();
  }
  word_at(versions_, kSeqOffset).store(res.seq, std::memory_order_release);
  stats_.keys_bumped += res.keys_bumped;
  stats_.slots_bumped += res.slots_bumped;
  return res;
}

InvalidateResult HomeState::invalidate(std::span<const uint64_t> dependencies, Scheme scheme,
                                       const PendingMark& mark) {
  std::lock_guard lk(mu_);
  const uint64_t now = now_ns_();
  expire_locked(now);
  bool all = scheme == Scheme::InvalidateAll;
  // A Pend whose marks would pass max_pending_marks is applied as an invalidate-all with one
  // global mark: conservative (every page refused until released), memory bounded.
  bool overflow = false;
  if (mark.op == MarkOp::Pend && !all && !dependencies.empty()) {
    size_t fresh = 0;
    for (uint64_t d0 : dependencies) {
      auto it = marks_.find(norm(d0));
      if (it == marks_.end() || !it->second.count(mark.token)) ++fresh;
    }
    if (marks_locked() + fresh > limits_.max_pending_marks) overflow = all = true;
  }
  InvalidateResult res = apply_locked(dependencies, all);
  ++stats_.invalidations;
  if (mark.op == MarkOp::Pend) {
    ++stats_.pend_applied;
    const uint64_t deadline = now + uint64_t(effective_ttl_ms(mark.ttl_ms)) * 1'000'000ull;
    if (overflow) ++stats_.pend_overflows;
    if (all || dependencies.empty()) {
      auto g = marks_.find(kAll);
      bool held = g != marks_.end() && g->second.count(mark.token);
      if (held || marks_locked() < limits_.max_pending_marks) {
        add_mark_locked(kAll, mark.token, deadline);
      } else {
        // Not even one more mark: a global mark that names no token, lifted only by expiry.
        if (!overflow) ++stats_.pend_overflows;
        overflow_deadline_ = std::max(overflow_deadline_, deadline);
      }
    } else {
      for (uint64_t d0 : dependencies) add_mark_locked(norm(d0), mark.token, deadline);
    }
  } else if (mark.op == MarkOp::Release) {
    ++stats_.released;
    release_locked(mark.token);
  }
  return res;
}

void HomeState::add_mark_locked(uint64_t dep, uint64_t token, uint64_t deadline) {
  auto& per_token = marks_[dep];
  auto [it, fresh] = per_token.try_emplace(token, deadline);
  if (!fresh) {
    if (it->second >= deadline) return;  // the same token marked it again: keep the later one
    by_deadline_.erase({it->second, token, dep});
    it->second = deadline;
  } else {
    mark_tokens_[token].push_back(dep);
  }
  by_deadline_.emplace(deadline, token, dep);
  TIERCE_DCHECK(marks_.count(dep) && marks_.at(dep).count(token),
                "a mark in the deadline queue is in the marks of its dependency");
}

void HomeState::release_locked(uint64_t token) {
  auto t = mark_tokens_.find(token);
  if (t == mark_tokens_.end()) return;  // never marked here, expired, or released already
  for (uint64_t dep : t->second) {
    auto m = marks_.find(dep);
    if (m == marks_.end()) continue;
    auto e = m->second.find(token);
    if (e == m->second.end()) continue;
    by_deadline_.erase({e->second, token, dep});
    m->second.erase(e);
    if (m->second.empty()) marks_.erase(m);
  }
  mark_tokens_.erase(t);
}

bool HomeState::marked_locked(std::span<const uint64_t> dependencies, uint64_t now) const {
  if (overflow_deadline_ > now) return true;
  if (marks_.empty()) return false;
  // Expired marks were removed just before (expire_locked): whatever is held is live.
  if (marks_.count(kAll)) return true;
  for (uint64_t d : dependencies)
    if (marks_.count(norm(d))) return true;
  return false;
}

size_t HomeState::expire_locked(uint64_t now) {
  std::vector<uint64_t> deps;
  std::unordered_set<uint64_t> seen, tokens;
  bool all = false;
  size_t n = 0;
  while (!by_deadline_.empty() && std::get<0>(*by_deadline_.begin()) <= now) {
    const uint64_t token = std::get<1>(*by_deadline_.begin());
    const uint64_t dep = std::get<2>(*by_deadline_.begin());
    by_deadline_.erase(by_deadline_.begin());
    auto m = marks_.find(dep);
    if (m != marks_.end()) {
      m->second.erase(token);
      if (m->second.empty()) marks_.erase(m);
    }
    tokens.insert(token);
    if (dep == kAll)
      all = true;
    else if (seen.insert(dep).second)
      deps.push_back(dep);
    ++n;
  }
  // Each token's index keeps only the dependencies it still marks (one pass per token).
  for (uint64_t token : tokens) {
    auto t = mark_tokens_.find(token);
    if (t == mark_tokens_.end()) continue;
    auto& v = t->second;
    v.erase(std::remove_if(v.begin(), v.end(),
                           [&](uint64_t dep) {
                             auto m = marks_.find(dep);
                             return m == marks_.end() || !m->second.count(token);
                           }),
            v.end());
    if (v.empty()) mark_tokens_.erase(t);
  }
  if (overflow_deadline_ && overflow_deadline_ <= now) {
    overflow_deadline_ = 0;
    all = true;
    ++n;
  }
  TIERCE_CHECK(by_deadline_.empty() || std::get<0>(*by_deadline_.begin()) > now,
               "no expired mark is left in the deadline queue");
  if (n == 0) return 0;
  // Its Release never came: the write may have committed at any time since the Pend. Treated
  // as that write's invalidation (renders that started before now are refused by the log).
  apply_locked(deps, all);
  stats_.expired += n;
  return n;
}

size_t HomeState::expire_marks() {
  std::lock_guard lk(mu_);
  return expire_locked(now_ns_());
}

HomeStats HomeState::stats() const {
  std::lock_guard lk(mu_);
  HomeStats s = stats_;
  s.keys = keys_.size();
  s.dependencies = deps_.size();
  s.pending_marks = marks_locked();
  return s;
}

}  // namespace tierce::coherence
