// mod_appversion/logic.cc — see logic.h. No httpd headers here.
#include "mod_appversion/logic.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>

#include "coherence/key.h"
#include "coherence/layout.h"

namespace tierce::appversion {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

// RFC 9110 token characters.
bool is_tchar(char c) {
  if (std::isalnum(static_cast<unsigned char>(c))) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

std::string parse_millis(std::string_view arg, uint32_t lo, uint32_t hi, uint32_t& out) {
  std::string_view s = trim(arg);
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size())
    return "'" + std::string(arg) + "' is not a whole number of milliseconds; write e.g. " +
           std::to_string(std::max<uint32_t>(lo, std::min<uint32_t>(hi, 200)));
  if (v < lo || v > hi)
    return std::to_string(v) + " ms is out of range: use " + std::to_string(lo) + ".." +
           std::to_string(hi) + " ms";
  out = static_cast<uint32_t>(v);
  return "";
}

std::string parse_scheme(std::string_view arg, coherence::Scheme& out) {
  std::string_view s = trim(arg);
  if (s == "dependency-lists") {
    out = coherence::Scheme::DependencyLists;
    return "";
  }
  if (s == "invalidate-all") {
    out = coherence::Scheme::InvalidateAll;
    return "";
  }
  return "'" + std::string(arg) + "' is not a scheme: use dependency-lists or invalidate-all";
}

std::string parse_header_names(std::string_view args, std::vector<std::string>& out) {
  std::vector<std::string> names;
  size_t i = 0;
  while (i < args.size()) {
    char c = args[i];
    if (c == ' ' || c == '\t' || c == ',') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < args.size() && args[j] != ' ' && args[j] != '\t' && args[j] != ',') ++j;
    std::string_view name = args.substr(i, j - i);
    i = j;
    if (!std::all_of(name.begin(), name.end(), is_tchar))
      return "'" + std::string(name) + "' is not a header name (letters, digits and -_. only)";
    if (iequals(name, kKeyHeader) || iequals(name, kTagHeader) || iequals(name, kInvalidateHeader))
      return "'" + std::string(name) +
             "' is a Tierce protocol header, not a dependency header; list e.g. Tierce-Depends "
             "Surrogate-Key";
    bool dup = std::any_of(names.begin(), names.end(),
                           [&](const std::string& n) { return iequals(n, name); });
    if (!dup) names.emplace_back(name);
  }
  if (names.empty())
    return "needs at least one header name; write e.g. AppVersionDependencyHeaders Tierce-Depends "
           "Surrogate-Key";
  out = std::move(names);
  return "";
}

std::string check_node_name(std::string_view arg) {
  if (arg.empty() || arg.size() > 64) return "a node name has 1..64 characters";
  for (char c : arg)
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f)
      return "'" + std::string(arg) + "' contains a space or control character";
  return "";
}

std::optional<uint64_t> parse_key_header(std::string_view value) {
  std::string_view s = trim(value);
  if (s.size() != 16) return std::nullopt;
  std::string lower(s);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return coherence::parse_hex(lower);
}

std::string collect_values(const HeaderList& headers, const std::vector<std::string>& names,
                           bool* found) {
  std::string out;
  bool any = false;
  for (const auto& [k, v] : headers) {
    const auto& key = k;  // clang 14 cannot capture a structured binding
    bool wanted = std::any_of(names.begin(), names.end(),
                              [&](const std::string& n) { return iequals(n, key); });
    if (!wanted) continue;
    any = true;
    std::string_view t = trim(v);
    if (t.empty()) continue;
    if (!out.empty()) out += ", ";
    out += t;
  }
  if (found) *found = any;
  return out;
}

std::vector<std::string> headers_to_strip(const std::vector<std::string>& dependency_headers) {
  std::vector<std::string> out = {kDependsHeader, kInvalidateHeader, kTagHeader};
  for (const auto& h : dependency_headers) {
    bool dup =
        std::any_of(out.begin(), out.end(), [&](const std::string& n) { return iequals(n, h); });
    if (!dup) out.push_back(h);
  }
  return out;
}

std::string join_lists(std::string_view a, std::string_view b) {
  a = trim(a);
  b = trim(b);
  if (a.empty()) return std::string(b);
  if (b.empty()) return std::string(a);
  return std::string(a) + ", " + std::string(b);
}

Decision decide_registration(const PageFacts& f) {
  if (!f.has_key) return Decision::NoKey;
  if (!f.is_get) return Decision::NotGet;
  if (f.status != 200) return Decision::NotOk;
  if (!f.seq_read) return Decision::NoSeq;
  if (!f.deps_valid) return Decision::BadDeps;
  if (f.app_nocache) return Decision::AppNoCache;
  // Under dependency-lists a page that names no dependency would never be bumped by an update:
  // an empty header does not make it cacheable either.
  if ((!f.deps_found || f.deps_count == 0) && f.scheme == coherence::Scheme::DependencyLists)
    return Decision::NoDeps;
  return Decision::Register;
}

std::string_view to_string(Decision d) {
  switch (d) {
    case Decision::Register: return "registered";
    case Decision::NoKey: return "no Tierce-Key";
    case Decision::NotGet: return "not a GET";
    case Decision::NotOk: return "status is not 200";
    case Decision::NoSeq: return "the home's invalidation sequence could not be read before the handler ran";
    case Decision::NoDeps: return "the response declared no dependencies";
    case Decision::BadDeps: return "the dependency list is malformed";
    case Decision::AppNoCache: return "the application marked it uncacheable (tierce-nocache note)";
  }
  return "?";
}

std::string format_tag(std::string_view home, uint64_t slot, uint64_t version) {
  std::string s(home);
  s += ' ';
  s += std::to_string(slot);
  s += ' ';
  s += std::to_string(version);
  return s;
}

RefusalCounter counter_of(coherence::Refusal r) {
  switch (r) {
    case coherence::Refusal::Race:
      return RefusalCounter::Race;
    case coherence::Refusal::LogTooShort:
    case coherence::Refusal::OtherIncarnation:
      return RefusalCounter::Log;
    case coherence::Refusal::Pending:
      return RefusalCounter::Pending;
    default:
      return RefusalCounter::Other;
  }
}

bool needs_second_invalidation(bool invalidated_at_first_output, bool first_output_was_last) {
  return invalidated_at_first_output && !first_output_was_last;
}

bool is_php_abort(int aplog_level, std::string_view message) {
  constexpr int kAplogErr = 3;  // APLOG_ERR (http_log.h); lower is more severe
  if (aplog_level > kAplogErr) return false;
  return message.substr(0, 4) == "PHP ";
}

size_t wait_bucket(uint64_t micros) {
  size_t b = 0;
  while (micros && b < kWaitBuckets - 1) {
    micros >>= 1;
    ++b;
  }
  return b;
}

uint64_t wait_quantile(const std::array<uint64_t, kWaitBuckets>& counts, double p) {
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  if (total == 0) return 0;
  uint64_t rank = static_cast<uint64_t>(p * static_cast<double>(total) + 0.999999);
  if (rank == 0) rank = 1;
  uint64_t seen = 0;
  for (size_t i = 0; i < kWaitBuckets; ++i) {
    seen += counts[i];
    if (seen >= rank) return i == 0 ? 1 : (uint64_t{1} << i);
  }
  return uint64_t{1} << (kWaitBuckets - 1);
}

void Counters::record_wait(uint64_t micros) {
  wait_buckets[wait_bucket(micros)].fetch_add(1, std::memory_order_relaxed);
  uint64_t m = wait_max_us.load(std::memory_order_relaxed);
  while (micros > m && !wait_max_us.compare_exchange_weak(m, micros, std::memory_order_relaxed)) {
  }
}

std::string Counters::text() const {
  std::string s;
  auto line = [&](const char* k, uint64_t v) {
    s += k;
    s += ' ';
    s += std::to_string(v);
    s += '\n';
  };
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  line("requests_keyed", ld(requests_keyed));
  line("bad_keys", ld(bad_keys));
  line("seq_failures", ld(seq_failures));
  line("registrations", ld(registrations));
  line("refused_race", ld(refused_race));
  line("refused_log", ld(refused_log));
  line("refused_pending", ld(refused_pending));
  line("refused_other", ld(refused_other));
  line("not_registered", ld(not_registered));
  line("invalidations", ld(invalidations));
  line("invalidations_fenced", ld(invalidations_fenced));
  line("acks_received", ld(acks_received));
  line("homes_fenced", ld(homes_fenced));
  line("homes_skipped", ld(homes_skipped));
  line("homes_marked", ld(homes_marked));
  line("invalidations_unconfirmed", ld(invalidations_unconfirmed));
  line("second_invalidations", ld(second_invalidations));
  line("aborted_responses", ld(aborted_responses));
  line("bad_dependency_lists", ld(bad_dependency_lists));
  std::array<uint64_t, kWaitBuckets> counts{};
  for (size_t i = 0; i < kWaitBuckets; ++i) counts[i] = ld(wait_buckets[i]);
  line("invalidation_wait_p50_us_le", wait_quantile(counts, 0.5));
  line("invalidation_wait_p99_us_le", wait_quantile(counts, 0.99));
  line("invalidation_wait_max_us", ld(wait_max_us));
  return s;
}

void Counters::metrics(base::Metrics& m) const {
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  m.counter("tierce_appversion_requests_keyed_total", "Requests with a valid Tierce-Key.",
            ld(requests_keyed));
  m.counter("tierce_appversion_bad_keys_total", "Requests whose Tierce-Key was malformed.",
            ld(bad_keys));
  m.counter("tierce_appversion_seq_failures_total",
            "Keyed requests whose home sequence could not be read (page not cacheable).",
            ld(seq_failures));
  m.counter("tierce_appversion_registrations_total", "Pages registered at their home and tagged.",
            ld(registrations));
  const char* help = "Registrations refused by the home, by reason.";
  m.counter("tierce_appversion_registrations_refused_total", help, ld(refused_race),
            {{"reason", "race"}});
  m.counter("tierce_appversion_registrations_refused_total", help, ld(refused_log),
            {{"reason", "log"}});
  m.counter("tierce_appversion_registrations_refused_total", help, ld(refused_pending),
            {{"reason", "pending"}});
  m.counter("tierce_appversion_registrations_refused_total", help, ld(refused_other),
            {{"reason", "other"}});
  m.counter("tierce_appversion_not_registered_total",
            "Keyed pages not registered (status, dependencies, ...).", ld(not_registered));
  m.counter("tierce_appversion_invalidations_total", "Invalidations sent.", ld(invalidations));
  m.counter("tierce_appversion_invalidations_fenced_total",
            "Invalidations that returned after the fence bound (some home was fenced instead "
            "of acknowledging).",
            ld(invalidations_fenced));
  m.counter("tierce_appversion_acks_received_total", "Homes that acknowledged an invalidation.",
            ld(acks_received));
  m.counter("tierce_appversion_homes_fenced_total", "Homes relied on as fenced.",
            ld(homes_fenced));
  m.counter("tierce_appversion_homes_skipped_total",
            "Homes not waited for: marked unreachable in this node's writer region since the "
            "fence bound or longer (they cannot vouch until the mark is cleared).",
            ld(homes_skipped));
  m.counter("tierce_appversion_homes_marked_total",
            "Skip marks set by this node's updates (a home did not acknowledge by half the bound).",
            ld(homes_marked));
  m.counter("tierce_appversion_invalidations_unconfirmed_total",
            "Invalidations a home of another topology did not acknowledge (not covered by its "
            "fence: its pages may be stale; COH0108).",
            ld(invalidations_unconfirmed));
  m.counter("tierce_appversion_second_invalidations_total",
            "Invalidations sent again after the script ended.", ld(second_invalidations));
  m.counter("tierce_appversion_aborted_responses_total",
            "Responses cut because PHP aborted after output (tag withdrawn).",
            ld(aborted_responses));
  m.counter("tierce_appversion_bad_dependency_lists_total", "Malformed dependency lists.",
            ld(bad_dependency_lists));
  std::array<uint64_t, kWaitBuckets> counts{};
  uint64_t waits = 0;
  for (size_t i = 0; i < kWaitBuckets; ++i) waits += counts[i] = ld(wait_buckets[i]);
  m.counter("tierce_appversion_invalidation_waits_total",
            "Invalidations waited for (acknowledged or fenced).", waits);
  // The buckets are powers of two of microseconds: a quantile is known to within a factor 2,
  // given as the bucket's upper bound.
  m.gauge("tierce_appversion_invalidation_wait_p50_le_seconds",
          "Upper bound of the bucket holding the median invalidation wait (0: none yet).",
          double(wait_quantile(counts, 0.5)) / 1e6);
  m.gauge("tierce_appversion_invalidation_wait_p99_le_seconds",
          "Upper bound of the bucket holding the 99th percentile invalidation wait.",
          double(wait_quantile(counts, 0.99)) / 1e6);
  m.gauge("tierce_appversion_invalidation_wait_max_seconds", "Longest invalidation wait.",
          double(ld(wait_max_us)) / 1e6);
}

// ---- the configuration -----------------------------------------------------------------------

DirSettings merge_dir(const DirSettings& base, const DirSettings& add) {
  DirSettings m;
  m.enabled = add.enabled != -1 ? add.enabled : base.enabled;
  m.dependency_headers = add.dependency_headers ? add.dependency_headers : base.dependency_headers;
  return m;
}

bool enabled(const DirSettings& d) { return d.enabled == 1; }

std::vector<std::string> dependency_headers(const DirSettings& d) {
  if (!d.dependency_headers) return {kDependsHeader};
  return *d.dependency_headers;
}

std::string check_node_in_topology(const coherence::Topology& t, std::string_view topology_path,
                                   std::string_view node) {
  const coherence::NodeInfo* n = t.find(std::string(node));
  if (!n)
    return "node '" + std::string(node) + "' is not in the topology " + std::string(topology_path) +
           "; name one of its [[node]] entries with role = \"app\"";
  if (n->role != coherence::Role::App)
    return "node '" + std::string(node) + "' has role proxy in " + std::string(topology_path) +
           "; mod_appversion runs on an app node (role = \"app\")";
  return "";
}

std::string check_against_topology(const coherence::Topology& t, std::string_view topology_path,
                                   const std::vector<SeenValue>& schemes,
                                   const std::vector<SeenValue>& ack_timeouts) {
  const std::string cluster(coherence::to_string(t.coherence.scheme));
  const std::string path(topology_path);
  for (const auto& s : schemes)
    if (s.value != cluster)
      return "APPVER0023 AppVersionScheme " + s.value + " (" + s.where +
             ") differs from the cluster's scheme " + cluster + " ([coherence] scheme in " + path +
             "): one scheme per cluster, or pages registered under one are missed by updates "
             "under the other. Remove AppVersionScheme (the topology decides) or make them equal";
  const uint32_t bound = t.coherence.fence_bound_ms();
  for (const auto& a : ack_timeouts)
    if (std::stoul(a.value) < bound)
      return "APPVER0024 AppVersionAckTimeout " + a.value + " (" + a.where +
             ") is shorter than the fence bound " + std::to_string(bound) +
             " ms ([coherence] lease_ms " + std::to_string(t.coherence.lease_ms) +
             " + clock_skew_ms " + std::to_string(t.coherence.clock_skew_ms) + " in " + path +
             "): an update could return while a home it could not reach still vouches for a "
             "page that misses it. Remove AppVersionAckTimeout (the bound is what an update "
             "waits at most) or raise it";
  return "";
}

base::Result<std::optional<ModuleConfig>> resolve_server_config(const ServerSettings& s) {
  namespace co = coherence;
  auto fail = [](std::string msg) -> base::Result<std::optional<ModuleConfig>> {
    return base::Status(base::Code::InvalidArgument, std::move(msg));
  };
  if (s.topology_path.empty() && s.node.empty()) {
    if (s.any_enabled)
      return fail("APPVER0004 AppVersion On is set but AppVersionTopology and AppVersionNode are "
                  "not: add both to the main server configuration");
    return std::optional<ModuleConfig>();
  }
  if (s.topology_path.empty() || s.node.empty())
    return fail(std::string("APPVER0004 AppVersion") + (s.node.empty() ? "Node" : "Topology") +
                " is missing: mod_appversion needs both AppVersionTopology and AppVersionNode in "
                "the main server configuration");
  ModuleConfig c;
  try {
    c.topology = co::Topology::load(s.topology_path);
    c.topology.require_app_nodes();
  } catch (const std::exception& e) {
    return fail("APPVER0001 cannot load the topology " + s.topology_path + ": " + e.what());
  }
  const co::NodeInfo* self = c.topology.find(s.node);
  if (!self || self->role != co::Role::App)
    return fail("APPVER0002 AppVersionNode " + s.node + ": " +
                (self ? "has role proxy" : "is not a node") + " in " + s.topology_path +
                "; name a [[node]] with role = \"app\"");
  try {
    for (const co::NodeInfo* n : c.topology.app_nodes()) (void)c.topology.uri_of(*n);
  } catch (const std::exception& e) {
    return fail("APPVER0001 topology " + s.topology_path + ": " + e.what() +
                " (every app node needs a memd URI of the cluster's transport)");
  }
  if (!s.agent_socket.empty()) {
    // The agent numbers and sends for us: no secret here, no counter mapped.
    if (self->writer.empty())
      return fail("APPVER0028 AppVersionAgent " + s.agent_socket + ": the topology " +
                  s.topology_path + " lists no writer agent for node " + s.node +
                  " (writer = [...] in its [[node]]): the homes must read its counter at the "
                  "agent that numbers for this httpd");
    c.agent_socket = s.agent_socket;
  } else {
    // The homes of a keyed cluster take registrations and invalidations only from a node that
    // signs (docs/SECURITY.md "Roles"): without the agent, the children sign themselves.
    if (self->public_key && s.node_key.empty())
      return fail("APPVER0032 the topology " + s.topology_path +
                  " gives nodes keys: set AppVersionAgent (recommended: the children then hold "
                  "no credential) or AppVersionNodeKey (this node's key file; the children, where "
                  "PHP runs, then hold it)");
    if (!s.node_key.empty()) {
      try {
        c.node_key = fabric::NodeKey::from_file(s.node_key);
      } catch (const std::exception& e) {
        return fail("APPVER0032 AppVersionNodeKey " + s.node_key + ": " + e.what());
      }
    }
    try {
      c.secret = c.topology.secret();
    } catch (const std::exception& e) {
      return fail("APPVER0003 cannot read the cluster secret " + c.topology.secret_file +
                  " named by " + s.topology_path + ": " + e.what() +
                  " (it must exist, hold >= 16 bytes and not be readable by others: chmod 600, "
                  "owner root)");
    }
  }
  if (std::string why = check_against_topology(c.topology, s.topology_path, s.schemes,
                                                s.ack_timeouts);
      !why.empty())
    return fail(why);
  c.node = s.node;
  c.writer_segment = self->segment_prefix + co::kWriterSuffix;
  c.tuning.op_timeout = std::chrono::milliseconds(s.op_timeout_ms);
  c.tuning.connect_timeout = std::chrono::milliseconds(std::max<uint32_t>(s.op_timeout_ms, 200));
  c.agent_timeouts.op = c.tuning.op_timeout;
  c.agent_timeouts.connect = c.tuning.connect_timeout;
  c.agent_timeouts.fence_bound = std::chrono::milliseconds(c.topology.coherence.fence_bound_ms());
  return std::optional<ModuleConfig>(std::move(c));
}

}  // namespace tierce::appversion
