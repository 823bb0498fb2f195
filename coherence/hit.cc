// coherence/hit.cc — the proxy's hit decision (see hit.h).
#include "coherence/hit.h"

#include <chrono>
#include <exception>
#include <ostream>

#include "coherence/client.h"
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
  }
  return "?";
}

std::ostream& operator<<(std::ostream& o, StaleCause c) { return o << to_string(c); }

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

bool expired(const CachedEntry& e, const HitQuery& q) {
  if (q.max_age_s <= 0) return false;
  // A clock stepped back makes the age negative: not expired (the version check still runs).
  return q.now_us - e.stored_at_us > q.max_age_s * 1'000'000;
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
  const uint32_t home = e->tag.home;
  if ((format.servable && !format.servable(e->payload)) || home >= topo.nodes.size() ||
      topo.nodes[home].role != Role::App) {
    arena.erase(r.key_hash, r.key);  // not ours, or corrupt: nothing could prove it current
    r.erased_unservable = true;
    r.verdict = Verdict::Miss;
    return r;
  }
  r.home = topo.nodes[home].name;
  if (expired(*e, q)) {
    arena.erase(r.key_hash, r.key);
    r.verdict = Verdict::Stale;
    r.stale_cause = StaleCause::Expired;
    r.entry = std::move(e);
    return r;
  }

  // The one version read of this request.
  auto t0 = std::chrono::steady_clock::now();
  try {
    r.home_version = reader.read_version(r.home, e->tag.slot);
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
  } else if (*r.home_version != e->tag.version) {
    arena.erase(r.key_hash, r.key);
    r.verdict = Verdict::Stale;
    r.stale_cause = StaleCause::VersionChanged;
  } else {
    r.verdict = Verdict::Hit;
  }
  r.entry = std::move(e);
  return r;
}

}  // namespace tierce::coherence
