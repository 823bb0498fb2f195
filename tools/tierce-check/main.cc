// tierce-check — checks Tierce's strong coherence against a running cluster (tools/tierce-cluster).
//
// Writers POST bid.php / edit.php straight to the app tier and record, once each response has
// returned, (return time on CLOCK_MONOTONIC, entity, committed version) for every `KEY=VERSION`
// line. Readers record their start time, GET item/category/user pages through the proxies and
// parse the `<meta name="tierce-data" content="KEY=VERSION">` markers. After the run every read is
// checked against the writes that RETURNED BEFORE the read STARTED: a version smaller than the
// highest such write's is a STALE READ. --sql-writers N: threads that update MariaDB directly
// (bypassing PHP: no invalidation) and record each entity's version and commit time; a read that
// starts more than --sql-stale-bound-ms after such a commit and shows an older version is an SQL
// STALE READ (bounded staleness, what a change-log agent such as tierce-binlogd promises); the
// stale window of each SQL write (how long after its commit a read still showed an older version)
// is reported. Reads are also checked against each other: a read showing
// a version older than one some read of the same entity (through any proxy) showed and returned
// before this read started is a READ-READ INVERSION (inversions.h): reported always, a failure
// with --strict. Errors (refused, timeouts, 5xx, missing marker) are counted
// apart. --window NAME=FROM-TO reports the same per stretch of the run (e.g. while a fault lasts):
// the operations that STARTED in it, and the latency of its writes. Exit 0 when no read was stale
// and the error ratio is <= --max-error-ratio (and, with --strict, no read inverted), 1 otherwise,
// 2 on bad usage.
#include "analysis.h"
#include "check.h"
#include "report.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace tcheck {
namespace {

// The readers' and writers' targets from the options; exits 2 on bad usage.
void resolve_targets(Options& opt, Shared& sh) {
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
  if (opt.write_ratio <= 0) opt.writers = opt.sql_writers = 0;
  if (opt.readers > 0 && sh.read_targets.empty())
    usage_error(opt.direct ? "--direct needs at least one --app (or --cluster)" : "no --proxy given (or --cluster)");
  if (opt.writers > 0 && sh.write_targets.empty()) usage_error("no --app given (or --cluster): writers need one");
  if (opt.sql_writers > 0 && opt.mariadb.host.empty())
    usage_error("--sql-writers needs --mariadb HOST:PORT (or --cluster with a \"mariadb\" object)");
  if (opt.readers + opt.write_threads() == 0) usage_error("no reader and no writer thread");
}

// Hot sets (a seeded sample of the ids, 1-based as tierce-datagen loads them) and the budgets.
void plan_workload(const Options& opt, Shared& sh) {
  int items = opt.items.value_or(10000), users = opt.users.value_or(2000), cats = opt.categories.value_or(20);
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
    sh.w_budget = opt.write_threads() ? (long long)std::llround(double(*opt.ops) * opt.write_ratio) : 0;
    sh.r_budget = opt.readers ? *opt.ops - sh.w_budget : 0;
    if (!opt.readers) sh.w_budget = *opt.ops;
  }
}

void announce(const Options& opt, const Shared& sh) {
  if (opt.quiet) return;
  std::fprintf(stderr, "tierce-check: cache=%s %s; %d readers -> %zu %s, %d writers -> %zu app node(s); ",
               opt.cache.c_str(), opt.direct ? "DIRECT reads" : "reads through the proxies", opt.readers,
               sh.read_targets.size(), opt.direct ? "app node(s)" : "proxies", opt.writers, sh.write_targets.size());
  if (opt.sql_writers)
    std::fprintf(stderr, "%d SQL writers -> MariaDB %s (stale bound %.0f ms); ", opt.sql_writers,
                 opt.mariadb.text().c_str(), opt.sql_stale_bound_ms);
  if (opt.ops) std::fprintf(stderr, "%lld ops (%lld reads, %lld writes)", *opt.ops, sh.r_budget, sh.w_budget);
  else std::fprintf(stderr, "%.0f s", *opt.duration);
  std::fprintf(stderr, "; hot sets %zu items, %zu users, %zu categories\n", sh.hot_items.size(), sh.hot_users.size(),
               sh.hot_cats.size());
}

// --rate: the open loop's intervals.
void plan_rate(const Options& opt, Shared& sh) {
  if (!opt.rate) return;
  double rr = opt.readers ? *opt.rate * (opt.write_threads() ? 1 - opt.write_ratio : 1) : 0;
  double wr = opt.write_threads() ? *opt.rate * (opt.readers ? opt.write_ratio : 1) : 0;
  sh.read_interval_ns = rr > 0 ? std::max<int64_t>(1, int64_t(1e9 / rr)) : 0;
  sh.write_interval_ns = wr > 0 ? std::max<int64_t>(1, int64_t(1e9 / wr)) : 0;
  if (!opt.quiet)
    std::fprintf(stderr, "tierce-check: open loop, %.1f reads/s and %.1f writes/s scheduled\n", rr, wr);
}

// The readers, writers and --during commands until the budget or the duration is spent; a
// progress line every 5 s. Returns each thread's records and the run's length in seconds.
std::vector<ThreadOut> run_workload(Options& opt, Shared& sh, double& elapsed) {
  sh.t0 = now_ns();
  if (opt.duration) sh.stop_at = sh.t0 + int64_t(*opt.duration * 1e9);
  sh.readers_left = opt.readers;
  sh.writers_left = opt.write_threads();
  std::vector<ThreadOut> outs(size_t(opt.readers + opt.write_threads()));
  std::vector<std::thread> threads;
  if (opt.sql_writers) sql_init();
  for (int i = 0; i < opt.readers; ++i) threads.emplace_back(reader, std::ref(sh), i, std::ref(outs[size_t(i)]));
  for (int i = 0; i < opt.writers; ++i)
    threads.emplace_back(writer, std::ref(sh), i, std::ref(outs[size_t(opt.readers + i)]));
  for (int i = 0; i < opt.sql_writers; ++i)
    threads.emplace_back(sql_writer, std::ref(sh), i, std::ref(outs[size_t(opt.readers + opt.writers + i)]));
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
  elapsed = double(t_workers_end - sh.t0) / 1e9;
  return outs;
}

}  // namespace
}  // namespace tcheck

int main(int argc, char** argv) {
  using namespace tcheck;
  std::signal(SIGPIPE, SIG_IGN);
  Options opt = parse_args(argc, argv);
  if (!opt.cluster_path.empty()) load_cluster(opt);
  Shared sh;
  sh.opt = &opt;
  sh.record_ops = !opt.windows.empty() || opt.timeline;
  resolve_targets(opt, sh);
  plan_workload(opt, sh);

  // The proxies' metrics before and after the run (none with --direct: no traffic goes there).
  bool tierce_metrics = false;
  std::vector<std::optional<Metrics>> before, after;
  std::vector<Url> proxy_urls;
  for (const auto& s : opt.proxies) {
    if (opt.direct) break;
    Url u;
    std::string err;
    parse_url(s, u, err);
    proxy_urls.push_back(u);
    before.push_back(fetch_metrics(u, opt.timeout));
    tierce_metrics = tierce_metrics || before.back().has_value();
  }
  announce(opt, sh);
  plan_rate(opt, sh);
  double elapsed = 0;
  std::vector<ThreadOut> outs = run_workload(opt, sh, elapsed);
  for (const auto& u : proxy_urls) after.push_back(fetch_metrics(u, opt.timeout));

  Run run = merge(outs, sh.t0, elapsed);
  const Analysis analysis = analyse(opt, run);
  const ProxyReport proxies = proxy_report(proxy_urls, before, after, tierce_metrics);
  print_report(opt, sh, run, analysis, proxies);
  if (!opt.json_path.empty()) write_json(opt, sh, run, analysis, proxies);
  return analysis.pass ? 0 : 1;
}
