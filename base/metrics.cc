// base/metrics.cc — see metrics.h.
#include "base/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "base/errors.h"
#include "base/fd.h"

namespace tierce::base {

namespace {

bool name_char(char c, bool first, bool colon_ok) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (c == ':') return colon_ok;
  return !first && c >= '0' && c <= '9';
}

std::string format_double(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 9e15) return std::to_string(int64_t(v));
  // The shortest of %.15g..%.17g that reads back as the same double ("0.99", not
  // "0.98999999999999999").
  char b[64];
  for (int prec = 15; prec <= 17; ++prec) {
    std::snprintf(b, sizeof b, "%.*g", prec, v);
    if (std::strtod(b, nullptr) == v) break;
  }
  return b;
}

std::string_view type_name(Metrics::Type t) {
  switch (t) {
    case Metrics::Type::Counter: return "counter";
    case Metrics::Type::Gauge: return "gauge";
    case Metrics::Type::Summary: return "summary";
    case Metrics::Type::Untyped: return "untyped";
  }
  return "untyped";
}

void check_labels(const MetricLabels& labels) {
  for (const auto& [k, v] : labels)
    if (!valid_label_name(k)) throw std::logic_error("invalid Prometheus label name: " + k);
}

}  // namespace

std::string escape_label_value(std::string_view v) {
  std::string o;
  o.reserve(v.size());
  for (char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

bool valid_metric_name(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (!name_char(name[i], i == 0, true)) return false;
  return true;
}

bool valid_label_name(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__") return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (!name_char(name[i], i == 0, false)) return false;
  return true;
}

Metrics::Metrics(MetricLabels common) : common_(std::move(common)) {
  check_labels(common_);
}

Metrics::Family& Metrics::family(std::string_view name, std::string_view help, Type type) {
  if (auto it = index_.find(name); it != index_.end()) {
    Family& f = families_[it->second];
    if (f.type != type)
      throw std::logic_error("metric " + std::string(name) + " added with two types");
    return f;
  }
  if (!valid_metric_name(name))
    throw std::logic_error("invalid Prometheus metric name: " + std::string(name));
  if (type == Type::Counter && (name.size() < 6 || name.substr(name.size() - 6) != "_total"))
    throw std::logic_error("a counter's name must end in _total: " + std::string(name));
  index_.emplace(std::string(name), families_.size());
  // HELP text: backslash and newline escaped.
  std::string h;
  for (char c : help) {
    if (c == '\\') h += "\\\\";
    else if (c == '\n') h += "\\n";
    else h += c;
  }
  families_.push_back(Family{std::string(name), std::move(h), type, {}});
  return families_.back();
}

void Metrics::sample(Family& f, std::string_view suffix, const MetricLabels& labels,
                     std::string value, const MetricLabels& extra) {
  check_labels(labels);
  check_labels(extra);
  std::string line = f.name;
  line += suffix;
  bool first = true;
  for (const MetricLabels* set : {&std::as_const(common_), &labels, &extra})
    for (const auto& [k, v] : *set) {
      line += first ? '{' : ',';
      first = false;
      line += k + "=\"" + escape_label_value(v) + "\"";
    }
  if (!first) line += '}';
  line += ' ';
  line += value;
  line += '\n';
  f.samples.push_back(std::move(line));
}

Metrics& Metrics::counter(std::string_view name, std::string_view help, uint64_t v,
                          const MetricLabels& labels) {
  sample(family(name, help, Type::Counter), "", labels, std::to_string(v));
  return *this;
}

Metrics& Metrics::counter_seconds(std::string_view name, std::string_view help, double v,
                                  const MetricLabels& labels) {
  if (name.size() < 14 || name.substr(name.size() - 14) != "_seconds_total")
    throw std::logic_error("counter_seconds: the name must end in _seconds_total: " +
                           std::string(name));
  sample(family(name, help, Type::Counter), "", labels, format_double(v));
  return *this;
}

Metrics& Metrics::gauge(std::string_view name, std::string_view help, double v,
                        const MetricLabels& labels) {
  sample(family(name, help, Type::Gauge), "", labels, format_double(v));
  return *this;
}

Metrics& Metrics::gauge(std::string_view name, std::string_view help, uint64_t v,
                        const MetricLabels& labels) {
  sample(family(name, help, Type::Gauge), "", labels, std::to_string(v));
  return *this;
}

Metrics& Metrics::summary(std::string_view name, std::string_view help,
                          const std::vector<std::pair<double, double>>& quantiles, double sum,
                          uint64_t count, const MetricLabels& labels) {
  Family& f = family(name, help, Type::Summary);
  for (const auto& [q, v] : quantiles)
    sample(f, "", labels, format_double(v), {{"quantile", format_double(q)}});
  sample(f, "_sum", labels, format_double(sum));
  sample(f, "_count", labels, std::to_string(count));
  return *this;
}

std::string Metrics::text() const {
  std::string o;
  for (const auto& f : families_) {
    o += "# HELP " + f.name + " " + f.help + "\n";
    o += "# TYPE " + f.name + " ";
    o += type_name(f.type);
    o += "\n";
    for (const auto& s : f.samples) o += s;
  }
  return o;
}

// ---- textfiles ----------------------------------------------------------------------------------

void write_textfile(const std::string& path, std::string_view text) {
  // A name node-exporter ignores (it reads *.prom only), unique to this process and call.
  static std::atomic<uint64_t> seq{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(seq.fetch_add(1));
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd) throw_errno("cannot create " + tmp);
  ::fchmod(fd.get(), 0644);  // whatever the umask: node-exporter runs as its own user
  const char* p = text.data();
  size_t n = text.size();
  while (n) {
    ssize_t w = ::write(fd.get(), p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int e = errno;
      ::unlink(tmp.c_str());
      throw std::system_error(e, std::generic_category(), "cannot write " + tmp);
    }
    p += w;
    n -= size_t(w);
  }
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw std::system_error(e, std::generic_category(), "cannot rename " + tmp + " to " + path);
  }
}

TextfileWriter::TextfileWriter(std::string path, std::chrono::milliseconds interval,
                               std::function<std::string()> render, LogSink log,
                               std::string log_id)
    : path_(std::move(path)),
      interval_(interval),
      render_(std::move(render)),
      log_(std::move(log)),
      log_id_(std::move(log_id)) {
  write_now();
  thread_ = std::thread([this] { run(); });
}

TextfileWriter::~TextfileWriter() {
  stop();
}

void TextfileWriter::write_now() {
  std::string text = render_();
  std::lock_guard g(mu_);
  try {
    write_textfile(path_, text);
    writes_.fetch_add(1);
    if (failing_ && log_)
      log_(LogLevel::Info, log_id_ + " metrics textfile " + path_ + " written again");
    failing_ = false;
  } catch (const std::system_error& e) {
    failures_.fetch_add(1);
    if (!failing_ && log_)
      log_(LogLevel::Warn, log_id_ + " cannot write the metrics textfile: " + e.what() +
                               " (check that its directory exists and this user may write "
                               "there; retrying every interval)");
    failing_ = true;
  }
}

void TextfileWriter::run() {
  std::unique_lock l(mu_);
  while (!stop_) {
    if (cv_.wait_for(l, interval_, [this] { return stop_; })) break;
    l.unlock();
    write_now();
    l.lock();
  }
}

void TextfileWriter::stop() {
  {
    std::lock_guard g(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  ::unlink(path_.c_str());
}

}  // namespace tierce::base
