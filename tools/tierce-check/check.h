// tools/tierce-check/check.h — what tierce-check's parts share: the options, the records a run
// produces, the state its threads share, and the functions of options.cc (the command line) and
// workload.cc (the readers, writers and --during commands; the proxies' metrics). main.cc runs
// them; analysis.h checks the finished run and report.h reports it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "http.h"

namespace tcheck {

// ------------------------------------------------------------------------------------------------
// entities

enum EType : uint64_t { kItem = 0, kCategory = 1, kUser = 2 };
inline const char* kTypeNames[] = {"item", "category", "user"};

inline uint64_t make_key(uint64_t type, uint64_t id) { return (type << 40) | id; }
inline std::string key_name(uint64_t k) {
  return std::string(kTypeNames[k >> 40]) + ":" + std::to_string(k & ((uint64_t(1) << 40) - 1));
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

// --mariadb* (or cluster.json's "mariadb"): where --sql-writers connect (TCP). What neither gives:
// the sample app's defaults (sample/php/lib.php), tierce / tierce, database rubis.
struct MariaDbTarget {
  std::string host;  // empty: not given
  unsigned port = 3306;
  std::optional<std::string> user, password, database;
  std::string text() const { return host + ":" + std::to_string(port); }
};

struct Options {
  std::vector<std::string> proxies, apps;
  int readers = 8, writers = 2;
  int sql_writers = 0;             // --sql-writers: threads that update MariaDB directly
  double sql_stale_bound_ms = 1000;  // --sql-stale-bound-ms: the staleness allowed after an SQL commit
  double sql_rate = 20;            // --sql-rate: SQL transactions per second, all SQL writers (0: budget)
  MariaDbTarget mariadb;
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
  int write_threads() const { return writers + sql_writers; }
};

// Exits 2 with `msg` and the usage text.
[[noreturn]] void usage_error(const std::string& msg);
// The command line; exits 2 on bad usage.
Options parse_args(int argc, char** argv);
// --cluster: the proxies, apps and cache kind from tierce-cluster's cluster.json.
void load_cluster(Options& o);

// ------------------------------------------------------------------------------------------------
// records

struct ReadRec {
  uint64_t key = 0, seen = 0;
  int64_t t_start = 0, t_end = 0;
  uint16_t target = 0;
  std::string path;
  std::string headers;  // cache-related response headers, "Name: value; ..."
};
// One entity's new version from a write. A PHP write (POST) returned at t_ret; an SQL write
// (--sql-writers, sql = true) committed at t_ret (COMMIT returned), its COMMIT sent at t_commit_sent.
struct WriteRec {
  uint64_t key = 0, version = 0;
  int64_t t_start = 0, t_ret = 0;
  int64_t t_commit_sent = 0;  // SQL writes only
  uint16_t target = 0;
  bool sql = false;
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
  std::vector<double> write_lat_ms;  // successful PHP writes
  std::vector<double> sql_lat_ms;    // successful SQL writes (transaction start to COMMIT returned)
  long long sql_writes_ok = 0, sql_writes_total = 0;  // also in writes_ok / writes_total
  long long reads_ok = 0, writes_ok = 0, reads_total = 0, writes_total = 0;
  long long xcache_seen = 0, xcache_hits = 0;  // successful reads with an X-Cache-like header / saying HIT
  std::map<std::string, long long> read_errors, write_errors;
  std::vector<ErrorSample> error_samples;  // the first few
  std::vector<OpRec> ops;                  // only with --window
  uint64_t connects = 0;
};


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

double rel_s(const Shared& sh, int64_t t);
void reader(Shared& sh, int idx, ThreadOut& out);
void writer(Shared& sh, int idx, ThreadOut& out);
void run_during(Shared& sh, During& d);
// What the reader and writer threads share (workload.cc): the pacing gate, the --rate schedule
// (0: the run ended), and an error counted by kind with the first few kept as samples.
bool may_go(Shared& sh, bool writer);
int64_t next_slot(Shared& sh, bool writer);
void note_error(Shared& sh, ThreadOut& out, bool writer, const std::string& kind, const std::string& target,
                const std::string& what);

// --sql-writers (sqlwriter.cc): sql_init() once before the threads start (libmariadb's global
// state), then one sql_writer thread each: transactions straight on MariaDB that change what
// bid.php / edit.php change, one WriteRec (sql = true) per entity.
void sql_init();
void sql_writer(Shared& sh, int idx, ThreadOut& out);

// ------------------------------------------------------------------------------------------------
// proxy metrics (mod_rcache /rcache-metrics, Prometheus text)

using Metrics = std::map<std::string, double>;
std::optional<Metrics> fetch_metrics(const Url& u, double timeout);

}  // namespace tcheck
