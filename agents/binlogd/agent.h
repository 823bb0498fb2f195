// agents/binlogd/agent.h — tierce-binlogd's pipeline: the change log in, invalidation rounds out.
//
//   reader thread       BinlogSource: connect (backoff 100 ms .. 5 s), start after the position,
//                       each committed transaction → the queue (bounded: a slow cluster slows
//                       the reading, never drops an event)
//   invalidator thread  takes every queued transaction up to max_batch_transactions (and one
//                       round's 4096 names), sends ONE invalidation for their union through the
//                       cluster's rounds (coherence::ClusterClient::invalidate, numbered by the
//                       node's writer counter like its httpd's: every home applies it, or is
//                       fenced by the bound), then persists the position after the last of them
//
// The position on disk only moves after the invalidation of everything before it: a restart
// resumes after it and may invalidate a few transactions twice, never skip one. A position the
// server purged, and the first start (no state file: writes before it are unknown), cost one
// invalidate-all. While the agent is down or behind, writes made outside PHP stay stale that long
// (bounded staleness, docs/binlog.md): it says so (BINLOGD0150, the lag metrics) and the cache
// keeps serving.
#pragma once
#include <cstdio>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agents/binlogd/config.h"
#include "agents/binlogd/mapping.h"
#include "agents/binlogd/source.h"
#include "base/log.h"
#include "coherence/client.h"
#include "coherence/topology.h"
#include "coherence/writer.h"

namespace tierce::binlogd {

struct AgentStats {
  uint64_t events = 0, heartbeats = 0, transactions = 0, rows = 0, names = 0, rounds = 0;
  uint64_t invalidate_all = 0, catch_ups = 0, reconnects = 0, rounds_incomplete = 0;
  uint64_t queued = 0;               // transactions read, not yet invalidated
  double oldest_queued_s = 0;        // age of the oldest of them (since it arrived)
  double behind_s = 0;               // now - the oldest queued transaction's commit (1 s steps)
  double lag_sum_s = 0;              // arrival → invalidated, summed over every transaction
  uint64_t lag_count = 0;
  bool connected = false;
  std::string position;              // persisted
  std::vector<double> lag_quantiles_ms;  // p50, p90, p99, max of arrival → invalidated (recent)
};

class Agent {
 public:
  static constexpr size_t kQueueLimit = 100000;

  // Loads the topology and the secret, maps the node's writer counter, reads the state file.
  // Throws std::runtime_error with the message id on what cannot work.
  Agent(Settings settings, std::string password, base::LogSink log);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  void start();
  void stop();

  AgentStats stats() const;
  std::string metrics_text() const;
  std::string status_text() const;

 private:
  struct Item {
    Transaction tx;
    bool synthetic = false;  // an invalidate-all of our own (first start, purged position)
  };
  void read_loop();
  void invalidate_loop();
  bool read_session(bool& first);
  void push(Item it);
  void invalidate(std::vector<Item>& batch);
  void persist(const GtidPosition& p);
  void note_lag(std::chrono::steady_clock::time_point arrived);

  Settings s_;
  std::string password_;
  base::LogSink log_;
  Mapping mapping_;
  coherence::Topology topo_;
  std::unique_ptr<coherence::ClusterClient> client_;
  std::unique_ptr<coherence::WriterLog> writer_;
  std::unique_ptr<BinlogSource> source_;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // queue not empty / not full / stopping
  std::deque<Item> queue_;
  bool stopping_ = false;
  GtidPosition read_pos_;       // after the last transaction queued (reader's)
  GtidPosition persisted_;      // after the last transaction invalidated
  bool have_state_ = false;     // the state file existed at start
  bool purged_ = false;         // reader: the server no longer has the position
  AgentStats counters_;
  std::vector<double> lags_ms_;  // ring of recent lags
  size_t lag_next_ = 0;
  std::chrono::steady_clock::time_point last_alarm_{};
  std::thread reader_, invalidator_;
  FILE* audit_ = nullptr;  // audit_file, when set
};

}  // namespace tierce::binlogd
