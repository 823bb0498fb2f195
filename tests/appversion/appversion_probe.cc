// tests/appversion/appversion_probe.cc — what the integration test asks the cluster directly,
// through the same coherence::ClusterClient the module uses:
//   appversion_probe TOPOLOGY home KEYHEX          -> "HOME SLOT"
//   appversion_probe TOPOLOGY seq NODE             -> the home's invalidation sequence
//   appversion_probe TOPOLOGY version NODE SLOT... -> one version per slot, one per line
// Exit 1 (with a message) when a read fails.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "coherence/client.h"
#include "coherence/key.h"
#include "coherence/topology.h"

namespace co = tierce::coherence;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s TOPOLOGY home KEYHEX | seq NODE | version NODE SLOT...\n",
                 argv[0]);
    return 2;
  }
  try {
    co::Topology topo = co::Topology::load(argv[1]);
    std::string cmd = argv[2];
    if (cmd == "home") {
      auto key = co::parse_hex(argv[3]);
      if (!key) {
        std::fprintf(stderr, "bad key %s\n", argv[3]);
        return 2;
      }
      std::printf("%s %llu\n", topo.home_of(*key).name.c_str(),
                  static_cast<unsigned long long>(co::slot_of(*key, topo.version_slots)));
      return 0;
    }
    co::ClientTuning tuning;
    tuning.op_timeout = std::chrono::milliseconds(1000);
    tuning.connect_timeout = std::chrono::milliseconds(1000);
    co::ClusterClient client(topo, topo.secret(), tuning,
                             tierce::fabric::stderr_sink("probe", tierce::fabric::LogLevel::Warn));
    if (cmd == "seq") {
      auto s = client.read_seq(argv[3]);
      if (!s) {
        std::fprintf(stderr, "cannot read the sequence of %s\n", argv[3]);
        return 1;
      }
      std::printf("%llu\n", static_cast<unsigned long long>(*s));
      return 0;
    }
    if (cmd == "version") {
      for (int i = 4; i < argc; ++i) {
        auto v = client.read_version(argv[3], std::strtoull(argv[i], nullptr, 10));
        if (!v) {
          std::fprintf(stderr, "cannot read slot %s of %s\n", argv[i], argv[3]);
          return 1;
        }
        std::printf("%llu\n", static_cast<unsigned long long>(*v));
      }
      return 0;
    }
    std::fprintf(stderr, "unknown command %s\n", cmd.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "appversion_probe: %s\n", e.what());
    return 1;
  }
}
