// coherence/home_service.cc — the home role inside an app node's memd (see home_service.h).
#include "coherence/home_service.h"

#include <algorithm>
#include <sstream>
#include <thread>

#include "coherence/layout.h"
#include "coherence/protocol.h"

namespace tierce::coherence {

// A new incarnation must not acknowledge an invalidation while proxies can still validate pages
// against its predecessor's version table: after a crash (SIGKILL) that segment stays mapped by
// shm peers, and they read it until the lease the dead memd last renewed runs out. Otherwise a
// writer's invalidation, acknowledged here, could complete while a proxy still serves a page
// the old table vouches for. A clean stop revokes and unlinks the segments: nothing to wait for.
void HomeService::await_predecessor_lease(std::initializer_list<std::string> names) {
  uint64_t until = 0;
  for (const auto& name : names) {
    try {
      auto old = fabric::SharedSegment::open(name);
      if (old.live()) until = std::max(until, old.header()->lease_deadline_ns.load());
    } catch (const std::exception&) {
      // none (or not ours): nothing can be read from it
    }
  }
  uint64_t now = fabric::monotonic_ns();
  if (until <= now) return;
  constexpr uint64_t kMaxWaitNs = 60'000'000'000ull;  // a lease is never configured this long
  uint64_t wait = std::min(until - now, kMaxWaitNs);
  if (log_)
    log_(fabric::LogLevel::Info,
         "COH0205 home " + node_ + ": the previous incarnation's lease is still valid for " +
             std::to_string(wait / 1'000'000) +
             " ms (it did not stop cleanly); waiting it out before serving, so that no proxy "
             "validates a page against its version table after this one acknowledges");
  std::this_thread::sleep_for(std::chrono::nanoseconds(wait));
}

HomeService::HomeService(fabric::Server& server, Topology topo, std::string node,
                         fabric::Secret secret, HomeServiceOptions opts, fabric::LogSink log)
    : server_(server),
      topo_(std::move(topo)),
      node_(std::move(node)),
      secret_(std::move(secret)),
      opts_(opts),
      log_(std::move(log)) {
  const NodeInfo& me = topo_.node(node_);
  if (me.role != Role::App)
    throw TopologyError(topo_.path + ": node " + node_ +
                        " has role proxy: only app nodes are homes (remove [coherence] from this "
                        "memd's config, or make the node an app node)");
  await_predecessor_lease({me.segment_prefix + ".versions", me.segment_prefix + ".acks"});
  versions_ = std::make_shared<fabric::SharedSegment>(fabric::SharedSegment::create(
      me.segment_prefix + ".versions", versions_bytes(topo_.version_slots)));
  acks_ = std::make_shared<fabric::SharedSegment>(
      fabric::SharedSegment::create(me.segment_prefix + ".acks", acks_bytes(opts_.ack_slots)));
  word_at(acks_->data(), 0).store(kAcksMagic);
  word_at(acks_->data(), 8).store(opts_.ack_slots);
  state_ = std::make_unique<HomeState>(versions_->data(), topo_.version_slots, opts_.limits, true);
  ClientTuning t;
  t.op_timeout = opts_.ack_op_timeout;
  t.connect_timeout = opts_.ack_op_timeout;
  peers_ = std::make_unique<ClusterClient>(topo_, secret_, t, log_);
  server_.export_region(kVersionsRegion, versions_);
  server_.export_region(kAcksRegion, acks_);
  server_.on_call(kRegisterService, [this](const fabric::PeerInfo&, std::span<const uint8_t> b) {
    return on_register(b);
  });
  server_.on_call(kInvalidateService,
                  [this](const fabric::PeerInfo&, std::span<const uint8_t> b) {
                    on_invalidate(b);
                    return std::vector<uint8_t>{};
                  });
  server_.on_call(kStatusService, [this](const fabric::PeerInfo&, std::span<const uint8_t>) {
    std::string s = status_text();
    return std::vector<uint8_t>(s.begin(), s.end());
  });
  if (log_)
    log_(fabric::LogLevel::Info,
         "COH0201 home " + node_ + ": version table " + me.segment_prefix + ".versions (" +
             std::to_string(topo_.version_slots) + " slots, new incarnation), ack counters " +
             me.segment_prefix + ".acks (" + std::to_string(opts_.ack_slots) + ")");
}

HomeService::~HomeService() {
  for (const char* r : {kVersionsRegion, kAcksRegion}) {
    try {
      server_.unexport_region(r);
    } catch (const std::exception&) {
    }
  }
  for (auto& s : {versions_, acks_}) {
    s->revoke();
    fabric::SharedSegment::unlink(s->name());
  }
}

std::vector<uint8_t> HomeService::on_register(std::span<const uint8_t> body) {
  RegisterResult res;
  try {
    auto req = decode_register(body);
    res = state_->register_page(req.key, req.slot, req.seq_start, req.deps);
  } catch (const ProtocolError& e) {
    bad_messages_.fetch_add(1, std::memory_order_relaxed);
    res.reason = e.what();
  }
  return encode(res);
}

void HomeService::on_invalidate(std::span<const uint8_t> body) {
  InvalidateRequest req;
  try {
    req = decode_invalidate(body);
  } catch (const ProtocolError& e) {
    bad_messages_.fetch_add(1, std::memory_order_relaxed);
    if (log_) log_(fabric::LogLevel::Warn, std::string("COH0202 bad invalidation: ") + e.what());
    return;
  }
  // Versions first, ack second: the origin's response may leave once every home acked.
  state_->invalidate(req.deps, req.scheme);
  ack(req.origin, req.ack_slot);
}

void HomeService::ack(const std::string& origin, uint32_t slot) {
  if (origin == node_) {  // our own counters: a local CPU atomic on the same word
    if (slot < opts_.ack_slots) {
      word_at(acks_->data(), ack_counter_offset(slot)).fetch_add(1, std::memory_order_acq_rel);
      acks_sent_.fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  const NodeInfo* o = topo_.find(origin);
  if (!o || o->role != Role::App) {
    ack_failures_.fetch_add(1, std::memory_order_relaxed);
    if (log_)
      log_(fabric::LogLevel::Warn, "COH0203 invalidation from unknown node \"" + origin +
                                       "\" applied but not acknowledged (topologies differ?)");
    return;
  }
  try {
    peers_->acknowledge(origin, slot);
    acks_sent_.fetch_add(1, std::memory_order_relaxed);
  } catch (const std::exception& e) {
    ack_failures_.fetch_add(1, std::memory_order_relaxed);
    if (log_)
      log_(fabric::LogLevel::Warn,
           "COH0204 cannot acknowledge an invalidation to " + origin + ": " + e.what());
  }
}

uint64_t HomeService::acks_sent() const { return acks_sent_.load(); }
uint64_t HomeService::ack_failures() const { return ack_failures_.load(); }

std::string HomeService::status_text() const {
  HomeStats s = state_->stats();
  std::ostringstream o;
  o << "node " << node_ << "\nincarnation " << versions_->incarnation() << "\nseq "
    << state_->seq() << "\nslots " << state_->slots() << "\nkeys " << s.keys
    << "\ndependencies " << s.dependencies << "\nregistrations " << s.registrations
    << "\nrefused_race " << s.refused_race << "\nrefused_log " << s.refused_log
    << "\ninvalidations " << s.invalidations << "\nkeys_bumped " << s.keys_bumped
    << "\nslots_bumped " << s.slots_bumped << "\nevictions " << s.evictions << "\nacks_sent "
    << acks_sent_.load() << "\nack_failures " << ack_failures_.load() << "\nbad_messages "
    << bad_messages_.load() << "\n";
  return o.str();
}

}  // namespace tierce::coherence
