// base/metrics.h — Prometheus text exposition (format 0.0.4), the same way in every component:
// mod_rcache's and mod_appversion's metrics handlers, and the textfiles tierce-memd, tierce-lockd
// and tierce-ftpd write for node-exporter's textfile collector (docs/OPERATIONS.md, "Monitoring";
// each component's families: "Metrics" in docs/memd.md, docs/dlm.md, docs/ftp.md,
// mod_rcache/README.md, mod_appversion/README.md).
//
//   base::Metrics m({{"node", "app1"}});
//   m.counter("tierce_memd_one_sided_ops_total", "One-sided operations served.", n);
//   m.gauge("tierce_memd_regions", "Regions by state.", 2, {{"state", "exported"}});
//   std::string body = m.text();
//
// A family's HELP and TYPE are written once, before its first sample, and its samples stay
// together whatever order they were added in (the format requires it). Names are checked:
// a name or label name that Prometheus would refuse is a programming error (std::logic_error),
// caught by the tests that parse every component's output.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/log.h"

namespace tierce::base {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A label value as the format wants it: backslash, double quote and newline escaped.
std::string escape_label_value(std::string_view v);
// [a-zA-Z_:][a-zA-Z0-9_:]* (metric names); label names: no colon, not starting with "__".
bool valid_metric_name(std::string_view name);
bool valid_label_name(std::string_view name);

class Metrics {
 public:
  enum class Type { Counter, Gauge, Summary, Untyped };

  // `common` labels go on every sample (node="app1"), before the sample's own.
  Metrics() = default;
  explicit Metrics(MetricLabels common);
  Metrics(std::initializer_list<std::pair<std::string, std::string>> common)
      : Metrics(MetricLabels(common)) {}

  // Counters are named *_total (checked). Integral values are written exactly.
  Metrics& counter(std::string_view name, std::string_view help, uint64_t v,
                   const MetricLabels& labels = {});
  // A counter in a base unit that is not a whole number (tierce_rcache_coop_lookup_seconds_total:
  // nanoseconds summed, written in seconds). Named counter_seconds, not an overload of counter,
  // so that an integer argument never picks it.
  Metrics& counter_seconds(std::string_view name, std::string_view help, double v,
                           const MetricLabels& labels = {});
  Metrics& gauge(std::string_view name, std::string_view help, double v,
                 const MetricLabels& labels = {});
  Metrics& gauge(std::string_view name, std::string_view help, uint64_t v,
                 const MetricLabels& labels = {});
  // A summary: quantiles (label quantile="0.5"...), then name_sum and name_count.
  Metrics& summary(std::string_view name, std::string_view help,
                   const std::vector<std::pair<double, double>>& quantiles, double sum,
                   uint64_t count, const MetricLabels& labels = {});

  std::string text() const;

 private:
  struct Family {
    std::string name, help;
    Type type;
    std::vector<std::string> samples;  // whole lines, newline included
  };
  Family& family(std::string_view name, std::string_view help, Type type);
  void sample(Family& f, std::string_view suffix, const MetricLabels& labels, std::string value,
              const MetricLabels& extra = {});

  MetricLabels common_;
  std::vector<Family> families_;
  std::map<std::string, size_t, std::less<>> index_;
};

// Writes `text` to `path` the way node-exporter's textfile collector needs it: a temporary file
// in the same directory, then rename(2), so a scrape never reads half a file. Mode 0644.
// Throws std::system_error (the path in its message).
void write_textfile(const std::string& path, std::string_view text);

// Writes render() to a textfile every `interval` from its own thread, and once more at stop();
// stop() (or the destructor) removes the file, so a daemon stopped cleanly leaves no numbers
// behind that look current (a crashed one leaves them: node-exporter's node_textfile_mtime_seconds
// says how old they are — alert on it). A failed write is logged once with `log_id`
// ("MEMD0050"), and once more when writing works again.
class TextfileWriter {
 public:
  TextfileWriter(std::string path, std::chrono::milliseconds interval,
                 std::function<std::string()> render, LogSink log, std::string log_id);
  ~TextfileWriter();
  TextfileWriter(const TextfileWriter&) = delete;
  TextfileWriter& operator=(const TextfileWriter&) = delete;

  void write_now();  // also what the thread does; safe from any thread
  void stop();
  const std::string& path() const { return path_; }
  uint64_t writes() const { return writes_.load(); }
  uint64_t failures() const { return failures_.load(); }

 private:
  void run();

  std::string path_;
  std::chrono::milliseconds interval_;
  std::function<std::string()> render_;
  LogSink log_;
  std::string log_id_;
  std::mutex mu_;  // one write at a time; guards failing_ and stop_
  std::condition_variable cv_;
  bool stop_ = false;
  bool failing_ = false;
  std::atomic<uint64_t> writes_{0}, failures_{0};
  std::thread thread_;
};

}  // namespace tierce::base
