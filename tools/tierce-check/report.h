// tools/tierce-check/report.h — what tierce-check says about a run: the proxies' metrics over
// it (deltas of mod_rcache's /rcache-metrics), the text report on stdout and the --json file.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "analysis.h"
#include "check.h"

namespace tcheck {

// One proxy's cache counters over the run (or all proxies' sum).
struct ProxyDelta {
  std::string url;
  bool ok = false;  // metrics read before and after
  double hits = 0, misses = 0, vfail = 0, inval = 0, stores = 0, p50 = 0, p99 = 0, checks = 0, sum = 0;
  double hit_ratio() const;
};

struct ProxyReport {
  bool tierce_metrics = false;  // some proxy answered /rcache-metrics before the run
  std::vector<ProxyDelta> proxies;
  ProxyDelta total;
};
ProxyReport proxy_report(const std::vector<Url>& urls, const std::vector<std::optional<Metrics>>& before,
                         const std::vector<std::optional<Metrics>>& after, bool tierce_metrics);

// The text report (stdout).
void print_report(const Options& opt, const Shared& sh, const Run& run, const Analysis& a, const ProxyReport& pr);
// The same as JSON, to opt.json_path; says so on stderr when it cannot be written.
void write_json(const Options& opt, const Shared& sh, const Run& run, const Analysis& a, const ProxyReport& pr);

}  // namespace tcheck
