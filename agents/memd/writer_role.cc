// agents/memd/writer_role.cc — the app node's writer agent (see writer_role.h).
#include "agents/memd/writer_role.h"

#include <sstream>

#include "agents/memd/agent_socket.h"
#include "base/unix_socket.h"
#include "coherence/agent_wire.h"

#include "coherence/client.h"
#include "coherence/key.h"
#include "coherence/layout.h"
#include "coherence/skip_keeper.h"
#include "coherence/topology.h"
#include "coherence/writer.h"

namespace tierce::memd {

WriterRole::WriterRole(fabric::Server& server, const std::string& node, const WriterConfig& cfg,
                       fabric::Secret secret, fabric::LogSink log, fabric::NodeKey key)
    : server_(server), node_(node), log_(std::move(log)) {
  topo_ = std::make_unique<coherence::Topology>(coherence::Topology::load(cfg.topology));
  const coherence::Topology& topo = *topo_;
  topo.require_app_nodes();
  const auto* me = topo.find(node_);
  if (!me || me->role != coherence::Role::App)
    throw coherence::TopologyError(
        cfg.topology + ": node " + node_ + (me ? " has role proxy" : " is not a node") +
        " ([memd] node must name an app node of the topology in [writer] topology)");
  const bool agent = !cfg.socket.empty();
  if (agent && me->writer.empty())
    throw coherence::TopologyError(
        cfg.topology + ": [writer] socket needs the topology to list node " + node_ +
        "'s writer agent (writer = [\"tcp://...\"] in its [[node]]): the homes must read its "
        "counter here, so that they stop vouching while the agent that numbers for the httpd "
        "children is gone");
  std::vector<std::string> homes;
  for (const auto* a : topo.app_nodes()) homes.push_back(a->name);
  period_ = std::chrono::milliseconds(std::max<uint32_t>(topo.coherence.lease_ms / 4, 1));
  // With the agent socket this process numbers: the digest goes with its numbers.
  writer_ = std::make_unique<coherence::WriterLog>(me->segment_prefix + coherence::kWriterSuffix,
                                                   agent ? topo.coherence_digest() : 0);
  coherence::ClientTuning t;
  t.op_timeout = period_;
  t.connect_timeout = period_;
  t.retry_after = std::chrono::milliseconds(0);
  client_ = std::make_unique<coherence::ClusterClient>(topo, secret, t, log_);
  keeper_ = std::make_unique<coherence::SkipMarkKeeper>(*writer_, *client_, homes, node_, log_);
  writer_->set_agent_numbering(agent);
  if (agent) {
    coherence::ClientTuning at;  // as mod_appversion's own client had (AppVersionOpTimeout)
    at.op_timeout = std::chrono::milliseconds(200);
    at.connect_timeout = std::chrono::milliseconds(200);
    at.max_connections_per_node = 64;  // every httpd child of the node shares these
    agent_client_ = std::make_unique<coherence::ClusterClient>(topo, std::move(secret), at, log_);
    if (me->public_key && key.empty())
      throw coherence::TopologyError(
          cfg.topology + ": [writer] socket in a keyed cluster needs [memd] node_key: the homes "
                         "take registrations and invalidations only from a node that signs");
    if (!key.empty()) agent_client_->sign_as(node_, key);
    number_bare("before exporting the counter: an invalidation queued in a previous agent's "
                "socket may be lost");
  }
  server_.export_region(coherence::kWriterRegion, writer_->segment());
  if (log_)
    log_(fabric::LogLevel::Info, "COH0223 writer agent of " + node_ + ": exports " +
                                     writer_->name() + " as region \"writer\" (incarnation " +
                                     coherence::to_hex(writer_->segment()->incarnation()) +
                                     ", issued " + std::to_string(writer_->last().number) + ")");
  if (agent) {
    AgentSocketOptions so;
    so.path = cfg.socket;
    so.mode = mode_t(cfg.socket_mode);
    so.max_clients = cfg.max_clients;
    if (!cfg.socket_group.empty()) {
      auto g = base::lookup_group(cfg.socket_group);
      if (!g) throw std::runtime_error("MEMD0160 [writer] socket_group: " + g.message());
      so.group = *g;
    }
    socket_ = std::make_unique<AgentSocket>(
        so, [this](const coherence::agentwire::Request& q) { return handle(q); },
        [this] { number_bare("a connection of the agent socket closed unread"); }, log_);
    if (log_)
      log_(fabric::LogLevel::Info,
           "MEMD0165 agent socket " + cfg.socket + " (mode " + std::to_string(cfg.socket_mode >> 6) +
               std::to_string((cfg.socket_mode >> 3) & 7) + std::to_string(cfg.socket_mode & 7) +
               (cfg.socket_group.empty() ? "" : ", group " + cfg.socket_group) +
               "): the node's httpd children read, register and invalidate through it");
  }
  thread_ = std::thread([this] { loop(); });
}

void WriterRole::number_bare(const std::string& why) {
  coherence::IssuedNumber n = writer_->issue();
  if (log_)
    log_(fabric::LogLevel::Warn, "COH0246 writer agent of " + node_ + ": numbered #" +
                                     std::to_string(n.number) + " bare (never sent), " + why +
                                     ": every home catches up on it before it vouches again (a "
                                     "flush of its pages, never a stale one)");
}

std::string WriterRole::socket_path() const { return socket_ ? socket_->path() : std::string(); }

coherence::agentwire::Reply WriterRole::handle(const coherence::agentwire::Request& q) {
  namespace aw = coherence::agentwire;
  aw::Reply r;
  r.op = q.op;
  r.id = q.id;
  try {
    switch (q.op) {
      case aw::Op::ReadSeq: {
        const auto& home = topo_->home_of(q.key);
        if (auto seq = agent_client_->read_seq(home.name)) {
          r.seq = *seq;
        } else {
          r.status = aw::Status::Unavailable;
          r.message = "cannot read the invalidation sequence of home " + home.name;
        }
        return r;
      }
      case aw::Op::Register: {
        const auto& home = topo_->home_of(q.key);  // the agent picks the home, not the caller
        r.registered = agent_client_->register_page(home.name, q.key, q.seq_start, q.deps);
        return r;
      }
      case aw::Op::Invalidate: {
        coherence::Scheme scheme = topo_->coherence.scheme == coherence::Scheme::InvalidateAll
                                       ? coherence::Scheme::InvalidateAll
                                       : q.scheme;
        r.outcome = agent_client_->invalidate(*writer_, node_, q.deps, scheme, q.mark,
                                              std::chrono::milliseconds(q.give_up_after_ms));
        return r;
      }
    }
  } catch (const std::exception& e) {
    r.status = aw::Status::Unavailable;
    r.message = e.what();
    if (q.op == aw::Op::Invalidate) {
      // Not numbered, maybe: a bare number covers it (the caller waits the fence bound).
      number_bare(std::string("an invalidation of the agent socket failed (") + e.what() + ")");
      r.message += "; numbered bare instead: the homes catch up";
    }
  }
  return r;
}

WriterRole::~WriterRole() {
  socket_.reset();  // first: its requests need the counter exported (own_writer_exported)
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
  if (socket_) o << socket_->status_text();
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
  if (socket_) socket_->metrics(m);
}

}  // namespace tierce::memd
