// coherence/hit.cc — the proxy's hit decision (see hit.h).
#include "coherence/hit.h"

#include <chrono>
#include <exception>
#include <ostream>

#include "coherence/client.h"
#include "coherence/coop_cache.h"
#include "coherence/key.h"

namespace tierce::coherence {

std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::Hit: return "hit";
    case Verdict::Miss: return "miss";
    case Verdict::Stale: return "stale";
    case Verdict::Unverifiable: return "unverifiable";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& o, Verdict v) { return o << to_string(v); }

std::string_view to_string(StaleCause c) {
  switch (c) {
    case StaleCause::None: return "none";
    case StaleCause::VersionChanged: return "version changed";
    case StaleCause::Expired: return "expired";
    case StaleCause::TagMismatch:
      return "tag not of the key";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& o, StaleCause c) { return o << to_string(c); }

std::string_view to_string(TagBinding b) {
  switch (b) {
    case TagBinding::Bound:
      return "bound";
    case TagBinding::OtherHome:
      return "home of another key";
    case TagBinding::OtherSlot:
      return "slot of another key";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& o, TagBinding b) {
  return o << to_string(b);
}

TagBinding tag_binding(const Tag& tag, const Topology& topo, uint64_t key_hash) {
  const NodeInfo& home = topo.home_of(key_hash);
  if (tag.home >= topo.nodes.size() || &topo.nodes[tag.home] != &home) return TagBinding::OtherHome;
  if (tag.slot != slot_of(key_hash, topo.version_slots)) return TagBinding::OtherSlot;
  return TagBinding::Bound;
}

std::optional<uint64_t> ClusterVersionReader::read_version(const std::string& home,
                                                           uint64_t slot) {
  return client_.read_version(home, slot);
}

namespace {

// The entry that answers the request: the base key's, or through its Vary record the variant's.
// Fills r.key / r.key_hash with where it was found.
std::optional<CachedEntry> find_entry(const CacheArena& arena, const HitQuery& q,
                                      const EntryFormat& format, HitResult& r) {
  r.key.assign(q.base_key);
  r.key_hash = q.base_hash;
  auto e = arena.lookup(r.key_hash, r.key);
  if (!e || !format.variant_key) return e;
  auto variant = format.variant_key(e->payload);
  if (!variant) return e;  // a response (or unservable: judged by the caller)
  r.key = std::move(*variant);
  r.key_hash = hash64(r.key);
  return arena.lookup(r.key_hash, r.key);  // only one level: a variant is never a Vary record
}

// See HitQuery: older than max_age, or further ahead of now than the cluster's clock skew.
bool expired(const CachedEntry& e, const HitQuery& q, const Topology& topo) {
  if (q.max_age_s <= 0) return false;
  // Unsigned differences: a corrupt stored_at (INT64_MIN, ...) must not overflow.
  if (e.stored_at_us <= q.now_us)
    return uint64_t(q.now_us) - uint64_t(e.stored_at_us) > uint64_t(q.max_age_s) * 1'000'000;
  return uint64_t(e.stored_at_us) - uint64_t(q.now_us) >
         uint64_t(topo.coherence.clock_skew_ms) * 1'000;
}

}  // namespace

namespace {

// The checks and the one version read for an entry found (locally or at a peer); `drop` removes
// the entry where it was found (the local arena's erase, or an invalidation at the directory).
template <class Drop>
void judge(HitResult& r, CachedEntry e, const Topology& topo, const HitQuery& q,
           const EntryFormat& format, VersionReader& reader, Drop drop) {
  const uint32_t home = e.tag.home;
  if ((format.servable && !format.servable(e.payload)) || home >= topo.nodes.size() ||
      topo.nodes[home].role != Role::App) {
    drop();  // not ours, or corrupt: nothing could prove it current
    r.erased_unservable = true;
    r.verdict = Verdict::Miss;
    return;
  }
  r.home = topo.nodes[home].name;
  if (tag_binding(e.tag, topo, q.base_hash) != TagBinding::Bound) {
    drop();  // its version says nothing about this key: never a hit, whatever it is
    r.verdict = Verdict::Stale;
    r.stale_cause = StaleCause::TagMismatch;
    r.entry = std::move(e);
    return;
  }
  if (expired(e, q, topo)) {
    drop();
    r.verdict = Verdict::Stale;
    r.stale_cause = StaleCause::Expired;
    r.entry = std::move(e);
    return;
  }

  // The one version read of this request.
  auto t0 = std::chrono::steady_clock::now();
  try {
    r.home_version = reader.read_version(r.home, e.tag.slot);
  } catch (const std::exception& ex) {
    r.reader_error = ex.what();
    r.home_version.reset();
  }
  r.version_read = true;
  r.read_ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - t0)
                           .count());

  if (!r.home_version) {
    r.verdict = Verdict::Unverifiable;  // fail closed; the entry may be proven current later
  } else if (*r.home_version != e.tag.version) {
    drop();
    r.verdict = Verdict::Stale;
    r.stale_cause = StaleCause::VersionChanged;
  } else {
    r.verdict = Verdict::Hit;
  }
  r.entry = std::move(e);
}

}  // namespace

HitResult decide_hit(CacheArena& arena, const Topology& topo, const HitQuery& q,
                     const EntryFormat& format, VersionReader& reader) {
  HitResult r;
  std::optional<CachedEntry> e;
  try {
    e = find_entry(arena, q, format, r);
  } catch (const std::exception& ex) {
    r.arena_error = ex.what();
    r.verdict = Verdict::Miss;
    return r;
  }
  if (!e) {
    r.verdict = Verdict::Miss;
    return r;
  }
  judge(r, std::move(*e), topo, q, format, reader, [&] { arena.erase(r.key_hash, r.key); });
  return r;
}

HitResult decide_hit_coop(CacheArena& arena, CoopCache* coop, const Topology& topo,
                          const HitQuery& q, const EntryFormat& format, VersionReader& reader) {
  HitResult local = decide_hit(arena, topo, q, format, reader);
  if (!coop || coop->scheme() == CoopScheme::Off || local.verdict != Verdict::Miss ||
      !local.arena_error.empty())
    return local;
  HitResult r;
  r.key.assign(q.base_key);
  r.key_hash = q.base_hash;
  std::vector<FetchedCopy> got;
  std::optional<FetchedCopy> f;
  try {
    f = coop->fetch(r.key_hash, r.key);
    if (f && format.variant_key) {
      if (auto variant = format.variant_key(f->entry.payload)) {
        got.push_back(std::move(*f));
        r.key = std::move(*variant);
        r.key_hash = hash64(r.key);
        f = coop->fetch(r.key_hash, r.key);  // one level: a variant is never a Vary record
      }
    }
  } catch (const std::exception& ex) {
    local.arena_error = std::string("cooperative cache: ") + ex.what();
    return local;
  }
  if (!f) return local;  // Miss everywhere
  r.peer = f->holder;
  CachedEntry e = f->entry;
  got.push_back(std::move(*f));
  judge(r, std::move(e), topo, q, format, reader, [&] { coop->invalidate(r.key_hash, r.key); });
  if (r.verdict == Verdict::Hit) r.fetched = std::move(got);
  return r;
}

}  // namespace tierce::coherence
