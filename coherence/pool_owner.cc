// coherence/pool_owner.cc — the requester side of the memory pool (pool_owner.h).
#include "coherence/pool_owner.h"

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "coherence/slab_pool_wire.h"
#include "fabric/random.h"

namespace tierce::coherence {

namespace w = poolwire;

struct PoolOwner::Donor {
  PoolDonor info;
  std::mutex call_mu;  // the connection, and one call at a time
  std::unique_ptr<fabric::Connection> conn;
  // Under PoolOwner::mu_:
  uint64_t incarnation = 0;  // ours at this donor (a new one after it refused the old: LeaseLost)
  bool answered = false;
  uint32_t free_slabs = 0;
  uint32_t held = 0;
  uint64_t pool_incarnation = 0;
  uint64_t lease_ms = 0;
  std::string last_error;
  Clock::time_point writable_until{};
  std::vector<uint32_t> pending_free;  // freed by the user, not yet confirmed by the donor
  uint64_t allocs = 0;  // allocations it granted us (see renew_now: stale UnknownOwner replies)
};

namespace {

uint64_t nonzero_random() {
  uint64_t x = 0;
  while (x == 0) x = fabric::random_u64();
  return x;
}

}  // namespace

PoolOwner::PoolOwner(std::vector<PoolDonor> donors, PoolOwnerOptions opts, fabric::LogSink log)
    : opts_(std::move(opts)), log_(std::move(log)) {
  if (donors.empty()) throw std::invalid_argument("PoolOwner: no donor to ask for memory");
  if (opts_.owner.empty() || opts_.owner.size() > SlabPoolLimits::kMaxOwnerName ||
      !std::all_of(opts_.owner.begin(), opts_.owner.end(),
                   [](char c) { return c > ' ' && c < 127; }))
    throw std::invalid_argument("PoolOwner: owner name '" + opts_.owner +
                                "' is not 1..64 printable bytes without spaces");
  if (opts_.incarnation == 0) opts_.incarnation = nonzero_random();
  rng_.seed(opts_.seed ? opts_.seed : fabric::random_u64());
  for (auto& d : donors) {
    auto x = std::make_unique<Donor>();
    x->info = std::move(d);
    x->incarnation = opts_.incarnation;
    donors_.push_back(std::move(x));
  }
}

PoolOwner::~PoolOwner() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (renewer_.joinable()) renewer_.join();
  try {
    auto all = held();
    free(all);
  } catch (const std::exception&) {  // best effort: the donors reclaim at the lease's end
  }
}

void PoolOwner::on_lost(LostFn fn) {
  std::lock_guard lk(mu_);
  on_lost_ = std::move(fn);
}

void PoolOwner::start() {
  std::lock_guard lk(mu_);
  if (!renewer_.joinable()) renewer_ = std::thread([this] { renew_loop(); });
}

base::Result<std::vector<uint8_t>> PoolOwner::call(size_t i, const char* service,
                                                   const std::vector<uint8_t>& body) {
  Donor& d = *donors_[i];
  std::lock_guard lk(d.call_mu);
  try {
    if (!d.conn) {
      fabric::ClientOptions o = opts_.client;
      o.identity = d.info.identity;
      d.conn = fabric::connect(d.info.uri, o);
    }
    return d.conn->call(service, body);
  } catch (const std::exception& e) {
    d.conn.reset();  // reconnect next time (a restarted memd is found again by its URI)
    return base::Status(base::Code::Unavailable, e.what());
  }
}

// call() and decode: the reply, or why not (no answer, or a malformed one).
base::Result<poolwire::Reply> PoolOwner::call_reply(size_t i, const char* service,
                                                    const std::vector<uint8_t>& body) {
  auto reply = call(i, service, body);
  if (!reply) return reply.status();
  try {
    return w::decode_reply(*reply);
  } catch (const w::PoolWireError& e) {
    return base::Status(base::Code::InvalidArgument, std::string("malformed reply: ") + e.what());
  }
}

std::vector<OwnedSlab> PoolOwner::drop_donor_locked(size_t i) {
  std::vector<OwnedSlab> lost;
  auto keep = std::stable_partition(held_.begin(), held_.end(),
                                    [i](const OwnedSlab& s) { return s.donor != i; });
  lost.assign(keep, held_.end());
  held_.erase(keep, held_.end());
  Donor& d = *donors_[i];
  d.held = 0;
  d.pending_free.clear();
  d.writable_until = {};
  counters_.slabs_lost += lost.size();
  return lost;
}

PoolOwner::Loss PoolOwner::note_reply_locked(size_t i, uint32_t free, uint64_t pool_incarnation,
                                             uint64_t lease_ms) {
  Donor& d = *donors_[i];
  Loss lost;
  if (d.pool_incarnation != 0 && pool_incarnation != d.pool_incarnation &&
      (d.held > 0 || !d.pending_free.empty())) {
    lost.slabs = drop_donor_locked(i);
    lost.why = "the pool of " + d.info.node + " is a new incarnation (its memd restarted): every "
           "descriptor of the old one is void";
  }
  d.answered = true;
  d.last_error.clear();
  d.free_slabs = free;
  d.pool_incarnation = pool_incarnation;
  d.lease_ms = lease_ms;
  return lost;
}

void PoolOwner::report_lost(const std::vector<OwnedSlab>& lost, const std::string& why) {
  if (lost.empty()) return;
  if (log_)
    log_(fabric::LogLevel::Warn,
         "COH0401 pool owner " + opts_.owner + ": " + std::to_string(lost.size()) +
             " slab(s) of " + donors_[lost.front().donor]->info.node + " lost: " + why +
             "; what was cached in them is gone (misses), nothing wrong is served");
  LostFn fn;
  {
    std::lock_guard lk(mu_);
    fn = on_lost_;
  }
  if (fn) fn(lost, why);
}

base::Result<std::vector<OwnedSlab>> PoolOwner::alloc(uint32_t count) {
  if (count == 0 || count > SlabPoolLimits::kMaxSlabsPerCall)
    return base::Status(base::Code::InvalidArgument,
                        "a count of " + std::to_string(count) + " slabs is out of range 1.." +
                            std::to_string(SlabPoolLimits::kMaxSlabsPerCall));
  bool any_known;
  {
    std::lock_guard lk(mu_);
    any_known = std::any_of(donors_.begin(), donors_.end(),
                            [](const auto& d) { return d->answered; });
  }
  if (!any_known) renew_now();  // learn the free counts first

  std::vector<bool> tried(donors_.size(), false);
  std::vector<bool> renamed(donors_.size(), false);  // asked again as a new incarnation once
  std::string refusals;
  for (;;) {
    size_t i;
    uint64_t inc;
    {
      std::lock_guard lk(mu_);
      std::vector<DonorCandidate> cand;
      std::vector<size_t> index;
      for (size_t k = 0; k < donors_.size(); ++k) {
        const Donor& d = *donors_[k];
        if (tried[k] || !d.answered) continue;
        cand.push_back({d.info.node, d.free_slabs, d.info.local});
        index.push_back(k);
      }
      auto c = choose_donor(cand, count, opts_.placement, rng_);
      if (!c) {
        ++counters_.alloc_refusals;
        std::ostringstream o;
        o << "no donor has " << count << " free slab(s) (";
        for (size_t k = 0; k < donors_.size(); ++k) {
          const Donor& d = *donors_[k];
          o << (k ? ", " : "") << d.info.node << ": "
            << (d.answered ? std::to_string(d.free_slabs) + " free" : "no answer (" + d.last_error + ")");
        }
        o << ")" << refusals;
        return base::Status(base::Code::ResourceExhausted, o.str());
      }
      i = index[*c];
      inc = donors_[i]->incarnation;
    }
    tried[i] = true;
    const auto sent = Clock::now();
    auto rep = call_reply(i, w::kAllocService, w::encode(w::AllocRequest{opts_.owner, inc, count}));
    std::vector<OwnedSlab> got;
    Loss lost;
    {
      std::lock_guard lk(mu_);
      Donor& d = *donors_[i];
      if (!rep) {
        d.answered = false;
        d.last_error = rep.message();
        refusals += "; " + d.info.node + ": " + rep.message();
        continue;
      }
      lost = note_reply_locked(i, rep->free_slabs, rep->pool_incarnation, rep->lease_ms);
      if (rep->status == PoolStatus::Ok) {
        for (const auto& s : rep->slabs) got.push_back({i, rep->pool_incarnation, s});
        held_.insert(held_.end(), got.begin(), got.end());
        d.held += uint32_t(got.size());
        ++d.allocs;
        d.writable_until = sent + std::chrono::milliseconds(rep->lease_ms - rep->lease_ms / 4);
        ++counters_.allocs;
        counters_.slabs_allocated += got.size();
      } else if (rep->status == PoolStatus::LeaseLost) {
        // This incarnation is void at that donor (it reclaimed our slabs): drop them and speak
        // as a new incarnation there from now on; the other donors keep ours.
        auto more = drop_donor_locked(i);
        lost.slabs.insert(lost.slabs.end(), more.begin(), more.end());
        lost.why = d.info.node + " reclaimed our slabs (LeaseLost): " + rep->message;
        d.incarnation = nonzero_random();
        refusals += "; " + d.info.node + ": LeaseLost";
        if (!renamed[i]) tried[i] = false;  // ask again with the new incarnation, once
        renamed[i] = true;
      } else {
        refusals += "; " + d.info.node + ": " + std::string(to_string(rep->status)) + " (" +
                    rep->message + ")";
      }
    }
    report_lost(lost.slabs, lost.why);
    if (!got.empty()) return got;
  }
}

void PoolOwner::free(std::span<const OwnedSlab> slabs) {
  std::map<size_t, std::vector<uint32_t>> todo;
  {
    std::lock_guard lk(mu_);
    for (const auto& s : slabs) {
      auto it = std::find_if(held_.begin(), held_.end(), [&](const OwnedSlab& h) {
        return h.donor == s.donor && h.slab.slab == s.slab.slab &&
               h.pool_incarnation == s.pool_incarnation;
      });
      if (it == held_.end()) continue;
      held_.erase(it);
      Donor& d = *donors_[s.donor];
      --d.held;
      d.pending_free.push_back(s.slab.slab);
      todo[s.donor];
    }
  }
  for (auto& [i, unused] : todo) {
    (void)unused;
    flush_pending_free(i);
  }
}

// Sends the donor the frees it has not confirmed yet (at most one call's worth).
void PoolOwner::flush_pending_free(size_t i) {
  std::vector<uint32_t> batch;
  uint64_t inc;
  {
    std::lock_guard lk(mu_);
    Donor& d = *donors_[i];
    batch = d.pending_free;
    inc = d.incarnation;
  }
  if (batch.empty()) return;
  if (batch.size() > SlabPoolLimits::kMaxSlabsPerCall) batch.resize(SlabPoolLimits::kMaxSlabsPerCall);
  auto rep = call_reply(i, w::kFreeService, w::encode(w::FreeRequest{opts_.owner, inc, batch}));
  std::lock_guard lk(mu_);
  Donor& d = *donors_[i];
  if (!rep) {  // kept in pending_free: retried by the next renewal round
    d.answered = false;
    d.last_error = rep.message();
    return;
  }
  // Ok: freed. NotHeld/UnknownOwner/LeaseLost: the donor does not count them as ours any more.
  // BadSlab/BadRequest: a bug; retrying would not help. Either way they are not ours.
  auto& p = d.pending_free;
  for (uint32_t s : batch) p.erase(std::remove(p.begin(), p.end(), s), p.end());
  if (rep->status == PoolStatus::Ok) counters_.slabs_freed += batch.size();
  d.free_slabs = rep->free_slabs;
}

size_t PoolOwner::renew_now() {
  size_t answered = 0;
  for (size_t i = 0; i < donors_.size(); ++i) {
    // Frees that did not reach the donor first: else it would keep them as ours.
    flush_pending_free(i);
    uint64_t inc, allocs_before;
    {
      std::lock_guard lk(mu_);
      inc = donors_[i]->incarnation;
      allocs_before = donors_[i]->allocs;
    }
    const auto sent = Clock::now();
    auto rep = call_reply(i, w::kRenewService, w::encode(w::RenewRequest{opts_.owner, inc}));
    Loss lost;
    {
      std::lock_guard lk(mu_);
      Donor& d = *donors_[i];
      if (!rep) {
        const std::string& err = rep.message();
        ++counters_.renew_failures;
        if (d.answered && log_)
          log_(fabric::LogLevel::Warn, "COH0402 pool owner " + opts_.owner + ": donor " +
                                           d.info.node + " (" + d.info.uri +
                                           ") did not answer a renewal: " + err);
        d.answered = false;
        d.last_error = err;
        if (d.held > 0 && Clock::now() >= d.writable_until) {
          lost.slabs = drop_donor_locked(i);
          lost.why = "no renewal answered by " + d.info.node + " for lease - lease/4 (" + err +
                "): it reclaims them after a whole lease";
          // Spoken to as a new incarnation from now on: if the donor was only slow or frozen and
          // still counts the old slabs as ours, its first request from us reclaims them (no leak).
          d.incarnation = nonzero_random();
        }
      } else {
        ++answered;
        lost = note_reply_locked(i, rep->free_slabs, rep->pool_incarnation, rep->lease_ms);
        switch (rep->status) {
          case PoolStatus::Ok:
            ++counters_.renewals;
            d.writable_until = sent + std::chrono::milliseconds(rep->lease_ms - rep->lease_ms / 4);
            break;
          case PoolStatus::UnknownOwner:  // holds nothing of ours: fine unless we thought so
            // ... or unless an allocation there completed since this renewal was sent: the call
            // mutex orders the two calls, but this reply is applied only now, under mu_, and an
            // alloc() (another thread) may have slipped in between — the donor answered the
            // renewal before it knew us. An Ok alloc means we are active there: a real
            // UnknownOwner after it needs a restarted donor, which its pool incarnation shows.
            if (d.held > 0 && d.allocs == allocs_before) {
              auto more = drop_donor_locked(i);
              lost.slabs.insert(lost.slabs.end(), more.begin(), more.end());
              lost.why = d.info.node + " does not know us as an owner any more (it reclaimed our "
                    "slabs: was this process frozen or cut off past the lease?)";
            }
            d.pending_free.clear();
            break;
          case PoolStatus::LeaseLost: {
            auto more = drop_donor_locked(i);
            lost.slabs.insert(lost.slabs.end(), more.begin(), more.end());
            lost.why = d.info.node + " reclaimed our slabs (LeaseLost): " + rep->message;
            d.incarnation = nonzero_random();
            break;
          }
          default:
            ++counters_.renew_failures;
            d.last_error = std::string(to_string(rep->status)) + ": " + rep->message;
            if (log_)
              log_(fabric::LogLevel::Error, "COH0403 pool owner " + opts_.owner + ": donor " +
                                                d.info.node + " refused a renewal: " +
                                                d.last_error);
        }
      }
    }
    report_lost(lost.slabs, lost.why);
  }
  return answered;
}

bool PoolOwner::writable(size_t donor) const {
  std::lock_guard lk(mu_);
  return donor < donors_.size() && Clock::now() < donors_[donor]->writable_until;
}

std::chrono::milliseconds PoolOwner::renew_period() const {
  if (opts_.renew_period.count() > 0) return opts_.renew_period;
  std::lock_guard lk(mu_);
  uint64_t lease = 0;
  for (const auto& d : donors_)
    if (d->lease_ms && (!lease || d->lease_ms < lease)) lease = d->lease_ms;
  return lease ? std::chrono::milliseconds(std::max<uint64_t>(1, lease / 3))
               : std::chrono::milliseconds(200);
}

void PoolOwner::renew_loop() {
  for (;;) {
    renew_now();
    const auto period = renew_period();
    std::unique_lock lk(mu_);
    if (cv_.wait_for(lk, period, [&] { return stopping_; })) return;
  }
}

std::vector<OwnedSlab> PoolOwner::held() const {
  std::lock_guard lk(mu_);
  return held_;
}

std::vector<DonorStatus> PoolOwner::donors() const {
  std::lock_guard lk(mu_);
  std::vector<DonorStatus> v;
  for (const auto& d : donors_)
    v.push_back({d->info.node, d->info.uri, d->answered, d->free_slabs, d->held,
                 d->pool_incarnation, d->lease_ms, d->last_error});
  return v;
}

PoolOwnerCounters PoolOwner::counters() const {
  std::lock_guard lk(mu_);
  return counters_;
}

std::string PoolOwner::status_text() const {
  auto c = counters();
  std::ostringstream o;
  o << "pool_owner " << opts_.owner << "\npool_owner_placement " << to_string(opts_.placement)
    << "\npool_owner_allocs " << c.allocs << "\npool_owner_alloc_refusals " << c.alloc_refusals
    << "\npool_owner_slabs_allocated " << c.slabs_allocated << "\npool_owner_slabs_freed "
    << c.slabs_freed << "\npool_owner_renewals " << c.renewals << "\npool_owner_renew_failures "
    << c.renew_failures << "\npool_owner_slabs_lost " << c.slabs_lost << "\n";
  for (const auto& d : donors())
    o << "pool_donor " << d.node << " " << (d.answered ? "up" : "down") << " free " << d.free_slabs
      << " held " << d.held << (d.last_error.empty() ? "" : " error " + d.last_error) << "\n";
  return o.str();
}

}  // namespace tierce::coherence
