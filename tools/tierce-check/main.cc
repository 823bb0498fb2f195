// tierce-check — checks Tierce's strong coherence against a running cluster (tools/tierce-cluster).
//
// Writers POST bid.php / edit.php straight to the app tier and record, once each response has
// returned, (return time on CLOCK_MONOTONIC, entity, committed version) for every `KEY=VERSION`
// line. Readers record their start time, GET item/category/user pages through the proxies and
// parse the `<meta name="tierce-data" content="KEY=VERSION">` markers. After the run every read is
// checked against the writes that RETURNED BEFORE the read STARTED: a version smaller than the
// highest such write's is a STALE READ. Reads are also checked against each other: a read showing
// a version older than one some read of the same entity (through any proxy) showed and returned
// before this read started is a READ-READ INVERSION (inversions.h): reported always, a failure
// with --strict. Errors (refused, timeouts, 5xx, missing marker) are counted
// apart. --window NAME=FROM-TO reports the same per stretch of the run (e.g. while a fault lasts):
// the operations that STARTED in it, and the latency of its writes. Exit 0 when no read was stale
// and the error ratio is <= --max-error-ratio (and, with --strict, no read inverted), 1 otherwise,
// 2 on bad usage.
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

#include "http.h"
#include "inversions.h"
#include <nlohmann/json.hpp>

#ifndef TIERCE_VERSION
#define TIERCE_VERSION "0.0.0"  // set by CMake to the project version
#endif

extern char** environ;

namespace tcheck {
namespace {

const char* kUsage =
    "Usage: tierce-check [--cluster DIR/cluster.json] [--proxy URL]... [--app URL]...\n"
    "                    [--readers 8] [--writers 2] [--ops N | --duration S] [--write-ratio 0.1]\n"
    "                    [--hot 100] [--items 10000] [--users 2000] [--categories 20] [--seed 1]\n"
    "                    [--during \"SHELL COMMAND\"@SECONDS]... [--max-error-ratio 0.01]\n"
    "                    [--timeout 10] [--direct] [--json FILE] [--quiet]\n"
    "                    [--window NAME=FROM-TO]... [--no-pace] [--site HOST[:PORT]] [--strict]\n"
    "                    [--rate OPS_PER_S] [--timeline]\n"
    "Readers GET item.php / category.php / user.php through the proxies (--direct: the app "
    "nodes);\n"
    "writers POST bid.php / edit.php to the app nodes. A read showing an entity version older "
    "than\n"
    "one whose update returned before the read started is a STALE READ.\n"
    "A read showing an entity version older than another read of that entity (through any proxy)\n"
    "showed, when that read returned before this one started, is a READ-READ INVERSION: always\n"
    "counted and reported (summary and --json \"read_inversions\", up to 5 examples); --strict "
    "makes\n"
    "inversions fail the run like stale reads (reads must then also agree with each other's "
    "real-time\n"
    "order, not only be fresh).\n"
    "--window NAME=FROM-TO (seconds since the start; repeatable, a NAME given again adds a "
    "range):\n"
    "reads, checked and stale reads, read-read inversions, writes with their latency p50/p99/max,\n"
    "and errors of the operations that started in it, printed and in --json \"windows\".\n"
    "--no-pace: readers and writers each go as fast as they can (--write-ratio only decides "
    "whether\n"
    "there are readers and writers at all): a stalled write path (a fault) does not hold reads "
    "back.\n"
    "--rate R: open loop: operations are issued on a schedule, R per second in all (reads\n"
    "R x (1 - write ratio), writes R x write ratio, each role's schedule shared by its threads),\n"
    "not when the previous one returned; latencies are measured from the scheduled time (so a\n"
    "stall shows as the queue it causes). Operations that start > 50 ms after their time are\n"
    "counted as late: many means the threads or the machine could not keep the rate. Implies\n"
    "--no-pace.\n"
    "--timeline: per-second counts (by the second the operation started or was scheduled) in\n"
    "--json \"timeline\": reads, stale reads, writes, their latency p50/p99, errors.\n"
    "--site: the Host header of reads through the proxies (default: each proxy's own address). "
    "Give\n"
    "the site name the proxies share, as a load balancer in front of them forwards it: the "
    "proxies\n"
    "then share cache keys (RCacheCoop).\n"
    "Exit: 0 no stale read, errors <= --max-error-ratio (and with --strict no read-read "
    "inversion);\n"
    "1 otherwise; 2 bad usage.\n";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "tierce-check: %s\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

// ------------------------------------------------------------------------------------------------
// entities

enum EType : uint64_t { kItem = 0, kCategory = 1, kUser = 2 };
const char* kTypeNames[] = {"item", "category", "user"};

uint64_t make_key(uint64_t type, uint64_t id) { return (type << 40) | id; }
std::string key_name(uint64_t k) {
  return std::string(kTypeNames[k >> 40]) + ":" + std::to_string(k & ((uint64_t(1) << 40) - 1));
}
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

// ------------------------------------------------------------------------------------------------
// options

struct During {
  std::string command;
  double at_s = 0;
  // results
  bool started = false, finished = false;
  int exit_status = -1;  // exit code, or 128+signal
  double start_s = 0, end_s = 0;
};

// --window NAME=FROM-TO: the operations that start in [FROM, TO) seconds after the start count.
struct Window {
  std::string name;
  std::vector<std::pair<double, double>> ranges;  // a NAME given several times: their union
  bool contains(double t) const {
    for (const auto& [from, to] : ranges)
      if (t >= from && t < to) return true;
    return false;
  }
};

struct Options {
  std::vector<std::string> proxies, apps;
  int readers = 8, writers = 2;
  std::optional<long long> ops;
  std::optional<double> duration;
  double write_ratio = 0.1;
  int hot = 100;
  std::optional<int> items, users, categories;
  uint64_t seed = 1;
  std::vector<During> during;
  std::vector<Window> windows;
  std::string json_path, cluster_path;
  bool quiet = false, direct = false, pace = true;
  bool strict = false;  // read-read inversions fail the run
  std::optional<double> rate;  // --rate: open loop, operations per second in all
  bool timeline = false;
  double max_error_ratio = 0.01;
  double timeout = 10;
  std::string cache = "unknown";
  std::string site;  // Host header of reads through the proxies
};

long long to_ll(const std::string& opt, const std::string& v, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno || x < lo || x > hi)
    usage_error(opt + " wants an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
  return x;
}
double to_d(const std::string& opt, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !(x >= lo && x <= hi))
    usage_error(opt + " wants a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
  return x;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (a == "-V" || a == "--version") {
      std::printf("tierce-check %s\n", TIERCE_VERSION);
      std::exit(0);
    }
    std::string v;
    bool has_inline = false;
    if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
      v = a.substr(a.find('=') + 1);
      a = a.substr(0, a.find('='));
      has_inline = true;
    }
    auto val = [&]() -> std::string {
      if (has_inline) return v;
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--proxy") o.proxies.push_back(val());
    else if (a == "--app") o.apps.push_back(val());
    else if (a == "--readers") o.readers = int(to_ll(a, val(), 0, 1024));
    else if (a == "--writers") o.writers = int(to_ll(a, val(), 0, 1024));
    else if (a == "--ops") o.ops = to_ll(a, val(), 1, 1LL << 40);
    else if (a == "--duration") o.duration = to_d(a, val(), 0.001, 1e7);
    else if (a == "--write-ratio") o.write_ratio = to_d(a, val(), 0, 1);
    else if (a == "--hot") o.hot = int(to_ll(a, val(), 1, 1LL << 30));
    else if (a == "--items") o.items = int(to_ll(a, val(), 1, 1LL << 30));
    else if (a == "--users") o.users = int(to_ll(a, val(), 1, 1LL << 30));
    else if (a == "--categories") o.categories = int(to_ll(a, val(), 1, 1LL << 30));
    else if (a == "--seed") o.seed = uint64_t(to_ll(a, val(), 0, (1LL << 62)));
    else if (a == "--during") {
      std::string s = val();
      size_t at = s.rfind('@');
      if (at == std::string::npos || at == 0) usage_error("--during wants \"COMMAND\"@SECONDS, got '" + s + "'");
      During d;
      d.command = s.substr(0, at);
      d.at_s = to_d("--during (seconds)", s.substr(at + 1), 0, 1e7);
      o.during.push_back(d);
    } else if (a == "--window") {
      std::string s = val();
      size_t eq = s.find('='), dash = eq == std::string::npos ? eq : s.find('-', eq + 1);
      if (eq == std::string::npos || eq == 0 || dash == std::string::npos)
        usage_error("--window wants NAME=FROM-TO (seconds), got '" + s + "'");
      std::string name = s.substr(0, eq);
      for (char c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
          usage_error("--window NAME: letters, digits, '_', '-', '.' only, got '" + name + "'");
      double from = to_d("--window (FROM)", s.substr(eq + 1, dash - eq - 1), 0, 1e7);
      double to = to_d("--window (TO)", s.substr(dash + 1), 0, 1e7);
      if (to <= from) usage_error("--window '" + s + "' ends before it starts");
      auto it = std::find_if(o.windows.begin(), o.windows.end(), [&](const Window& w) { return w.name == name; });
      if (it == o.windows.end()) {
        o.windows.push_back(Window{name, {}});
        it = o.windows.end() - 1;
      }
      it->ranges.emplace_back(from, to);
    } else if (a == "--json") o.json_path = val();
    else if (a == "--cluster") o.cluster_path = val();
    else if (a == "--quiet") o.quiet = true;
    else if (a == "--site") {
      o.site = val();
      if (o.site.empty() || o.site.find_first_of(" \t\r\n/") != std::string::npos)
        usage_error("--site wants a host name with an optional :port, got '" + o.site + "'");
    }
    else if (a == "--direct") o.direct = true;
    else if (a == "--no-pace") o.pace = false;
    else if (a == "--strict") o.strict = true;
    else if (a == "--rate") {
      o.rate = to_d(a, val(), 0.01, 1e6);
      o.pace = false;
    } else if (a == "--timeline")
      o.timeline = true;
    else if (a == "--max-error-ratio") o.max_error_ratio = to_d(a, val(), 0, 1);
    else if (a == "--timeout") o.timeout = to_d(a, val(), 0.01, 3600);
    else usage_error("unknown argument '" + a + "'");
  }
  if (o.ops && o.duration) usage_error("give --ops or --duration, not both");
  if (!o.ops && !o.duration) o.ops = 10000;
  return o;
}

std::string json_escape(const std::string& s) { return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// Fills URLs / sizes / cache kind from cluster.json where the command line left them out.
void load_cluster(Options& o) {
  std::ifstream f(o.cluster_path);
  if (!f) usage_error("cannot read --cluster file '" + o.cluster_path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    usage_error(o.cluster_path + ": not valid JSON: " + e.what());
  }
  std::vector<std::string> proxies, apps;
  if (auto nodes = j.find("nodes"); nodes != j.end() && nodes->is_array()) {
    for (const auto& n : *nodes) {
      if (!n.is_object()) continue;
      auto role = n.find("role"), url = n.find("url");
      if (role == n.end() || url == n.end() || !role->is_string() || !url->is_string()) continue;
      if (*role == "proxy") proxies.push_back(url->get<std::string>());
      else if (*role == "app") apps.push_back(url->get<std::string>());
    }
  }
  if (o.proxies.empty()) o.proxies = proxies;
  if (o.apps.empty()) o.apps = apps;
  if (auto opts = j.find("options"); opts != j.end() && opts->is_object()) {
    auto num = [&](const char* k, std::optional<int>& dst) {
      auto v = opts->find(k);
      if (!dst && v != opts->end() && v->is_number_integer()) dst = v->get<int>();
    };
    num("items", o.items);
    num("users", o.users);
    num("categories", o.categories);
    if (auto c = opts->find("cache"); c != opts->end() && c->is_string()) o.cache = c->get<std::string>();
  }
  if (auto st = j.find("state"); st != j.end() && st->is_string() && *st != "up")
    std::fprintf(stderr, "tierce-check: warning: %s says state '%s', not 'up'\n", o.cluster_path.c_str(),
                 st->get<std::string>().c_str());
}

// ------------------------------------------------------------------------------------------------
// records

struct ReadRec {
  uint64_t key = 0, seen = 0;
  int64_t t_start = 0, t_end = 0;
  uint16_t target = 0;
  std::string path;
  std::string headers;  // cache-related response headers, "Name: value; ..."
};
struct WriteRec {
  uint64_t key = 0, version = 0;
  int64_t t_start = 0, t_ret = 0;
  uint16_t target = 0;
  std::string what;
};
struct ErrorSample {
  std::string role, kind, target, what;
  double at_s;
};
// Every operation, when there are --window's to count them in.
struct OpRec {
  int64_t t_start = 0, t_end = 0;
  bool write = false, ok = false;
};

struct ThreadOut {
  std::vector<ReadRec> reads;       // one per marker of a successful read
  std::vector<WriteRec> writes;     // one per entity of a successful write
  std::vector<double> read_lat_ms;  // successful reads
  std::vector<double> write_lat_ms;
  long long reads_ok = 0, writes_ok = 0, reads_total = 0, writes_total = 0;
  long long xcache_seen = 0, xcache_hits = 0;  // successful reads with an X-Cache-like header / saying HIT
  std::map<std::string, long long> read_errors, write_errors;
  std::vector<ErrorSample> error_samples;  // the first few
  std::vector<OpRec> ops;                  // only with --window
  uint64_t connects = 0;
};

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

// ------------------------------------------------------------------------------------------------
// the run

struct Shared {
  const Options* opt;
  std::vector<Url> read_targets, write_targets;
  std::vector<int> hot_items, hot_users, hot_cats;
  int64_t t0 = 0;
  int64_t stop_at = 0;  // duration mode
  long long r_budget = -1, w_budget = -1;  // ops mode
  std::atomic<long long> r_started{0}, w_started{0}, r_done{0}, w_done{0}, errors{0};
  std::atomic<bool> stop{false};
  std::atomic<int> readers_left{0}, writers_left{0};
  bool record_ops = false;  // --window or --timeline given: keep an OpRec per operation
  // --rate: the n-th read (write) is due at t0 + n * interval; 0 = closed loop.
  int64_t read_interval_ns = 0, write_interval_ns = 0;
  std::atomic<long long> r_ticket{0}, w_ticket{0};
  std::atomic<long long> late{0};   // operations that started > kLateNs after their time
  std::atomic<int64_t> max_lag{0};  // ns
};
constexpr int64_t kLateNs = 50'000'000;

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
    double slack = 8.0 * (sh.opt->readers + sh.opt->writers) + 20;
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

// ------------------------------------------------------------------------------------------------
// proxy metrics (mod_rcache /rcache-metrics, Prometheus text)

using Metrics = std::map<std::string, double>;

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

double pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t i = size_t(std::min<double>(double(v.size() - 1), std::floor(p * double(v.size() - 1) + 0.5)));
  std::nth_element(v.begin(), v.begin() + long(i), v.end());
  return v[i];
}

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

}  // namespace
}  // namespace tcheck

int main(int argc, char** argv) {
  using namespace tcheck;
  std::signal(SIGPIPE, SIG_IGN);
  Options opt = parse_args(argc, argv);
  if (!opt.cluster_path.empty()) load_cluster(opt);
  int items = opt.items.value_or(10000), users = opt.users.value_or(2000), cats = opt.categories.value_or(20);

  Shared sh;
  sh.opt = &opt;
  sh.record_ops = !opt.windows.empty() || opt.timeline;
  std::string err;
  for (const auto& s : opt.proxies) {
    Url u;
    if (!parse_url(s, u, err)) usage_error("--proxy: " + err);
    u.host_header = opt.site;
    if (!opt.direct) sh.read_targets.push_back(u);
  }
  for (const auto& s : opt.apps) {
    Url u;
    if (!parse_url(s, u, err)) usage_error("--app: " + err);
    sh.write_targets.push_back(u);
    if (opt.direct) sh.read_targets.push_back(u);
  }
  if (opt.write_ratio >= 1) opt.readers = 0;
  if (opt.write_ratio <= 0) opt.writers = 0;
  if (opt.readers > 0 && sh.read_targets.empty())
    usage_error(opt.direct ? "--direct needs at least one --app (or --cluster)" : "no --proxy given (or --cluster)");
  if (opt.writers > 0 && sh.write_targets.empty()) usage_error("no --app given (or --cluster): writers need one");
  if (opt.readers + opt.writers == 0) usage_error("no reader and no writer thread");

  // Hot sets: a seeded sample of the ids (1-based, as tierce-datagen loads them).
  std::mt19937_64 hrng(opt.seed);
  auto sample = [&](int n) {
    std::vector<int> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ids[size_t(i)] = i + 1;
    std::shuffle(ids.begin(), ids.end(), hrng);
    ids.resize(size_t(std::min(n, opt.hot)));
    return ids;
  };
  sh.hot_items = sample(items);
  sh.hot_users = sample(users);
  sh.hot_cats = sample(cats);

  if (opt.ops) {
    sh.w_budget = opt.writers ? (long long)std::llround(double(*opt.ops) * opt.write_ratio) : 0;
    sh.r_budget = opt.readers ? *opt.ops - sh.w_budget : 0;
    if (!opt.readers) sh.w_budget = *opt.ops;
  }

  // Proxy metrics before.
  bool tierce_metrics = false;
  std::vector<std::optional<Metrics>> before, after;
  std::vector<Url> proxy_urls;
  for (const auto& s : opt.proxies) {
    if (opt.direct) break;  // the proxies carry no traffic then
    Url u;
    parse_url(s, u, err);
    proxy_urls.push_back(u);
    before.push_back(fetch_metrics(u, opt.timeout));
    tierce_metrics = tierce_metrics || before.back().has_value();
  }

  if (!opt.quiet) {
    std::fprintf(stderr, "tierce-check: cache=%s %s; %d readers -> %zu %s, %d writers -> %zu app node(s); ",
                 opt.cache.c_str(), opt.direct ? "DIRECT reads" : "reads through the proxies", opt.readers,
                 sh.read_targets.size(), opt.direct ? "app node(s)" : "proxies", opt.writers, sh.write_targets.size());
    if (opt.ops) std::fprintf(stderr, "%lld ops (%lld reads, %lld writes)", *opt.ops, sh.r_budget, sh.w_budget);
    else std::fprintf(stderr, "%.0f s", *opt.duration);
    std::fprintf(stderr, "; hot sets %zu items, %zu users, %zu categories\n", sh.hot_items.size(), sh.hot_users.size(),
                 sh.hot_cats.size());
  }

  if (opt.rate) {
    double rr = opt.readers ? *opt.rate * (opt.writers ? 1 - opt.write_ratio : 1) : 0;
    double wr = opt.writers ? *opt.rate * (opt.readers ? opt.write_ratio : 1) : 0;
    sh.read_interval_ns = rr > 0 ? std::max<int64_t>(1, int64_t(1e9 / rr)) : 0;
    sh.write_interval_ns = wr > 0 ? std::max<int64_t>(1, int64_t(1e9 / wr)) : 0;
    if (!opt.quiet)
      std::fprintf(stderr, "tierce-check: open loop, %.1f reads/s and %.1f writes/s scheduled\n",
                   rr, wr);
  }
  sh.t0 = now_ns();
  if (opt.duration) sh.stop_at = sh.t0 + int64_t(*opt.duration * 1e9);
  sh.readers_left = opt.readers;
  sh.writers_left = opt.writers;
  std::vector<ThreadOut> outs(size_t(opt.readers + opt.writers));
  std::vector<std::thread> threads;
  for (int i = 0; i < opt.readers; ++i) threads.emplace_back(reader, std::ref(sh), i, std::ref(outs[size_t(i)]));
  for (int i = 0; i < opt.writers; ++i)
    threads.emplace_back(writer, std::ref(sh), i, std::ref(outs[size_t(opt.readers + i)]));
  std::vector<std::thread> during_threads;
  for (auto& d : opt.during) during_threads.emplace_back(run_during, std::ref(sh), std::ref(d));
  std::atomic<bool> workers_done{false};
  std::thread progress([&] {
    int64_t next = sh.t0 + 5'000'000'000;
    while (!workers_done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (!opt.quiet && now_ns() >= next) {
        next += 5'000'000'000;
        std::fprintf(stderr, "tierce-check: [%.0fs] %lld reads, %lld writes, %lld errors\n", rel_s(sh, now_ns()),
                     sh.r_done.load(), sh.w_done.load(), sh.errors.load());
      }
    }
  });
  for (auto& t : threads) t.join();
  int64_t t_workers_end = now_ns();
  // A --during command still scheduled: do not start it now; one running: wait for it.
  sh.stop = true;
  for (auto& t : during_threads) t.join();
  workers_done = true;
  progress.join();
  double elapsed = double(t_workers_end - sh.t0) / 1e9;

  for (const auto& u : proxy_urls) after.push_back(fetch_metrics(u, opt.timeout));

  // ---- merge + analysis
  std::vector<ReadRec> reads;
  std::vector<WriteRec> writes;
  std::vector<double> rlat, wlat;
  long long reads_ok = 0, writes_ok = 0, reads_total = 0, writes_total = 0, xc_seen = 0, xc_hits = 0;
  std::map<std::string, long long> rerr, werr;
  std::vector<ErrorSample> samples;
  std::vector<OpRec> ops;
  uint64_t connects = 0;
  for (auto& o : outs) {
    ops.insert(ops.end(), o.ops.begin(), o.ops.end());
    for (auto& r : o.reads) reads.push_back(std::move(r));
    for (auto& w : o.writes) writes.push_back(std::move(w));
    rlat.insert(rlat.end(), o.read_lat_ms.begin(), o.read_lat_ms.end());
    wlat.insert(wlat.end(), o.write_lat_ms.begin(), o.write_lat_ms.end());
    reads_ok += o.reads_ok;
    writes_ok += o.writes_ok;
    reads_total += o.reads_total;
    writes_total += o.writes_total;
    xc_seen += o.xcache_seen;
    xc_hits += o.xcache_hits;
    for (auto& [k, v] : o.read_errors) rerr[k] += v;
    for (auto& [k, v] : o.write_errors) werr[k] += v;
    for (auto& s : o.error_samples) samples.push_back(s);
    connects += o.connects;
  }
  std::sort(samples.begin(), samples.end(), [](auto& a, auto& b) { return a.at_s < b.at_s; });

  // Per entity: writes sorted by return time with the running maximum of the version.
  struct Hist {
    std::vector<int64_t> t;
    std::vector<uint64_t> maxv;
    std::vector<size_t> idx;  // write record of the running maximum
  };
  std::unordered_map<uint64_t, std::vector<size_t>> by_key;
  for (size_t i = 0; i < writes.size(); ++i) by_key[writes[i].key].push_back(i);
  std::unordered_map<uint64_t, Hist> hist;
  for (auto& [k, v] : by_key) {
    std::sort(v.begin(), v.end(), [&](size_t a, size_t b) { return writes[a].t_ret < writes[b].t_ret; });
    Hist h;
    uint64_t m = 0;
    size_t mi = 0;
    for (size_t i : v) {
      if (writes[i].version > m) {
        m = writes[i].version;
        mi = i;
      }
      h.t.push_back(writes[i].t_ret);
      h.maxv.push_back(m);
      h.idx.push_back(mi);
    }
    hist.emplace(k, std::move(h));
  }
  struct Stale {
    size_t read, write;
    uint64_t expected;
  };
  std::vector<Stale> stale;
  long long checked = 0;  // reads with at least one earlier returned write of their entity
  for (size_t i = 0; i < reads.size(); ++i) {
    auto it = hist.find(reads[i].key);
    if (it == hist.end()) continue;
    const Hist& h = it->second;
    // writes with t_ret < t_start
    size_t n = size_t(std::lower_bound(h.t.begin(), h.t.end(), reads[i].t_start) - h.t.begin());
    if (n == 0) continue;
    ++checked;
    if (reads[i].seen < h.maxv[n - 1]) stale.push_back({i, h.idx[n - 1], h.maxv[n - 1]});
  }
  std::sort(stale.begin(), stale.end(), [&](auto& a, auto& b) { return reads[a.read].t_start < reads[b.read].t_start; });
  // Distinct stale page reads (a page has one marker today, but count pages not markers).
  long long stale_reads = 0;
  std::vector<std::pair<int64_t, uint16_t>> stale_pages;
  {
    auto& seen = stale_pages;
    for (auto& s : stale) seen.emplace_back(reads[s.read].t_start, reads[s.read].target);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    stale_reads = (long long)seen.size();
  }

  // Read-read inversions: a read older than a read of the same entity that ended before it started.
  InversionResult inv;
  {
    std::vector<InvRead> ir(reads.size());
    for (size_t i = 0; i < reads.size(); ++i) ir[i] = {reads[i].key, reads[i].seen, reads[i].t_start, reads[i].t_end};
    inv = find_inversions(ir);
  }
  const long long inversions = (long long)inv.found.size();

  // Per --window: what started in it.
  struct WindowStats {
    long long reads = 0, reads_ok = 0, checked = 0, stale = 0, writes = 0, writes_ok = 0, inversions = 0;
    long long read_errors = 0, write_errors = 0;
    std::vector<double> wlat;  // ms, successful writes
    double p50 = 0, p99 = 0, max = 0;
  };
  std::vector<WindowStats> wstats(opt.windows.size());
  for (size_t w = 0; w < opt.windows.size(); ++w) {
    const Window& win = opt.windows[w];
    WindowStats& ws = wstats[w];
    for (const OpRec& op : ops) {
      if (!win.contains(rel_s(sh, op.t_start))) continue;
      if (op.write) {
        ++ws.writes;
        if (op.ok) {
          ++ws.writes_ok;
          ws.wlat.push_back(double(op.t_end - op.t_start) / 1e6);
        } else {
          ++ws.write_errors;
        }
      } else {
        ++ws.reads;
        if (op.ok) ++ws.reads_ok;
        else ++ws.read_errors;
      }
    }
    for (const auto& [t, target] : stale_pages) ws.stale += win.contains(rel_s(sh, t));
    for (const Inversion& x : inv.found) ws.inversions += win.contains(rel_s(sh, reads[x.later].t_start));
    std::sort(ws.wlat.begin(), ws.wlat.end());
    if (!ws.wlat.empty()) {
      std::vector<double> tmp = ws.wlat;
      ws.p50 = pct(tmp, 0.5);
      ws.p99 = pct(tmp, 0.99);
      ws.max = ws.wlat.back();
    }
  }
  if (!wstats.empty()) {
    for (size_t i = 0; i < reads.size(); ++i) {
      auto it = hist.find(reads[i].key);
      if (it == hist.end() || it->second.t.empty() || it->second.t.front() >= reads[i].t_start) continue;
      double t = rel_s(sh, reads[i].t_start);
      for (size_t w = 0; w < opt.windows.size(); ++w) wstats[w].checked += opt.windows[w].contains(t);
    }
  }

  // --timeline: the same per second of the run.
  struct SecondStats {
    long long reads = 0, reads_ok = 0, stale = 0, writes = 0, writes_ok = 0, errors = 0;
    std::vector<double> wlat;
  };
  std::vector<SecondStats> seconds;
  if (opt.timeline) {
    auto at = [&](int64_t t) -> SecondStats& {
      double x = std::max(0.0, rel_s(sh, t));
      size_t i = size_t(x);
      if (seconds.size() <= i) seconds.resize(i + 1);
      return seconds[i];
    };
    for (const OpRec& op : ops) {
      SecondStats& ss = at(op.t_start);
      (op.write ? ss.writes : ss.reads)++;
      if (!op.ok)
        ss.errors++;
      else if (op.write) {
        ss.writes_ok++;
        ss.wlat.push_back(double(op.t_end - op.t_start) / 1e6);
      } else {
        ss.reads_ok++;
      }
    }
    for (const auto& [t, target] : stale_pages) at(t).stale++;
  }

  long long read_errors = 0, write_errors = 0;
  for (auto& [k, v] : rerr) read_errors += v;
  for (auto& [k, v] : werr) write_errors += v;
  long long ops_done = reads_total + writes_total;
  double error_ratio = ops_done ? double(read_errors + write_errors) / double(ops_done) : 1.0;
  double rp50 = pct(rlat, 0.5), rp99 = pct(rlat, 0.99), wp50 = pct(wlat, 0.5), wp99 = pct(wlat, 0.99);

  std::vector<std::string> failures;
  if (stale_reads > 0) failures.push_back(std::to_string(stale_reads) + " stale read(s)");
  if (opt.strict && inversions > 0)
    failures.push_back(std::to_string(inversions) + " read-read inversion(s) (--strict)");
  if (error_ratio > opt.max_error_ratio)
    failures.push_back("error ratio " + fmt("%.4f", error_ratio) + " > --max-error-ratio " + fmt("%.4f", opt.max_error_ratio));
  if (ops_done == 0) failures.push_back("no operation was done");
  if (reads_total > 0 && reads_ok == 0) failures.push_back("no read succeeded");
  if (writes_total > 0 && writes_ok == 0) failures.push_back("no write succeeded");
  for (auto& d : opt.during) {
    if (!d.started) failures.push_back("--during '" + d.command + "'@" + fmt("%g", d.at_s) + " did not run (the run ended at " + fmt("%.1f", elapsed) + " s)");
    else if (d.exit_status != 0) failures.push_back("--during '" + d.command + "' exited " + std::to_string(d.exit_status));
  }
  bool pass = failures.empty();

  // ---- report
  auto target_name = [&](uint16_t t, bool read) {
    return (read ? sh.read_targets : sh.write_targets)[t].text;
  };
  std::printf("tierce-check: %s (cache=%s%s%s)\n", pass ? "PASS" : "FAIL", opt.cache.c_str(),
              opt.direct ? ", direct reads" : "", opt.strict ? ", strict" : "");
  std::printf("  time            %.2f s\n", elapsed);
  std::printf("  ops             %lld (reads %lld, writes %lld)\n", ops_done, reads_total, writes_total);
  std::printf("  reads           %lld ok, %.0f/s, latency p50 %.2f ms p99 %.2f ms\n", reads_ok,
              elapsed > 0 ? double(reads_ok) / elapsed : 0, rp50, rp99);
  std::printf("  writes          %lld ok, %.0f/s, latency p50 %.2f ms p99 %.2f ms, %zu entity versions recorded\n",
              writes_ok, elapsed > 0 ? double(writes_ok) / elapsed : 0, wp50, wp99, writes.size());
  std::printf("  checked reads   %lld (entity written before the read started)\n", checked);
  std::printf("  STALE READS     %lld\n", stale_reads);
  std::printf("  READ INVERSIONS %lld of %lld reads with an earlier-ended read of their entity (%s)\n", inversions,
              inv.checked, opt.strict ? "--strict: each fails the run" : "informational; --strict fails on them");
  auto errline = [](const std::map<std::string, long long>& m) {
    std::string s;
    for (auto& [k, v] : m) s += (s.empty() ? "" : ", ") + k + " " + std::to_string(v);
    return s.empty() ? std::string("none") : s;
  };
  std::printf("  errors          %lld (ratio %.4f, max %.4f); reads: %s; writes: %s\n", read_errors + write_errors,
              error_ratio, opt.max_error_ratio, errline(rerr).c_str(), errline(werr).c_str());
  for (auto& s : samples)
    if (&s - &samples[0] < 6)
      std::printf("    [%.2fs] %s %s via %s: %s\n", s.at_s, s.role.c_str(), s.kind.c_str(), s.target.c_str(), s.what.c_str());
  if (xc_seen > 0)
    std::printf("  X-Cache header  on %lld reads, HIT on %lld (%.3f of the successful reads)\n", xc_seen, xc_hits,
                reads_ok ? double(xc_hits) / double(reads_ok) : 0.0);
  std::printf("  connections     %llu opened\n", (unsigned long long)connects);
  if (opt.rate)
    std::printf(
        "  open loop       %.1f ops/s scheduled; %lld started > %.0f ms late (max lag %.1f ms)%s\n",
        *opt.rate, sh.late.load(), double(kLateNs) / 1e6, double(sh.max_lag.load()) / 1e6,
        sh.late.load() ? ": the threads (or the machine) did not keep the rate" : "");
  for (auto& d : opt.during)
    std::printf("  during          '%s'@%g: %s\n", d.command.c_str(), d.at_s,
                d.started ? ("ran " + fmt("%.1f", d.start_s) + "-" + fmt("%.1f", d.end_s) + " s, exit " + std::to_string(d.exit_status)).c_str()
                          : "did not run");
  auto ranges_text = [](const Window& w) {
    std::string r;
    for (const auto& [from, to] : w.ranges) r += (r.empty() ? "" : ",") + fmt("%g", from) + "-" + fmt("%g", to);
    return r + " s";
  };
  for (size_t w = 0; w < opt.windows.size(); ++w) {
    const WindowStats& ws = wstats[w];
    std::printf("  window %-8s %s: reads %lld (ok %lld, checked %lld, STALE %lld, inversions %lld); writes %lld "
                "(ok %lld), latency p50 %.1f ms p99 %.1f ms max %.1f ms; errors %lld (reads %lld, writes %lld)\n",
                opt.windows[w].name.c_str(), ranges_text(opt.windows[w]).c_str(), ws.reads, ws.reads_ok, ws.checked,
                ws.stale, ws.inversions, ws.writes, ws.writes_ok, ws.p50, ws.p99, ws.max, ws.read_errors + ws.write_errors,
                ws.read_errors, ws.write_errors);
  }

  // Proxy metrics (deltas over the run).
  struct PM {
    std::string url;
    bool ok = false;
    double hits = 0, misses = 0, vfail = 0, inval = 0, stores = 0, p50 = 0, p99 = 0, checks = 0, sum = 0;
  };
  std::vector<PM> pms;
  PM tot;
  tot.url = "all";
  for (size_t i = 0; i < proxy_urls.size(); ++i) {
    PM p;
    p.url = proxy_urls[i].text;
    if (before[i] && after[i]) {
      auto d = [&](const char* k) {
        auto a = after[i]->find(k), b = before[i]->find(k);
        return (a == after[i]->end() ? 0 : a->second) - (b == before[i]->end() ? 0 : b->second);
      };
      auto g = [&](const char* k) {
        auto a = after[i]->find(k);
        return a == after[i]->end() ? 0.0 : a->second;
      };
      p.ok = true;
      p.hits = d("tierce_rcache_hits_total");
      p.misses = d("tierce_rcache_misses_total");
      p.vfail = d("tierce_rcache_version_failures_total");
      p.inval = d("tierce_rcache_stale_rejects_total");
      p.stores = d("tierce_rcache_stores_total");
      p.checks = d("tierce_rcache_version_check_seconds_count");
      p.sum = d("tierce_rcache_version_check_seconds_sum");
      p.p50 = g("tierce_rcache_version_check_seconds{quantile=\"0.5\"}");
      p.p99 = g("tierce_rcache_version_check_seconds{quantile=\"0.99\"}");
      tot.ok = true;
      tot.hits += p.hits;
      tot.misses += p.misses;
      tot.vfail += p.vfail;
      tot.inval += p.inval;
      tot.stores += p.stores;
      tot.checks += p.checks;
      tot.sum += p.sum;
    }
    pms.push_back(p);
  }
  auto ratio = [](const PM& p) {
    double l = p.hits + p.misses + p.vfail + p.inval;
    return l > 0 ? p.hits / l : 0.0;
  };
  if (!tierce_metrics) {
    std::printf("  proxy metrics   n/a (%s)\n", opt.direct ? "--direct" : "no /rcache-metrics on the proxies");
  } else {
    for (auto& p : pms) {
      if (!p.ok) {
        std::printf("  proxy %s: metrics n/a\n", p.url.c_str());
        continue;
      }
      std::printf("  proxy %s: hit ratio %.3f (hits %.0f, misses %.0f), version-check failures %.0f, "
                  "invalidations %.0f, stores %.0f, version check p50 %.1f us p99 %.1f us (%.0f checks, mean %.1f us)\n",
                  p.url.c_str(), ratio(p), p.hits, p.misses, p.vfail, p.inval, p.stores, p.p50 * 1e6, p.p99 * 1e6,
                  p.checks, p.checks > 0 ? p.sum / p.checks * 1e6 : 0.0);
    }
    std::printf("  proxies total   hit ratio %.3f, version-check failures %.0f, invalidations %.0f\n", ratio(tot),
                tot.vfail, tot.inval);
  }

  if (!stale.empty()) {
    std::printf("  first stale reads (of %zu stale markers):\n", stale.size());
    for (size_t k = 0; k < stale.size() && k < 10; ++k) {
      const ReadRec& r = reads[stale[k].read];
      const WriteRec& w = writes[stale[k].write];
      std::printf("    %s: seen %llu, expected >= %llu; read GET %s via %s started %.6f s ended %.6f s; "
                  "write %s to %s returned %.6f s (%.1f ms before the read)\n      headers: %s\n",
                  key_name(r.key).c_str(), (unsigned long long)r.seen, (unsigned long long)stale[k].expected,
                  r.path.c_str(), target_name(r.target, true).c_str(), rel_s(sh, r.t_start), rel_s(sh, r.t_end),
                  w.what.c_str(), target_name(w.target, false).c_str(), rel_s(sh, w.t_ret),
                  double(r.t_start - w.t_ret) / 1e6, r.headers.empty() ? "(none of interest)" : r.headers.c_str());
    }
  }
  if (!inv.found.empty()) {
    std::printf("  first read-read inversions (of %lld):\n", inversions);
    for (size_t k = 0; k < inv.found.size() && k < 5; ++k) {
      const ReadRec& r = reads[inv.found[k].later];
      const ReadRec& e = reads[inv.found[k].earlier];
      std::printf("    %s: seen %llu by GET %s via %s started %.6f s ended %.6f s; %llu seen by GET %s via %s "
                  "started %.6f s ended %.6f s (%.1f us before)\n",
                  key_name(r.key).c_str(), (unsigned long long)r.seen, r.path.c_str(),
                  target_name(r.target, true).c_str(), rel_s(sh, r.t_start), rel_s(sh, r.t_end),
                  (unsigned long long)e.seen, e.path.c_str(), target_name(e.target, true).c_str(),
                  rel_s(sh, e.t_start), rel_s(sh, e.t_end), double(r.t_start - e.t_end) / 1e3);
    }
  }
  if (!pass)
    for (auto& f : failures) std::printf("  FAILED: %s\n", f.c_str());
  std::fflush(stdout);

  if (!opt.json_path.empty()) {
    std::ostringstream j;
    j << "{\n  \"pass\": " << (pass ? "true" : "false") << ",\n  \"cache\": " << json_escape(opt.cache)
      << ",\n  \"direct\": " << (opt.direct ? "true" : "false") << ",\n  \"elapsed_s\": " << elapsed
      << ",\n  \"ops\": " << ops_done << ",\n  \"reads\": " << reads_total << ",\n  \"reads_ok\": " << reads_ok
      << ",\n  \"writes\": " << writes_total << ",\n  \"writes_ok\": " << writes_ok
      << ",\n  \"reads_per_s\": " << (elapsed > 0 ? double(reads_ok) / elapsed : 0)
      << ",\n  \"writes_per_s\": " << (elapsed > 0 ? double(writes_ok) / elapsed : 0)
      << ",\n  \"read_latency_ms\": {\"p50\": " << rp50 << ", \"p99\": " << rp99 << "}"
      << ",\n  \"write_latency_ms\": {\"p50\": " << wp50 << ", \"p99\": " << wp99 << "}"
      << ",\n  \"xcache_header_reads\": " << xc_seen << ",\n  \"xcache_hits\": " << xc_hits
      << ",\n  \"checked_reads\": " << checked << ",\n  \"stale_reads\": " << stale_reads
      << ",\n  \"strict\": " << (opt.strict ? "true" : "false") << ",\n  \"read_inversions\": " << inversions
      << ",\n  \"inversion_checked_reads\": " << inv.checked
      << ",\n  \"errors\": " << (read_errors + write_errors) << ",\n  \"error_ratio\": " << error_ratio
      << ",\n  \"max_error_ratio\": " << opt.max_error_ratio;
    auto emap = [&](const std::map<std::string, long long>& m) {
      std::string s = "{";
      for (auto& [k, v] : m) s += (s.size() > 1 ? ", " : "") + json_escape(k) + ": " + std::to_string(v);
      return s + "}";
    };
    j << ",\n  \"read_errors\": " << emap(rerr) << ",\n  \"write_errors\": " << emap(werr);
    if (opt.rate)
      j << ",\n  \"rate\": {\"ops_per_s\": " << *opt.rate << ", \"late\": " << sh.late.load()
        << ", \"late_ms\": " << double(kLateNs) / 1e6
        << ", \"max_lag_ms\": " << double(sh.max_lag.load()) / 1e6 << "}";
    if (opt.timeline) {
      j << ",\n  \"timeline\": [";
      for (size_t i = 0; i < seconds.size(); ++i) {
        SecondStats& ss = seconds[i];
        std::vector<double> tmp = ss.wlat;
        j << (i ? "," : "") << "\n    {\"t\": " << i << ", \"reads\": " << ss.reads
          << ", \"reads_ok\": " << ss.reads_ok << ", \"stale_reads\": " << ss.stale
          << ", \"writes\": " << ss.writes << ", \"writes_ok\": " << ss.writes_ok
          << ", \"errors\": " << ss.errors << ", \"write_latency_ms\": {\"p50\": " << pct(tmp, 0.5)
          << ", \"p99\": " << pct(tmp, 0.99) << "}}";
      }
      j << "]";
    }
    j << ",\n  \"during\": [";
    for (size_t i = 0; i < opt.during.size(); ++i) {
      auto& d = opt.during[i];
      j << (i ? ", " : "") << "{\"command\": " << json_escape(d.command) << ", \"at_s\": " << d.at_s
        << ", \"ran\": " << (d.started ? "true" : "false") << ", \"exit\": " << d.exit_status
        << ", \"start_s\": " << d.start_s << ", \"end_s\": " << d.end_s << "}";
    }
    j << "]";
    j << ",\n  \"windows\": [";
    for (size_t w = 0; w < opt.windows.size(); ++w) {
      const WindowStats& ws = wstats[w];
      j << (w ? "," : "") << "\n    {\"name\": " << json_escape(opt.windows[w].name) << ", \"ranges\": [";
      for (size_t r = 0; r < opt.windows[w].ranges.size(); ++r)
        j << (r ? ", " : "") << "[" << opt.windows[w].ranges[r].first << ", " << opt.windows[w].ranges[r].second << "]";
      j << "], \"reads\": " << ws.reads << ", \"reads_ok\": " << ws.reads_ok << ", \"checked_reads\": " << ws.checked
        << ", \"stale_reads\": " << ws.stale << ", \"read_inversions\": " << ws.inversions
        << ", \"writes\": " << ws.writes << ", \"writes_ok\": " << ws.writes_ok
        << ", \"write_latency_ms\": {\"p50\": " << ws.p50 << ", \"p99\": " << ws.p99 << ", \"max\": " << ws.max << "}"
        << ", \"errors\": " << (ws.read_errors + ws.write_errors) << ", \"read_errors\": " << ws.read_errors
        << ", \"write_errors\": " << ws.write_errors << ", \"write_latencies_ms\": [";
      for (size_t k = 0; k < ws.wlat.size(); ++k) j << (k ? ", " : "") << ws.wlat[k];
      j << "]}";
    }
    j << "]";
    if (tierce_metrics) {
      j << ",\n  \"proxies\": [";
      for (size_t i = 0; i < pms.size(); ++i) {
        auto& p = pms[i];
        j << (i ? ", " : "") << "{\"url\": " << json_escape(p.url);
        if (p.ok)
          j << ", \"hit_ratio\": " << ratio(p) << ", \"hits\": " << p.hits << ", \"misses\": " << p.misses
            << ", \"version_check_failures\": " << p.vfail << ", \"invalidations\": " << p.inval
            << ", \"stores\": " << p.stores << ", \"version_check_p50_us\": " << p.p50 * 1e6
            << ", \"version_check_p99_us\": " << p.p99 * 1e6 << ", \"version_checks\": " << p.checks;
        j << "}";
      }
      j << "],\n  \"hit_ratio\": " << ratio(tot) << ",\n  \"version_check_failures\": " << tot.vfail
        << ",\n  \"invalidations\": " << tot.inval;
    } else {
      j << ",\n  \"proxies\": null,\n  \"hit_ratio\": null";
    }
    j << ",\n  \"stale\": [";
    for (size_t k = 0; k < stale.size() && k < 10; ++k) {
      const ReadRec& r = reads[stale[k].read];
      const WriteRec& w = writes[stale[k].write];
      j << (k ? ",\n    " : "\n    ") << "{\"entity\": " << json_escape(key_name(r.key)) << ", \"seen\": " << r.seen
        << ", \"expected\": " << stale[k].expected << ", \"path\": " << json_escape(r.path)
        << ", \"via\": " << json_escape(target_name(r.target, true)) << ", \"read_start_s\": " << rel_s(sh, r.t_start)
        << ", \"read_end_s\": " << rel_s(sh, r.t_end) << ", \"write\": " << json_escape(w.what)
        << ", \"write_return_s\": " << rel_s(sh, w.t_ret) << ", \"headers\": " << json_escape(r.headers) << "}";
    }
    j << "],\n  \"inversions\": [";
    for (size_t k = 0; k < inv.found.size() && k < 5; ++k) {
      const ReadRec& r = reads[inv.found[k].later];
      const ReadRec& e = reads[inv.found[k].earlier];
      j << (k ? ",\n    " : "\n    ") << "{\"entity\": " << json_escape(key_name(r.key)) << ", \"seen\": " << r.seen
        << ", \"path\": " << json_escape(r.path) << ", \"via\": " << json_escape(target_name(r.target, true))
        << ", \"read_start_s\": " << rel_s(sh, r.t_start) << ", \"read_end_s\": " << rel_s(sh, r.t_end)
        << ", \"earlier_seen\": " << e.seen << ", \"earlier_path\": " << json_escape(e.path)
        << ", \"earlier_via\": " << json_escape(target_name(e.target, true))
        << ", \"earlier_start_s\": " << rel_s(sh, e.t_start) << ", \"earlier_end_s\": " << rel_s(sh, e.t_end)
        << ", \"gap_us\": " << double(r.t_start - e.t_end) / 1e3 << ", \"headers\": " << json_escape(r.headers)
        << ", \"earlier_headers\": " << json_escape(e.headers) << "}";
    }
    j << "],\n  \"failures\": [";
    for (size_t i = 0; i < failures.size(); ++i) j << (i ? ", " : "") << json_escape(failures[i]);
    j << "]\n}\n";
    std::ofstream f(opt.json_path);
    f << j.str();
    if (!f) std::fprintf(stderr, "tierce-check: cannot write %s\n", opt.json_path.c_str());
  }
  return pass ? 0 : 1;
}
