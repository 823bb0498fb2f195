// mod_rcache/rcache_logic.cc — see rcache_logic.h. No httpd headers here.
#include "mod_rcache/rcache_logic.h"

#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "base/metrics.h"
#include "coherence/key.h"

namespace tierce::rcache {

namespace {

char lc(char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; }

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
void put_str(std::string& out, std::string_view s) {
  put_u32(out, uint32_t(s.size()));
  out.append(s);
}

struct Reader {
  std::string_view in;
  size_t pos = 0;
  bool ok = true;
  uint32_t u32() {
    if (in.size() - pos < 4) {
      ok = false;
      return 0;
    }
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(static_cast<unsigned char>(in[pos + i])) << (8 * i);
    pos += 4;
    return v;
  }
  std::string_view view() {
    uint32_t n = u32();
    if (!ok || in.size() - pos < n) {
      ok = false;
      return {};
    }
    std::string_view s = in.substr(pos, n);
    pos += n;
    return s;
  }
  std::string str() { return std::string(view()); }
};

constexpr std::string_view kRespMagic = "RCR1";
constexpr std::string_view kVaryMagic = "RCV1";

// Splits a comma-separated list (header field values), trimming each element, skipping empties.
std::vector<std::string_view> split_list(std::string_view v) {
  std::vector<std::string_view> out;
  size_t start = 0;
  bool in_quotes = false;
  for (size_t i = 0; i <= v.size(); ++i) {
    if (i < v.size() && v[i] == '"') in_quotes = !in_quotes;
    if (i == v.size() || (v[i] == ',' && !in_quotes)) {
      auto e = trim(v.substr(start, i - start));
      if (!e.empty()) out.push_back(e);
      start = i + 1;
    }
  }
  return out;
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  if (s.empty()) return std::nullopt;
  uint64_t base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
    if (s.empty() || s.size() > 16) return std::nullopt;
  }
  uint64_t v = 0;
  for (char c : s) {
    uint64_t d;
    if (c >= '0' && c <= '9') d = uint64_t(c - '0');
    else if (base == 16 && lc(c) >= 'a' && lc(c) <= 'f') d = uint64_t(lc(c) - 'a' + 10);
    else return std::nullopt;
    if (v > (UINT64_MAX - d) / base) return std::nullopt;
    v = v * base + d;
  }
  return v;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lc(a[i]) != lc(b[i])) return false;
  return true;
}

bool istarts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
}

std::string lower(std::string_view s) {
  std::string o(s);
  for (auto& c : o) c = lc(c);
  return o;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

bool is_protocol_header(std::string_view name) { return istarts_with(name, "Tierce-"); }

bool is_hop_by_hop(std::string_view n) {
  for (std::string_view h : {"Connection", "Keep-Alive", "Proxy-Authenticate",
                             "Proxy-Authorization", "Proxy-Connection", "TE", "Trailer",
                             "Transfer-Encoding", "Upgrade"})
    if (iequals(n, h)) return true;
  return false;
}

Headers headers_to_store(const Headers& in, bool keep_set_cookie) {
  std::vector<std::string_view> connection_named;
  for (const auto& [n, v] : in)
    if (iequals(n, "Connection"))
      for (auto t : split_list(v)) connection_named.push_back(t);
  Headers out;
  for (const auto& [n, v] : in) {
    if (is_hop_by_hop(n) || is_protocol_header(n)) continue;
    if (iequals(n, "Date") || iequals(n, "Age") || iequals(n, "Content-Length") ||
        iequals(n, "Content-Type"))
      continue;
    if (!keep_set_cookie && (iequals(n, "Set-Cookie") || iequals(n, "Set-Cookie2"))) continue;
    bool named = false;
    for (auto t : connection_named)
      if (iequals(n, t)) named = true;
    if (named) continue;
    out.emplace_back(n, v);
  }
  return out;
}

PayloadKind payload_kind(std::string_view p) {
  if (p.substr(0, 4) == kRespMagic) return PayloadKind::Response;
  if (p.substr(0, 4) == kVaryMagic) return PayloadKind::Vary;
  return PayloadKind::Invalid;
}

std::string serialize_response(const StoredResponse& r) {
  std::string out;
  size_t est = 16 + r.content_type.size() + r.body.size();
  for (const auto& [n, v] : r.headers) est += 8 + n.size() + v.size();
  out.reserve(est);
  out.append(kRespMagic);
  put_u32(out, uint32_t(r.status));
  put_str(out, r.content_type);
  put_u32(out, uint32_t(r.headers.size()));
  for (const auto& [n, v] : r.headers) {
    put_str(out, n);
    put_str(out, v);
  }
  out.append(r.body);
  return out;
}

bool is_valid_response(std::string_view p) {
  if (payload_kind(p) != PayloadKind::Response) return false;
  Reader rd{p, 4};
  uint32_t status = rd.u32();
  rd.view();
  uint32_t n = rd.u32();
  if (!rd.ok || status < 100 || status > 999) return false;
  if (n > (p.size() - rd.pos) / 8) return false;
  for (uint32_t i = 0; i < n && rd.ok; ++i) {
    rd.view();
    rd.view();
  }
  return rd.ok;
}

std::optional<StoredResponse> parse_response(std::string_view p) {
  if (payload_kind(p) != PayloadKind::Response) return std::nullopt;
  Reader rd{p, 4};
  StoredResponse r;
  r.status = int(rd.u32());
  r.content_type = rd.str();
  uint32_t n = rd.u32();
  if (!rd.ok || r.status < 100 || r.status > 999) return std::nullopt;
  if (n > (p.size() - rd.pos) / 8) return std::nullopt;  // each header needs >= 8 bytes
  for (uint32_t i = 0; i < n && rd.ok; ++i) {
    std::string name = rd.str();
    std::string value = rd.str();
    r.headers.emplace_back(std::move(name), std::move(value));
  }
  if (!rd.ok) return std::nullopt;
  r.body.assign(p.substr(rd.pos));
  return r;
}

std::string serialize_vary(const std::vector<std::string>& names) {
  std::string out(kVaryMagic);
  put_u32(out, uint32_t(names.size()));
  for (const auto& n : names) put_str(out, n);
  return out;
}

std::optional<std::vector<std::string>> parse_vary_record(std::string_view p) {
  if (payload_kind(p) != PayloadKind::Vary) return std::nullopt;
  Reader rd{p, 4};
  uint32_t n = rd.u32();
  if (!rd.ok || n > (p.size() - rd.pos) / 4) return std::nullopt;
  std::vector<std::string> names;
  for (uint32_t i = 0; i < n && rd.ok; ++i) names.push_back(rd.str());
  if (!rd.ok || rd.pos != p.size() || names.empty()) return std::nullopt;
  return names;
}

VarySpec parse_vary(std::string_view v) {
  VarySpec s;
  for (auto e : split_list(v)) {
    if (e == "*") {
      s.star = true;
      continue;
    }
    std::string n = lower(e);
    bool dup = false;
    for (const auto& x : s.names)
      if (x == n) dup = true;
    if (!dup) s.names.push_back(std::move(n));
  }
  return s;
}

std::string vary_values(const std::vector<std::string>& names,
                        const std::function<std::optional<std::string>(const std::string&)>& get) {
  std::string out;
  for (const auto& n : names) {
    out.append(n);
    out.append(": ");
    if (auto v = get(n)) out.append(trim(*v));
    out.push_back('\n');
  }
  return out;
}

coherence::EntryFormat entry_format(std::string base, const HeaderGetter& get) {
  coherence::EntryFormat f;
  f.variant_key = [base = std::move(base), &get](std::string_view p) -> std::optional<std::string> {
    if (payload_kind(p) != PayloadKind::Vary) return std::nullopt;
    auto names = parse_vary_record(p);
    if (!names) return std::nullopt;  // corrupt: not servable either, so it is erased
    return coherence::variant_key(base, vary_values(*names, get));
  };
  f.servable = [](std::string_view p) { return is_valid_response(p); };
  return f;
}

CacheControl parse_cache_control(std::string_view value) {
  CacheControl cc;
  for (auto e : split_list(value)) {
    auto eq = e.find('=');
    std::string_view name = trim(e.substr(0, eq));
    std::string_view arg = eq == std::string_view::npos ? std::string_view{} : trim(e.substr(eq + 1));
    if (iequals(name, "no-store")) cc.no_store = true;
    else if (iequals(name, "no-cache")) cc.no_cache = true;
    else if (iequals(name, "private")) cc.is_private = true;
    else if (iequals(name, "public")) cc.is_public = true;
    else if (iequals(name, "max-age")) {
      if (!arg.empty() && arg.front() == '"' && arg.size() >= 2) arg = arg.substr(1, arg.size() - 2);
      if (arg == "0") cc.max_age_zero = true;
    }
  }
  return cc;
}

std::optional<TagText> parse_tag(std::string_view value) {
  std::vector<std::string_view> f;
  size_t i = 0;
  while (i < value.size()) {
    while (i < value.size() && (value[i] == ' ' || value[i] == '\t')) ++i;
    size_t s = i;
    while (i < value.size() && value[i] != ' ' && value[i] != '\t') ++i;
    if (i > s) f.push_back(value.substr(s, i - s));
  }
  if (f.size() != 3) return std::nullopt;
  for (char c : f[0])
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      return std::nullopt;
  auto slot = parse_u64(f[1]);
  auto version = parse_u64(f[2]);
  if (!slot || !version || f[0].size() > 64) return std::nullopt;
  return TagText{std::string(f[0]), *slot, *version};
}

base::Result<uint32_t> resolve_tag_home(const TagText& t, const coherence::Topology& topo) {
  using base::Code;
  for (size_t i = 0; i < topo.nodes.size(); ++i) {
    const auto& n = topo.nodes[i];
    if (n.name != t.node) continue;
    if (n.role != coherence::Role::App)
      return {Code::InvalidArgument,
              "Tierce-Tag names node '" + t.node + "', which is not an app node"};
    if (t.slot >= topo.version_slots)
      return {Code::InvalidArgument, "Tierce-Tag slot " + std::to_string(t.slot) +
                                         " >= version_slots " + std::to_string(topo.version_slots)};
    return uint32_t(i);
  }
  return {Code::InvalidArgument, "Tierce-Tag names node '" + t.node + "', unknown in the topology"};
}

RequestAction decide_request(const RequestFacts& f, const Policy& p) {
  if (f.method != "GET" && f.method != "HEAD") return RequestAction::Pass;
  if (f.subrequest) return RequestAction::Pass;
  if (f.authorization && !p.store_authorized) return RequestAction::Pass;
  auto cc = parse_cache_control(f.cache_control);
  if (cc.no_store) return RequestAction::Pass;
  bool pragma_no_cache = false;
  for (auto e : split_list(f.pragma))
    if (iequals(e, "no-cache")) pragma_no_cache = true;
  if (cc.no_cache || cc.max_age_zero || (f.cache_control.empty() && pragma_no_cache))
    return RequestAction::ForwardStore;
  return RequestAction::Lookup;
}

Cacheability decide_response(const ResponseFacts& f, const Policy& p,
                             const coherence::Topology& topo) {
  Cacheability c;
  auto no = [&](std::string why) {
    c.cacheable = false;
    c.reason = std::move(why);
    return c;
  };
  if (!f.request_is_get) return no("not a GET request");
  if (f.request_authorized && !p.store_authorized) return no("request carried Authorization");
  if (f.request_no_store) return no("request Cache-Control: no-store");
  if (f.status != 200) return no("status " + std::to_string(f.status) + " (only 200 is cached)");
  auto cc = parse_cache_control(f.cache_control);
  if (cc.no_store) return no("Cache-Control: no-store");
  if (cc.is_private) return no("Cache-Control: private");
  if (cc.no_cache) return no("Cache-Control: no-cache");
  if (f.set_cookie && !p.store_set_cookie) return no("response sets a cookie (Set-Cookie)");
  if (f.request_cookie && !p.store_cookie_requests && !cc.is_public)
    return no("request carried Cookie (the page may be personal): store it with "
              "Cache-Control: public or RCacheStoreCookieRequests On");
  auto vary = parse_vary(f.vary);
  if (vary.star) return no("Vary: *");
  if (!f.tag) return no("no Tierce-Tag (nothing proves the page current)");
  auto t = parse_tag(*f.tag);
  if (!t) return no("malformed Tierce-Tag '" + *f.tag + "'");
  auto home = resolve_tag_home(*t, topo);
  if (!home.ok()) return no(home.message());
  c.binding = coherence::tag_binding(coherence::Tag{*home, t->slot, t->version}, topo, f.key_hash);
  if (c.binding != coherence::TagBinding::Bound) {
    const coherence::NodeInfo& key_home = topo.home_of(f.key_hash);
    return no("Tierce-Tag '" + *f.tag + "' is not this key's (" +
              std::string(coherence::to_string(c.binding)) + ": key " +
              coherence::to_hex(f.key_hash) + " has home " + key_home.name + ", slot " +
              std::to_string(coherence::slot_of(f.key_hash, topo.version_slots)) +
              "): no update would invalidate it; is AppVersion Off where this page is rendered, "
              "or does the application set Tierce-Tag itself?");
  }
  c.cacheable = true;
  c.tag = *t;
  c.home = *home;
  c.vary = std::move(vary.names);
  return c;
}

std::string incomplete_body(const BodyEnd& b) {
  if (b.error_bucket)
    return "the body ended in an error (e.g. the backend broke it off before its end)";
  if (b.connection_aborted) return "the client connection was aborted";
  if (b.no_cache)
    return "httpd marked the response not cacheable (r->no_cache: e.g. the backend broke off)";
  if (b.content_length && *b.content_length != b.body_bytes)
    return "body of " + std::to_string(b.body_bytes) + " bytes, Content-Length " +
           std::to_string(*b.content_length);
  return "";
}

std::optional<uint64_t> parse_size(std::string_view s) {
  s = trim(s);
  if (s.empty()) return std::nullopt;
  uint64_t mult = 1;
  char last = lc(s.back());
  if (last == 'k' || last == 'm' || last == 'g') {
    mult = last == 'k' ? 1ull << 10 : last == 'm' ? 1ull << 20 : 1ull << 30;
    s.remove_suffix(1);
  }
  if (s.empty() || s.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + uint64_t(c - '0');
  }
  if (v > UINT64_MAX / mult) return std::nullopt;
  return v * mult;
}

std::optional<uint64_t> parse_uint(std::string_view s, uint64_t lo, uint64_t hi) {
  s = trim(s);
  if (s.empty() || s.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + uint64_t(c - '0');
  }
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

// ---- status / metrics ----------------------------------------------------------------------------

namespace {
std::string fmt_ratio(uint64_t hits, uint64_t misses) {
  uint64_t total = hits + misses;
  char b[32];
  std::snprintf(b, sizeof b, "%.4f", total ? double(hits) / double(total) : 0.0);
  return b;
}
std::string us(uint64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", double(ns) / 1000.0);
  return b;
}
}  // namespace

std::string html_escape(std::string_view s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o.push_back(c);
    }
  }
  return o;
}

std::string render_status_auto(const StatusSnapshot& s) {
  std::string o;
  auto kv = [&](std::string_view k, const std::string& v) {
    o.append(k);
    o.append(": ");
    o.append(v);
    o.push_back('\n');
  };
  auto n = [](uint64_t v) { return std::to_string(v); };
  kv("Node", s.node);
  kv("Cluster", s.cluster);
  kv("Topology", s.topology_path);
  kv("Entries", n(s.entries));
  kv("BytesUsed", n(s.used_bytes));
  kv("BytesCapacity", n(s.capacity_bytes));
  kv("MaxEntryBytes", n(s.max_entry_bytes));
  kv("Hits", n(s.hits));
  kv("Misses", n(s.misses));
  kv("HitRatio", fmt_ratio(s.hits, s.misses + s.version_failures + s.stale_rejects + s.expired));
  kv("VersionFailures", n(s.version_failures));
  kv("Invalidations", n(s.stale_rejects));
  kv("Expired", n(s.expired));
  kv("Stores", n(s.stores));
  kv("StoreRefused", n(s.store_refused));
  kv("Uncacheable", n(s.uncacheable));
  kv("Evictions", n(s.evictions));
  kv("Erased", n(s.erased));
  kv("LockTimeouts", n(s.lock_timeouts));
  kv("TagMismatches", n(s.tag_mismatches));
  kv("VersionChecks", n(s.latency_count));
  kv("VersionCheckP50us", us(s.p50_ns));
  kv("VersionCheckP90us", us(s.p90_ns));
  kv("VersionCheckP99us", us(s.p99_ns));
  for (const auto& h : s.homes) {
    kv("Home-" + h.name, h.state);
    kv("Home-" + h.name + "-Lookups", n(h.lookups));
    kv("Home-" + h.name + "-Hits", n(h.hits));
    kv("Home-" + h.name + "-Unverifiable", n(h.unverifiable));
  }
  if (s.coop.scheme != "off") {
    kv("coop_scheme", s.coop.scheme);
    for (const auto& [k, v] : s.coop.counters) kv("coop_" + k, n(v));
    for (const auto& [k, v] : s.coop.copy_misses) kv("coop_copy_miss_" + k, n(v));
    for (const auto& [k, v] : s.coop.dir_misses) kv("coop_dir_miss_" + k, n(v));
  }
  return o;
}

std::string render_status_html(const StatusSnapshot& s) {
  std::string o =
      "<!DOCTYPE html>\n<html><head><title>Tierce proxy cache status</title></head><body>\n"
      "<h1>Tierce proxy cache (mod_rcache)</h1>\n";
  o += "<dl><dt>Node</dt><dd>" + html_escape(s.node) + "</dd><dt>Cluster</dt><dd>" +
       html_escape(s.cluster) + "</dd><dt>Topology</dt><dd>" + html_escape(s.topology_path) +
       "</dd></dl>\n<table border=\"1\">\n";
  auto row = [&](std::string_view k, const std::string& v) {
    o += "<tr><th align=\"left\">";
    o.append(k);
    o += "</th><td align=\"right\">" + html_escape(v) + "</td></tr>\n";
  };
  auto n = [](uint64_t v) { return std::to_string(v); };
  row("Entries", n(s.entries));
  row("Bytes used / capacity", n(s.used_bytes) + " / " + n(s.capacity_bytes));
  row("Largest entry", n(s.max_entry_bytes));
  row("Hits", n(s.hits));
  row("Misses", n(s.misses));
  row("Hit ratio (hits / lookups)",
      fmt_ratio(s.hits, s.misses + s.version_failures + s.stale_rejects + s.expired));
  row("Version-check failures (forwarded, fail closed)", n(s.version_failures));
  row("Invalidations (stale entries rejected)", n(s.stale_rejects));
  row("Expired (older than RCacheMaxAge: erased, forwarded)", n(s.expired));
  row("Stores", n(s.stores));
  row("Stores refused", n(s.store_refused));
  row("Uncacheable responses", n(s.uncacheable));
  row("Evictions", n(s.evictions));
  row("Erased", n(s.erased));
  row("Lock timeouts (stores/erases skipped: the arena mutex was held too long)",
      n(s.lock_timeouts));
  row("Tag mismatches (Tierce-Tag not of the page's key: not stored, or erased)",
      n(s.tag_mismatches));
  row("Version checks", n(s.latency_count));
  row("Version check p50 (&micro;s)", us(s.p50_ns));
  row("Version check p90 (&micro;s)", us(s.p90_ns));
  row("Version check p99 (&micro;s)", us(s.p99_ns));
  o += "</table>\n";
  if (!s.homes.empty()) {
    o += "<h2>Homes (state as seen by this child; lookups of the pages homed there, all "
         "children)</h2>\n<table border=\"1\">\n<tr><th>Home</th><th>State</th><th>Lookups</th>"
         "<th>Hits</th><th>Unverifiable</th><th>Hit ratio</th></tr>\n";
    for (const auto& h : s.homes)
      o += "<tr><th align=\"left\">" + html_escape(h.name) + "</th><td>" + html_escape(h.state) +
           "</td><td align=\"right\">" + n(h.lookups) + "</td><td align=\"right\">" + n(h.hits) +
           "</td><td align=\"right\">" + n(h.unverifiable) + "</td><td align=\"right\">" +
           fmt_ratio(h.hits, h.lookups - std::min(h.hits, h.lookups)) + "</td></tr>\n";
    o += "</table>\n";
  }
  if (s.coop.scheme != "off") {
    o += "<h2>Cooperative cache (RCacheCoop " + html_escape(s.coop.scheme) +
         ")</h2>\n<table border=\"1\">\n";
    for (const auto& [k, v] : s.coop.counters) row(k, n(v));
    for (const auto& [k, v] : s.coop.copy_misses) row("copy not used: " + k, n(v));
    for (const auto& [k, v] : s.coop.dir_misses) row("directory miss: " + k, n(v));
    o += "</table>\n";
  }
  o += "</body></html>\n";
  return o;
}

std::string render_metrics(const StatusSnapshot& s) {
  base::Metrics m;
  m.counter("tierce_rcache_hits_total", "Requests served from the cache after a version check.",
            s.hits);
  m.counter("tierce_rcache_misses_total", "Cacheable requests not found in the cache.", s.misses);
  m.counter("tierce_rcache_version_failures_total",
            "Version reads that failed or timed out (request forwarded).", s.version_failures);
  m.counter("tierce_rcache_stale_rejects_total",
            "Entries found stale by their version check (invalidations).", s.stale_rejects);
  m.counter("tierce_rcache_stores_total", "Responses stored.", s.stores);
  m.counter("tierce_rcache_store_refused_total",
            "Cacheable responses not stored (too large, aborted, arena refused).",
            s.store_refused);
  m.counter("tierce_rcache_uncacheable_total", "Responses not cacheable by the rules.",
            s.uncacheable);
  m.counter("tierce_rcache_evictions_total", "Entries overwritten by the ring.", s.evictions);
  m.counter("tierce_rcache_erased_total", "Entries erased.", s.erased);
  m.counter("tierce_rcache_expired_total",
            "Entries found older than RCacheMaxAge (erased, request forwarded).", s.expired);
  m.counter("tierce_rcache_lock_timeouts_total",
            "Stores and erases skipped because the arena's writer mutex was not free in time.",
            s.lock_timeouts);
  m.counter("tierce_rcache_tag_mismatches_total",
            "Responses not stored and entries erased because their Tierce-Tag is not their "
            "key's home and slot.",
            s.tag_mismatches);
  m.gauge("tierce_rcache_entries", "Live entries in the arena.", s.entries);
  m.gauge("tierce_rcache_bytes_used", "Bytes used in the arena ring.", s.used_bytes);
  m.gauge("tierce_rcache_bytes_capacity", "Capacity of the arena ring in bytes.",
          s.capacity_bytes);
  m.summary("tierce_rcache_version_check_seconds",
            "Latency of the one-sided version read of a hit.",
            {{0.5, double(s.p50_ns) / 1e9},
             {0.9, double(s.p90_ns) / 1e9},
             {0.99, double(s.p99_ns) / 1e9}},
            double(s.latency_sum_ns) / 1e9, s.latency_count);
  for (const auto& h : s.homes)
    m.gauge("tierce_rcache_home_up", "Whether this child's last contact with the home succeeded.",
            uint64_t(h.state == "ok" ? 1 : 0), {{"home", h.name}});
  // Per home: the hit ratio of the pages homed at each app node (a dead home costs its own pages;
  // docs/OPERATIONS.md). Families of their own: tierce_rcache_hits_total keeps no label.
  for (const auto& h : s.homes)
    m.counter("tierce_rcache_home_lookups_total",
              "Cache lookups of pages homed at this app node (hits, misses, stale, unverifiable).",
              h.lookups, {{"home", h.name}});
  for (const auto& h : s.homes)
    m.counter("tierce_rcache_home_hits_total",
              "Lookups of pages homed at this app node served from the cache.", h.hits,
              {{"home", h.name}});
  for (const auto& h : s.homes)
    m.counter("tierce_rcache_home_unverifiable_total",
              "Lookups of pages homed at this app node whose version could not be read or was not "
              "vouched for (forwarded, fail closed).",
              h.unverifiable, {{"home", h.name}});
  if (s.coop.scheme != "off") {
    for (const auto& [k, v] : s.coop.counters) {
      if (k == "lookup_ns")
        m.counter_seconds("tierce_rcache_coop_lookup_seconds_total",
                          "Time spent in directory and copy reads.", double(v) / 1e9);
      else
        m.counter("tierce_rcache_coop_" + k + "_total",
                  "Cooperative cache events (docs/coop_cache.md).", v);
    }
    for (const auto& [k, v] : s.coop.copy_misses)
      m.counter("tierce_rcache_coop_copy_misses_total",
                "Copies read from a peer that did not verify (a miss, never wrong bytes).", v,
                {{"reason", k}});
    for (const auto& [k, v] : s.coop.dir_misses)
      m.counter("tierce_rcache_coop_dir_misses_total", "Directory reads that found no entry.", v,
                {{"reason", k}});
  }
  return m.text();
}

// ---- the status pages' numbers ---------------------------------------------------------------

StatusSnapshot status_snapshot(const ModuleConfig& cfg, const coherence::CacheArena* arena,
                               const std::atomic<int>* home_state) {
  namespace co = coherence;
  StatusSnapshot s;
  s.node = cfg.node;
  s.topology_path = cfg.topology_path;
  s.cluster = cfg.topo.name;
  if (arena) {
    auto st = arena->stats();
    s.entries = st.entries;
    s.used_bytes = st.used_bytes;
    s.capacity_bytes = st.capacity_bytes;
    s.max_entry_bytes = cfg.max_entry;  // RCacheMaxEntrySize (the arena itself allows ring/4)
    auto& c = arena->counters();
    auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
    s.hits = ld(c.hits);
    s.misses = ld(c.misses);
    s.version_failures = ld(c.version_failures);
    s.stale_rejects = ld(c.stale_rejects);
    s.stores = ld(c.stores);
    s.store_refused = ld(c.store_refused);
    s.uncacheable = ld(c.uncacheable);
    s.evictions = ld(c.evictions);
    s.erased = ld(c.erased);
    s.expired = ld(c.expired);
    s.lock_timeouts = ld(c.lock_timeouts);
    s.tag_mismatches = ld(c.tag_mismatches);
    for (size_t i = 0; i < co::ArenaCounters::kLatencyBuckets; ++i) {
      uint64_t n = ld(c.latency[i]);
      s.latency_count += n;
      s.latency_sum_ns += n * co::CacheArena::latency_bucket_lo(i);
    }
    s.p50_ns = arena->latency_percentile(0.5);
    s.p90_ns = arena->latency_percentile(0.9);
    s.p99_ns = arena->latency_percentile(0.99);
    for (size_t i = 0; i < cfg.topo.nodes.size(); ++i) {
      if (cfg.topo.nodes[i].role != co::Role::App) continue;
      int hs = home_state ? home_state[i].load(std::memory_order_relaxed) : 0;
      HomeReach h{cfg.topo.nodes[i].name, hs == 1 ? "ok" : hs == 2 ? "failed" : "unknown"};
      if (i < co::ArenaCounters::kHomeCounters) {
        h.lookups = ld(c.home[i].lookups);
        h.hits = ld(c.home[i].hits);
        h.unverifiable = ld(c.home[i].unverifiable);
      }
      s.homes.push_back(std::move(h));
    }
    if (cfg.coop != co::CoopScheme::Off) {
      const co::CoopCounters& k = c.coop;
      s.coop.scheme = std::string(co::to_string(cfg.coop));
      s.coop.counters = {{"lookups", ld(k.lookups)},
                         {"dir_hits", ld(k.dir_hits)},
                         {"dir_unreachable", ld(k.dir_unreachable)},
                         {"copy_reads", ld(k.copy_reads)},
                         {"copy_hits", ld(k.copy_hits)},
                         {"copy_unreachable", ld(k.copy_unreachable)},
                         {"remote_hits", ld(k.remote_hits)},
                         {"remote_stale", ld(k.remote_stale)},
                         {"remote_unverifiable", ld(k.remote_unverifiable)},
                         {"kept_local", ld(k.kept_local)},
                         {"stored_local", ld(k.stored_local)},
                         {"stored_pool", ld(k.stored_pool)},
                         {"pool_failures", ld(k.pool_failures)},
                         {"demoted", ld(k.demoted)},
                         {"publishes", ld(k.publishes)},
                         {"publish_refused", ld(k.publish_refused)},
                         {"withdrawals", ld(k.withdrawals)},
                         {"invalidations", ld(k.invalidations)},
                         {"messages_failed", ld(k.messages_failed)},
                         {"lookup_ns", ld(k.lookup_ns)}};
      for (size_t i = 0; i < co::kMissReasonCount; ++i)
        s.coop.copy_misses.emplace_back(std::string(co::to_string(co::MissReason(i))),
                                        ld(k.copy_misses[i]));
      for (size_t i = 0; i < co::kDirMissReasonCount; ++i)
        s.coop.dir_misses.emplace_back(std::string(co::to_string(co::DirMissReason(i))),
                                       ld(k.dir_misses[i]));
    }
  }
  return s;
}

// ---- the server configuration ----------------------------------------------------------------

base::Result<ModuleConfig> resolve_server_config(const ServerSettings& c) {
  namespace co = coherence;
  auto fail = [](const std::string& msg) -> base::Result<ModuleConfig> {
    return base::Status(base::Code::InvalidArgument, msg);
  };
  if (c.topology.empty())
    return fail("RCACHE0001 RCache On is used but RCacheTopology is not set: add "
                "'RCacheTopology /etc/tierce/cluster.toml' to the main server configuration");
  if (c.node.empty())
    return fail("RCACHE0002 RCache On is used but RCacheNode is not set: add 'RCacheNode NAME' "
                "naming this proxy's node in the topology file");
  ModuleConfig g;
  g.topology_path = c.topology;
  g.node = c.node;
  try {
    g.topo = co::Topology::load(g.topology_path);
    g.topo.require_app_nodes();
  } catch (const std::exception& e) {
    return fail(std::string("RCACHE0003 RCacheTopology ") + g.topology_path +
                ": cannot load the topology: " + e.what());
  }
  const co::NodeInfo* self = nullptr;
  for (const auto& n : g.topo.nodes)
    if (n.name == g.node) self = &n;
  if (!self)
    return fail("RCACHE0004 RCacheNode " + g.node + ": no node of that name in " +
                g.topology_path + ": use one of its [[node]] names");
  if (self->segment_prefix.empty())
    return fail("RCACHE0004 RCacheNode " + g.node + ": the node has no segment_prefix in " +
                g.topology_path);
  bool has_app = false;
  for (const auto& n : g.topo.nodes)
    if (n.role == co::Role::App) has_app = true;
  if (!has_app)
    return fail("RCACHE0005 RCacheTopology " + g.topology_path +
                ": the topology has no app node (role = \"app\"): nothing could prove a page current");
  try {
    g.secret = g.topo.secret();
  } catch (const std::exception& e) {
    return fail("RCACHE0006 RCacheTopology " + g.topology_path +
                ": cannot read the fabric secret (secret_file): " + e.what());
  }
  g.size = c.size ? c.size : kDefaultArenaSize;
  g.max_entry = c.max_entry ? c.max_entry : kDefaultMaxEntry;
  if (g.max_entry > g.size / 4)
    return fail("RCACHE0007 RCacheMaxEntrySize " + std::to_string(g.max_entry) +
                " is more than RCacheSize/4 (" + std::to_string(g.size / 4) +
                "): lower it or raise RCacheSize");
  g.version_timeout_ms =
      c.version_timeout_ms > 0 ? uint32_t(c.version_timeout_ms) : g.topo.op_timeout_ms;
  g.retry_after_ms = c.retry_after_ms >= 0 ? uint32_t(c.retry_after_ms) : kDefaultRetryAfterMs;
  g.segment = self->segment_prefix + ".arena";
  g.coop = c.coop >= 0 ? co::CoopScheme(c.coop) : co::CoopScheme::Off;
  if (g.coop != co::CoopScheme::Off && self->role != co::Role::Proxy)
    return fail("RCACHE0012 RCacheCoop " + std::string(co::to_string(g.coop)) + ": node " +
                g.node + " is not a proxy (role = \"proxy\") in " + g.topology_path +
                ": the directory of shared copies is partitioned over the proxies; set its role "
                "or use RCacheCoop Off");
  g.coop_threshold = c.coop_threshold ? c.coop_threshold : 16384;
  g.coop_pool_slabs = c.coop_pool_slabs > 0 ? uint32_t(c.coop_pool_slabs) : 16;
  g.coop_placement =
      c.coop_placement >= 0 ? co::Placement(c.coop_placement) : co::Placement::MostFree;
  if (co::uses_pool(g.coop)) {
    if (c.coop_pool) {
      g.coop_pool = *c.coop_pool;
    } else {
      for (const auto& n : g.topo.nodes)
        if (n.role == co::Role::App) g.coop_pool.push_back(n.name);
    }
    for (const auto& name : g.coop_pool) {
      const co::NodeInfo* d = nullptr;
      for (const auto& n : g.topo.nodes)
        if (n.name == name) d = &n;
      if (!d || d->memd.empty())
        return fail("RCACHE0015 RCacheCoopPool " + name + ": " +
                    (d ? "the node has no memd address" : "no node of that name") + " in " +
                    g.topology_path + ": name nodes whose memd has a [pool] section");
    }
  } else if (c.coop_pool) {
    return fail("RCACHE0015 RCacheCoopPool is set but RCacheCoop " +
                std::string(co::to_string(g.coop)) +
                " uses no pool memory: use RCacheCoop MTACC or HYBCC, or remove it");
  }
  return g;
}

// ---- one directive's argument ----------------------------------------------------------------

namespace {
base::Status bad_arg(std::string msg) {
  return base::Status(base::Code::InvalidArgument, std::move(msg));
}
std::string quoted(std::string_view directive, std::string_view arg) {
  return std::string(directive) + ": '" + std::string(arg) + "'";
}
}  // namespace

base::Result<uint64_t> arena_size_arg(std::string_view arg) {
  auto v = parse_size(arg);
  if (!v || *v < (1ull << 20) || *v > (1ull << 40))
    return bad_arg(quoted("RCacheSize", arg) +
                   " is not allowed: give the arena size in bytes with an optional K, M or G "
                   "suffix, between 1M and 1024G (e.g. RCacheSize 256M)");
  return *v;
}

base::Result<uint64_t> max_entry_arg(std::string_view arg) {
  auto v = parse_size(arg);
  if (!v || *v < 1024)
    return bad_arg(quoted("RCacheMaxEntrySize", arg) +
                   " is not allowed: give a size of at least 1K with an optional K, M or G "
                   "suffix, at most RCacheSize/4 (e.g. RCacheMaxEntrySize 1M)");
  return *v;
}

base::Result<int> version_timeout_arg(std::string_view arg) {
  auto v = parse_uint(arg, 1, 60000);
  if (!v)
    return bad_arg(quoted("RCacheVersionTimeout", arg) +
                   " is not allowed: give milliseconds from 1 to 60000 (e.g. "
                   "RCacheVersionTimeout 50)");
  return int(*v);
}

base::Result<int> retry_after_arg(std::string_view arg) {
  auto v = parse_uint(arg, 0, 600000);
  if (!v)
    return bad_arg(quoted("RCacheRetryAfter", arg) +
                   " is not allowed: give milliseconds from 0 to 600000 (e.g. RCacheRetryAfter "
                   "100)");
  return int(*v);
}

base::Result<int64_t> max_age_arg(std::string_view arg) {
  auto v = parse_uint(arg, 0, uint64_t(kMaxMaxAgeSeconds));
  if (!v)
    return bad_arg(quoted("RCacheMaxAge", arg) + " is not allowed: give seconds from 1 to " +
                   std::to_string(kMaxMaxAgeSeconds) +
                   ", or 0 for no limit (e.g. RCacheMaxAge 600)");
  return int64_t(*v);
}

base::Result<coherence::CoopScheme> coop_arg(std::string_view arg) {
  auto v = coherence::parse_coop_scheme(arg);
  if (!v)
    return bad_arg(quoted("RCacheCoop", arg) +
                   " is not a scheme: give Off (each proxy alone, the default), BCC (share "
                   "copies, keep fetched ones too), CCWR (share copies without duplicating "
                   "them), MTACC (as CCWR, and what the arena evicts moves to pool memory) or "
                   "HYBCC (small pages as BCC, large ones in pool memory)");
  return *v;
}

base::Result<uint64_t> coop_threshold_arg(std::string_view arg) {
  auto v = parse_size(arg);
  if (!v || *v < 1 || *v > (1ull << 30))
    return bad_arg(quoted("RCacheCoopThreshold", arg) +
                   " is not allowed: give a size from 1 to 1G with an optional K, M or G suffix "
                   "(HYBCC pools pages from this size; e.g. RCacheCoopThreshold 16K)");
  return *v;
}

base::Result<int> coop_pool_slabs_arg(std::string_view arg) {
  auto v = parse_uint(arg, 1, 65536);
  if (!v)
    return bad_arg(quoted("RCacheCoopPoolSlabs", arg) +
                   " is not allowed: give the most slabs of pool memory one httpd child holds, "
                   "1 to 65536 (e.g. RCacheCoopPoolSlabs 16)");
  return int(*v);
}

base::Result<coherence::Placement> coop_placement_arg(std::string_view arg) {
  auto v = coherence::parse_placement(arg);
  if (!v)
    return bad_arg(quoted("RCacheCoopPlacement", arg) +
                   " is not a policy: give local_first, most_free or power_of_two");
  return *v;
}

// ---- what a virtual host and a location say -------------------------------------------------

PolicySettings merge_policy(const PolicySettings& base, const PolicySettings& add) {
  PolicySettings m = base;
  if (add.store_set_cookie != -1) m.store_set_cookie = add.store_set_cookie;
  if (add.store_authorized != -1) m.store_authorized = add.store_authorized;
  if (add.require_tag != -1) m.require_tag = add.require_tag;
  if (add.store_cookie_requests != -1) m.store_cookie_requests = add.store_cookie_requests;
  if (add.max_age_s != -1) m.max_age_s = add.max_age_s;
  if (add.strip_protocol_headers != -1) m.strip_protocol_headers = add.strip_protocol_headers;
  return m;
}

Policy resolve_policy(const PolicySettings& s) {
  Policy p;
  p.store_set_cookie = s.store_set_cookie == 1;
  p.store_authorized = s.store_authorized == 1;
  p.require_tag = s.require_tag != 0;
  p.store_cookie_requests = s.store_cookie_requests == 1;
  p.max_age_s = s.max_age_s >= 0 ? s.max_age_s : kDefaultMaxAgeSeconds;
  return p;
}

bool strips_protocol_headers(const PolicySettings& s) { return s.strip_protocol_headers != 0; }

int merge_enabled(int base, int add) { return add != -1 ? add : base; }

}  // namespace tierce::rcache
