// tests/support/topology.h — cluster topology files for tests that load one (module and agent
// configuration tests): the [cluster] head and [[node]] entries as TOML text.
#pragma once

#include <string>

namespace tierce_test {

// "[cluster]" with name "t", the secret file and the transport, then `rest` (e.g. a [coherence]
// section).
inline std::string topology_head(const std::string& secret_file, const std::string& transport = "tcp",
                                 const std::string& rest = "") {
  return "[cluster]\nname = \"t\"\nsecret_file = \"" + secret_file + "\"\ntransport = \"" +
         transport + "\"\n" + rest;
}

// One [[node]] with a tcp memd address on 127.0.0.1:`port` and segment prefix /tierce.t.NAME.
inline std::string topology_node(const std::string& name, const std::string& role, int port) {
  return "[[node]]\nname = \"" + name + "\"\nrole = \"" + role + "\"\nmemd = [\"tcp://127.0.0.1:" +
         std::to_string(port) + "\"]\nsegment_prefix = \"/tierce.t." + name + "\"\n";
}

}  // namespace tierce_test
