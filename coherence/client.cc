// coherence/client.cc — the client side of the app nodes (see client.h).
#include "coherence/client.h"

#include <array>
#include <stdexcept>
#include <thread>

#include "coherence/invalidation.h"
#include "coherence/layout.h"
#include "coherence/protocol.h"

namespace tierce::coherence {

ClusterClient::ClusterClient(Topology topo, fabric::Secret secret, ClientTuning tuning,
                             fabric::LogSink log)
    : topo_(std::move(topo)) {
  ctx_.secret = std::move(secret);
  ctx_.tuning = tuning;
  ctx_.log = std::move(log);
  ctx_.digest = topo_.coherence_digest();
  ctx_.clock_skew = fabric::Millis(topo_.coherence.clock_skew_ms);
  for (const auto& n : topo_.nodes) {
    auto node = std::make_unique<NodePool>();
    node->info = &n;
    if (n.role == Role::App) {
      node->uri = topo_.uri_of(n);  // throws when it has none
    } else if (n.role == Role::Proxy && !n.memd.empty()) {
      node->uri = topo_.uri_of(n);  // the cooperative cache reads its directory and arena
    }
    nodes_.push_back(std::move(node));
  }
}

ClusterClient::~ClusterClient() = default;

NodePool& ClusterClient::node(const std::string& name) {
  for (auto& n : nodes_)
    if (n->info->name == name) return *n;
  throw TopologyError("no node named \"" + name + "\" in " + topo_.path);
}

std::optional<uint64_t> ClusterClient::read_word(NodePool& n, RegionKind kind, uint64_t off) {
  auto c = borrow(n, ctx_);
  if (!c) return std::nullopt;
  Borrowed l(n, std::move(c), ctx_.tuning.retry_after);
  try {
    const auto& r = region(*l, kind, ctx_);
    if (off + 8 > r.len) return std::nullopt;
    uint64_t v = 0;
    l->c->read(r, off, &v, 8);
    l.done();
    return v;
  } catch (const fabric::FabricError& e) {
    if (ctx_.log)
      ctx_.log(e.code() == fabric::Errc::Fenced ? fabric::LogLevel::Info : fabric::LogLevel::Debug,
               "COH0102 read at " + n.info->name + " failed: " + std::string(e.what()));
    return std::nullopt;
  } catch (const std::exception& e) {
    if (ctx_.log)
      ctx_.log(fabric::LogLevel::Debug,
               "COH0102 read at " + n.info->name + " failed: " + std::string(e.what()));
    return std::nullopt;
  }
}

std::optional<uint64_t> ClusterClient::read_version(const std::string& home, uint64_t slot) {
  if (slot >= topo_.version_slots) return std::nullopt;
  return read_word(node(home), RegionKind::Versions, slot_offset(slot));
}

std::optional<uint64_t> ClusterClient::read_seq(const std::string& home) {
  return read_word(node(home), RegionKind::Versions, kSeqOffset);
}

std::optional<IssuedNumber> ClusterClient::read_writer(const std::string& name) {
  NodePool& n = node(name);
  auto c = borrow(n, ctx_);
  if (!c) return std::nullopt;
  Borrowed l(n, std::move(c), ctx_.tuning.retry_after);
  try {
    const auto& r = region(*l, RegionKind::Writer, ctx_);
    if (r.len < kWriterBytes) return std::nullopt;
    uint64_t w[3] = {};
    l->c->read(r, 0, w, sizeof w);
    l.done();
    if (w[0] != kWriterMagic) return IssuedNumber{};  // not initialised: nothing issued yet
    return IssuedNumber{w[kWriterIncarnationOffset / 8], w[kWriterIssuedOffset / 8]};
  } catch (const std::exception& e) {
    if (ctx_.log)
      ctx_.log(fabric::LogLevel::Debug,
               "COH0106 writer counter of " + name + " not readable: " + std::string(e.what()));
    return std::nullopt;
  }
}

RegisterResult ClusterClient::register_page(const std::string& home, uint64_t key,
                                            uint64_t seq_start, std::span<const uint64_t> deps) {
  RegisterResult res;
  NodePool& n = node(home);
  auto c = borrow(n, ctx_);
  if (!c) {
    res.reason = "home " + home + " unreachable";
    return res;
  }
  Borrowed l(n, std::move(c), ctx_.tuning.retry_after);
  try {
    RegisterRequest req{ctx_.digest, key, seq_start, {deps.begin(), deps.end()}};
    auto reply = l->c->call(kRegisterService, encode(req));
    res = decode_register_reply(reply);
    l.done();
  } catch (const std::exception& e) {
    res = RegisterResult{};
    res.reason = "register at " + home + " failed: " + e.what();
  }
  return res;
}

InvalidateOutcome ClusterClient::invalidate(WriterLog& writer, const std::string& self,
                                            std::span<const uint64_t> deps, Scheme scheme,
                                            const PendingMark& mark,
                                            std::chrono::milliseconds give_up_after) {
  using Clock = InvalidationRound::Clock;
  if (give_up_after.count() > 0 && mark.op == MarkOp::None)
    throw std::invalid_argument(
        "ClusterClient::invalidate: give_up_after is only for pending marks (a plain "
        "invalidation returns when every home acknowledged or after the fence bound)");
  const NodeInfo& origin = topo_.node(self);
  if (origin.role != Role::App)
    throw TopologyError(topo_.path + ": node " + self + " is not an app node: it cannot write");
  auto t0 = Clock::now();
  InvalidateOutcome out;
  InvalidateRequest req;
  req.digest = ctx_.digest;
  req.scheme = scheme;
  req.origin = self;
  if (scheme == Scheme::DependencyLists) req.deps.assign(deps.begin(), deps.end());
  req.mark = mark;  // in every round: a home applies the number (and its mark) once

  std::vector<NodePool*> homes;
  for (const NodeInfo* a : topo_.app_nodes()) homes.push_back(&node(a->name));
  out.homes = homes.size();
  InvalidationRound round(homes, ctx_, std::move(req));
  round.connect();
  // Numbered before anything is sent: from now on no home can renew its fence without holding
  // this invalidation, so after the bound an unconfirmed home is fenced.
  out.number = writer.issue();
  const auto fence_at = Clock::now() + std::chrono::milliseconds(topo_.coherence.fence_bound_ms());
  // Giving up early: the rounds (their sends, connects and reads) end at stop_at, not at the bound.
  const bool may_give_up = give_up_after.count() > 0 && Clock::now() + give_up_after < fence_at;
  const auto stop_at = may_give_up ? Clock::now() + give_up_after : fence_at;
  round.number(out.number, stop_at);
  bool settled = round.run();
  out.acked = round.acked();
  if (!settled && may_give_up) {
    out.gave_up_on = round.unsettled_homes();
  } else {
    // Never earlier than the bound: the homes not confirmed may still vouch until then.
    if (!settled) std::this_thread::sleep_until(fence_at);
    out.fenced = round.unsettled_homes();
  }
  out.rounds = round.rounds();
  out.elapsed = Clock::now() - t0;
  return out;
}

namespace {

// A failure of a cooperative-cache operation that concerns the region or the service, not the
// connection (the proxy's arena not exported yet or re-created, no [coop] there): the connection
// stays in the pool and the node is not marked down; the descriptors are looked up again next time.
bool region_level(const std::exception& e) {
  auto* f = dynamic_cast<const fabric::FabricError*>(&e);
  if (!f) return false;
  switch (f->code()) {
    case fabric::Errc::NoSuchRegion:
    case fabric::Errc::Revoked:
    case fabric::Errc::BadKey:
    case fabric::Errc::OutOfBounds:
    case fabric::Errc::NoSuchService:
    case fabric::Errc::HandlerFailed:
    case fabric::Errc::Fenced:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::unique_ptr<NodePool::Conn> ClusterClient::borrow_peer(NodePool& n) {
  if (n.uri.empty()) {
    if (ctx_.log)
      ctx_.log(fabric::LogLevel::Debug, "COH0113 node " + n.info->name +
                                            " has no memd address in the topology: its cache "
                                            "cannot be shared (give it memd = [...])");
    return nullptr;
  }
  return borrow(n, ctx_);
}

// One cooperative-cache operation on `name`'s memd: `op` runs on a borrowed connection and
// returns an optional (nullopt: the connection is fine, the operation has no result, e.g. a
// descriptor out of bounds). A failure is logged as `what`, and nullopt; one that concerns the
// regions or the service, not the connection (region_level), keeps the connection and drops
// its cooperative-cache descriptors, which are looked up again next time.
template <class Op>
auto ClusterClient::on_peer(const std::string& name, const char* what, Op op)
    -> decltype(op(std::declval<NodePool::Conn&>())) {
  NodePool& n = node(name);
  auto c = borrow_peer(n);
  if (!c) return std::nullopt;
  Borrowed l(n, std::move(c), ctx_.tuning.retry_after);
  try {
    auto r = op(*l);
    l.done();
    return r;
  } catch (const std::exception& e) {
    if (region_level(e)) {
      l->coop_dir.reset();
      l->arena.reset();
      l->pool.reset();
      l.done();
    }
    if (ctx_.log)
      ctx_.log(fabric::LogLevel::Debug,
               std::string(what) + " " + name + " failed: " + std::string(e.what()));
    return std::nullopt;
  }
}

std::optional<DirReadResult> ClusterClient::read_coop_entry(const std::string& proxy,
                                                            uint64_t key_hash,
                                                            uint64_t key_check) {
  return on_peer(proxy, "COH0110 directory read at",
                 [&](NodePool::Conn& c) -> std::optional<DirReadResult> {
                   const auto& r = region(c, RegionKind::CoopDir, ctx_);
                   const DirectoryGeometry& g = c.coop_geometry;
                   std::array<uint8_t, kDirBucketSize> bucket;
                   DirReadResult res;
                   for (int attempt = 0; attempt < 2; ++attempt) {
                     c.c->read(r, g.bucket_offset(key_hash), bucket.data(), bucket.size());
                     res = read_entry(g, bucket, key_hash, key_check);
                     auto* m = std::get_if<DirMiss>(&res);
                     if (!m ||
                         (m->reason != DirMissReason::Torn && m->reason != DirMissReason::Checksum))
                       break;
                   }
                   return res;
                 });
}

std::optional<std::vector<uint8_t>> ClusterClient::read_arena(const std::string& proxy,
                                                              uint64_t offset, uint64_t bytes) {
  return read_bytes(proxy, RegionKind::Arena, offset, bytes);
}

std::optional<std::vector<uint8_t>> ClusterClient::read_pool(const std::string& node,
                                                             uint64_t offset, uint64_t bytes) {
  return read_bytes(node, RegionKind::Pool, offset, bytes);
}

std::optional<std::vector<uint8_t>> ClusterClient::read_bytes(const std::string& name,
                                                              RegionKind kind, uint64_t offset,
                                                              uint64_t bytes) {
  return on_peer(name, kind == RegionKind::Pool ? "COH0111 pool read at" : "COH0111 arena read at",
                 [&](NodePool::Conn& c) -> std::optional<std::vector<uint8_t>> {
                   const auto& r = region(c, kind, ctx_);
                   if (bytes == 0 || offset > r.len || bytes > r.len - offset ||
                       bytes > c.c->capabilities().max_transfer)
                     return std::nullopt;  // the connection is fine: the descriptor is not
                   std::vector<uint8_t> out(bytes);
                   c.c->read(r, offset, out.data(), out.size());
                   return out;
                 });
}

bool ClusterClient::write_pool(const std::string& name, uint64_t offset,
                               std::span<const uint8_t> bytes) {
  auto ok = on_peer(name, "COH0114 pool write at", [&](NodePool::Conn& c) -> std::optional<bool> {
    const auto& r = region(c, RegionKind::Pool, ctx_);
    if (bytes.empty() || offset > r.len || bytes.size() > r.len - offset ||
        bytes.size() > c.c->capabilities().max_transfer)
      return std::nullopt;
    c.c->write(r, offset, bytes.data(), bytes.size());
    return true;
  });
  return ok.value_or(false);
}

std::optional<dirwire::Reply> ClusterClient::coop_update(const std::string& proxy,
                                                         const dirwire::Message& m) {
  return on_peer(proxy, "COH0112 directory update at",
                 [&](NodePool::Conn& c) -> std::optional<dirwire::Reply> {
                   return dirwire::decode_reply(
                       c.c->call(dirwire::kUpdateService, dirwire::encode(m)));
                 });
}

bool ClusterClient::coop_notify(const std::string& proxy, const dirwire::Message& m) {
  auto sent = on_peer(proxy, "COH0112 directory update (one-way) to",
                      [&](NodePool::Conn& c) -> std::optional<bool> {
                        c.c->send(dirwire::kUpdateService, dirwire::encode(m));
                        return true;
                      });
  return sent.value_or(false);
}

}  // namespace tierce::coherence
