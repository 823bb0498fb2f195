// php_ext/engine.cc — see engine.h.
#include "php_ext/engine.h"

#include <unistd.h>

#include <chrono>
#include <stdexcept>

#include "coherence/key.h"
#include "coherence/layout.h"
#include "coherence/writer.h"

namespace tierce::php {

namespace co = tierce::coherence;

Engine::Engine(const std::string& topology_path, const std::string& node,
               const std::string& agent_socket, const std::string& node_key)
    : node_(node), agent_path_(agent_socket) {
  try {
    topo_ = cluster::Topology::load(topology_path);
    topo_.require_app_nodes();
  } catch (const std::exception& e) {
    throw std::runtime_error("tierce.topology " + topology_path + ": " + e.what());
  }
  const cluster::NodeInfo* self = topo_.find(node);
  if (!self || self->role != cluster::Role::App)
    throw std::runtime_error("tierce.node " + node + ": " +
                             (self ? "has role proxy" : "is not a node") + " in " + topology_path +
                             "; name a [[node]] with role = \"app\"");
  if (!agent_path_.empty()) {
    if (self->writer.empty())
      throw std::runtime_error("tierce.agent " + agent_path_ + ": the topology " + topology_path +
                               " lists no writer agent for node " + node +
                               " (writer = [...] in its [[node]])");
    co::AgentTimeouts t;
    t.fence_bound = std::chrono::milliseconds(topo_.coherence.fence_bound_ms());
    agent_ = std::make_unique<co::AgentClient>(agent_path_, t);
    return;  // no secret, no counter: the agent numbers and sends
  }
  if (self->public_key && node_key.empty())
    throw std::runtime_error("the topology " + topology_path + " gives nodes keys: set tierce.agent "
                             "(recommended) or tierce.node_key");
  if (!node_key.empty()) {
    try {
      node_key_ = fabric::NodeKey::from_file(node_key);
    } catch (const std::exception& e) {
      throw std::runtime_error("tierce.node_key " + node_key + ": " + e.what());
    }
  }
  try {
    secret_ = topo_.secret();
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot read the cluster secret " + topo_.secret_file + ": " +
                             e.what() + " (it must exist, hold >= 16 bytes, mode 600)");
  }
  try {
    writer_ = std::make_unique<co::WriterLog>(self->segment_prefix + co::kWriterSuffix,
                                              topo_.coherence_digest());
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot map this node's invalidation counter " +
                             self->segment_prefix + co::kWriterSuffix + ": " + e.what());
  }
}

Engine::~Engine() = default;

co::ClusterClient& Engine::client() {
  // A client's connections belong to the process that made them: after fork, a new one.
  if (!client_ || client_pid_ != getpid()) {
    if (client_ && client_pid_ != getpid()) (void)client_.release();  // the parent's: not ours to close
    co::ClientTuning tuning;
    tuning.op_timeout = std::chrono::milliseconds(200);
    tuning.connect_timeout = std::chrono::milliseconds(200);
    client_ = std::make_unique<co::ClusterClient>(topo_, secret_, tuning, fabric::LogSink{});
    if (!node_key_.empty()) client_->sign_as(node_, node_key_);
    client_pid_ = getpid();
  }
  return *client_;
}

RoundResult Engine::round(const std::vector<std::string>& names, bool all,
                          const co::PendingMark& mark, std::chrono::milliseconds give_up_after) {
  RoundResult r;
  std::vector<uint64_t> deps;
  deps.reserve(names.size());
  for (const std::string& n : names) deps.push_back(co::dependency_hash(n));
  co::Scheme scheme = all || topo_.coherence.scheme == co::Scheme::InvalidateAll
                          ? co::Scheme::InvalidateAll
                          : co::Scheme::DependencyLists;
  if (scheme == co::Scheme::DependencyLists && deps.empty()) {
    r.sent = r.complete = true;  // nothing to do
    return r;
  }
  if (scheme == co::Scheme::InvalidateAll) deps.clear();
  if (agent_) {
    co::AgentInvalidation a = agent_->invalidate(deps, scheme, mark, give_up_after);
    r.micros = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(a.elapsed).count());
    switch (a.kind) {
      case co::AgentInvalidation::Kind::Answered:
        r.sent = true;
        r.complete = a.outcome.complete();
        r.gave_up = a.outcome.gave_up();
        for (const std::string& f : a.outcome.fenced) r.error += (r.error.empty() ? "" : "; ") + f;
        for (const std::string& f : a.outcome.gave_up_on) r.error += (r.error.empty() ? "" : "; ") + f;
        break;
      case co::AgentInvalidation::Kind::GaveUp:  // maybe numbered: a Pend that did not reach every home
        r.sent = true;
        r.gave_up = true;
        r.error = a.why;
        break;
      case co::AgentInvalidation::Kind::Lost:  // covered by the fence after the bound it waited
        r.sent = true;
        r.error = a.why;
        break;
      case co::AgentInvalidation::Kind::Stuck:
      case co::AgentInvalidation::Kind::Refused:
        r.error = a.why;
        break;
    }
    return r;
  }
  try {
    co::InvalidateOutcome o =
        client().invalidate(*writer_, node_, deps, scheme, mark, give_up_after);
    r.sent = true;
    r.complete = o.complete();
    r.gave_up = o.gave_up();
    r.micros = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(o.elapsed).count());
    for (const std::string& f : o.fenced) r.error += (r.error.empty() ? "" : "; ") + f;
    for (const std::string& f : o.gave_up_on) r.error += (r.error.empty() ? "" : "; ") + f;
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

RoundResult Engine::pend(const std::vector<std::string>& names, bool all, uint64_t token,
                         uint32_t ttl_ms, std::chrono::milliseconds timeout) {
  return round(names, all, co::PendingMark{co::MarkOp::Pend, token, ttl_ms}, timeout);
}

RoundResult Engine::release(const std::vector<std::string>& names, bool all, uint64_t token,
                            std::chrono::milliseconds give_up_after) {
  return round(names, all, co::PendingMark{co::MarkOp::Release, token, 0}, give_up_after);
}

RoundResult Engine::invalidate(const std::vector<std::string>& names, bool all) {
  return round(names, all, co::PendingMark{}, {});
}

}  // namespace tierce::php
