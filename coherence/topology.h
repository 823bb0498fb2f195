// coherence/topology.h — the cluster topology (cluster/topology.h) under the names the coherence
// floor and the Apache modules use.
#pragma once
#include "cluster/topology.h"

namespace tierce::coherence {
using cluster::NodeInfo;
using cluster::Role;
using cluster::Topology;
using cluster::TopologyError;
}  // namespace tierce::coherence
