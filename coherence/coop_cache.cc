// coherence/coop_cache.cc — the cooperative cache's fetch / publish / invalidate (coop_cache.h).
#include "coherence/coop_cache.h"

#include <chrono>
#include <cstring>

#include "coherence/client.h"
#include "coherence/coop_pool_store.h"
#include "coherence/key.h"

namespace tierce::coherence {

std::string_view to_string(CoopScheme s) {
  switch (s) {
    case CoopScheme::Off: return "off";
    case CoopScheme::BCC: return "bcc";
    case CoopScheme::CCWR: return "ccwr";
    case CoopScheme::MTACC: return "mtacc";
    case CoopScheme::HYBCC: return "hybcc";
  }
  return "?";
}

std::optional<CoopScheme> parse_coop_scheme(std::string_view s) {
  std::string l;
  for (char c : s) l += char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (l == "off") return CoopScheme::Off;
  if (l == "bcc") return CoopScheme::BCC;
  if (l == "ccwr") return CoopScheme::CCWR;
  if (l == "mtacc") return CoopScheme::MTACC;
  if (l == "hybcc") return CoopScheme::HYBCC;
  return std::nullopt;
}

std::optional<DirReadResult> ClusterCoopPeers::read_entry(const std::string& proxy,
                                                          uint64_t key_hash, uint64_t key_check) {
  return c_.read_coop_entry(proxy, key_hash, key_check);
}
std::optional<std::vector<uint8_t>> ClusterCoopPeers::read_arena(const std::string& proxy,
                                                                 uint64_t offset, uint64_t bytes) {
  return c_.read_arena(proxy, offset, bytes);
}
std::optional<std::vector<uint8_t>> ClusterCoopPeers::read_pool(const std::string& node,
                                                                uint64_t offset, uint64_t bytes) {
  return c_.read_pool(node, offset, bytes);
}
std::optional<dirwire::Reply> ClusterCoopPeers::update(const std::string& proxy,
                                                       const dirwire::Message& m) {
  return c_.coop_update(proxy, m);
}
bool ClusterCoopPeers::notify(const std::string& proxy, const dirwire::Message& m) {
  return c_.coop_notify(proxy, m);
}

namespace {
void bump(std::atomic<uint64_t>& a, uint64_t n = 1) { a.fetch_add(n, std::memory_order_relaxed); }
}  // namespace

CoopCache::CoopCache(CoopScheme scheme, const Topology& topo, const std::string& self,
                     CacheArena& arena, CoopPeers& peers, PoolStore* pool, size_t threshold)
    : scheme_(scheme),
      topo_(topo),
      self_(self),
      self_index_(node_index(topo, self)),
      arena_(arena),
      peers_(peers),
      pool_(pool),
      threshold_(threshold),
      n_(arena.counters().coop) {
  if (topo.nodes[self_index_].role != Role::Proxy)
    throw TopologyError(topo.path + ": node " + self + " is not a proxy: it has no cache to share");
}

const NodeInfo& CoopCache::home_of(uint64_t key_hash) const {
  return directory_home_of(topo_, key_hash);
}

bool CoopCache::send(const std::string& home, const dirwire::Message& m, UpdateStatus* status) {
  auto reply = peers_.update(home, m);
  if (!reply) {
    bump(n_.messages_failed);
    return false;
  }
  if (status) *status = reply->status;
  return update_ok(reply->status);
}

void CoopCache::withdraw(const std::string& home, uint64_t key_hash, uint64_t key_check,
                         const Location& l) {
  bump(n_.withdrawals);
  if (!peers_.notify(home, dirwire::Withdraw{key_hash, key_check, l.node, l.kind, l.offset,
                                             l.generation}))
    bump(n_.messages_failed);
}

std::optional<std::vector<uint8_t>> CoopCache::read_copy(const Location& l) {
  if (l.node >= topo_.nodes.size()) return std::nullopt;
  if (l.kind == CopyRegion::Pool) return peers_.read_pool(topo_.nodes[l.node].name, l.offset, l.slot_size);
  return peers_.read_arena(topo_.nodes[l.node].name, l.offset, l.slot_size);
}

std::optional<FetchedCopy> CoopCache::fetch(uint64_t key_hash, std::string_view key) {
  auto t0 = std::chrono::steady_clock::now();
  struct Timer {
    std::chrono::steady_clock::time_point t0;
    CoopCounters& n;
    ~Timer() {
      bump(n.lookup_ns, uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now() - t0)
                                     .count()));
    }
  } timer{t0, n_};
  bump(n_.lookups);
  const NodeInfo& home = home_of(key_hash);
  const uint64_t check = coop_key_check(key);
  auto res = peers_.read_entry(home.name, key_hash, check);
  if (!res) {
    bump(n_.dir_unreachable);
    return std::nullopt;
  }
  if (auto* m = std::get_if<DirMiss>(&*res)) {
    bump(n_.dir_misses[size_t(m->reason) % 8]);
    return std::nullopt;
  }
  bump(n_.dir_hits);
  const DirEntry& d = std::get<DirEntry>(*res);
  // Our own arena copies are gone (the local lookup that led here missed: evicted, or erased
  // as stale): withdraw them unread. The others in the directory's order.
  std::vector<Location> order;
  for (const Location& l : d.copies()) {
    if (l.node == self_index_ && l.kind == CopyRegion::Arena)
      withdraw(home.name, key_hash, check, l);
    else
      order.push_back(l);
  }
  for (const Location& l : order) {
    bump(n_.copy_reads);
    auto bytes = read_copy(l);
    if (!bytes) {
      bump(n_.copy_unreachable);
      continue;  // the holder is down or the location is not ours to read: not proof it is gone
    }
    std::variant<CachedEntry, MissReason> v = MissReason::Empty;
    if (l.kind == CopyRegion::Pool) {
      auto s = verify_slot(*bytes, key_hash, key, l.generation);
      if (auto* m = std::get_if<Miss>(&s)) {
        v = m->reason;
      } else if (auto e = decode_pooled_entry(key, std::get<SlotHit>(s).payload)) {
        v = std::move(*e);
      } else {
        v = MissReason::LengthOutOfBounds;  // a slot of the key too short for an entry
      }
    } else {
      v = CacheArena::verify_copy(*bytes, l.generation, key_hash, key);
    }
    if (auto* why = std::get_if<MissReason>(&v)) {
      bump(n_.copy_misses[size_t(*why) % 8]);
      withdraw(home.name, key_hash, check, l);
      continue;
    }
    auto& e = std::get<CachedEntry>(v);
    if (e.tag.home != d.tag.home || e.tag.slot != d.tag.slot || e.tag.version != d.tag.version) {
      // The bytes are of the key but not of the version the directory names: an older copy left
      // behind (the directory superseded it) — never the entry's; withdraw it.
      bump(n_.copy_misses[size_t(MissReason::GenerationChanged)]);
      withdraw(home.name, key_hash, check, l);
      continue;
    }
    bump(n_.copy_hits);
    return FetchedCopy{std::move(e), l, topo_.nodes[l.node].name, home.name};
  }
  return std::nullopt;
}

bool CoopCache::publish(uint64_t key_hash, std::string_view key, const Tag& tag,
                        const ArenaCopy& copy, uint64_t length) {
  if (copy.bytes > UINT32_MAX) return false;
  Location where;
  where.node = self_index_;
  where.kind = CopyRegion::Arena;
  where.offset = copy.offset;
  where.generation = copy.pos;
  where.slot_size = uint32_t(copy.bytes);
  return publish_at(key_hash, key, tag, where, length);
}

bool CoopCache::publish_at(uint64_t key_hash, std::string_view key, const Tag& tag,
                           const Location& where, uint64_t length) {
  UpdateStatus st = UpdateStatus::NotFound;
  bool ok = send(home_of(key_hash).name,
                 dirwire::Publish{key_hash, coop_key_check(key), length, tag, where}, &st);
  bump(ok ? n_.publishes : n_.publish_refused);
  return ok;
}

bool CoopCache::store(uint64_t key_hash, std::string_view key, const Tag& tag,
                      std::string_view payload) {
  if (pool_ && scheme_ == CoopScheme::MTACC) {
    // The arena holds the newest pages; what its ring evicts moves to pool memory (the
    // replacement order "local, then remote free space"): no page is in two places.
    std::vector<CacheArena::Evicted> victims;
    auto copy = arena_.store_located(key_hash, key, tag, payload, 0, &victims);
    if (copy) {
      bump(n_.stored_local);
      publish(key_hash, key, tag, *copy, payload.size());
    }
    for (const auto& v : victims) {
      uint64_t h = hash64(v.entry.key);
      auto where = pool_->put(h, v.entry.key, v.entry.tag, v.entry.payload, v.entry.stored_at_us);
      if (!where) {
        bump(n_.pool_failures);
        continue;  // dropped, as without a pool: its directory hint fails verification later
      }
      bump(n_.demoted);
      publish_at(h, v.entry.key, v.entry.tag, *where, v.entry.payload.size());
      withdraw(home_of(h).name, h, coop_key_check(v.entry.key),
               Location{self_index_, CopyRegion::Arena, v.where.offset, v.where.pos,
                        uint32_t(v.where.bytes)});
    }
    return copy.has_value();
  }
  bool to_pool = pool_ && scheme_ == CoopScheme::HYBCC && payload.size() >= threshold_;
  if (to_pool) {
    if (auto where = pool_->put(key_hash, key, tag, payload)) {
      bump(n_.stored_pool);
      publish_at(key_hash, key, tag, *where, payload.size());
      return true;
    }
    bump(n_.pool_failures);  // no pool memory to be had: the page stays here
  }
  auto copy = arena_.store_located(key_hash, key, tag, payload);
  if (!copy) return false;
  bump(n_.stored_local);
  if (scheme_ != CoopScheme::Off) publish(key_hash, key, tag, *copy, payload.size());
  return true;
}

bool CoopCache::keep_fetched(const FetchedCopy& f) {
  if (f.from.node == self_index_ && f.from.kind == CopyRegion::Arena) return false;  // ours
  const CachedEntry& e = f.entry;
  switch (scheme_) {
    case CoopScheme::Off: return false;
    case CoopScheme::BCC: break;
    case CoopScheme::CCWR:
    case CoopScheme::MTACC:
      if (!arena_.fits_without_eviction(e.key.size(), e.payload.size())) return false;
      break;
    case CoopScheme::HYBCC:
      if (e.payload.size() >= threshold_) return false;  // large pages live in the pool only
      break;
  }
  uint64_t h = hash64(e.key);
  // With the copy's own first-store time: the max age counts from the render, not from this hop.
  auto copy = arena_.store_located(h, e.key, e.tag, e.payload, e.stored_at_us);
  if (!copy) return false;
  bump(n_.kept_local);
  publish(h, e.key, e.tag, *copy, e.payload.size());
  return true;
}

void CoopCache::invalidate(uint64_t key_hash, std::string_view key) {
  bump(n_.invalidations);
  if (!peers_.notify(home_of(key_hash).name, dirwire::Invalidate{key_hash, coop_key_check(key)}))
    bump(n_.messages_failed);
}

}  // namespace tierce::coherence
