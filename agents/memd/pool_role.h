// agents/memd/pool_role.h — memd's [pool] role: this node donates memory to the cooperative cache
// pool (ARCHITECTURE §6, seed 000 §7.2.3: passive pools on app nodes).
//
// At start it creates the shared segment /tierce.<node>.pool ([pool] bytes, every page reserved
// with posix_fallocate so a short /dev/shm fails here and not with SIGBUS later), exports it as
// region "pool", and serves pool.alloc / pool.free / pool.renew (binary,
// coherence/slab_pool_wire.h) and pool.status / pool.metrics (text) with a coherence::SlabPool. A
// thread reclaims the slabs of owners whose lease lapsed every lease/4. A clean stop revokes and
// unlinks the segment; a restarted memd creates a new one (new incarnation, new export key): old
// descriptors fail and their holders allocate again.
//
// Threads: the services run on the server's connection threads, the reclaim on the role's own
// thread; SlabPool serializes them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "agents/memd/config.h"
#include "base/metrics.h"
#include "coherence/slab_pool.h"
#include "fabric/fabric.h"

namespace tierce::memd {

class PoolRole {
 public:
  // Creates and exports the pool; throws std::runtime_error saying what to change when the memory
  // cannot be had. Prereq: cfg.enabled.
  PoolRole(fabric::Server& server, const std::string& node, const PoolConfig& cfg,
           fabric::LogSink log);
  ~PoolRole();  // stops the reclaim thread, unexports, revokes and unlinks the segment
  PoolRole(const PoolRole&) = delete;
  PoolRole& operator=(const PoolRole&) = delete;

  coherence::SlabPool& pool() { return *pool_; }
  const std::string& segment_name() const { return segment_name_; }
  uint64_t incarnation() const { return segment_->incarnation(); }

  // Reclaims expired leases now (the thread does this every lease/4). Returns how many owners
  // lost their slabs.
  size_t reclaim_now();

  // "key value" lines: segment, incarnation, slab_bytes, slabs, free, zeroing, lease_ms,
  // max_slabs_per_owner, the counters, then one "owner NAME key=value..." line per owner.
  std::string status_text() const;
  // The same numbers in Prometheus text format (tierce_pool_*).
  std::string metrics_text() const;        // pool.metrics: metrics() labelled node=
  void metrics(base::Metrics& m) const;    // the [pool] families, into the memd's metrics

  static uint64_t now_ms();  // CLOCK_MONOTONIC in ms: the clock of the leases

 private:
  enum class Op { Alloc, Free, Renew };
  std::vector<uint8_t> handle(Op op, std::span<const uint8_t> body);
  void log_reclaimed(const coherence::Reclaimed& r);
  void reclaim_loop();

  fabric::Server& server_;
  std::string node_;
  PoolConfig cfg_;
  fabric::LogSink log_;
  std::string segment_name_;
  std::shared_ptr<fabric::SharedSegment> segment_;
  std::unique_ptr<coherence::SlabPool> pool_;
  std::atomic<uint64_t> bad_requests_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread reclaimer_;
};

}  // namespace tierce::memd
