// tests/rcache/test_rcache_logic.cc — mod_rcache's pure helpers (no httpd): payload format, header
// filtering, the cacheability rules one by one, Tierce-Tag parsing, Vary, directive values, the
// completeness of a captured body, the entry format the hit decision reads, and the status
// renderers.
#define BOOST_TEST_MODULE rcache_logic
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include "coherence/key.h"
#include "mod_rcache/rcache_logic.h"

using namespace tierce::rcache;
namespace co = tierce::coherence;

namespace {

co::Topology topo() {
  co::Topology t;
  t.path = "/tmp/cluster.toml";
  t.name = "test";
  t.version_slots = 1024;
  co::NodeInfo p;
  p.name = "proxy1";
  p.role = co::Role::Proxy;
  p.segment_prefix = "/tierce.test.proxy1";
  co::NodeInfo a;
  a.name = "app1";
  a.role = co::Role::App;
  a.segment_prefix = "/tierce.test.app1";
  co::NodeInfo b = a;
  b.name = "app2";
  t.nodes = {p, a, b};
  return t;
}

// A key hash whose home is `home` and whose slot is `slot` under topo() (what the home derives
// at registration: coherence::tag_binding).
uint64_t key_bound_to(std::string_view home, uint64_t slot) {
  const co::Topology t = topo();
  for (uint64_t i = 0;; ++i) {
    uint64_t h = co::hash64("http://shop.example\n/item.php?id=" + std::to_string(i));
    if (t.home_of(h).name == home && co::slot_of(h, t.version_slots) == slot) return h;
  }
}

// A response to a request of key key_bound_to("app1", 17), tagged for that key.
ResponseFacts good() {
  static const uint64_t key = key_bound_to("app1", 17);
  ResponseFacts f;
  f.key_hash = key;
  f.tag = "app1 17 123456";
  return f;
}

bool has(const Headers& h, std::string_view name) {
  for (const auto& [n, v] : h)
    if (iequals(n, name)) return true;
  return false;
}

}  // namespace

BOOST_AUTO_TEST_CASE(serialization_round_trip_binary) {
  StoredResponse r;
  r.status = 200;
  r.content_type = "application/octet-stream";
  r.headers = {{"ETag", "\"abc\""}, {"X-Empty", ""}, {"Vary", "Accept-Language"}};
  for (int i = 0; i < 4096; ++i) r.body.push_back(char(i * 7 & 0xff));
  r.body.append(std::string("\0\0RCR1\r\n", 8));
  std::string p = serialize_response(r);
  BOOST_TEST((payload_kind(p) == PayloadKind::Response));
  auto back = parse_response(p);
  BOOST_REQUIRE(back);
  BOOST_TEST(back->status == 200);
  BOOST_TEST(back->content_type == r.content_type);
  BOOST_TEST(back->headers == r.headers);
  BOOST_TEST(back->body == r.body);

  StoredResponse empty;
  empty.status = 204;
  auto e2 = parse_response(serialize_response(empty));
  BOOST_REQUIRE(e2);
  BOOST_TEST(e2->body.empty());
  BOOST_TEST(e2->headers.empty());
}

BOOST_AUTO_TEST_CASE(serialization_rejects_garbage) {
  BOOST_TEST(!parse_response(""));
  BOOST_TEST(!parse_response("RCR1"));
  BOOST_TEST(!parse_response("XXXXsomething"));
  StoredResponse r;
  r.headers = {{"A", "b"}};
  std::string p = serialize_response(r);
  for (size_t cut = 0; cut + 1 < p.size(); ++cut) {
    // Every truncation inside the header block is rejected (the body is "the rest").
    auto x = parse_response(std::string_view(p).substr(0, cut));
    if (cut < p.size()) BOOST_TEST(!x, "cut " << cut);
  }
  std::string huge = p;
  huge[8] = '\xff';  // content_type length far beyond the payload
  huge[9] = '\xff';
  BOOST_TEST(!parse_response(huge));
  BOOST_TEST((payload_kind(p) != PayloadKind::Vary));
}

BOOST_AUTO_TEST_CASE(vary_record_round_trip) {
  std::vector<std::string> names{"accept-language", "accept-encoding"};
  std::string p = serialize_vary(names);
  BOOST_TEST((payload_kind(p) == PayloadKind::Vary));
  auto back = parse_vary_record(p);
  BOOST_REQUIRE(back);
  BOOST_TEST(*back == names);
  BOOST_TEST(!parse_vary_record(p + "x"));
  BOOST_TEST(!parse_vary_record(serialize_vary({})));
  BOOST_TEST(!parse_response(p));
}

BOOST_AUTO_TEST_CASE(protocol_and_hop_by_hop_headers) {
  BOOST_TEST(is_protocol_header("Tierce-Tag"));
  BOOST_TEST(is_protocol_header("tierce-depends"));
  BOOST_TEST(is_protocol_header("TIERCE-INVALIDATE"));
  BOOST_TEST(!is_protocol_header("Tierce"));
  BOOST_TEST(!is_protocol_header("X-Tierce-Tag"));
  BOOST_TEST(is_hop_by_hop("connection"));
  BOOST_TEST(is_hop_by_hop("Transfer-Encoding"));
  BOOST_TEST(!is_hop_by_hop("Content-Type"));

  Headers in{{"Connection", "close, X-Private-Hop"},
             {"X-Private-Hop", "1"},
             {"Keep-Alive", "timeout=5"},
             {"Transfer-Encoding", "chunked"},
             {"Tierce-Tag", "app1 1 2"},
             {"Tierce-Depends", "item:42"},
             {"Date", "x"},
             {"Age", "3"},
             {"Content-Length", "10"},
             {"Content-Type", "text/html"},
             {"Set-Cookie", "a=b"},
             {"ETag", "\"e\""},
             {"Cache-Control", "max-age=60"},
             {"Vary", "Accept-Language"}};
  Headers out = headers_to_store(in, false);
  BOOST_TEST(out.size() == 3u);
  BOOST_TEST(has(out, "ETag"));
  BOOST_TEST(has(out, "Cache-Control"));
  BOOST_TEST(has(out, "Vary"));
  Headers with_cookie = headers_to_store(in, true);
  BOOST_TEST(has(with_cookie, "Set-Cookie"));
  BOOST_TEST(!has(with_cookie, "Tierce-Tag"));
}

BOOST_AUTO_TEST_CASE(tag_parsing) {
  auto t = parse_tag("app1 17 123456");
  BOOST_REQUIRE(t);
  BOOST_TEST(t->node == "app1");
  BOOST_TEST(t->slot == 17u);
  BOOST_TEST(t->version == 123456u);
  auto h = parse_tag("  app-2.x\t0x1f 0xFFFFFFFFFFFFFFFF ");
  BOOST_REQUIRE(h);
  BOOST_TEST(h->slot == 31u);
  BOOST_TEST(h->version == ~0ull);
  auto big = parse_tag("app1 1 18446744073709551615");
  BOOST_REQUIRE(big);
  BOOST_TEST(big->version == ~0ull);
  for (const char* bad : {"", "app1", "app1 1", "app1 1 2 3", "app1 -1 2", "app1 1 x",
                          "app1 1 18446744073709551616", "ap/p 1 2", "app1 0x 2",
                          "app1 1 0x11111111111111111", "app1 1.5 2"})
    BOOST_TEST(!parse_tag(bad), "'" << bad << "' should be malformed");

  auto tp = topo();
  BOOST_TEST(resolve_tag_home(*parse_tag("app1 17 1"), tp).value() == 1u);
  BOOST_TEST(resolve_tag_home(*parse_tag("app2 1023 1"), tp).value() == 2u);
  auto slot = resolve_tag_home(*parse_tag("app2 1024 1"), tp);
  BOOST_TEST(!slot.ok());
  BOOST_TEST(slot.message().find("version_slots") != std::string::npos);
  auto proxy = resolve_tag_home(*parse_tag("proxy1 1 1"), tp);
  BOOST_TEST(!proxy.ok());
  BOOST_TEST(proxy.message().find("not an app node") != std::string::npos);
  auto unknown = resolve_tag_home(*parse_tag("nobody 1 1"), tp);
  BOOST_TEST(!unknown.ok());
  BOOST_TEST(unknown.message().find("unknown") != std::string::npos);
  BOOST_TEST(unknown.status().code() == tierce::base::Code::InvalidArgument);
}

BOOST_AUTO_TEST_CASE(cache_control_parsing) {
  auto cc = parse_cache_control("public, max-age=0, No-Store");
  BOOST_TEST(cc.no_store);
  BOOST_TEST(cc.max_age_zero);
  BOOST_TEST(!cc.is_private);
  BOOST_TEST(parse_cache_control("private=\"Set-Cookie, X\"").is_private);
  BOOST_TEST(!parse_cache_control("private=\"Set-Cookie, X\"").no_store);
  BOOST_TEST(parse_cache_control("no-cache").no_cache);
  BOOST_TEST(!parse_cache_control("max-age=60").max_age_zero);
  BOOST_TEST(!parse_cache_control("").no_store);
  BOOST_TEST(parse_cache_control("Public, max-age=60").is_public);
  BOOST_TEST(!parse_cache_control("max-age=60").is_public);
  BOOST_TEST(!parse_cache_control("private=\"public\"").is_public);
}

BOOST_AUTO_TEST_CASE(request_rules) {
  Policy p;
  RequestFacts f;
  f.method = "GET";
  BOOST_TEST((decide_request(f, p) == RequestAction::Lookup));
  f.method = "HEAD";
  BOOST_TEST((decide_request(f, p) == RequestAction::Lookup));
  f.method = "POST";
  BOOST_TEST((decide_request(f, p) == RequestAction::Pass));
  f.method = "GET";
  f.subrequest = true;
  BOOST_TEST((decide_request(f, p) == RequestAction::Pass));
  f.subrequest = false;
  f.authorization = true;
  BOOST_TEST((decide_request(f, p) == RequestAction::Pass));
  p.store_authorized = true;
  BOOST_TEST((decide_request(f, p) == RequestAction::Lookup));
  f.authorization = false;
  f.cache_control = "no-cache";
  BOOST_TEST((decide_request(f, p) == RequestAction::ForwardStore));
  f.cache_control = "max-age=0";
  BOOST_TEST((decide_request(f, p) == RequestAction::ForwardStore));
  f.cache_control = "no-store";
  BOOST_TEST((decide_request(f, p) == RequestAction::Pass));
  f.cache_control = "";
  f.pragma = "no-cache";
  BOOST_TEST((decide_request(f, p) == RequestAction::ForwardStore));
}

BOOST_AUTO_TEST_CASE(response_rules_each) {
  auto tp = topo();
  Policy p;
  {
    auto c = decide_response(good(), p, tp);
    BOOST_TEST(c.cacheable);
    BOOST_TEST(c.home == 1u);
    BOOST_TEST(c.tag.slot == 17u);
    BOOST_TEST(c.tag.version == 123456u);
    BOOST_TEST(c.vary.empty());
  }
  auto rejected = [&](ResponseFacts f, const Policy& pol, std::string_view word) {
    auto c = decide_response(f, pol, tp);
    BOOST_TEST(!c.cacheable);
    BOOST_TEST(c.reason.find(word) != std::string::npos, c.reason << " should mention " << word);
  };
  auto f = good();
  f.request_is_get = false;
  rejected(f, p, "GET");
  f = good();
  f.status = 404;
  rejected(f, p, "404");
  f = good();
  f.status = 206;
  rejected(f, p, "206");
  f = good();
  f.cache_control = "max-age=10, no-store";
  rejected(f, p, "no-store");
  f = good();
  f.cache_control = "private";
  rejected(f, p, "private");
  f = good();
  f.cache_control = "no-cache";
  rejected(f, p, "no-cache");
  f = good();
  f.set_cookie = true;
  rejected(f, p, "Set-Cookie");
  {
    Policy q = p;
    q.store_set_cookie = true;
    BOOST_TEST(decide_response(f, q, tp).cacheable);
  }
  f = good();
  f.request_authorized = true;
  rejected(f, p, "Authorization");
  {
    Policy q = p;
    q.store_authorized = true;
    BOOST_TEST(decide_response(f, q, tp).cacheable);
  }
  f = good();
  f.request_no_store = true;
  rejected(f, p, "no-store");
  f = good();
  f.tag.reset();
  rejected(f, p, "Tierce-Tag");
  {
    Policy q = p;
    q.require_tag = false;  // still nothing to check a version against: not cached
    BOOST_TEST(!decide_response(f, q, tp).cacheable);
  }
  f = good();
  f.tag = "app1 17";
  rejected(f, p, "malformed");
  f.tag = "garbage";
  rejected(f, p, "malformed");
  f.tag = "proxy1 1 1";
  rejected(f, p, "not an app node");
  f.tag = "app1 5000 1";
  rejected(f, p, "version_slots");
  f.tag = "ghost 1 1";
  rejected(f, p, "unknown");
  f = good();
  f.vary = "*";
  rejected(f, p, "Vary");
  f.vary = "Accept-Language, *";
  rejected(f, p, "Vary");
}

// Issue 29, path 7: a well-formed Tierce-Tag of an app node used to be stored whatever key it
// was for; one that is not the key's (home, slot) is refused now, and says so.
BOOST_AUTO_TEST_CASE(a_tierce_tag_of_another_key_is_not_stored) {
  auto tp = topo();
  Policy p;
  auto f = good();
  BOOST_TEST(decide_response(f, p, tp).cacheable);
  BOOST_TEST((decide_response(f, p, tp).binding == co::TagBinding::Bound));
  // The key's home, another slot (an app tier with AppVersion Off passing a Tierce-Tag through,
  // or a page that sets one itself).
  f.tag = "app1 18 123456";
  auto c = decide_response(f, p, tp);
  BOOST_TEST(!c.cacheable);
  BOOST_TEST((c.binding == co::TagBinding::OtherSlot));
  BOOST_TEST(c.reason.find("not this key's") != std::string::npos, c.reason);
  BOOST_TEST(c.reason.find("slot 17") != std::string::npos, c.reason);
  // The key's slot at the other app node.
  f.tag = "app2 17 123456";
  c = decide_response(f, p, tp);
  BOOST_TEST(!c.cacheable);
  BOOST_TEST((c.binding == co::TagBinding::OtherHome));
  BOOST_TEST(c.reason.find("home app1") != std::string::npos, c.reason);
  // The tag of another key (homed at app2): right for that key, not for this one.
  const uint64_t other = key_bound_to("app2", 900);
  f.tag = "app2 900 1";
  c = decide_response(f, p, tp);
  BOOST_TEST(!c.cacheable);
  f.key_hash = other;
  BOOST_TEST(decide_response(f, p, tp).cacheable);
  // The check comes after the tag's own validity: a malformed tag is still "malformed".
  f.tag = "app1 x 1";
  c = decide_response(f, p, tp);
  BOOST_TEST((c.binding == co::TagBinding::Bound));
  BOOST_TEST(c.reason.find("malformed") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(cookie_requests_are_not_stored_unless_public_or_allowed) {
  auto tp = topo();
  Policy p;
  auto f = good();
  f.request_cookie = true;
  auto c = decide_response(f, p, tp);
  BOOST_TEST(!c.cacheable);
  BOOST_TEST(c.reason.find("Cookie") != std::string::npos, c.reason);
  // Cache-Control: public says the page is the same for everyone.
  f.cache_control = "public, max-age=60";
  BOOST_TEST(decide_response(f, p, tp).cacheable);
  f.cache_control = "max-age=60";
  BOOST_TEST(!decide_response(f, p, tp).cacheable);
  // RCacheStoreCookieRequests On.
  Policy q = p;
  q.store_cookie_requests = true;
  BOOST_TEST(decide_response(f, q, tp).cacheable);
  // public does not override the other rules.
  f.cache_control = "public, no-store";
  BOOST_TEST(!decide_response(f, q, tp).cacheable);
  f = good();
  f.request_cookie = true;
  f.cache_control = "public";
  f.set_cookie = true;
  BOOST_TEST(!decide_response(f, p, tp).cacheable);
  // Without a Cookie, nothing changes.
  BOOST_TEST(decide_response(good(), p, tp).cacheable);
  // Requests with a Cookie are still looked up (the cached page is one stored for everyone).
  RequestFacts rf;
  rf.method = "GET";
  BOOST_TEST((decide_request(rf, p) == RequestAction::Lookup));
}

BOOST_AUTO_TEST_CASE(only_complete_bodies_are_stored) {
  BodyEnd b;
  b.body_bytes = 10;
  BOOST_TEST(incomplete_body(b).empty());
  b.content_length = 10;
  BOOST_TEST(incomplete_body(b).empty());
  b.content_length = 100;
  BOOST_TEST(incomplete_body(b).find("Content-Length 100") != std::string::npos);
  b.content_length.reset();
  auto with = [&](auto set) {
    BodyEnd x = b;
    set(x);
    return incomplete_body(x);
  };
  // mod_proxy_http, when the backend breaks the body off: a 502 error bucket, then EOS, and
  // r->no_cache. Either one alone is enough.
  BOOST_TEST(with([](BodyEnd& x) { x.error_bucket = true; }).find("error") != std::string::npos);
  BOOST_TEST(with([](BodyEnd& x) { x.no_cache = true; }).find("no_cache") != std::string::npos);
  BOOST_TEST(with([](BodyEnd& x) { x.connection_aborted = true; }).find("aborted") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(entry_format_for_the_hit_decision) {
  std::string base = co::base_key("https", "h", "/v");
  std::optional<std::string> lang = "fr";
  HeaderGetter get = [&](const std::string& n) -> std::optional<std::string> {
    if (n == "accept-language") return lang;
    return std::nullopt;
  };
  auto f = entry_format(base, get);
  StoredResponse r;
  r.body = "x";
  std::string resp = serialize_response(r);
  BOOST_TEST(!f.variant_key(resp).has_value());
  BOOST_TEST(f.servable(resp));
  std::string vary = serialize_vary({"accept-language"});
  BOOST_TEST(f.variant_key(vary).value() == co::variant_key(base, "accept-language: fr\n"));
  lang = "en";  // the getter is read at each call: the request's headers
  BOOST_TEST(f.variant_key(vary).value() == co::variant_key(base, "accept-language: en\n"));
  BOOST_TEST(!f.servable(vary));
  BOOST_TEST(!f.variant_key("RCV1garbage").has_value());
  BOOST_TEST(!f.servable("RCV1garbage"));
  BOOST_TEST(!f.servable(""));
  // is_valid_response agrees with parse_response on every truncation.
  r.headers = {{"A", "b"}, {"C", ""}};
  r.content_type = "text/html";
  std::string p = serialize_response(r);
  for (size_t cut = 0; cut <= p.size(); ++cut) {
    auto v = std::string_view(p).substr(0, cut);
    BOOST_TEST(is_valid_response(v) == parse_response(v).has_value(), "cut " << cut);
  }
}

BOOST_AUTO_TEST_CASE(vary_handling) {
  auto v = parse_vary("Accept-Language, accept-encoding,ACCEPT-LANGUAGE, ,");
  BOOST_TEST(!v.star);
  BOOST_TEST(v.names == (std::vector<std::string>{"accept-language", "accept-encoding"}));
  BOOST_TEST(parse_vary("").names.empty());
  BOOST_TEST(parse_vary("*").star);

  auto tp = topo();
  auto f = good();
  f.vary = "Accept-Language";
  auto c = decide_response(f, Policy{}, tp);
  BOOST_TEST(c.cacheable);
  BOOST_TEST(c.vary == std::vector<std::string>{"accept-language"});

  auto getter_fr = [](const std::string& n) -> std::optional<std::string> {
    if (n == "accept-language") return std::string(" fr ");
    return std::nullopt;
  };
  auto getter_en = [](const std::string& n) -> std::optional<std::string> {
    if (n == "accept-language") return std::string("en");
    return std::nullopt;
  };
  std::vector<std::string> names{"accept-language", "accept-encoding"};
  std::string fr = vary_values(names, getter_fr);
  BOOST_TEST(fr == "accept-language: fr\naccept-encoding: \n");
  std::string en = vary_values(names, getter_en);
  std::string base = co::base_key("http", "Example.COM:80", "/a?b=1");
  BOOST_TEST(base == "http://example.com\n/a?b=1");
  BOOST_TEST(co::variant_key(base, fr) != co::variant_key(base, en));
  BOOST_TEST(co::hash64(co::variant_key(base, fr)) != co::hash64(co::variant_key(base, en)));
}

BOOST_AUTO_TEST_CASE(directive_values) {
  BOOST_TEST(parse_size("4096").value() == 4096u);
  BOOST_TEST(parse_size("64K").value() == 64u * 1024);
  BOOST_TEST(parse_size("64k").value() == 64u * 1024);
  BOOST_TEST(parse_size("256M").value() == 256ull << 20);
  BOOST_TEST(parse_size("2G").value() == 2ull << 30);
  for (const char* bad : {"", "M", "12T", "1.5M", "-1", "abc", "99999999999999999999", "20000000000G",
                          "1 M"})
    BOOST_TEST(!parse_size(bad), "'" << bad << "' should be refused");
  BOOST_TEST(parse_uint("50", 1, 60000).value() == 50u);
  BOOST_TEST(!parse_uint("0", 1, 60000));
  BOOST_TEST(!parse_uint("60001", 1, 60000));
  BOOST_TEST(!parse_uint("5ms", 1, 60000));
  BOOST_TEST(!parse_uint("", 0, 10));
}

BOOST_AUTO_TEST_CASE(status_renderers) {
  StatusSnapshot s;
  s.node = "proxy1";
  s.topology_path = "/etc/tierce/cluster.toml";
  s.hits = 3;
  s.misses = 1;
  s.stale_rejects = 2;
  s.expired = 4;
  s.lock_timeouts = 7;
  s.tag_mismatches = 9;
  s.p50_ns = 12000;
  s.p99_ns = 50000;
  s.latency_count = 5;
  s.homes = {{"app1", "ok", 10, 9, 0}, {"app<2>", "failed", 6, 1, 4}};
  std::string a = render_status_auto(s);
  BOOST_TEST(a.find("Hits: 3\n") != std::string::npos);
  BOOST_TEST(a.find("Invalidations: 2\n") != std::string::npos);
  BOOST_TEST(a.find("Expired: 4\n") != std::string::npos);
  BOOST_TEST(a.find("LockTimeouts: 7\n") != std::string::npos);
  BOOST_TEST(a.find("TagMismatches: 9\n") != std::string::npos);
  BOOST_TEST(a.find("HitRatio: 0.3000\n") != std::string::npos);  // 3 / (3 + 1 + 2 + 4)
  BOOST_TEST(a.find("VersionCheckP50us: 12.0\n") != std::string::npos);
  BOOST_TEST(a.find("Node: proxy1\n") != std::string::npos);
  std::string h = render_status_html(s);
  BOOST_TEST(h.find("app&lt;2&gt;") != std::string::npos);
  BOOST_TEST(h.find("app<2>") == std::string::npos);
  BOOST_TEST(h.find("Expired") != std::string::npos);
  BOOST_TEST(h.find("Lock timeouts") != std::string::npos);
  std::string m = render_metrics(s);
  BOOST_TEST(m.find("# TYPE tierce_rcache_hits_total counter\ntierce_rcache_hits_total 3\n") !=
             std::string::npos);
  BOOST_TEST(m.find("# TYPE tierce_rcache_version_check_seconds summary") != std::string::npos);
  BOOST_TEST(m.find("\ntierce_rcache_expired_total 4\n") != std::string::npos);
  BOOST_TEST(m.find("\ntierce_rcache_lock_timeouts_total 7\n") != std::string::npos);
  BOOST_TEST(m.find("\ntierce_rcache_tag_mismatches_total 9\n") != std::string::npos);
  BOOST_TEST(h.find("Tag mismatches") != std::string::npos);
  // base::Metrics writes the shortest text that reads back as the same double.
  BOOST_TEST(m.find("tierce_rcache_version_check_seconds{quantile=\"0.99\"} 5e-05\n") !=
             std::string::npos, m);
  BOOST_TEST(m.find("tierce_rcache_version_check_seconds_count 5") != std::string::npos);
  BOOST_TEST(m.find("tierce_rcache_home_up{home=\"app1\"} 1") != std::string::npos);
  BOOST_TEST(m.find("tierce_rcache_home_up{home=\"app<2>\"} 0") != std::string::npos);
  // Per home: one family each, a sample per app node (the hit ratio of the pages homed there).
  BOOST_TEST(m.find("# TYPE tierce_rcache_home_lookups_total counter\n"
                    "tierce_rcache_home_lookups_total{home=\"app1\"} 10\n"
                    "tierce_rcache_home_lookups_total{home=\"app<2>\"} 6\n") != std::string::npos,
             m);
  BOOST_TEST(m.find("tierce_rcache_home_hits_total{home=\"app1\"} 9\n"
                    "tierce_rcache_home_hits_total{home=\"app<2>\"} 1\n") != std::string::npos,
             m);
  BOOST_TEST(
      m.find("tierce_rcache_home_unverifiable_total{home=\"app<2>\"} 4\n") != std::string::npos, m);
  BOOST_TEST(a.find("Home-app1: ok\nHome-app1-Lookups: 10\nHome-app1-Hits: 9\n"
                    "Home-app1-Unverifiable: 0\n") != std::string::npos,
             a);
  BOOST_TEST(h.find(">0.1667<") != std::string::npos, h);  // app<2>: 1 hit of 6 lookups
  BOOST_TEST(m.find("coop") == std::string::npos);  // no [coop]: no coop families
  // With [coop]: lookup_ns is a counter of seconds (promtool refuses a counter without _total
  // and a unit other than the base one), the misses one family each, labelled by reason.
  s.coop.scheme = "ccwr";
  s.coop.counters = {{"lookups", 4}, {"lookup_ns", 1500000000}};
  s.coop.copy_misses = {{"generation_changed", 2}, {"checksum", 0}};
  s.coop.dir_misses = {{"not_found", 1}};
  m = render_metrics(s);
  BOOST_TEST(m.find("\ntierce_rcache_coop_lookups_total 4\n") != std::string::npos, m);
  BOOST_TEST(m.find("# TYPE tierce_rcache_coop_lookup_seconds_total counter\n"
                    "tierce_rcache_coop_lookup_seconds_total 1.5\n") != std::string::npos, m);
  BOOST_TEST(m.find("lookup_ns") == std::string::npos, m);
  BOOST_TEST(m.find("tierce_rcache_coop_copy_misses_total{reason=\"generation_changed\"} 2\n"
                    "tierce_rcache_coop_copy_misses_total{reason=\"checksum\"} 0\n") !=
             std::string::npos, m);
  BOOST_TEST(m.find("tierce_rcache_coop_dir_misses_total{reason=\"not_found\"} 1\n") !=
             std::string::npos, m);
}
