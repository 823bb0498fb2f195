// agents/binlogd/agent.cc — the reader and the invalidator (agent.h).
#include "agents/binlogd/agent.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "base/metrics.h"
#include "coherence/key.h"
#include "coherence/layout.h"
#include "coherence/protocol.h"

namespace tierce::binlogd {
namespace {

namespace co = tierce::coherence;
using base::LogLevel;
using Clock = std::chrono::steady_clock;

constexpr size_t kLagRing = 4096;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The state file: "gtid D-S-N[,...]\n", written to a temporary file, synced, renamed over.
base::Status write_state(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return {base::Code::Internal, tmp + ": " + std::strerror(errno), "BINLOGD0141"};
  std::string body = "gtid " + text + "\n";
  bool ok = ::write(fd, body.data(), body.size()) == ssize_t(body.size()) && ::fsync(fd) == 0;
  int e = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    if (ok) e = errno;
    ::unlink(tmp.c_str());
    return {base::Code::Internal, path + ": " + std::strerror(e), "BINLOGD0141"};
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

}  // namespace

Agent::Agent(Settings settings, std::string password, base::LogSink log)
    : s_(std::move(settings)), password_(std::move(password)), log_(std::move(log)) {
  auto m = Mapping::make(s_.mapping);
  if (!m) throw std::runtime_error(m.status().to_string());
  mapping_ = std::move(*m);
  try {
    topo_ = co::Topology::load(s_.topology);
    topo_.require_app_nodes();
  } catch (const std::exception& e) {
    throw std::runtime_error("BINLOGD0104 topology " + s_.topology + ": " + e.what());
  }
  const co::NodeInfo* self = topo_.find(s_.node);
  if (!self || self->role != co::Role::App)
    throw std::runtime_error("BINLOGD0104 node " + s_.node + " is " +
                             (self ? "a proxy" : "not a node") + " in " + s_.topology +
                             "; name the app node this agent runs beside");
  fabric::Secret secret;
  try {
    secret = topo_.secret();
  } catch (const std::exception& e) {
    throw std::runtime_error("BINLOGD0104 cannot read the cluster secret " + topo_.secret_file +
                             ": " + e.what());
  }
  try {
    writer_ = std::make_unique<co::WriterLog>(self->segment_prefix + co::kWriterSuffix,
                                              topo_.coherence_digest());
  } catch (const std::exception& e) {
    throw std::runtime_error("BINLOGD0104 cannot map " + s_.node + "'s invalidation counter " +
                             self->segment_prefix + co::kWriterSuffix + ": " + e.what() +
                             " (the agent must run on " + s_.node + "'s host)");
  }
  co::ClientTuning tuning;
  tuning.op_timeout = std::chrono::milliseconds(200);
  tuning.connect_timeout = std::chrono::milliseconds(200);
  client_ = std::make_unique<co::ClusterClient>(topo_, secret, tuning, log_);
  // Its rounds are a member's: signed with the node's key where the cluster has keys.
  if (self->public_key && s_.node_key.empty())
    throw std::runtime_error("BINLOGD0104 the topology " + s_.topology +
                             " gives nodes keys: set node_key (this node's key file; the homes "
                             "take invalidations only from a node that signs)");
  if (!s_.node_key.empty()) {
    try {
      client_->sign_as(s_.node, fabric::NodeKey::from_file(s_.node_key));
    } catch (const std::exception& e) {
      throw std::runtime_error("BINLOGD0104 node_key " + s_.node_key + ": " + e.what());
    }
  }
  // The state file: absent = first start; present but unreadable or malformed = refuse (an
  // operator removes it to start over, which costs one invalidate-all).
  std::ifstream in(s_.state_file);
  if (in) {
    std::string word, text;
    in >> word >> text;
    auto p = GtidPosition::parse(text);
    if (word != "gtid" || !p)
      throw std::runtime_error("BINLOGD0142 the state file " + s_.state_file +
                               " is not one this agent wrote (\"gtid D-S-N\"): " +
                               (p ? "no \"gtid\" word" : p.message()) +
                               "; remove it to start from the server's current position (one "
                               "invalidate-all)");
    persisted_ = read_pos_ = *p;
    have_state_ = true;
  }
  counters_.position = persisted_.text();
  lags_ms_.reserve(kLagRing);
  if (!s_.audit_file.empty()) {
    audit_ = std::fopen(s_.audit_file.c_str(), "ae");
    if (!audit_)
      throw std::runtime_error("BINLOGD0143 cannot open the audit file " + s_.audit_file + ": " +
                               std::strerror(errno));
  }
  SourceSettings src = s_.mariadb;
  src.password = password_;
  source_ = std::make_unique<BinlogSource>(src, mapping_);
}

Agent::~Agent() {
  stop();
  if (audit_) std::fclose(audit_);
}

void Agent::start() {
  reader_ = std::thread([this] { read_loop(); });
  invalidator_ = std::thread([this] { invalidate_loop(); });
}

void Agent::stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_ && !reader_.joinable() && !invalidator_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (source_) source_->interrupt();
  if (reader_.joinable()) reader_.join();
  if (invalidator_.joinable()) invalidator_.join();
}

void Agent::push(Item it) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return stopping_ || queue_.size() < kQueueLimit; });
  if (stopping_) return;
  if (!it.synthetic) read_pos_.advance(it.tx.domain, it.tx.server, it.tx.seq);
  queue_.push_back(std::move(it));
  cv_.notify_all();
}

// One connection's life: connect, start, read until it fails. Returns false to stop for good.
bool Agent::read_session(bool& first) {
  base::Status s = source_->connect();
  if (!s.ok()) {
    log_(s.code() == base::Code::FailedPrecondition ? LogLevel::Error : LogLevel::Warn,
         s.to_string());
    return true;
  }
  GtidPosition from;
  {
    std::lock_guard<std::mutex> l(mu_);
    from = read_pos_;
  }
  auto start_at_current = [&](const std::string& why) -> bool {
    auto cur = source_->current_position();
    if (!cur) {
      log_(LogLevel::Warn, cur.status().to_string());
      return false;
    }
    Item all;
    all.synthetic = true;
    all.tx.invalidate_all = true;
    all.tx.why_all = why;
    all.tx.gtid = "@" + cur->text();  // (audit: covers every transaction up to there)
    all.tx.arrived = Clock::now();
    push(std::move(all));
    {
      std::lock_guard<std::mutex> l(mu_);
      read_pos_ = *cur;
      ++counters_.catch_ups;
    }
    from = *cur;
    log_(LogLevel::Warn, "BINLOGD0132 " + why + ": invalidating everything once, then reading "
                         "from the server's current position " +
                             (cur->empty() ? std::string("(empty binlog)") : cur->text()));
    return true;
  };
  if (purged_) {
    purged_ = false;
    if (!start_at_current("the position " + from.text() + " was purged from the server's binlogs"))
      return true;
  } else if (from.empty() && first && !have_state_) {
    if (!start_at_current("first start (no state file " + s_.state_file +
                          "): the writes before now are not known"))
      return true;
  }
  first = false;
  s = source_->start(from);
  if (s.code() == base::Code::NotFound) {
    purged_ = true;  // the next session starts from the current position (a fresh connection)
    log_(LogLevel::Warn, s.to_string());
    return true;
  }
  if (!s.ok()) {
    log_(LogLevel::Warn, s.to_string());
    return true;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    counters_.connected = true;
  }
  log_(LogLevel::Info, "BINLOGD0133 reading the binlog of " +
                           (s_.mariadb.socket.empty()
                                ? s_.mariadb.host + ":" + std::to_string(s_.mariadb.port)
                                : s_.mariadb.socket) +
                           " after " + (from.empty() ? std::string("the start") : from.text()));
  for (;;) {
    auto tx = source_->next();
    if (!tx) {
      {
        std::lock_guard<std::mutex> l(mu_);
        counters_.connected = false;
        if (stopping_) return false;
      }
      if (tx.status().code() == base::Code::NotFound) {
        purged_ = true;
        log_(LogLevel::Warn, tx.status().to_string());
        return true;
      }
      log_(LogLevel::Warn, tx.status().to_string() + "; reconnecting");
      return true;
    }
    Item it;
    it.tx = std::move(*tx);
    push(std::move(it));
  }
}

void Agent::read_loop() {
  auto backoff = std::chrono::milliseconds(100);
  bool first = true;
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stopping_) return;
    }
    auto began = Clock::now();
    if (!read_session(first)) return;
    source_->close();
    std::unique_lock<std::mutex> l(mu_);
    if (stopping_) return;
    ++counters_.reconnects;
    // A session that ran a while was healthy: start the backoff over.
    if (Clock::now() - began > std::chrono::seconds(10)) backoff = std::chrono::milliseconds(100);
    cv_.wait_for(l, backoff, [&] { return stopping_; });
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(5));
  }
}

void Agent::note_lag(Clock::time_point arrived) {
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - arrived).count();
  counters_.lag_sum_s += ms / 1000;
  ++counters_.lag_count;
  if (lags_ms_.size() < kLagRing) lags_ms_.push_back(ms);
  else lags_ms_[lag_next_] = ms;
  lag_next_ = (lag_next_ + 1) % kLagRing;
}

void Agent::invalidate(std::vector<Item>& batch) {
  bool all = false;
  std::string why;
  std::vector<std::string> names;
  for (const Item& it : batch) {
    if (it.tx.invalidate_all) {
      if (!all) why = it.tx.why_all;
      all = true;
    }
    for (const auto& n : it.tx.names) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  if (all || !names.empty()) {
    std::vector<uint64_t> deps;
    co::Scheme scheme = all || topo_.coherence.scheme == co::Scheme::InvalidateAll
                            ? co::Scheme::InvalidateAll
                            : co::Scheme::DependencyLists;
    if (scheme == co::Scheme::DependencyLists)
      for (const auto& n : names) deps.push_back(co::dependency_hash(n));
    if (all)
      log_(LogLevel::Info, "BINLOGD0151 invalidating everything: " + why);
    co::InvalidateOutcome o;
    try {
      o = client_->invalidate(*writer_, s_.node, deps, scheme);
    } catch (const std::exception& e) {
      // Not numbered or not sent: the homes' fences cover what was numbered; retry the batch.
      log_(LogLevel::Error, std::string("BINLOGD0152 invalidation failed: ") + e.what() +
                                "; retrying the same transactions");
      std::unique_lock<std::mutex> l(mu_);
      for (auto it = batch.rbegin(); it != batch.rend(); ++it) queue_.push_front(std::move(*it));
      cv_.wait_for(l, std::chrono::milliseconds(100), [&] { return stopping_; });
      return;
    }
    std::lock_guard<std::mutex> l(mu_);
    ++counters_.rounds;
    counters_.names += names.size();
    if (all) ++counters_.invalidate_all;
    if (!o.complete()) {
      ++counters_.rounds_incomplete;
      std::string homes;
      for (const auto& h : o.fenced) homes += (homes.empty() ? "" : "; ") + h;
      for (const auto& h : o.unconfirmed) homes += (homes.empty() ? "" : "; ") + h + " [another topology]";
      log_(LogLevel::Warn, "BINLOGD0153 invalidation #" + std::to_string(o.number.number) +
                               " not acknowledged by every home (" + homes +
                               "): those homes are fenced until they catch up");
    }
  }
  if (audit_) {
    // One line per transaction, after its invalidation: when (CLOCK_REALTIME, so that a client
    // can compare it with its own commit times), which, how many rows, and what was invalidated.
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
    for (const Item& it : batch) {
      std::string line = std::to_string(ns) + " " + it.tx.gtid + " " + std::to_string(it.tx.rows);
      if (all) line += " *";
      else
        for (const auto& n : it.tx.names) line += " " + n;
      line += "\n";
      std::fwrite(line.data(), 1, line.size(), audit_);
    }
    std::fflush(audit_);
  }
  std::lock_guard<std::mutex> l(mu_);
  GtidPosition p = persisted_;
  for (const Item& it : batch) {
    if (!it.synthetic) {
      p.advance(it.tx.domain, it.tx.server, it.tx.seq);
      ++counters_.transactions;
      counters_.rows += it.tx.rows;
    }
    note_lag(it.tx.arrived);
  }
  if (!(p == persisted_)) persist(p);
}

void Agent::persist(const GtidPosition& p) {
  base::Status s = write_state(s_.state_file, p.text());
  if (!s.ok()) {
    log_(LogLevel::Error, s.to_string() + " (the position is not saved: a restart would "
                                          "invalidate the transactions since again)");
    return;
  }
  persisted_ = p;
  counters_.position = p.text();
}

void Agent::invalidate_loop() {
  for (;;) {
    std::vector<Item> batch;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, std::chrono::milliseconds(200), [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      if (queue_.empty()) continue;
      size_t names = 0;
      while (!queue_.empty() && batch.size() < s_.max_batch_transactions) {
        const Item& it = queue_.front();
        if (!batch.empty() && names + it.tx.names.size() > co::kMaxDependencies) break;
        names += it.tx.names.size();
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      cv_.notify_all();  // room in the queue
      double oldest = seconds_since(batch.front().tx.arrived);
      if (oldest * 1000 > double(s_.lag_alarm.count()) &&
          Clock::now() - last_alarm_ > std::chrono::seconds(10)) {
        last_alarm_ = Clock::now();
        log_(LogLevel::Warn,
             "BINLOGD0150 behind: the oldest transaction not yet invalidated arrived " +
                 std::to_string(int(oldest * 1000)) + " ms ago (" +
                 std::to_string(queue_.size() + batch.size()) +
                 " queued): pages written outside PHP may be stale that long");
      }
    }
    invalidate(batch);
  }
}

AgentStats Agent::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  AgentStats s = counters_;
  s.events = source_->events();
  s.heartbeats = source_->heartbeats();
  s.queued = queue_.size();
  s.oldest_queued_s = queue_.empty() ? 0 : seconds_since(queue_.front().tx.arrived);
  s.behind_s = queue_.empty() || queue_.front().synthetic
                   ? 0
                   : std::max(0.0, double(std::time(nullptr)) - double(queue_.front().tx.timestamp));
  std::vector<double> v = lags_ms_;
  std::sort(v.begin(), v.end());
  for (double q : {0.5, 0.9, 0.99, 1.0})
    s.lag_quantiles_ms.push_back(v.empty() ? 0 : v[std::min(v.size() - 1, size_t(q * double(v.size())))]);
  return s;
}

std::string Agent::metrics_text() const {
  AgentStats s = stats();
  base::Metrics m({{"node", s_.node}});
  m.counter("tierce_binlogd_events_total", "Binlog events read.", s.events);
  m.counter("tierce_binlogd_heartbeats_total", "Heartbeats from the idle server.", s.heartbeats);
  m.counter("tierce_binlogd_transactions_total", "Transactions invalidated.", s.transactions);
  m.counter("tierce_binlogd_rows_total", "Row changes of watched tables invalidated.", s.rows);
  m.counter("tierce_binlogd_names_total", "Dependency names invalidated.", s.names);
  m.counter("tierce_binlogd_rounds_total", "Invalidation rounds sent.", s.rounds);
  m.counter("tierce_binlogd_rounds_incomplete_total",
            "Rounds some home did not acknowledge (fenced instead).", s.rounds_incomplete);
  m.counter("tierce_binlogd_invalidate_all_total", "Rounds that invalidated everything.",
            s.invalidate_all);
  m.counter("tierce_binlogd_catch_ups_total",
            "Starts from the server's current position (first start, purged position).",
            s.catch_ups);
  m.counter("tierce_binlogd_reconnects_total", "Connections to the server lost or refused.",
            s.reconnects);
  m.gauge("tierce_binlogd_connected", "1 while the binlog stream is open.", uint64_t(s.connected));
  m.gauge("tierce_binlogd_lag_transactions", "Transactions read, not yet invalidated.", s.queued);
  m.gauge("tierce_binlogd_lag_seconds",
          "Age of the oldest transaction read and not yet invalidated.", s.oldest_queued_s);
  m.gauge("tierce_binlogd_behind_seconds",
          "Now minus the server's commit time of the oldest transaction not yet invalidated "
          "(whole seconds; 0 when none waits).",
          s.behind_s);
  std::vector<std::pair<double, double>> q;
  double qs[] = {0.5, 0.9, 0.99, 1.0};
  for (size_t i = 0; i < s.lag_quantiles_ms.size(); ++i) q.emplace_back(qs[i], s.lag_quantiles_ms[i] / 1000);
  m.summary("tierce_binlogd_invalidation_lag_seconds",
            "From a transaction's arrival to its invalidation acknowledged (quantiles of the "
            "recent ones).",
            q, s.lag_sum_s, s.lag_count);
  return m.text();
}

std::string Agent::status_text() const {
  AgentStats s = stats();
  std::ostringstream o;
  o << "connected " << (s.connected ? "yes" : "no") << ", position " << (s.position.empty() ? "-" : s.position)
    << ", transactions " << s.transactions << ", rows " << s.rows << ", rounds " << s.rounds
    << ", invalidate-all " << s.invalidate_all << ", queued " << s.queued << " (oldest "
    << int(s.oldest_queued_s * 1000) << " ms), lag p50/p99/max " << s.lag_quantiles_ms[0] << "/"
    << s.lag_quantiles_ms[2] << "/" << s.lag_quantiles_ms[3] << " ms, reconnects " << s.reconnects;
  return o.str();
}

}  // namespace tierce::binlogd
