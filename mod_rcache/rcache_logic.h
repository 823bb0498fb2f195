// mod_rcache/rcache_logic.h — the parts of mod_rcache that do not need httpd: header filtering,
// the cacheability rules, Tierce-Tag parsing, Vary handling, the payload format of arena entries,
// directive value parsing, whether a captured body is complete, the entry format the hit
// decision (coherence/hit.h) reads, the status/metrics snapshot and renderers, and the RCache*
// configuration (each directive's argument, vhost and location merging, the start-up
// resolution). Unit-tested by tests/rcache (test_rcache_logic.cc, test_rcache_config.cc);
// mod_rcache.cc is the Apache glue around it.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "coherence/arena.h"
#include "coherence/coop_cache.h"
#include "coherence/hit.h"
#include "coherence/slab_pool.h"
#include "coherence/topology.h"

namespace tierce::rcache {

using Headers = std::vector<std::pair<std::string, std::string>>;

// ASCII case-insensitive comparisons (header names).
bool iequals(std::string_view a, std::string_view b);
bool istarts_with(std::string_view s, std::string_view prefix);
std::string lower(std::string_view s);
std::string_view trim(std::string_view s);

// Headers of this protocol ("Tierce-*", any case): never accepted from clients, never sent to them.
bool is_protocol_header(std::string_view name);
// RFC 9110 hop-by-hop headers (Connection, Keep-Alive, Proxy-*, TE, Trailer, Transfer-Encoding,
// Upgrade).
bool is_hop_by_hop(std::string_view name);

// The headers of a response as they are kept in the cache: without hop-by-hop headers (and those
// named by Connection), protocol headers, Date and Age (set anew when served), Content-Length
// (recomputed from the body), Content-Type (kept apart) and, unless `keep_set_cookie`, Set-Cookie.
Headers headers_to_store(const Headers& in, bool keep_set_cookie);

// ---- the payload of an arena entry -------------------------------------------------------------
// Two kinds share the arena: a stored response, and a vary record (kept under the base key of a
// response that carried `Vary: a, b`: it names the request headers that select the variant, which
// is stored under coherence::variant_key(base, vary_values(...))).
//
// Format (little-endian): "RCR1" | u32 status | str content_type | u32 n | n * (str name, str value)
// | body (the rest);  "RCV1" | u32 n | n * str name.   str = u32 length + bytes.
struct StoredResponse {
  int status = 200;
  std::string content_type;
  Headers headers;
  std::string body;
};

enum class PayloadKind { Response, Vary, Invalid };
PayloadKind payload_kind(std::string_view payload);
std::string serialize_response(const StoredResponse& r);
std::optional<StoredResponse> parse_response(std::string_view payload);
// parse_response(payload).has_value(), without copying anything.
bool is_valid_response(std::string_view payload);
std::string serialize_vary(const std::vector<std::string>& names);
std::optional<std::vector<std::string>> parse_vary_record(std::string_view payload);

// ---- Vary ----------------------------------------------------------------------------------------
struct VarySpec {
  bool star = false;               // "Vary: *": never cacheable
  std::vector<std::string> names;  // lower-cased, deduplicated, in order of appearance
};
VarySpec parse_vary(std::string_view header_value);  // "" → no names
// "name: value\n" per name (value trimmed, "" when the request lacks it), the selector
// coherence::variant_key() expects. `get` returns the request's value of a header or nullopt.
std::string vary_values(const std::vector<std::string>& names,
                        const std::function<std::optional<std::string>(const std::string&)>& get);

// The payload format above, as coherence::decide_hit reads it: a Vary record under `base` leads
// to variant_key(base, vary_values(names, get)); only a valid stored response is servable. `get`
// is the request's header getter; it must outlive the returned format.
using HeaderGetter = std::function<std::optional<std::string>(const std::string&)>;
coherence::EntryFormat entry_format(std::string base, const HeaderGetter& get);

// ---- Cache-Control -------------------------------------------------------------------------------
struct CacheControl {
  bool no_store = false;
  bool no_cache = false;
  bool is_private = false;
  bool is_public = false;
  bool max_age_zero = false;  // max-age=0 (request: the client wants a fresh answer)
};
CacheControl parse_cache_control(std::string_view value);  // several headers: join with ","

// ---- Tierce-Tag ----------------------------------------------------------------------------------
// "Tierce-Tag: <node-name> <slot> <version>": slot and version in decimal or 0x-hex, separated by
// spaces/tabs. Anything else is malformed.
struct TagText {
  std::string node;
  uint64_t slot = 0;
  uint64_t version = 0;
};
std::optional<TagText> parse_tag(std::string_view value);
// The index of `node` in topo.nodes when it is an app node and slot < version_slots; else
// InvalidArgument saying which.
base::Result<uint32_t> resolve_tag_home(const TagText& t, const coherence::Topology& topo);

// ---- the rules -----------------------------------------------------------------------------------
inline constexpr int64_t kDefaultMaxAgeSeconds = 600;
inline constexpr int64_t kMaxMaxAgeSeconds = 31536000;  // a year: RCacheMaxAge 0..this

struct Policy {
  bool store_set_cookie = false;
  bool store_authorized = false;
  // Off: a response to a request that carried Cookie is stored only when it says
  // Cache-Control: public (Varnish's built-in VCL passes such requests: the page may be personal).
  bool store_cookie_requests = false;
  bool require_tag = true;
  // The max-age backstop of the hit decision (coherence::HitQuery::max_age_s); 0 = no limit.
  int64_t max_age_s = kDefaultMaxAgeSeconds;
};

struct RequestFacts {
  std::string method;        // "GET", "HEAD", ...
  bool subrequest = false;   // r->main or r->prev
  bool authorization = false;
  std::string cache_control;  // the request's Cache-Control (joined)
  std::string pragma;
};
enum class RequestAction {
  Lookup,       // look the key up; on a miss, forward and maybe store
  ForwardStore, // forward without lookup (client asked no-cache / max-age=0), may store
  Pass,         // not ours: forward, never store
};
RequestAction decide_request(const RequestFacts& f, const Policy& p);

struct ResponseFacts {
  // hash64 of the request's base key: what its Tierce-Key named. The Tierce-Tag must be this
  // key's (home, slot) (coherence::tag_binding), else the response is not stored.
  uint64_t key_hash = 0;
  bool request_is_get = true;
  bool request_authorized = false;
  bool request_cookie = false;  // the request carried a Cookie header
  bool request_no_store = false;
  int status = 200;
  std::optional<std::string> tag;  // Tierce-Tag value
  std::string cache_control;       // joined
  bool set_cookie = false;
  std::string vary;                // joined
};
struct Cacheability {
  bool cacheable = false;
  std::string reason;  // why not
  TagText tag;
  uint32_t home = 0;   // index in topo.nodes
  std::vector<std::string> vary;
  // Not Bound: a well-formed Tierce-Tag of an app node, but not the key's home or slot (not
  // cacheable; the module counts it in tag_mismatches and logs RCACHE0035).
  coherence::TagBinding binding = coherence::TagBinding::Bound;
};
Cacheability decide_response(const ResponseFacts& f, const Policy& p,
                             const coherence::Topology& topo);

// ---- a captured body at its end --------------------------------------------------------------
// Only complete responses are stored. What the output filter saw when the body ended (EOS, or
// an error bucket: mod_proxy_http ends a body the backend broke off — closed before the chunked
// body's 0-chunk, or short of its Content-Length — with a 502 error bucket, then EOS, and sets
// r->no_cache).
struct BodyEnd {
  bool error_bucket = false;      // an AP_BUCKET_IS_ERROR came with the body
  bool connection_aborted = false;  // r->connection->aborted: the client went away
  bool no_cache = false;          // r->no_cache: httpd marked the response not to be cached
  std::optional<uint64_t> content_length;  // the response's Content-Length when it had one
  uint64_t body_bytes = 0;        // bytes captured
};
// Why the body must not be stored ("" when it is complete).
std::string incomplete_body(const BodyEnd& b);

// ---- directive values ----------------------------------------------------------------------------
// "4096", "64K", "256M", "2G" (case-insensitive suffix, powers of 1024). nullopt on anything else
// or overflow.
std::optional<uint64_t> parse_size(std::string_view s);
// Decimal in [lo, hi].
std::optional<uint64_t> parse_uint(std::string_view s, uint64_t lo, uint64_t hi);

// ---- status / metrics ----------------------------------------------------------------------------
struct HomeReach {
  std::string name;
  std::string state;  // "ok", "failed", "unknown"
  // The pages homed at this node, over all children (coherence::ArenaCounters::Home): lookups,
  // hits, and unverifiable lookups (forwarded, fail closed).
  uint64_t lookups = 0, hits = 0, unverifiable = 0;
};
// The cooperative cache's counters (coherence::CoopCounters), by name, when RCacheCoop is on.
struct CoopSnapshot {
  std::string scheme = "off";
  std::vector<std::pair<std::string, uint64_t>> counters;     // e.g. ("remote_hits", 12)
  std::vector<std::pair<std::string, uint64_t>> copy_misses;  // by reason (coop_slot.h names)
  std::vector<std::pair<std::string, uint64_t>> dir_misses;   // by reason (coop_directory.h)
};
struct StatusSnapshot {
  std::string node, topology_path, cluster;
  uint64_t entries = 0, used_bytes = 0, capacity_bytes = 0, max_entry_bytes = 0;
  uint64_t hits = 0, misses = 0, version_failures = 0, stale_rejects = 0, stores = 0,
           store_refused = 0, uncacheable = 0, evictions = 0, erased = 0, expired = 0,
           lock_timeouts = 0, tag_mismatches = 0;
  uint64_t p50_ns = 0, p90_ns = 0, p99_ns = 0, latency_count = 0, latency_sum_ns = 0;
  std::vector<HomeReach> homes;
  CoopSnapshot coop;
};
std::string render_status_auto(const StatusSnapshot& s);
std::string render_status_html(const StatusSnapshot& s);
std::string render_metrics(const StatusSnapshot& s);
std::string html_escape(std::string_view s);

// ---- the server configuration (RCacheTopology, RCacheNode, RCacheSize, RCacheCoop...) --------

inline constexpr uint64_t kDefaultArenaSize = 256ull << 20;
inline constexpr uint64_t kDefaultMaxEntry = 1ull << 20;
inline constexpr int kDefaultRetryAfterMs = 100;

// The server-wide RCache* directives as the configuration left them (unset: empty, 0 or -1).
struct ServerSettings {
  std::string topology, node;  // empty: unset
  uint64_t size = 0, max_entry = 0;
  int version_timeout_ms = -1, retry_after_ms = -1;
  int coop = -1;  // a coherence::CoopScheme
  std::optional<std::vector<std::string>> coop_pool;  // RCacheCoopPool given
  uint64_t coop_threshold = 0;
  int coop_pool_slabs = -1;
  int coop_placement = -1;  // a coherence::Placement
};

// What RCache On runs with: the topology loaded, this proxy's node, the secret, the defaults
// filled in.
struct ModuleConfig {
  std::string topology_path, node;
  coherence::Topology topo;
  fabric::Secret secret;
  std::string segment;  // this node's arena: its segment_prefix + ".arena"
  uint64_t size = kDefaultArenaSize, max_entry = kDefaultMaxEntry;
  uint32_t version_timeout_ms = 50, retry_after_ms = kDefaultRetryAfterMs;
  coherence::CoopScheme coop = coherence::CoopScheme::Off;
  std::vector<std::string> coop_pool;  // donor nodes (MTACC, HYBCC)
  uint64_t coop_threshold = 16384;
  uint32_t coop_pool_slabs = 16;
  coherence::Placement coop_placement = coherence::Placement::MostFree;
};

// Resolves and checks the settings (start-up and `httpd -t`): the configuration, or why RCache
// On cannot run with it (the message starts with its RCACHE id and says what to change).
base::Result<ModuleConfig> resolve_server_config(const ServerSettings& s);

// The status pages' numbers: the configuration, the arena's counters shared by all children
// (nullptr: RCache is not on) and this child's last version read at each topology node
// (home_state: 0 unknown, 1 ok, 2 failed; nullptr: none).
StatusSnapshot status_snapshot(const ModuleConfig& cfg, const coherence::CacheArena* arena,
                               const std::atomic<int>* home_state);

// ---- one directive's argument ----------------------------------------------------------------
// The value of RCacheSize, RCacheMaxEntrySize, ...; or the configuration error httpd prints
// (naming the directive, what is allowed and an example).
base::Result<uint64_t> arena_size_arg(std::string_view arg);         // RCacheSize
base::Result<uint64_t> max_entry_arg(std::string_view arg);          // RCacheMaxEntrySize
base::Result<int> version_timeout_arg(std::string_view arg);         // RCacheVersionTimeout
base::Result<int> retry_after_arg(std::string_view arg);             // RCacheRetryAfter
base::Result<int64_t> max_age_arg(std::string_view arg);             // RCacheMaxAge
base::Result<coherence::CoopScheme> coop_arg(std::string_view arg);  // RCacheCoop
base::Result<uint64_t> coop_threshold_arg(std::string_view arg);     // RCacheCoopThreshold
base::Result<int> coop_pool_slabs_arg(std::string_view arg);         // RCacheCoopPoolSlabs
base::Result<coherence::Placement> coop_placement_arg(std::string_view arg);  // RCacheCoopPlacement

// ---- what a virtual host and a location say -------------------------------------------------
// The switches a <VirtualHost> may set apart from the main server (RCacheStoreSetCookie,
// RCacheStoreAuthorized, RCacheRequireTag, RCacheStoreCookieRequests, RCacheStripProtocolHeaders:
// -1 unset, 0 Off, 1 On; RCacheMaxAge: -1 unset).
struct PolicySettings {
  int store_set_cookie = -1, store_authorized = -1, require_tag = -1, store_cookie_requests = -1;
  int strip_protocol_headers = -1;
  int64_t max_age_s = -1;
};
// A vhost's switches over the main server's: each one set in `add` wins. (The server-wide
// ServerSettings are the main server's only: a vhost inherits them whole.)
PolicySettings merge_policy(const PolicySettings& base, const PolicySettings& add);
// The request rules of a (merged) server: unset switches take their defaults (RCacheRequireTag
// On, the others Off; RCacheMaxAge kDefaultMaxAgeSeconds).
Policy resolve_policy(const PolicySettings& s);
// RCacheStripProtocolHeaders, On unless set Off.
bool strips_protocol_headers(const PolicySettings& s);
// RCache On|Off of nested locations (-1 unset, 0 Off, 1 On): the innermost setting wins; unset
// everywhere is Off.
int merge_enabled(int base, int add);
inline bool cache_enabled(int merged) { return merged == 1; }

}  // namespace tierce::rcache
