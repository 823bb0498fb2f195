// agents/memd/memd.h — the node's one-sided target, as a class that runs without a process
// around it (main.cc adds the daemon: options, pid file, signals, logging).
//
// Memd owns a fabric::Server on the configured listen addresses and keeps each configured
// [[region]] in line with the POSIX shared segment its owner created:
//
//   state       meaning                                         leaves it when
//   pending     the segment does not exist (yet)                it appears (rescan)
//   not-ready   it exists but is still being created, or its    its header is complete
//               header is not a Tierce segment's
//   failed      memd cannot open it (permissions, ...)          the cause is fixed (rescan)
//   exported    served under the region's name                  it is re-created, removed,
//                                                               revoked, or its owner exits
//   revoked     its owner exited (follow_owner) or revoked it;  the owner creates it again
//               peers get Revoked/NoSuchRegion
//
// A re-created segment (new incarnation) is re-exported under the same name with a new id and
// key, and the old incarnation is revoked: descriptors of it fail (tcp: NoSuchRegion/BadKey;
// shm: Revoked, or PeerDead once its lease lapses) and their holders look the name up again.
//
// Threads: rescan(), check_owners(), poll_once(), reload() and stop() belong to one thread (the
// daemon's main loop). The services "memd.list" and "memd.status" run on the server's connection
// threads and only read, under mu_. The roles ([coherence] home, [pool]) run their own threads.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agents/memd/config.h"
#include "agents/memd/coop_role.h"
#include "agents/memd/pool_role.h"
#include "agents/memd/writer_role.h"
#include "coherence/home_service.h"
#include "fabric/fabric.h"

namespace tierce::memd {

enum class RegionState { Pending, NotReady, Failed, Exported, Revoked };
std::string_view to_string(RegionState s);

// A snapshot of one configured region, for status pages and tests.
struct RegionStatus {
  RegionConfig config;
  RegionState state = RegionState::Pending;
  std::string detail;          // why it is not exported (empty when exported)
  uint64_t incarnation = 0;    // of the segment exported or last seen
  pid_t owner = 0;             // its creator pid
  bool owner_watched = false;  // exited owners are noticed at once (pidfd), else at each rescan
  uint32_t id = 0;             // export id (exported only)
  uint64_t addr = 0;           // descriptor base address as peers see it over tcp/shm
  uint64_t len = 0;
  uint64_t key = 0;                             // 0 when memd could not learn it (see list_text)
  std::chrono::system_clock::time_point since;  // last state change
};

// Monotonic counters (never reset; shown by memd.status).
struct MemdCounters {
  uint64_t rescans = 0;
  uint64_t exports = 0;      // export_region calls, including re-exports
  uint64_t reexports = 0;    // because the owner re-created the segment
  uint64_t revocations = 0;  // segments memd revoked (owner exited, re-created, removed)
  uint64_t owner_exits = 0;
  uint64_t reloads = 0;
  uint64_t failed_reloads = 0;
};

struct ReloadOutcome {
  std::vector<std::string> added, removed, changed;  // region names
  std::vector<std::string> need_restart;             // [memd] keys whose new value waits
};

class Memd {
 public:
  // Starts the server (binds every listen address; throws fabric::FabricError naming the one that
  // failed) and registers memd.list and memd.status. Exports nothing until rescan().
  Memd(Config cfg, fabric::Secret secret, fabric::LogSink log);
  ~Memd();
  Memd(const Memd&) = delete;
  Memd& operator=(const Memd&) = delete;

  std::vector<std::string> bound_uris() const;
  // The files this memd created and removes at stop: its shm listen sockets, and the shm objects
  // of its roles (/dev/shm/<segment>: [pool], [coop], the home's versions and acks). main gives
  // them to [memd] user before dropping to it (docs/memd.md "Running as a user").
  std::vector<std::string> created_files() const;
  const Config& config() const { return cfg_; }

  // Brings every region in line with the segment present now (opens, exports, re-exports,
  // withdraws) and checks owners. Runs at start, every rescan_ms and after a reload.
  void rescan();
  // Revokes and withdraws the regions whose owner has exited (follow_owner).
  void check_owners();
  // Waits up to max_wait for an owner to exit, the next rescan to fall due, or `extra_fd`
  // (e.g. a signalfd; -1 = none) to become readable; does the due work; returns whether
  // extra_fd is readable.
  bool poll_once(int extra_fd, std::chrono::milliseconds max_wait);

  // Applies a new configuration: regions added, removed or changed take effect now, and so do
  // rescan_ms and log_level; the other [memd] keys need a restart (listed in need_restart and
  // logged). Prereq: `next` passed load_config.
  ReloadOutcome reload(Config next);
  // Counts a reload that failed before reaching reload() (bad file), for memd.status.
  void note_failed_reload();

  std::vector<RegionStatus> regions() const;
  MemdCounters counters() const;
  fabric::ServerStats server_stats() const;
  // "name addr len key segment incarnation" per exported region (hex numbers; key "-" when memd
  // could not learn it).
  std::string list_text() const;
  // "key value" lines: node, pid, uptime, listen addresses, server and memd counters, then one
  // "region NAME STATE key=value..." line per configured region.
  std::string status_text() const;
  std::string metrics_text() const;  // memd.metrics: Prometheus text (docs/memd.md)
  // The [pool] role, or nullptr without [pool].
  PoolRole* pool() { return pool_.get(); }
  // The [coop] role, or nullptr without [coop].
  CoopRole* coop() { return coop_.get(); }

  // Stops serving (peers' leases end at once). Exports are withdrawn, segments are not revoked:
  // their owners live on, and a restarted memd exports them again.
  void stop();

 private:
  struct Region;

  void log(fabric::LogLevel l, const std::string& line) const;
  void rescan_one(Region& r);
  // The parts of rescan_one (Prereq: mu_ held, as for rescan_one): the segment could not be
  // opened (errno e); a mapped segment that is not the object already exported; exporting it.
  void segment_open_failed(Region& r, int e);
  void adopt_segment(Region& r, fabric::SharedSegment seg, const struct stat& st);
  void export_segment(Region& r, fabric::SharedSegment seg, const struct stat& st,
                      uint64_t incarnation, pid_t owner, bool was_exported,
                      uint64_t old_incarnation);
  void withdraw(Region& r, RegionState next, const std::string& why, bool revoke);
  void set_state(Region& r, RegionState s, const std::string& detail);
  void note_problem(Region& r, RegionState s, fabric::LogLevel l, const std::string& line);
  bool owner_exited(Region& r);
  void withdraw_exited_owners();  // Prereq: mu_ held
  void watch_owner(Region& r);
  RegionStatus snapshot(const Region& r) const;

  Config cfg_;
  fabric::Secret secret_;
  fabric::LogSink log_;
  std::vector<std::string> home_segments_;  // [coherence]: the segments HomeService created
  std::unique_ptr<fabric::Server> server_;
  std::unique_ptr<coherence::HomeService> home_;  // with [coherence]: this app node's home role
  std::unique_ptr<WriterRole> writer_;            // with [writer]: the node's writer agent
  std::unique_ptr<PoolRole> pool_;                // with [pool]: memory donated to the pool
  std::unique_ptr<CoopRole> coop_;                // with [coop]: this node's directory part
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point next_rescan_;

  mutable std::mutex mu_;  // guards regions_ contents and counters_ against the service threads
  std::vector<std::unique_ptr<Region>> regions_;
  MemdCounters counters_;
};

}  // namespace tierce::memd
