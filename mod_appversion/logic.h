// mod_appversion/logic.h — the parts of mod_appversion that need no httpd: directive argument
// checks, the Tierce-Key request header, which response headers carry dependencies, which are
// stripped, whether a page is registered, the Tierce-Tag value, the counters the status
// handler shows (a plain struct of atomics placed in shared memory by the module), and the
// configuration: location merging and the start-up resolution against the topology.
// Unit-tested in tests/appversion (test_appversion_logic.cc, test_appversion_config.cc).
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/metrics.h"
#include "base/status.h"
#include "coherence/agent_client.h"
#include "coherence/home.h"
#include "coherence/pool.h"
#include "coherence/topology.h"

namespace tierce::appversion {

// Protocol headers (docs/ARCHITECTURE.md §4).
inline constexpr const char* kKeyHeader = "Tierce-Key";             // request, from the proxy
inline constexpr const char* kTagHeader = "Tierce-Tag";             // response, to the proxy
inline constexpr const char* kDependsHeader = "Tierce-Depends";     // response, from the app
inline constexpr const char* kInvalidateHeader = "Tierce-Invalidate";  // response, from the app
// r->notes the PHP code sets with apache_note(): same syntax as the headers.
inline constexpr const char* kDependsNote = "tierce-depends";
inline constexpr const char* kInvalidateNote = "tierce-invalidate";
// Set by the tierce PHP extension (php_ext/): any value makes the page uncacheable (it ran SQL
// whose dependencies cannot be bounded; the value says why); "tierce-invalidate-all" makes the
// update's invalidation an invalidate-all (DDL, stored procedures, ...).
inline constexpr const char* kNoCacheNote = "tierce-nocache";
inline constexpr const char* kInvalidateAllNote = "tierce-invalidate-all";

// ---- directive arguments: each returns "" when fine, else the problem (without the directive
// name, which httpd prefixes) ------------------------------------------------------------------

// A whole number of milliseconds in [lo, hi].
std::string parse_millis(std::string_view arg, uint32_t lo, uint32_t hi, uint32_t& out);
// "dependency-lists" | "invalidate-all".
std::string parse_scheme(std::string_view arg, coherence::Scheme& out);
// Header names separated by spaces or commas; at least one; HTTP tokens; duplicates (any case)
// dropped; Tierce-Key, Tierce-Tag and Tierce-Invalidate are refused (they mean something else).
std::string parse_header_names(std::string_view args, std::vector<std::string>& out);
// A node name as the topology spells it: 1..64 bytes, no spaces or control characters.
std::string check_node_name(std::string_view arg);

// ---- requests and responses -----------------------------------------------------------------

// The Tierce-Key value: 16 hex digits (surrounding blanks ignored). nullopt on anything else.
std::optional<uint64_t> parse_key_header(std::string_view value);

// A header table as (name, value) pairs, in order; names match case-insensitively.
using HeaderList = std::vector<std::pair<std::string_view, std::string_view>>;

bool iequals(std::string_view a, std::string_view b);

// Every value of every header named in `names` (all occurrences), joined with ", ".
// `found` tells whether at least one such header was present (even with an empty value).
std::string collect_values(const HeaderList& headers, const std::vector<std::string>& names,
                           bool* found = nullptr);

// The response headers that never reach clients: Tierce-Depends, Tierce-Invalidate, Tierce-Tag
// (an app must not forge one; the module sets the real one after stripping) and the configured
// dependency headers, without duplicates.
std::vector<std::string> headers_to_strip(const std::vector<std::string>& dependency_headers);

// Joins a header value and a note value (either may be empty) into one dependency list.
std::string join_lists(std::string_view a, std::string_view b);

// Whether a rendered page is registered at its home, and if not, why.
struct PageFacts {
  bool has_key = false;    // the request carried a valid Tierce-Key
  bool is_get = false;     // GET (not HEAD, not anything else)
  int status = 0;          // final response status
  bool seq_read = false;   // the home's sequence was read before the handler ran
  bool deps_found = false; // at least one dependency header/note was present
  bool deps_valid = true;  // the dependency names parsed
  size_t deps_count = 0;   // dependency names found (an empty header names none)
  bool app_nocache = false;  // the tierce-nocache note is set
  coherence::Scheme scheme = coherence::Scheme::DependencyLists;
};
enum class Decision { Register, NoKey, NotGet, NotOk, NoSeq, NoDeps, BadDeps, AppNoCache };
Decision decide_registration(const PageFacts& f);
std::string_view to_string(Decision d);

// "app1 1234 987654321": home node, slot and version in decimal.
std::string format_tag(std::string_view home, uint64_t slot, uint64_t version);

// Which counter a home's refusal goes to (refused_race, refused_log, refused_pending,
// refused_other).
enum class RefusalCounter { Race, Log, Pending, Other };
RefusalCounter counter_of(coherence::Refusal r);

// What the invalidation at the end of an update response is for (docs/coherence.md, "An
// update"): the first one runs on the response's first output, which PHP may send before it
// commits (a flush); a second one after the script ended covers that commit. None is needed when
// the first output already held the end of the response (the script had finished).
bool needs_second_invalidation(bool invalidated_at_first_output, bool first_output_was_last);

// Whether a line httpd logs for a request says its PHP script ended abnormally (a fatal error,
// an uncaught exception, a parse error): PHP logs those through httpd at APLOG_ERR or worse,
// prefixed "PHP ". Such a response is cut short however well it is framed.
bool is_php_abort(int aplog_level, std::string_view message);

// ---- counters (shared by all children through anonymous shared memory) ----------------------

// Invalidation wait histogram: bucket i counts waits in [2^(i-1), 2^i) microseconds (bucket 0:
// below 1 µs); the last bucket collects everything longer.
inline constexpr size_t kWaitBuckets = 32;
size_t wait_bucket(uint64_t micros);
// Upper bound (µs) of the bucket holding the p-th quantile (0 < p <= 1); 0 when empty.
uint64_t wait_quantile(const std::array<uint64_t, kWaitBuckets>& counts, double p);

struct Counters {
  std::atomic<uint64_t> requests_keyed{0};       // requests with a valid Tierce-Key
  std::atomic<uint64_t> bad_keys{0};             // Tierce-Key present but malformed
  std::atomic<uint64_t> seq_failures{0};         // home sequence not read: page not cacheable
  std::atomic<uint64_t> registrations{0};        // registered and tagged
  std::atomic<uint64_t> refused_race{0};         // refused: overlapping invalidation since seq
  std::atomic<uint64_t> refused_log{0};          // refused: the log no longer reaches back
  std::atomic<uint64_t> refused_pending{0};      // refused: a write of a dependency is pending
  std::atomic<uint64_t> refused_other{0};        // refused otherwise (home unreachable, ...)
  std::atomic<uint64_t> not_registered{0};       // keyed pages not registered (status, deps...)
  std::atomic<uint64_t> invalidations{0};        // invalidations sent
  std::atomic<uint64_t> invalidations_fenced{0};  // returned after the fence bound: some home
                                                  // did not acknowledge (it was fenced instead)
  std::atomic<uint64_t> acks_received{0};         // homes that acknowledged
  std::atomic<uint64_t> homes_fenced{0};          // homes relied on as fenced
  std::atomic<uint64_t> homes_skipped{0};  // homes not waited for (skip mark since the bound)
  std::atomic<uint64_t> homes_marked{0};   // skip marks this node's updates set
  std::atomic<uint64_t> invalidations_unconfirmed{0};  // a home of another topology did not ack
  std::atomic<uint64_t> second_invalidations{0};  // sent again after the script ended
  std::atomic<uint64_t> aborted_responses{0};     // PHP aborted after output: cut, tag withdrawn
  std::atomic<uint64_t> bad_dependency_lists{0};
  std::atomic<uint64_t> wait_buckets[kWaitBuckets]{};
  std::atomic<uint64_t> wait_max_us{0};

  void record_wait(uint64_t micros);
  // "key value" lines, as memd's coherence.status does.
  std::string text() const;
  // The same numbers as Prometheus families tierce_appversion_* (the appversion-metrics handler;
  // mod_appversion/README.md "Metrics").
  void metrics(base::Metrics& m) const;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "counters live in shared memory");

// ---- the configuration -----------------------------------------------------------------------

inline constexpr uint32_t kDefaultOpTimeoutMs = 200;

// AppVersion and AppVersionDependencyHeaders as a <Location>/<Directory> left them.
struct DirSettings {
  int enabled = -1;  // -1 unset (Off), 0 Off, 1 On
  // nullptr: unset (Tierce-Depends). Shared, not copied, by the merges of every request.
  std::shared_ptr<const std::vector<std::string>> dependency_headers;
};
// Nested locations: each setting of the inner one (`add`) wins, the others are inherited.
DirSettings merge_dir(const DirSettings& base, const DirSettings& add);
bool enabled(const DirSettings& d);
// The response headers that carry the page's dependencies (default: Tierce-Depends).
std::vector<std::string> dependency_headers(const DirSettings& d);

// A value a directive wrote that must agree with the topology, and where (file:line).
struct SeenValue {
  std::string value;
  std::string where;
};

// Whichever of AppVersionTopology / AppVersionNode comes second checks the node: "" when it is
// an app node of the topology, else the problem (without the directive name).
std::string check_node_in_topology(const coherence::Topology& t, std::string_view topology_path,
                                   std::string_view node);

// AppVersionScheme and AppVersionAckTimeout values (wherever written) against the topology: ""
// or the problem (APPVER0023: another scheme; APPVER0024: shorter than the fence bound).
std::string check_against_topology(const coherence::Topology& t, std::string_view topology_path,
                                   const std::vector<SeenValue>& schemes,
                                   const std::vector<SeenValue>& ack_timeouts);

// What the configuration pass left: the main server's directives, and what every directive
// wherever written added.
struct ServerSettings {
  std::string topology_path;  // absolute; empty: unset
  std::string node;           // empty: unset
  uint32_t op_timeout_ms = kDefaultOpTimeoutMs;  // AppVersionOpTimeout
  std::string agent_socket;   // AppVersionAgent (absolute); empty: unset (the secret in children)
  std::string node_key;       // AppVersionNodeKey (absolute): without the agent, in a keyed cluster
  bool any_enabled = false;   // "AppVersion On" somewhere
  std::vector<SeenValue> schemes, ack_timeouts;
};

// What the module runs with (prepared by the parent, as root; inherited by the children).
struct ModuleConfig {
  coherence::Topology topology;  // loaded again: the file may have changed since the directive
  // With AppVersionAgent: the writer agent's socket; then `secret` stays empty and
  // `writer_segment` is not mapped (the children hold no credential: docs/coherence.md "The
  // agent socket"). Without: the secret, read as root before the children drop privileges.
  std::string agent_socket;
  fabric::Secret secret;
  fabric::NodeKey node_key;  // without the agent, in a keyed cluster: the children sign with it
  std::string node;
  std::string writer_segment;  // this node's invalidation counter (coherence/writer.h)
  coherence::ClientTuning tuning;
  coherence::AgentTimeouts agent_timeouts;  // op from AppVersionOpTimeout, fence_bound the topology's
};

// Resolves and checks the settings at start-up: the configuration; nullopt when the module is
// loaded but not configured (no AppVersionTopology, no AppVersionNode, no AppVersion On); or
// why it cannot run (the message starts with its APPVER id: 0004 a directive missing, 0001 the
// topology, 0002 the node, 0003 the secret, 0023/0024 check_against_topology, 0028 an
// AppVersionAgent whose node has no writer agent in the topology, 0032 a keyed cluster without
// AppVersionAgent or AppVersionNodeKey, or a key that cannot be read).
base::Result<std::optional<ModuleConfig>> resolve_server_config(const ServerSettings& s);

}  // namespace tierce::appversion
