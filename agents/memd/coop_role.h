// agents/memd/coop_role.h — memd's [coop] role: this proxy's part of the cooperative-cache
// directory (coherence/coop_directory.h, docs/coop_cache.md "Directory"). memd creates the
// directory in the segment /tierce.<node>.coop (CoopDirectory::create_segment: a fresh, empty
// directory with a new incarnation on every start), exports it as region "coop.dir" for peers'
// one-sided bucket reads, and serves:
//   coop.dir.update  binary (coherence/coop_directory_wire.h): publish / withdraw /
//                    withdraw_node / invalidate, answered by dirwire::apply_body (a body that does
//                    not decode is a BadRequest reply, never a change)
//   coop.dir.status  text: the directory's geometry and its update counters
// The role hosts the directory only: it does not know the topology, so the directory's node
// count is the format's maximum (65535: every node index below it is accepted) and its digest 0;
// the peers' shared topology gives node indices their meaning. A clean stop revokes and unlinks
// the segment; a restarted memd starts with an empty directory (a new export key: old
// descriptors fail, peers re-read the header and the publishers publish again).
//
// Threads: the services run on the server's connection threads; CoopDirectory serialises updates.
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "agents/memd/config.h"
#include "base/metrics.h"
#include "fabric/fabric.h"

// Declared only: memd.h, which includes this, need not see the directory's layout.
namespace tierce::coherence {
class CoopDirectory;
}

namespace tierce::memd {

class CoopRole {
 public:
  static constexpr const char* kStatusService = "coop.dir.status";
  static constexpr uint16_t kNodes = 65535;  // no topology: any node index below is accepted

  // Creates and exports the directory; throws std::runtime_error saying what to change when the
  // memory cannot be had. Prereq: cfg.enabled.
  CoopRole(fabric::Server& server, const std::string& node, const CoopConfig& cfg,
           fabric::LogSink log);
  // Unexports, revokes and unlinks the segment. Prereq: the server no longer runs handlers (memd
  // stops it first).
  ~CoopRole();
  CoopRole(const CoopRole&) = delete;
  CoopRole& operator=(const CoopRole&) = delete;

  coherence::CoopDirectory& directory() { return *dir_; }
  const std::string& segment_name() const { return segment_name_; }

  // The coop.dir.update handler's body (also for in-process tests).
  std::vector<uint8_t> handle_update(std::span<const uint8_t> body);

  // "key value" lines: segment, incarnation, buckets, bucket_bytes, bytes, nodes, entries,
  // updates_<status> for each UpdateStatus except bad_request, then bad_requests.
  std::string status_text() const;
  void metrics(base::Metrics& m) const;  // tierce_coopdir_* families (the memd's metrics)

 private:
  fabric::Server& server_;
  std::string node_;
  CoopConfig cfg_;
  fabric::LogSink log_;
  std::string segment_name_;
  std::unique_ptr<coherence::CoopDirectory> dir_;
  std::atomic<uint64_t> bad_requests_{0};
};

}  // namespace tierce::memd
