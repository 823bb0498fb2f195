// coherence/hit.h — the proxy's hit decision, in plain C++: arena lookup (through a Vary record
// to the variant when there is one), the max-age backstop, then ONE version read at the entry's
// home, turned into a Verdict. mod_rcache's handler only adapts the verdict (counters, log lines,
// serve or DECLINE); tests drive it with a fake VersionReader (tests/coherence/test_hit.cc).
//
//   lookup(base) ─ none ──────────────────────────────────────────────▶ Miss
//     │ a Vary record: lookup(variant) ─ none ─────────────────────────▶ Miss
//     ▼ the entry
//   unservable payload / unknown home ── erase ─────────────────────────▶ Miss
//   tag not the key's (home, slot) ───── erase ─────────────────────────▶ Stale (TagMismatch)
//   stored longer ago than max_age, or
//   further in the future than the skew ─ erase ────────────────────────▶ Stale (Expired)
//   read_version(home, slot): nullopt or throws ────────────────────────▶ Unverifiable (kept)
//                             != tag.version ── erase ──────────────────▶ Stale (VersionChanged)
//                             == tag.version ───────────────────────────▶ Hit
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

#include <vector>

#include "coherence/arena.h"
#include "coherence/coop_cache.h"
#include "coherence/topology.h"

namespace tierce::coherence {

class ClusterClient;

enum class Verdict {
  Hit,           // the entry's version is the home's current one: serve it
  Miss,          // no usable entry: forward; the response may be stored
  Stale,         // the version differs, or the entry is older than the max age: erased, forward
  Unverifiable,  // the version could not be read in time: forward (fail closed); entry kept
};
std::string_view to_string(Verdict v);
std::ostream& operator<<(std::ostream& o, Verdict v);

// Why an entry was Stale.
enum class StaleCause { None, VersionChanged, Expired, TagMismatch };
std::string_view to_string(StaleCause c);
std::ostream& operator<<(std::ostream& o, StaleCause c);

// Reads one version slot at a home: one one-sided 8-byte read. nullopt = could not be read in
// time (dead peer, timeout, revoked region, home marked down). An exception counts as nullopt.
class VersionReader {
 public:
  virtual ~VersionReader() = default;
  virtual std::optional<uint64_t> read_version(const std::string& home, uint64_t slot) = 0;
};

// ClusterClient (coherence/client.h) as a VersionReader. It does not own the client.
class ClusterVersionReader final : public VersionReader {
 public:
  explicit ClusterVersionReader(ClusterClient& client) : client_(client) {}
  std::optional<uint64_t> read_version(const std::string& home, uint64_t slot) override;

 private:
  ClusterClient& client_;
};

// How entries' payloads are read: the format is the caller's (mod_rcache: rcache_logic.h), so
// Vary handling stays there.
struct EntryFormat {
  // When `payload` (found under the base key) is a Vary record: the variant key that answers
  // this request (coherence::variant_key(base, "name: value\n"...)). nullopt: it is a response.
  std::function<std::optional<std::string>(std::string_view payload)> variant_key;
  // Whether `payload` is a response the caller can serve. An entry that is not (corrupt, a Vary
  // record where a response must be, someone else's format) is erased and counts as a Miss.
  // Unset: every payload is.
  std::function<bool(std::string_view payload)> servable;
};

// Whether a tag can prove a page of key `key_hash` current: its home must be the key's home
// (topo.home_of) and its slot the key's slot (slot_of(key_hash, topo.version_slots)), which is
// what the home derives itself when the page registers (HomeState::register_page: the slot is
// never taken from the app). A tag of another slot proves nothing about this key — no update of
// the page's dependencies bumps that slot — whether it came from an app tier that did not strip
// a Tierce-Tag (AppVersion Off), a PHP header(), or a forged peer copy. `key_hash` is the hash
// of the BASE key (what Tierce-Key named; a variant and its Vary record carry the base key's
// tag). Prereq: tag.home indexes an app node of `topo` (so topo has app nodes).
enum class TagBinding { Bound, OtherHome, OtherSlot };
std::string_view to_string(TagBinding b);
std::ostream& operator<<(std::ostream& o, TagBinding b);
TagBinding tag_binding(const Tag& tag, const Topology& topo, uint64_t key_hash);

struct HitQuery {
  std::string_view base_key;  // coherence::base_key(scheme, host, uri); outlives the call
  uint64_t base_hash = 0;     // hash64(base_key)
  // The max-age backstop (writes that bypass the invalidation path): an entry stored more than
  // max_age_s seconds before now_us is Stale (Expired) without a version read. 0 = no limit.
  // The age counts from the page's FIRST store (CachedEntry::stored_at_us, carried by copies
  // passed between proxies), on the clock of the proxy that stored it then: hosts' wall clocks
  // differ by up to the topology's clock_skew_ms, so a page may live max_age + that skew.
  // An entry stored further in the FUTURE than clock_skew_ms (this host's clock stepped back, or
  // a corrupt or forged copy) is Expired as well: no correct clock explains it, and counting its
  // age from a future time would keep it for as long as that time is ahead.
  int64_t now_us = 0;  // CLOCK_REALTIME microseconds, the clock of CachedEntry::stored_at_us
  int64_t max_age_s = 0;
};

struct HitResult {
  Verdict verdict = Verdict::Miss;
  StaleCause stale_cause = StaleCause::None;  // set when verdict == Stale
  // Hit: the entry to serve. Stale, Unverifiable: the entry that was found (for log lines).
  std::optional<CachedEntry> entry;
  std::string key;  // the key it was found under (the base key, or the variant key)
  uint64_t key_hash = 0;
  std::string home;  // the home node whose version was (to be) read, when an entry was found
  bool version_read = false;             // a read was made (never more than one)
  std::optional<uint64_t> home_version;  // what it returned
  uint64_t read_ns = 0;                  // how long it took (steady clock)
  std::string reader_error;              // the reader threw (verdict Unverifiable): its message
  std::string arena_error;               // the lookup threw (verdict Miss): its message
  bool erased_unservable = false;        // an unservable entry was erased (verdict Miss)
  // decide_hit_coop: the entry came from the cooperative cache (a peer's copy, or this proxy's
  // own read back through the directory): the node it was read from ("" for a local lookup).
  std::string peer;
  // ... and, on a Hit, every entry fetched for it (the Vary record first when there was one),
  // for CoopCache::keep_fetched.
  std::vector<FetchedCopy> fetched;
};

// The hit decision for one request. Contract:
//  - at most ONE read_version per call: exactly one for an entry that could be served (found,
//    servable, of a known home, its tag bound to the key, not expired); none for a Miss, an
//    entry whose tag is not its key's (TagMismatch) or an expired entry (it is discarded
//    whatever its version: reading it would only add the read's latency);
//  - erases (arena.erase) exactly the Stale and unservable entries; an Unverifiable entry is
//    kept (the home may be back at the next request);
//  - counts nothing: counters and the latency histogram are the caller's (read_ns).
// `topo` names the homes: tag.home indexes topo.nodes and must be an app node.
HitResult decide_hit(CacheArena& arena, const Topology& topo, const HitQuery& q,
                     const EntryFormat& format, VersionReader& reader);

// decide_hit, then, when nothing usable was found locally (verdict Miss) and `coop` is on, the
// cooperative cache (coop_cache.h): the key's copy at a peer (through a Vary record to the
// variant, also fetched), judged exactly as a local entry — servable, of a known app home, its
// tag bound to the key, not expired (from its first store), and ONE version read at its home. A
// peer's copy that is Stale or unservable is invalidated at the key's directory home instead of
// erased. The contract of decide_hit holds: at most one version read per call. Nothing is stored
// here: on a Hit the caller decides (CoopCache::keep_fetched over r.fetched).
HitResult decide_hit_coop(CacheArena& arena, CoopCache* coop, const Topology& topo,
                          const HitQuery& q, const EntryFormat& format, VersionReader& reader);

}  // namespace tierce::coherence
