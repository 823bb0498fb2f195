// coherence/slab_pool.cc — slab bookkeeping, leases and zeroing (see slab_pool.h), and the
// placement policies.
#include "coherence/slab_pool.h"

#include "base/check.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace tierce::coherence {

std::string_view to_string(PoolStatus s) {
  switch (s) {
    case PoolStatus::Ok:
      return "ok";
    case PoolStatus::NotEnoughFree:
      return "not-enough-free";
    case PoolStatus::OverQuota:
      return "over-quota";
    case PoolStatus::NotHeld:
      return "not-held";
    case PoolStatus::BadSlab:
      return "bad-slab";
    case PoolStatus::UnknownOwner:
      return "unknown-owner";
    case PoolStatus::LeaseLost:
      return "lease-lost";
    case PoolStatus::BadRequest:
      return "bad-request";
  }
  return "?";
}

std::string check_owner_name(std::string_view name) {
  if (name.empty() || name.size() > SlabPoolLimits::kMaxOwnerName)
    return "an owner name has 1.." + std::to_string(SlabPoolLimits::kMaxOwnerName) +
           " bytes, not " + std::to_string(name.size());
  for (char c : name) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) return "an owner name is printable ASCII without spaces";
  }
  return "";
}

namespace {

PoolResult refuse(PoolStatus s, std::string why) {
  PoolResult r;
  r.status = s;
  r.message = std::move(why);
  return r;
}

}  // namespace

SlabPool::SlabPool(uint8_t* base, size_t len, SlabPoolOptions opts)
    : base_(base), opts_(opts), slab_count_(0) {
  const size_t sb = opts_.slab_bytes;
  if (sb < SlabPoolLimits::kMinSlabBytes || sb > SlabPoolLimits::kMaxSlabBytes || (sb & (sb - 1)))
    throw std::invalid_argument("slab size " + std::to_string(sb) +
                                " is not a power of two between 64 KiB and 1 GiB");
  if (opts_.lease_ms == 0) throw std::invalid_argument("the pool's lease must be at least 1 ms");
  if (!base_ || len / sb == 0)
    throw std::invalid_argument("the pool area (" + std::to_string(len) +
                                " bytes) holds no slab of " + std::to_string(sb) + " bytes");
  if (len / sb >= kZeroing)
    throw std::invalid_argument("the pool area holds too many slabs: use larger slabs");
  slab_count_ = uint32_t(len / sb);
  holder_.assign(slab_count_, kFree);
  free_list_.reserve(slab_count_);
  for (uint32_t i = slab_count_; i-- > 0;) free_list_.push_back(i);  // slab 0 goes out first
}

SlabDescriptor SlabPool::descriptor(uint32_t slab) const {
  TIERCE_DCHECK(slab < slab_count_, "a descriptor of a slab of this pool");
  return SlabDescriptor{slab, uint64_t(slab) * opts_.slab_bytes, opts_.slab_bytes};
}

uint32_t SlabPool::free_slabs() const {
  std::lock_guard g(mu_);
  return uint32_t(free_list_.size());
}

std::string SlabPool::holder(uint32_t slab) const {
  std::lock_guard g(mu_);
  if (slab >= slab_count_) return "";
  uint32_t h = holder_[slab];
  return h == kFree || h == kZeroing ? std::string() : owners_[h].name;
}

void SlabPool::retire(Owner& o) {
  TIERCE_CHECK(o.slabs == 0, "an owner retires holding no slab");
  o.active = false;
  o.retired_incarnation = o.incarnation;
  o.retired_at = ++retire_clock_;
}

std::vector<uint32_t> SlabPool::take_back(Owner& o, uint32_t index) {
  std::vector<uint32_t> slabs;
  if (o.slabs > 0) {
    for (uint32_t s = 0; s < slab_count_; ++s) {
      if (holder_[s] != index) continue;
      holder_[s] = kZeroing;
      slabs.push_back(s);
    }
  }
  TIERCE_CHECK(slabs.size() == o.slabs, "an owner's slab count is the number of slabs naming it");
  o.slabs = 0;
  o.reclaimed += slabs.size();
  counters_.slabs_reclaimed += slabs.size();
  retire(o);
  return slabs;
}

void SlabPool::forget_old_retired() {
  if (by_name_.size() <= SlabPoolLimits::kMaxRetiredOwners) return;  // the usual case: O(1)
  size_t retired = 0;
  for (auto& [name, idx] : by_name_) retired += !owners_[idx].active;
  while (retired > SlabPoolLimits::kMaxRetiredOwners) {
    auto oldest = by_name_.end();
    for (auto it = by_name_.begin(); it != by_name_.end(); ++it) {
      const Owner& o = owners_[it->second];
      if (!o.active &&
          (oldest == by_name_.end() || o.retired_at < owners_[oldest->second].retired_at))
        oldest = it;
    }
    vacant_.push_back(oldest->second);
    owners_[oldest->second] = Owner{};
    by_name_.erase(oldest);
    --retired;
  }
}

void SlabPool::finish_zeroing(const std::vector<uint32_t>& slabs) {
  if (slabs.empty()) return;
  // Outside the lock: a slab in state kZeroing is neither held nor allocatable, so nobody else
  // touches its bytes through the pool. Remote readers may still be reading it (stale
  // descriptors): they see the old bytes, zeros, or a mix, and the slot checksum decides.
  for (uint32_t s : slabs) std::memset(base_ + size_t(s) * opts_.slab_bytes, 0, opts_.slab_bytes);
  std::lock_guard g(mu_);
  for (uint32_t s : slabs) {
    TIERCE_CHECK(holder_[s] == kZeroing, "a slab being zeroed is held by nobody meanwhile");
    holder_[s] = kFree;
    free_list_.push_back(s);
  }
  counters_.bytes_zeroed += uint64_t(slabs.size()) * opts_.slab_bytes;
}

SlabPool::Owner* SlabPool::find_current(const std::string& owner, uint64_t incarnation, bool create,
                                        std::vector<uint32_t>* zero, PoolResult* refusal) {
  if (std::string why = check_owner_name(owner); !why.empty()) {
    *refusal = refuse(PoolStatus::BadRequest, "owner \"" + owner.substr(0, 64) + "\": " + why);
    return nullptr;
  }
  if (incarnation == 0) {
    *refusal = refuse(PoolStatus::BadRequest,
                      "owner " + owner +
                          ": incarnation 0 is reserved; pick a random non-zero one "
                          "at process start");
    return nullptr;
  }
  auto it = by_name_.find(owner);
  if (it == by_name_.end()) {
    if (!create) {
      *refusal =
          refuse(PoolStatus::UnknownOwner, "owner " + owner +
                                               " holds nothing in this pool (never allocated, or "
                                               "forgotten); allocate first");
      return nullptr;
    }
    uint32_t idx;
    if (!vacant_.empty()) {
      idx = vacant_.back();
      vacant_.pop_back();
    } else {
      idx = uint32_t(owners_.size());
      owners_.emplace_back();
    }
    by_name_.emplace(owner, idx);
    Owner& o = owners_[idx];
    o = Owner{};
    o.name = owner;
    o.incarnation = incarnation;
    o.active = true;
    return &o;
  }
  const uint32_t idx = it->second;
  Owner& o = owners_[idx];
  if (o.active && o.incarnation == incarnation) return &o;
  if (incarnation == o.retired_incarnation) {
    *refusal = refuse(PoolStatus::LeaseLost,
                      "owner " + owner + " incarnation " + std::to_string(incarnation) +
                          " lost its slabs (its lease lapsed or a newer incarnation spoke); drop "
                          "every descriptor of this pool and start again with a new incarnation");
    return nullptr;
  }
  if (o.active) {
    // Another incarnation speaks for the name: the old process is gone (a restarted owner picks a
    // new random incarnation). Its memory goes back before the new one gets any.
    Reclaimed rec;
    rec.owner = owner;
    rec.incarnation = o.incarnation;
    rec.why = Reclaimed::Why::NewIncarnation;
    rec.slabs = take_back(o, idx);
    zero->insert(zero->end(), rec.slabs.begin(), rec.slabs.end());
    ++counters_.incarnations_replaced;
    refusal->replaced = std::move(rec);
  }
  if (!create) {
    PoolResult r = refuse(PoolStatus::UnknownOwner,
                          "owner " + owner + " incarnation " + std::to_string(incarnation) +
                              " holds nothing in this pool; allocate first");
    r.replaced = std::move(refusal->replaced);
    *refusal = std::move(r);
    return nullptr;
  }
  o.incarnation = incarnation;
  o.active = true;
  return &o;
}

std::optional<Reclaimed> SlabPool::replace_old_incarnation(const std::string& owner,
                                                           uint64_t incarnation) {
  std::vector<uint32_t> zero;
  PoolResult ignored;
  {
    std::lock_guard g(mu_);
    auto it = by_name_.find(owner);
    if (it == by_name_.end() || incarnation == 0) return std::nullopt;
    Owner& o = owners_[it->second];
    if (!o.active || o.incarnation == incarnation || incarnation == o.retired_incarnation)
      return std::nullopt;
    find_current(owner, incarnation, false, &zero, &ignored);  // retires the old incarnation
  }
  finish_zeroing(zero);
  return std::move(ignored.replaced);
}

PoolResult SlabPool::alloc(const std::string& owner, uint64_t incarnation, uint32_t count,
                           uint64_t now_ms) {
  PoolResult r;
  std::vector<uint32_t> zero;
  // A new incarnation's slabs come after the old one's are back: zeroed first, so the restarted
  // owner can have them in this very call.
  std::optional<Reclaimed> replaced = replace_old_incarnation(owner, incarnation);
  {
    std::lock_guard g(mu_);
    ++counters_.alloc_requests;
    Owner* o = nullptr;
    if (count == 0 || count > SlabPoolLimits::kMaxSlabsPerCall) {
      r = refuse(PoolStatus::BadRequest, "alloc of " + std::to_string(count) +
                                             " slabs: ask for 1.." +
                                             std::to_string(SlabPoolLimits::kMaxSlabsPerCall));
    } else if ((o = find_current(owner, incarnation, true, &zero, &r)) != nullptr) {
      o->last_renew_ms = now_ms;
      const uint32_t idx = by_name_.find(owner)->second;
      if (opts_.max_slabs_per_owner && uint64_t(o->slabs) + count > opts_.max_slabs_per_owner) {
        auto replaced = std::move(r.replaced);
        r = refuse(PoolStatus::OverQuota, "owner " + owner + " holds " + std::to_string(o->slabs) +
                                              " slabs; " + std::to_string(count) +
                                              " more would pass max_slabs_per_owner (" +
                                              std::to_string(opts_.max_slabs_per_owner) + ")");
        r.replaced = std::move(replaced);
      } else if (free_list_.size() < count) {
        auto replaced = std::move(r.replaced);
        r = refuse(PoolStatus::NotEnoughFree,
                   "alloc of " + std::to_string(count) + " slabs: only " +
                       std::to_string(free_list_.size()) + " of " + std::to_string(slab_count_) +
                       " are free; ask another donor or for fewer");
        r.replaced = std::move(replaced);
      } else {
        for (uint32_t i = 0; i < count; ++i) {
          uint32_t s = free_list_.back();
          free_list_.pop_back();
          TIERCE_CHECK(holder_[s] == kFree, "a slab on the free list is free");
          holder_[s] = idx;
          r.slabs.push_back(s);
        }
        o->slabs += count;
        o->allocs += count;
        counters_.slabs_allocated += count;
      }
      r.held = o->slabs;
    }
    if (!r.ok()) ++counters_.alloc_refusals;
    forget_old_retired();
  }
  finish_zeroing(zero);
  if (replaced && !r.replaced) r.replaced = std::move(replaced);
  return r;
}

PoolResult SlabPool::free(const std::string& owner, uint64_t incarnation,
                          std::span<const uint32_t> slabs, uint64_t now_ms) {
  PoolResult r;
  std::vector<uint32_t> zero, freed;
  {
    std::lock_guard g(mu_);
    ++counters_.free_requests;
    Owner* o = nullptr;
    if (slabs.empty() || slabs.size() > SlabPoolLimits::kMaxSlabsPerCall) {
      r = refuse(PoolStatus::BadRequest, "free of " + std::to_string(slabs.size()) +
                                             " slabs: name 1.." +
                                             std::to_string(SlabPoolLimits::kMaxSlabsPerCall));
    } else if ((o = find_current(owner, incarnation, false, &zero, &r)) != nullptr) {
      o->last_renew_ms = now_ms;
      const uint32_t idx = by_name_.find(owner)->second;
      // Check everything before changing anything.
      std::vector<uint32_t> sorted(slabs.begin(), slabs.end());
      std::sort(sorted.begin(), sorted.end());
      for (size_t i = 0; i < sorted.size() && r.ok(); ++i) {
        uint32_t s = sorted[i];
        if (s >= slab_count_)
          r = refuse(PoolStatus::BadSlab, "slab " + std::to_string(s) + " is beyond the pool (" +
                                              std::to_string(slab_count_) +
                                              " slabs); nothing freed");
        else if (i > 0 && sorted[i - 1] == s)
          r = refuse(PoolStatus::BadRequest,
                     "slab " + std::to_string(s) + " is named twice; nothing freed");
        else if (holder_[s] != idx)
          r = refuse(PoolStatus::NotHeld, "slab " + std::to_string(s) + " is not held by owner " +
                                              owner + "; nothing freed");
      }
      if (r.ok()) {
        for (uint32_t s : sorted) holder_[s] = kZeroing;
        o->slabs -= uint32_t(sorted.size());
        o->frees += sorted.size();
        counters_.slabs_freed += sorted.size();
        freed = std::move(sorted);
      }
      r.held = o->slabs;
    }
    if (!r.ok()) ++counters_.free_refusals;
    forget_old_retired();
  }
  finish_zeroing(zero);
  finish_zeroing(freed);
  if (r.ok()) r.slabs = std::move(freed);
  return r;
}

PoolResult SlabPool::renew(const std::string& owner, uint64_t incarnation, uint64_t now_ms) {
  PoolResult r;
  std::vector<uint32_t> zero;
  {
    std::lock_guard g(mu_);
    if (Owner* o = find_current(owner, incarnation, false, &zero, &r)) {
      o->last_renew_ms = now_ms;
      r.held = o->slabs;
      ++counters_.renewals;
    } else {
      ++counters_.renew_refusals;
    }
    forget_old_retired();
  }
  finish_zeroing(zero);
  return r;
}

std::vector<Reclaimed> SlabPool::reclaim_expired(uint64_t now_ms) {
  std::vector<Reclaimed> out;
  std::vector<uint32_t> zero;
  {
    std::lock_guard g(mu_);
    for (auto& [name, idx] : by_name_) {
      Owner& o = owners_[idx];
      if (!o.active || now_ms < o.last_renew_ms + opts_.lease_ms) continue;
      Reclaimed rec;
      rec.owner = name;
      rec.incarnation = o.incarnation;
      rec.why = Reclaimed::Why::LeaseExpired;
      rec.slabs = take_back(o, idx);
      zero.insert(zero.end(), rec.slabs.begin(), rec.slabs.end());
      ++counters_.leases_expired;
      out.push_back(std::move(rec));
    }
    forget_old_retired();
  }
  finish_zeroing(zero);
  return out;
}

PoolSnapshot SlabPool::snapshot(uint64_t now_ms) const {
  std::lock_guard g(mu_);
  PoolSnapshot s;
  s.slab_count = slab_count_;
  s.free_slabs = uint32_t(free_list_.size());
  s.zeroing_slabs = uint32_t(std::count(holder_.begin(), holder_.end(), kZeroing));
  s.slab_bytes = opts_.slab_bytes;
  s.lease_ms = opts_.lease_ms;
  s.max_slabs_per_owner = opts_.max_slabs_per_owner;
  s.counters = counters_;
  for (auto& [name, idx] : by_name_) {
    const Owner& o = owners_[idx];
    OwnerUsage u;
    u.owner = name;
    u.incarnation = o.active ? o.incarnation : o.retired_incarnation;
    u.active = o.active;
    u.slabs = o.slabs;
    u.bytes = uint64_t(o.slabs) * opts_.slab_bytes;
    u.allocs = o.allocs;
    u.frees = o.frees;
    u.reclaimed = o.reclaimed;
    uint64_t end = o.last_renew_ms + opts_.lease_ms;
    u.lease_ms_left = o.active && end > now_ms ? end - now_ms : 0;
    s.owners.push_back(std::move(u));
  }
  return s;
}

// ---- placement -------------------------------------------------------------------------------

std::string_view to_string(Placement p) {
  switch (p) {
    case Placement::LocalFirst:
      return "local_first";
    case Placement::MostFree:
      return "most_free";
    case Placement::PowerOfTwo:
      return "power_of_two";
  }
  return "?";
}

std::optional<Placement> parse_placement(std::string_view s) {
  if (s == "local_first") return Placement::LocalFirst;
  if (s == "most_free") return Placement::MostFree;
  if (s == "power_of_two") return Placement::PowerOfTwo;
  return std::nullopt;
}

std::optional<size_t> choose_donor(std::span<const DonorCandidate> candidates, uint32_t need,
                                   Placement policy, std::mt19937_64& rng) {
  std::vector<size_t> eligible;
  for (size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i].free_slabs >= need && candidates[i].free_slabs > 0) eligible.push_back(i);
  if (eligible.empty()) return std::nullopt;
  // The most free among `eligible` satisfying `keep`; a tie goes to a local donor, then to the
  // earlier one.
  auto most_free = [&](auto keep) -> std::optional<size_t> {
    std::optional<size_t> best;
    for (size_t i : eligible) {
      if (!keep(candidates[i])) continue;
      if (!best) {
        best = i;
        continue;
      }
      const auto& b = candidates[*best];
      const auto& c = candidates[i];
      if (c.free_slabs > b.free_slabs ||
          (c.free_slabs == b.free_slabs && c.is_local && !b.is_local))
        best = i;
    }
    return best;
  };
  switch (policy) {
    case Placement::LocalFirst:
      if (auto local = most_free([](const DonorCandidate& c) { return c.is_local; })) return local;
      return most_free([](const DonorCandidate&) { return true; });
    case Placement::MostFree:
      return most_free([](const DonorCandidate&) { return true; });
    case Placement::PowerOfTwo: {
      if (eligible.size() == 1) return eligible[0];
      std::uniform_int_distribution<size_t> first(0, eligible.size() - 1);
      std::uniform_int_distribution<size_t> second(0, eligible.size() - 2);
      size_t a = first(rng), b = second(rng);
      if (b >= a) ++b;  // two distinct candidates
      size_t ia = eligible[a], ib = eligible[b];
      return candidates[ib].free_slabs > candidates[ia].free_slabs ? ib : ia;
    }
  }
  return std::nullopt;
}

}  // namespace tierce::coherence
