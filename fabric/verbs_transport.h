// fabric/verbs_transport.h — the rdma-core backend (internal entry points).
// RC queue pairs set up through rdma_cm; one-sided ops are real RDMA READ/WRITE/atomics on
// registered memory; HELLO/AUTH/LOOKUP/CALL travel as SEND/RECV carrying wire.h frames.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "fabric/fabric.h"
#include "fabric/listener.h"
#include "fabric/stream_transport.h"

namespace tierce::fabric {

// The active port ibv_get_device_list finds ("mlx5_0 port 1 is active (RoCE)"), or why there is
// none (Unavailable). Note: it returns NULL (errno ENOSYS) on a kernel without RDMA support, which
// is "no device", not an error.
base::Result<std::string> verbs_probe();

// Throws FabricError{NoDevice} when there is no device.
std::unique_ptr<Listener> make_verbs_listener(const Address& a, ServeContext ctx);
std::unique_ptr<Connection> verbs_connect(const Address& a, const ClientOptions& opts);

}  // namespace tierce::fabric
