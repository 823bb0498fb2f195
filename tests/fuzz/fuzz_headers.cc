// tests/fuzz/fuzz_headers.cc — fuzzes what the Apache modules read from the outside world:
// mod_rcache's stored-entry payloads (read back from the arena and from peers' pools), Vary,
// Cache-Control, Tierce-Tag, size and number directive values; mod_appversion's Tierce-Key,
// dependency header lists and directive arguments; coherence::parse_dependencies (the
// Tierce-Depends / invalidation header value). Each parser returns, or refuses with its documented
// error, on any bytes — and what it accepts is consistent:
//   - parse_response(p) has a value exactly when is_valid_response(p) and payload_kind(p) says
//     Response; an accepted response serializes back to a payload that parses to the same one;
//   - a vary record round-trips; parse_vary's names are lower-case, unique, non-empty;
//   - a tag names 1..64 bytes of node; parse_size/parse_uint stay in range;
//   - parse_header_names never keeps a reserved or duplicate name; parse_dependencies never
//     returns more than kMaxDependencies hashes.
// Built twice (tests/fuzz/CMakeLists.txt): under libFuzzer (-DTIERCE_LIBFUZZER) and as a
// deterministic mutation driver in ctest:
//   fuzz_headers_replay [--iterations N] [--write-seeds DIR] [FILE...]
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "coherence/protocol.h"
#include "mod_appversion/logic.h"
#include "mod_rcache/rcache_logic.h"

namespace rc = tierce::rcache;
namespace av = tierce::appversion;
namespace co = tierce::coherence;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_headers: %s\n", what);
  std::abort();
}

bool is_lower(std::string_view s) {
  for (unsigned char c : s)
    if (std::isupper(c)) return false;
  return true;
}

void stored_payload(std::string_view p) {
  auto r = rc::parse_response(p);
  const bool valid = rc::is_valid_response(p);
  if (r.has_value() != valid) fail("parse_response and is_valid_response disagree");
  const auto kind = rc::payload_kind(p);
  if (valid && kind != rc::PayloadKind::Response) fail("a valid response of another kind");
  if (r) {
    auto again = rc::parse_response(rc::serialize_response(*r));
    if (!again || again->status != r->status || again->content_type != r->content_type ||
        again->headers != r->headers || again->body != r->body)
      fail("a stored response does not survive serialize/parse");
  }
  auto v = rc::parse_vary_record(p);
  if (v) {
    if (kind != rc::PayloadKind::Vary) fail("a vary record of another kind");
    auto again = rc::parse_vary_record(rc::serialize_vary(*v));
    if (!again || *again != *v) fail("a vary record does not survive serialize/parse");
  }
}

void vary_and_cache_control(std::string_view s) {
  auto spec = rc::parse_vary(s);
  std::set<std::string> seen;
  for (const auto& n : spec.names) {
    if (n.empty()) fail("parse_vary kept an empty name");
    if (!is_lower(n)) fail("parse_vary kept a name that is not lower-case");
    if (!seen.insert(n).second) fail("parse_vary kept a duplicate");
  }
  (void)rc::parse_cache_control(s);
  auto get = [&](const std::string& name) -> std::optional<std::string> {
    if (name.size() % 2) return std::nullopt;
    return std::string(s.substr(0, std::min<size_t>(s.size(), 64)));
  };
  (void)rc::vary_values(spec.names, get);
}

void tag_and_numbers(std::string_view s) {
  if (auto t = rc::parse_tag(s)) {
    if (t->node.empty() || t->node.size() > 64) fail("a tag with a node name of a bad length");
  }
  if (auto n = rc::parse_uint(s, 3, 1000)) {
    if (*n < 3 || *n > 1000) fail("parse_uint out of its range");
  }
  (void)rc::parse_size(s);
  uint32_t ms = 0;
  if (av::parse_millis(s, 5, 60000, ms).empty() && (ms < 5 || ms > 60000))
    fail("parse_millis accepted a value out of range");
  (void)av::parse_key_header(s);
  (void)av::check_node_name(s);
  (void)rc::html_escape(s);
}

void dependency_lists(std::string_view s) {
  try {
    auto deps = co::parse_dependencies(s);
    if (deps.size() > co::kMaxDependencies) fail("too many dependencies accepted");
  } catch (const co::ProtocolError&) {
  }
  std::vector<std::string> names;
  if (av::parse_header_names(s, names).empty()) {
    if (names.empty()) fail("parse_header_names accepted no name");
    std::set<std::string> seen;
    for (const auto& n : names) {
      std::string low;
      for (unsigned char c : n) low += char(std::tolower(c));
      if (low == "tierce-key" || low == "tierce-tag" || low == "tierce-invalidate")
        fail("parse_header_names kept a reserved name");
      if (!seen.insert(low).second) fail("parse_header_names kept a duplicate");
    }
  }
  // A header table cut out of the bytes: "name:value" per line.
  std::vector<std::string> lines;
  size_t at = 0;
  while (at <= s.size() && lines.size() < 64) {
    size_t nl = s.find('\n', at);
    if (nl == std::string_view::npos) nl = s.size();
    lines.emplace_back(s.substr(at, nl - at));
    at = nl + 1;
  }
  av::HeaderList table;
  for (const auto& l : lines) {
    std::string_view lv(l);
    size_t colon = lv.find(':');
    table.emplace_back(lv.substr(0, colon), colon == lv.npos ? "" : lv.substr(colon + 1));
  }
  bool found = false;
  std::string joined = av::collect_values(table, {"Tierce-Depends", "X-Deps"}, &found);
  (void)av::join_lists(joined, s.substr(0, s.size() / 2));
  (void)av::headers_to_strip(names);
}

}  // namespace

// Byte 0 picks the parser family; the rest is the text (a private copy: exact bounds).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: stored_payload(text); break;
    case 1: vary_and_cache_control(text); break;
    case 2: tag_and_numbers(text); break;
    default: dependency_lists(text); break;
  }
  return 0;
}

#ifndef TIERCE_LIBFUZZER
// ---- deterministic replay driver (any compiler; in ctest) ---------------------------------------
#include "replay_args.h"

static std::vector<std::string> seeds() {
  std::vector<std::string> out;
  auto with = [&](char which, std::string s) { out.push_back(std::string(1, which) + s); };
  rc::StoredResponse r;
  r.status = 200;
  r.content_type = "text/html";
  r.headers = {{"X-A", "1"}, {"Link", "</a>; rel=next"}};
  r.body = "<p>hello</p>";
  with(0, rc::serialize_response(r));
  with(0, rc::serialize_vary({"accept-language", "cookie"}));
  with(0, "RCR1");
  with(1, "Accept-Encoding, Accept-Language ,cookie");
  with(1, "*");
  with(1, "no-store, max-age=0, private, public, no-cache=\"Set-Cookie\"");
  with(2, "app1 17 0x2a");
  with(2, "64K");
  with(2, "0123456789abcdef");
  with(2, "250");
  with(3, "item:42 category:7, user:3\ttable:items");
  with(3, "Tierce-Depends X-Deps, x-deps");
  with(3, "Tierce-Depends: item:1\nX-Deps:user:2\nOther: 3");
  return out;
}

int main(int argc, char** argv) {
  return tierce_fuzz::replay_main(argc, argv, "fuzz_headers", 200000, seeds(), 20261126);
}
#endif  // TIERCE_LIBFUZZER
