// agents/memd/writer_role.cc — the app node's writer agent (see writer_role.h).
#include "agents/memd/writer_role.h"

#include <sstream>

#include "coherence/client.h"
#include "coherence/key.h"
#include "coherence/layout.h"
#include "coherence/skip_keeper.h"
#include "coherence/topology.h"
#include "coherence/writer.h"

namespace tierce::memd {

WriterRole::WriterRole(fabric::Server& server, const std::string& node, const WriterConfig& cfg,
                       fabric::Secret secret, fabric::LogSink log)
    : server_(server), node_(node), log_(std::move(log)) {
  auto topo = coherence::Topology::load(cfg.topology);
  topo.require_app_nodes();
  const auto* me = topo.find(node_);
  if (!me || me->role != coherence::Role::App)
    throw coherence::TopologyError(
        cfg.topology + ": node " + node_ + (me ? " has role proxy" : " is not a node") +
        " ([memd] node must name an app node of the topology in [writer] topology)");
  std::vector<std::string> homes;
  for (const auto* a : topo.app_nodes()) homes.push_back(a->name);
  period_ = std::chrono::milliseconds(std::max<uint32_t>(topo.coherence.lease_ms / 4, 1));
  writer_ = std::make_unique<coherence::WriterLog>(me->segment_prefix + coherence::kWriterSuffix);
  coherence::ClientTuning t;
  t.op_timeout = period_;
  t.connect_timeout = period_;
  t.retry_after = std::chrono::milliseconds(0);
  client_ = std::make_unique<coherence::ClusterClient>(topo, std::move(secret), t, log_);
  keeper_ = std::make_unique<coherence::SkipMarkKeeper>(*writer_, *client_, homes, node_, log_);
  server_.export_region(coherence::kWriterRegion, writer_->segment());
  if (log_)
    log_(fabric::LogLevel::Info, "COH0223 writer agent of " + node_ + ": exports " +
                                     writer_->name() + " as region \"writer\" (incarnation " +
                                     coherence::to_hex(writer_->segment()->incarnation()) +
                                     ", issued " + std::to_string(writer_->last().number) + ")");
  thread_ = std::thread([this] { loop(); });
}

WriterRole::~WriterRole() {
  {
    std::lock_guard lk(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  try {
    server_.unexport_region(coherence::kWriterRegion);
  } catch (const std::exception&) {
  }
}

const std::string& WriterRole::segment_name() const {
  return writer_->name();
}

void WriterRole::loop() {
  for (;;) {
    try {
      if (writer_->remap_if_replaced()) {
        server_.export_region(coherence::kWriterRegion, writer_->segment());
        if (log_)
          log_(fabric::LogLevel::Warn, "COH0214 " + writer_->name() +
                                           " was removed or replaced behind the writer agent's "
                                           "back: mapped and exported anew (a new incarnation: "
                                           "homes catch up)");
      }
      std::lock_guard lk(mu_);
      keeper_->pass();
    } catch (const std::exception& e) {
      if (log_)
        log_(fabric::LogLevel::Warn, std::string("COH0222 skip-mark pass failed: ") + e.what());
    }
    std::unique_lock lk(stop_mu_);
    if (stop_cv_.wait_for(lk, period_, [&] { return stopping_; })) return;
  }
}

std::string WriterRole::status_text() const {
  std::lock_guard lk(mu_);
  auto seg = writer_->segment();
  auto r = writer_->reading(coherence::kMaxSkipHomes);
  auto k = keeper_->stats();
  std::ostringstream o;
  o << "segment " << writer_->name() << "\nincarnation " << coherence::to_hex(seg->incarnation())
    << "\nissued " << r.issued.number << "\ndigest " << coherence::to_hex(r.digest)
    << "\nskip_marks_held " << k.held << "\nskip_marks_cleared " << k.cleared << "\n";
  for (const auto& h : keeper_->held()) o << "skip_mark " << h << "\n";
  return o.str();
}

void WriterRole::metrics(base::Metrics& m) const {
  std::lock_guard lk(mu_);
  auto k = keeper_->stats();
  m.gauge("tierce_writer_issued", "The last invalidation number this node issued.",
          uint64_t(writer_->last().number));
  m.gauge("tierce_writer_skip_marks_held",
          "Homes marked in this node's writer region (its updates stop waiting for them).", k.held);
  m.counter("tierce_writer_skip_marks_cleared_total",
            "Skip marks lifted because the home answered again.", k.cleared);
}

}  // namespace tierce::memd
