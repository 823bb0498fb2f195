// fabric/responder.h — the server side of the protocol, independent of the transport: the table
// of exported regions, the table of services, and the handling of one authenticated request.
// The tcp and shm servers call it per frame; verbs calls it for its two-sided messages; the fuzz
// target calls it with arbitrary bytes.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "base/fd.h"
#include "fabric/fabric.h"
#include "fabric/wire.h"

namespace tierce::fabric {

struct ExportedRegion {
  uint32_t id = 0;
  std::string name;
  uint64_t key = 0;  // random; tcp/shm peers must present it
  std::shared_ptr<SharedSegment> seg;
  RegionAccess access;
  base::Fd read_only_fd;  // the segment opened O_RDONLY: what a reader's shm MAP gets
};

// Invariant: ids are never reused within a server's life, so a stale descriptor can only miss.
class RegionTable {
 public:
  ExportInfo add(const std::string& name, std::shared_ptr<SharedSegment> seg,
                 RegionAccess access = {});
  bool remove(const std::string& name);
  std::shared_ptr<const ExportedRegion> by_id(uint32_t id) const;
  std::shared_ptr<const ExportedRegion> by_name(std::string_view name) const;
  std::vector<std::shared_ptr<const ExportedRegion>> all() const;

 private:
  mutable std::shared_mutex mu_;
  uint32_t next_id_ = 1;
  std::map<uint32_t, std::shared_ptr<const ExportedRegion>> by_id_;
  std::map<std::string, uint32_t, std::less<>> by_name_;
};

class ServiceTable {
 public:
  void add_call(const std::string& name, CallHandler h, Callers who = Callers::Members);
  void add_stream(const std::string& name, StreamHandler h, Callers who = Callers::Members);
  // Empty when absent, or when `peer` may not call it (*refused set: a reader, members only).
  CallHandler call(std::string_view name, const PeerInfo& peer, bool* refused) const;
  StreamHandler stream(std::string_view name, const PeerInfo& peer, bool* refused) const;

 private:
  mutable std::shared_mutex mu_;
  std::map<std::string, std::pair<CallHandler, Callers>, std::less<>> calls_;
  std::map<std::string, std::pair<StreamHandler, Callers>, std::less<>> streams_;
};

struct Counters {
  std::atomic<uint64_t> connections_accepted{0}, auth_failures{0}, malformed_frames{0},
      one_sided_ops{0}, rejected_ops{0}, messages{0}, streams{0}, connections_refused{0},
      preauth_oversize{0}, bad_frame_macs{0}, reader_refusals{0};
  ServerStats snapshot() const;
};

// How a transport names exported memory to its peers.
struct TransportView {
  Transport transport = Transport::Tcp;
  bool can_pass_fd = false;  // shm: MAP answers with the segment's fd
};

struct Reply {
  wire::Header header;
  std::vector<uint8_t> payload;
  std::span<const uint8_t> direct;               // READ: bytes sent straight from the region
  std::shared_ptr<const ExportedRegion> pinned;  // keeps `direct` mapped while it is sent
  int fd_to_pass = -1;                           // MAP: the segment's fd (still owned by it)
};

class Responder {
 public:
  Responder(const RegionTable& regions, const ServiceTable& services, Counters& counters)
      : regions_(regions), services_(services), counters_(counters) {}

  // Handles one authenticated request (Prereq: header decoded and not a reply; payload complete).
  // Returns false when no reply is due (SEND). Never throws on peer-controlled input: bad requests
  // become error statuses. HELLO/AUTH/STREAM_OPEN are the connection's business, not handled here.
  bool handle(const wire::Header& req, std::span<const uint8_t> payload, const PeerInfo& peer,
              const TransportView& view, Reply* out) const;

  static uint64_t address_of(uint32_t region_id, uint64_t offset) {
    return (uint64_t(region_id) << wire::kRegionShift) | offset;
  }

 private:
  // Resolves (addr, key, len) to a pointer into the region, or an error status.
  Errc resolve(uint64_t addr, uint64_t key, uint64_t len, bool atomic,
               std::shared_ptr<const ExportedRegion>* region, uint8_t** ptr) const;

  const RegionTable& regions_;
  const ServiceTable& services_;
  Counters& counters_;
};

}  // namespace tierce::fabric
