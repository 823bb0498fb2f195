// tools/tierce-check/workload.cc — the run: reader and writer threads (pacing, --rate schedules,
// the records each keeps), the --during commands, and the proxies' metrics before and after.
#include "check.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

extern char** environ;

namespace tcheck {
namespace {

// "item:42=17" -> key, version
bool parse_kv(const std::string& s, uint64_t& key, uint64_t& version) {
  size_t colon = s.find(':'), eq = s.find('=');
  if (colon == std::string::npos || eq == std::string::npos || eq < colon) return false;
  std::string t = s.substr(0, colon);
  uint64_t type;
  if (t == "item") type = kItem;
  else if (t == "category") type = kCategory;
  else if (t == "user") type = kUser;
  else return false;
  std::string id = s.substr(colon + 1, eq - colon - 1), v = s.substr(eq + 1);
  if (id.empty() || v.empty() || id.size() > 12 || v.size() > 18) return false;
  for (char c : id)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  for (char c : v)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  key = make_key(type, std::stoull(id));
  version = std::stoull(v);
  return true;
}

// Every <meta name="tierce-data" content="KEY=VERSION"> of a page.
std::vector<std::pair<uint64_t, uint64_t>> page_markers(const std::string& body) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  static const std::string pre = "<meta name=\"tierce-data\" content=\"";
  size_t p = 0;
  while ((p = body.find(pre, p)) != std::string::npos) {
    p += pre.size();
    size_t q = body.find('"', p);
    if (q == std::string::npos) break;
    uint64_t k, v;
    if (parse_kv(body.substr(p, q - p), k, v)) out.emplace_back(k, v);
    p = q;
  }
  return out;
}
// Cache-related headers worth showing next to a stale read.
std::string interesting_headers(const Response& r) {
  std::string o;
  for (const auto& [k, v] : r.headers) {
    if (k == "age" || k == "via" || k == "cache-control" || k == "expires" || k == "etag" || k == "last-modified" ||
        k == "date" || k.rfind("x-", 0) == 0 || k.rfind("tierce-", 0) == 0 || k.find("cache") != std::string::npos) {
      if (!o.empty()) o += "; ";
      o += k + ": " + v;
    }
  }
  return o;
}

}  // namespace


// --rate: takes the next slot of the role's schedule and sleeps until it is due. Returns the
// scheduled time, or 0 when the run ends first. Closed loop (no --rate): now.
int64_t next_slot(Shared& sh, bool writer) {
  const int64_t interval = writer ? sh.write_interval_ns : sh.read_interval_ns;
  if (interval == 0) return now_ns();
  long long k = (writer ? sh.w_ticket : sh.r_ticket).fetch_add(1);
  int64_t due = sh.t0 + k * interval;
  if (sh.stop_at && due >= sh.stop_at) return 0;
  for (;;) {
    if (sh.stop.load()) return 0;
    int64_t now = now_ns();
    if (now >= due) {
      int64_t lag = now - due;
      if (lag > kLateNs) sh.late++;
      int64_t m = sh.max_lag.load();
      while (lag > m && !sh.max_lag.compare_exchange_weak(m, lag)) {
      }
      return due;
    }
    std::this_thread::sleep_for(std::chrono::nanoseconds(std::min<int64_t>(due - now, 50'000'000)));
  }
}

double rel_s(const Shared& sh, int64_t t) { return double(t - sh.t0) / 1e9; }

// Pacing: keeps reads : writes near (1 - ratio) : ratio through the run (so that writes are
// spread over the whole run and collide with reads), in "implied total ops" units with slack.
bool may_go(Shared& sh, bool writer) {
  const double ratio = sh.opt->write_ratio;
  for (;;) {
    if (sh.stop.load()) return false;
    if (sh.stop_at && now_ns() >= sh.stop_at) return false;
    long long r = sh.r_started.load(), w = sh.w_started.load();
    bool other_gone = writer ? (sh.readers_left.load() == 0 || (sh.r_budget >= 0 && r >= sh.r_budget))
                             : (sh.writers_left.load() == 0 || (sh.w_budget >= 0 && w >= sh.w_budget));
    if (other_gone || ratio <= 0 || ratio >= 1 || !sh.opt->pace) return true;
    double slack = 8.0 * (sh.opt->readers + sh.opt->write_threads()) + 20;
    double implied_r = double(r) / (1 - ratio), implied_w = double(w) / ratio;
    if (writer ? implied_w <= implied_r + slack : implied_r <= implied_w + slack) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void note_error(Shared& sh, ThreadOut& out, bool writer, const std::string& kind, const std::string& target,
                const std::string& what) {
  (writer ? out.write_errors : out.read_errors)[kind]++;
  sh.errors++;
  if (out.error_samples.size() < 3) {
    std::string w = what;
    for (char& c : w)
      if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    out.error_samples.push_back({writer ? "write" : "read", kind, target, w, rel_s(sh, now_ns())});
  }
}

std::string status_kind(int status) {
  if (status >= 500) return "http_5xx";
  if (status >= 400) return "http_4xx";
  return "http_" + std::to_string(status);
}

void reader(Shared& sh, int idx, ThreadOut& out) {
  std::mt19937_64 rng(sh.opt->seed * 1000003 + uint64_t(idx) * 7919 + 1);
  std::vector<std::unique_ptr<HttpConn>> conns;
  for (const Url& u : sh.read_targets) conns.push_back(std::make_unique<HttpConn>(u, sh.opt->timeout));
  Response resp;
  for (;;) {
    if (!may_go(sh, false)) break;
    long long n = sh.r_started.fetch_add(1);
    if (sh.r_budget >= 0 && n >= sh.r_budget) break;
    size_t t = rng() % conns.size();
    unsigned pick = unsigned(rng() % 100);
    uint64_t type;
    int id;
    if (pick < 50) {
      type = kItem;
      id = sh.hot_items[rng() % sh.hot_items.size()];
    } else if (pick < 75) {
      type = kCategory;
      id = sh.hot_cats[rng() % sh.hot_cats.size()];
    } else {
      type = kUser;
      id = sh.hot_users[rng() % sh.hot_users.size()];
    }
    std::string path = std::string(kTypeNames[type]) + ".php?id=" + std::to_string(id);
    ErrKind kind;
    std::string err;
    // --rate: latency from the scheduled time; the stale check keeps the real start (a write that
    // returned between the two is not one the read must see).
    int64_t t_sched = next_slot(sh, false);
    if (t_sched == 0) break;
    out.reads_total++;
    int64_t t_start = now_ns();
    bool ok = conns[t]->request("GET", path, "", "", resp, kind, err);
    int64_t t_end = now_ns();
    sh.r_done++;
    if (sh.record_ops) out.ops.push_back({t_sched, t_end, false, false});
    if (!ok) {
      note_error(sh, out, false, err_kind_name(kind), sh.read_targets[t].text, "GET " + path + ": " + err);
      if (kind == ErrKind::Connect) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (resp.status != 200) {
      note_error(sh, out, false, status_kind(resp.status), sh.read_targets[t].text,
                 "GET " + path + ": status " + std::to_string(resp.status) + ": " + resp.body.substr(0, 200));
      continue;
    }
    auto marks = page_markers(resp.body);
    uint64_t want = make_key(type, uint64_t(id));
    bool found = false;
    for (const auto& m : marks) found = found || m.first == want;
    if (!found) {
      note_error(sh, out, false, "no_marker", sh.read_targets[t].text,
                 "GET " + path + ": no tierce-data marker for " + key_name(want));
      continue;
    }
    out.reads_ok++;
    if (sh.record_ops) out.ops.back().ok = true;
    out.read_lat_ms.push_back(double(t_end - t_sched) / 1e6);
    bool xc = false, hit = false;
    for (const auto& [hk, hv] : resp.headers) {
      if (hk.rfind("x-cache", 0) == 0 || hk.rfind("x-rcache", 0) == 0) {
        xc = true;
        std::string up = hv;
        for (auto& c : up) c = char(std::toupper(static_cast<unsigned char>(c)));
        hit = hit || up.find("HIT") != std::string::npos;
      }
    }
    out.xcache_seen += xc;
    out.xcache_hits += hit;
    std::string hdrs = interesting_headers(resp);
    for (const auto& [k, v] : marks) {
      ReadRec r;
      r.key = k;
      r.seen = v;
      r.t_start = t_start;
      r.t_end = t_end;
      r.target = uint16_t(t);
      r.path = path;
      r.headers = hdrs;
      out.reads.push_back(std::move(r));
    }
  }
  for (auto& c : conns) out.connects += c->connects();
  sh.readers_left--;
}

void writer(Shared& sh, int idx, ThreadOut& out) {
  std::mt19937_64 rng(sh.opt->seed * 2000003 + uint64_t(idx) * 104729 + 7);
  std::vector<std::unique_ptr<HttpConn>> conns;
  for (const Url& u : sh.write_targets) conns.push_back(std::make_unique<HttpConn>(u, sh.opt->timeout));
  Response resp;
  long long seq = 0;
  for (;;) {
    if (!may_go(sh, true)) break;
    long long n = sh.w_started.fetch_add(1);
    if (sh.w_budget >= 0 && n >= sh.w_budget) break;
    size_t t = rng() % conns.size();
    int item = sh.hot_items[rng() % sh.hot_items.size()];
    std::string path, body;
    if (rng() % 100 < 70) {
      int user = sh.hot_users[rng() % sh.hot_users.size()];
      char amount[32];
      std::snprintf(amount, sizeof amount, "%llu.%02llu", (unsigned long long)(1 + rng() % 9999),
                    (unsigned long long)(rng() % 100));
      path = "bid.php";
      body = "item=" + std::to_string(item) + "&user=" + std::to_string(user) + "&amount=" + amount;
    } else {
      path = "edit.php";
      std::string tag = std::to_string(idx) + "-" + std::to_string(++seq);
      body = "item=" + std::to_string(item) + "&name=" + url_encode("item " + std::to_string(item) + " edit " + tag) +
             "&description=" + url_encode("edited by tierce-check writer " + tag);
    }
    std::string what = "POST " + path + " " + body;
    ErrKind kind;
    std::string err;
    int64_t t_start = next_slot(sh, true);  // --rate: the scheduled time (latency from it)
    if (t_start == 0) break;
    out.writes_total++;
    bool ok = conns[t]->request("POST", path, body, "application/x-www-form-urlencoded", resp, kind, err);
    int64_t t_ret = now_ns();
    sh.w_done++;
    if (sh.record_ops) out.ops.push_back({t_start, t_ret, true, false});
    if (!ok) {
      note_error(sh, out, true, err_kind_name(kind), sh.write_targets[t].text, what + ": " + err);
      if (kind == ErrKind::Connect) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (resp.status != 200) {
      note_error(sh, out, true, status_kind(resp.status), sh.write_targets[t].text,
                 what + ": status " + std::to_string(resp.status) + ": " + resp.body.substr(0, 200));
      continue;
    }
    std::vector<WriteRec> recs;
    std::istringstream lines(resp.body);
    std::string line;
    while (std::getline(lines, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      WriteRec w;
      if (!parse_kv(line, w.key, w.version)) continue;
      w.t_start = t_start;
      w.t_ret = t_ret;
      w.target = uint16_t(t);
      w.what = what;
      recs.push_back(std::move(w));
    }
    if (recs.empty() || (recs[0].key >> 40) != kItem) {
      note_error(sh, out, true, "bad_update_body", sh.write_targets[t].text,
                 what + ": no item:N=V line in '" + resp.body.substr(0, 200) + "'");
      continue;
    }
    out.writes_ok++;
    if (sh.record_ops) out.ops.back().ok = true;
    out.write_lat_ms.push_back(double(t_ret - t_start) / 1e6);
    for (auto& w : recs) out.writes.push_back(std::move(w));
  }
  for (auto& c : conns) out.connects += c->connects();
  sh.writers_left--;
}

void run_during(Shared& sh, During& d) {
  for (;;) {
    if (sh.stop.load()) return;
    double now = rel_s(sh, now_ns());
    if (now >= d.at_s) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(int64_t(std::min(50.0, (d.at_s - now) * 1000 + 1))));
  }
  d.started = true;
  d.start_s = rel_s(sh, now_ns());
  if (!sh.opt->quiet) std::fprintf(stderr, "tierce-check: [%.1fs] running: %s\n", d.start_s, d.command.c_str());
  pid_t pid;
  std::string cmd = d.command;
  char arg0[] = "/bin/sh", arg1[] = "-c";
  char* argv[] = {arg0, arg1, cmd.data(), nullptr};
  int rc = posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv, environ);
  if (rc != 0) {
    d.finished = true;
    d.exit_status = 127;
    d.end_s = rel_s(sh, now_ns());
    std::fprintf(stderr, "tierce-check: cannot start /bin/sh: %s\n", std::strerror(rc));
    return;
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  d.finished = true;
  d.end_s = rel_s(sh, now_ns());
  d.exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  if (!sh.opt->quiet)
    std::fprintf(stderr, "tierce-check: [%.1fs] '%s' exited %d after %.1fs\n", d.end_s, d.command.c_str(),
                 d.exit_status, d.end_s - d.start_s);
}


std::optional<Metrics> fetch_metrics(const Url& u, double timeout) {
  HttpConn c(u, timeout);
  Response r;
  ErrKind k;
  std::string err;
  if (!c.request("GET", "rcache-metrics", "", "", r, k, err) || r.status != 200) return std::nullopt;
  Metrics m;
  std::istringstream in(r.body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    char* end = nullptr;
    double v = std::strtod(line.c_str() + sp + 1, &end);
    if (end == line.c_str() + sp + 1) continue;
    m[line.substr(0, sp)] = v;
  }
  if (m.find("tierce_rcache_hits_total") == m.end()) return std::nullopt;
  return m;
}

}  // namespace tcheck
