// fabric/verbs_transport.cc — the rdma-core backend's entry points.
//
//   verbs_probe          is there an RDMA device with an active port?
//   make_verbs_listener  in verbs_server.cc (the server side).
//   verbs_connect        a VerbsConnection (verbs_connection.h).
#include "fabric/verbs_transport.h"

#include <infiniband/verbs.h>

#include <cerrno>

#include "fabric/verbs_connection.h"
#include "fabric/verbs_resources.h"

namespace tierce::fabric {

// ---------------------------------------------------------------------------------------------
// Probe

namespace {

struct DeviceListDeleter {
  void operator()(ibv_device** l) const noexcept { ibv_free_device_list(l); }
};
struct ContextDeleter {
  void operator()(ibv_context* c) const noexcept { (void)ibv_close_device(c); }
};

}  // namespace

base::Result<std::string> verbs_probe() {
  std::string found;  // the active port, or why there is none
  auto say = [&](std::string s) { found = std::move(s); };
  int n = 0;
  errno = 0;
  std::unique_ptr<ibv_device*, DeviceListDeleter> list(ibv_get_device_list(&n));
  if (!list) {
    int e = errno;
    if (e == ENOSYS)
      say("no RDMA support in this kernel (ibv_get_device_list: ENOSYS; load ib_uverbs and the "
          "HCA's driver)");
    else
      say("ibv_get_device_list failed: " + verbs::err_text(e) +
          " (is /dev/infiniband accessible?)");
    return base::Status(base::Code::Unavailable, found);
  }
  if (n <= 0) {
    say("no RDMA device found (ibv_get_device_list returned an empty list; see `ibv_devices`)");
    return base::Status(base::Code::Unavailable, found);
  }
  std::string seen;
  for (int i = 0; i < n; ++i) {
    const char* nm = ibv_get_device_name(list.get()[i]);
    std::string name = nm ? nm : "?";
    errno = 0;
    std::unique_ptr<ibv_context, ContextDeleter> ctx(ibv_open_device(list.get()[i]));
    if (!ctx) {
      seen += name + ": cannot be opened (" + verbs::err_text(errno) + "); ";
      continue;
    }
    ibv_device_attr attr{};
    if (int rc = ibv_query_device(ctx.get(), &attr); rc != 0) {
      seen += name + ": cannot be queried (" + verbs::err_text(rc) + "); ";
      continue;
    }
    for (unsigned p = 1; p <= attr.phys_port_cnt; ++p) {
      ibv_port_attr pa{};
      if (int rc = ibv_query_port(ctx.get(), uint8_t(p), &pa); rc != 0) {
        seen += name + " port " + std::to_string(p) + ": cannot be queried (" +
                verbs::err_text(rc) + "); ";
        continue;
      }
      if (pa.state == IBV_PORT_ACTIVE) {
        say(name + " port " + std::to_string(p) + " is active (" +
            (pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand") + ")");
        return found;
      }
      seen += name + " port " + std::to_string(p) + ": " + ibv_port_state_str(pa.state) + "; ";
    }
  }
  if (seen.size() >= 2) seen.resize(seen.size() - 2);
  say("no active RDMA port (" + seen +
      "); check cables and, on InfiniBand, the subnet manager (`ibstat`)");
  return base::Status(base::Code::Unavailable, found);
}

// ---------------------------------------------------------------------------------------------
// Entry points

std::unique_ptr<Connection> verbs_connect(const Address& a, const ClientOptions& opts) {
  if (auto probe = verbs_probe(); !probe.ok())
    throw FabricError(Errc::NoDevice, "cannot connect to " + a.uri() + ": " + probe.message() +
                                          "; use tcp:// instead");
  return std::make_unique<verbs::VerbsConnection>(a, opts);
}

}  // namespace tierce::fabric
