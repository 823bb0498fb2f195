// tests/fuzz/fabric_world.h — what the fabric fuzz targets serve: one exported 64 KiB region
// ("data") and an "echo" call service, with the tables and counters a Responder needs. Built once
// per process (the targets reuse it across inputs).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "fabric/responder.h"

namespace tierce_fuzz {

struct FabricWorld {
  tierce::fabric::RegionTable regions;
  tierce::fabric::ServiceTable services;
  tierce::fabric::Counters counters;
  std::shared_ptr<tierce::fabric::SharedSegment> seg;
  uint32_t id = 0;
  uint64_t key = 0;
  explicit FabricWorld(const std::string& segment_name)
      : seg(std::make_shared<tierce::fabric::SharedSegment>(
            tierce::fabric::SharedSegment::create_anonymous(segment_name, 1 << 16))) {
    auto info = regions.add("data", seg);
    id = info.id;
    key = regions.by_id(id)->key;
    services.add_call("echo", [](const tierce::fabric::PeerInfo&, std::span<const uint8_t> b) {
      return std::vector<uint8_t>(b.begin(), b.end());
    });
  }
};

}  // namespace tierce_fuzz
