// coherence/coop_cache.h — the cooperative cache across the proxies (docs/coop_cache.md): what a
// proxy does on a local miss (ask the key's home proxy's directory with one one-sided read, then
// read one copy with one one-sided read and verify it), after it stored a page (publish the copy
// at the key's home), and when a copy proved stale (invalidate the key at its home). The hit
// decision around it (coherence/hit.h, decide_hit_coop) still reads the page's version at its app
// home before anything fetched is served: the directory is a hint, never a proof.
//
// Schemes (seed 000 §7.2; RCacheCoop): Off (AC: each proxy alone), BCC (a fetched copy is also
// kept locally: redundancy allowed), CCWR (no redundancy: a fetched copy is kept locally only in
// free room, i.e. when storing it evicts nothing; rendered pages are stored locally, the ring
// evicting its oldest entries as today), MTACC (as CCWR, but a rendered page that would evict
// goes to pool memory donated by other nodes — app nodes' memd [pool] — instead, while there is
// any), HYBCC (pages smaller than the threshold as BCC; larger ones only in pool memory, never
// duplicated).
//
// Message counts per request (Table 7.2's terms; control = directory, data = the page's bytes):
//   local hit                    0 + the version read
//   remote hit                   1 directory read + 1 copy read + the version read
//                                (+1 publish message when BCC keeps the copy)
//   miss everywhere              1 directory read; after rendering, 1 publish message per entry
//   stale copy                   + 1 invalidate message (one-way)
//   a copy that fails to verify  + 1 withdraw message (one-way; repairs the hint)
//   this proxy's own arena copy named by the directory after a local miss: not read (the local
//   lookup just proved it gone), withdrawn (one-way)
//
// Threads: a CoopCache is stateless beyond its references; any number of threads may use it.
// Counters go to the arena's shared CoopCounters.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coherence/arena.h"
#include "coherence/coop_directory.h"
#include "coherence/coop_directory_wire.h"
#include "coherence/topology.h"

namespace tierce::coherence {

enum class CoopScheme { Off, BCC, CCWR, MTACC, HYBCC };
std::string_view to_string(CoopScheme s);
// Whether the scheme stores pages in pool memory (a PoolStore is needed).
inline bool uses_pool(CoopScheme s) { return s == CoopScheme::MTACC || s == CoopScheme::HYBCC; }
// "off", "bcc", "ccwr", "mtacc", "hybcc" in any case; nullopt otherwise.
std::optional<CoopScheme> parse_coop_scheme(std::string_view s);

// What the cooperative cache needs of the cluster: ClusterClient (client.h) through
// ClusterCoopPeers, or anything else that reaches the proxies' memd.
class CoopPeers {
 public:
  virtual ~CoopPeers() = default;
  // The verified directory entry of a key at `proxy` (or why there is none); nullopt: unreachable.
  virtual std::optional<DirReadResult> read_entry(const std::string& proxy, uint64_t key_hash,
                                                  uint64_t key_check) = 0;
  // `bytes` at `offset` of `proxy`'s arena region; nullopt: unreachable or out of bounds.
  virtual std::optional<std::vector<uint8_t>> read_arena(const std::string& proxy,
                                                         uint64_t offset, uint64_t bytes) = 0;
  // The same in `node`'s pool region (memd [pool]).
  virtual std::optional<std::vector<uint8_t>> read_pool(const std::string& node, uint64_t offset,
                                                        uint64_t bytes) = 0;
  // A directory update at `proxy`; nullopt: not delivered.
  virtual std::optional<dirwire::Reply> update(const std::string& proxy,
                                               const dirwire::Message& m) = 0;
  // The same, one-way (no reply awaited); false when it could not be sent.
  virtual bool notify(const std::string& proxy, const dirwire::Message& m) = 0;
};

class ClusterClient;
class ClusterCoopPeers final : public CoopPeers {
 public:
  explicit ClusterCoopPeers(ClusterClient& c) : c_(c) {}
  std::optional<DirReadResult> read_entry(const std::string& proxy, uint64_t key_hash,
                                          uint64_t key_check) override;
  std::optional<std::vector<uint8_t>> read_arena(const std::string& proxy, uint64_t offset,
                                                 uint64_t bytes) override;
  std::optional<std::vector<uint8_t>> read_pool(const std::string& node, uint64_t offset,
                                                uint64_t bytes) override;
  std::optional<dirwire::Reply> update(const std::string& proxy,
                                       const dirwire::Message& m) override;
  bool notify(const std::string& proxy, const dirwire::Message& m) override;

 private:
  ClusterClient& c_;
};

// A copy read from a peer (or from this proxy's own arena through the directory), verified.
struct FetchedCopy {
  CachedEntry entry;
  Location from;
  std::string holder;  // the node it was read from
  std::string home;    // the directory home of the key
};

class PoolStore;

class CoopCache {
 public:
  // `self` must be a proxy of `topo`; `arena` is this proxy's (its counters are shared).
  // `pool`: where MTACC/HYBCC put pages (nullptr: they keep every page locally, as CCWR/BCC);
  // `threshold`: HYBCC's size (payload bytes) from which a page is pooled.
  CoopCache(CoopScheme scheme, const Topology& topo, const std::string& self, CacheArena& arena,
            CoopPeers& peers, PoolStore* pool = nullptr, size_t threshold = 16384);

  CoopScheme scheme() const { return scheme_; }
  const std::string& self() const { return self_; }
  uint16_t self_index() const { return self_index_; }

  // After a local miss: the key's directory entry at its home, then its copies one by one until
  // one verifies (this proxy's own arena copies are not read — the local lookup that missed
  // proved them gone — but withdrawn). A copy that does not verify is withdrawn at the home (the
  // hint is repaired; one-way). nullopt: no usable copy anywhere (the caller forwards to the
  // origin).
  std::optional<FetchedCopy> fetch(uint64_t key_hash, std::string_view key);

  // A rendered page: stored where the scheme says (the local arena, or pool memory) and
  // published at the key's home. Returns whether it was stored anywhere.
  //   Off, BCC, CCWR   the local arena (evicting its oldest entries when full)
  //   MTACC            the local arena while that evicts nothing, else pool memory, else the
  //                    arena anyway
  //   HYBCC            below the threshold: the local arena; from it: pool memory, else the arena
  bool store(uint64_t key_hash, std::string_view key, const Tag& tag, std::string_view payload);
  // After storing `key` in the local arena at `copy`: publish the copy at the key's home.
  // Returns whether the home took it (refusals and failures are counted, never thrown).
  bool publish(uint64_t key_hash, std::string_view key, const Tag& tag, const ArenaCopy& copy,
               uint64_t length);
  // Stores a fetched entry locally when the scheme keeps fetched copies (BCC, and HYBCC below its
  // threshold: always; CCWR, MTACC: only when it evicts nothing; HYBCC from the threshold:
  // never, it is pooled) and publishes it. Returns whether it was kept.
  bool keep_fetched(const FetchedCopy& f);
  // A copy of `key` proved stale or unservable: the key's entry at its home is dropped (the next
  // render publishes afresh).
  void invalidate(uint64_t key_hash, std::string_view key);

 private:
  const NodeInfo& home_of(uint64_t key_hash) const;
  void withdraw(const std::string& home, uint64_t key_hash, uint64_t key_check,
                const Location& l);
  std::optional<std::vector<uint8_t>> read_copy(const Location& l);
  bool publish_at(uint64_t key_hash, std::string_view key, const Tag& tag, const Location& where,
                  uint64_t length);
  bool send(const std::string& home, const dirwire::Message& m, UpdateStatus* status = nullptr);

  CoopScheme scheme_;
  const Topology& topo_;
  std::string self_;
  uint16_t self_index_ = 0;
  CacheArena& arena_;
  CoopPeers& peers_;
  PoolStore* pool_;
  size_t threshold_;
  CoopCounters& n_;
};

}  // namespace tierce::coherence
