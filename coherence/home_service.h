// coherence/home_service.h — an app node's home role, hosted by its memd: creates the node's
// "versions" and "acks" segments (fresh random bases: a new incarnation on every start), exports
// them on the memd's fabric::Server, and serves coherence.register / coherence.invalidate /
// coherence.status. Invalidations are acknowledged with a fetch-and-add on the origin node's
// "acks" region (connections to the other nodes are opened on demand and kept). After a crash,
// a new incarnation first waits out the shm lease its predecessor last renewed (COH0205): until
// then proxies may still read the old table, and nothing may be acknowledged.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "coherence/client.h"
#include "coherence/home.h"
#include "coherence/topology.h"
#include "fabric/fabric.h"

namespace tierce::coherence {

struct HomeServiceOptions {
  HomeLimits limits;
  uint32_t ack_slots = 4096;
  std::chrono::milliseconds ack_op_timeout{500};
};

class HomeService {
 public:
  // `node` must be an app node of `topo`. Creates <prefix>.versions and <prefix>.acks (replacing
  // stale ones), exports them as "versions" and "acks", registers the services.
  HomeService(fabric::Server& server, Topology topo, std::string node, fabric::Secret secret,
              HomeServiceOptions opts, fabric::LogSink log);
  ~HomeService();  // unexports, revokes and unlinks its segments

  HomeState& state() { return *state_; }
  std::string status_text() const;  // "key value" lines
  uint64_t acks_sent() const;
  uint64_t ack_failures() const;

 private:
  void on_invalidate(std::span<const uint8_t> body);
  void await_predecessor_lease(std::initializer_list<std::string> names);
  std::vector<uint8_t> on_register(std::span<const uint8_t> body);
  void ack(const std::string& origin, uint32_t slot);

  fabric::Server& server_;
  Topology topo_;
  std::string node_;
  fabric::Secret secret_;
  HomeServiceOptions opts_;
  fabric::LogSink log_;
  std::shared_ptr<fabric::SharedSegment> versions_, acks_;
  std::unique_ptr<HomeState> state_;
  std::unique_ptr<ClusterClient> peers_;  // acks to the other app nodes
  std::atomic<uint64_t> acks_sent_{0}, ack_failures_{0}, bad_messages_{0};
};

}  // namespace tierce::coherence
