// coherence/client.cc — the client side of the app nodes (see client.h).
#include "coherence/client.h"

#include <array>
#include <map>
#include <stdexcept>
#include <thread>

#include "coherence/invalidation.h"
#include "coherence/key.h"
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
    if (n.role == Role::App && !n.writer.empty()) {
      auto w = std::make_unique<NodePool>();
      w->info = &n;
      w->uri = topo_.writer_uri_of(n);
      writer_nodes_.push_back(std::move(w));
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

std::optional<WriterReading> ClusterClient::read_writer(const std::string& name,
                                                        size_t home_index) {
  NodePool* np = &node(name);
  for (auto& w : writer_nodes_)
    if (w->info->name == name) np = w.get();
  NodePool& n = *np;
  auto c = borrow(n, ctx_);
  if (!c) return std::nullopt;
  Borrowed l(n, std::move(c), ctx_.tuning.retry_after);
  try {
    const auto& r = region(*l, RegionKind::Writer, ctx_);
    if (r.len < kWriterHeaderBytes) return std::nullopt;
    // The header, and our skip word when the region has one (a 64-byte region of an older
    // version has none).
    uint64_t want = kWriterHeaderBytes;
    if (home_index < kMaxSkipHomes && skip_offset(home_index) + 8 <= r.len)
      want = skip_offset(home_index) + 8;
    std::vector<uint64_t> w(want / 8);
    l->c->read(r, 0, w.data(), want);
    l.done();
    return parse_writer_reading(w.data(), w.size(), home_index);
  } catch (const std::exception& e) {
    if (ctx_.log)
      ctx_.log(fabric::LogLevel::Debug,
               "COH0106 writer counter of " + name + " not readable: " + std::string(e.what()));
    return std::nullopt;
  }
}

bool ClusterClient::home_answers(const std::string& home) {
  NodePool& n = node(home);
  auto c = borrow(n, ctx_, true);
  if (!c) return false;
  Borrowed l(n, std::move(c), ctx_.tuning.retry_after);
  try {
    const auto& r = region(*l, RegionKind::Acks, ctx_);
    uint64_t magic = 0;
    l->c->read(r, 0, &magic, 8);
    if (magic != kAcksMagic) return false;
    l.done();
    return true;
  } catch (const std::exception&) {
    return false;
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

bool ClusterClient::own_writer_exported(WriterLog& writer, const std::string& self) {
  const uint64_t mine = writer.segment()->incarnation();
  std::lock_guard lk(own_mu_);
  auto now = std::chrono::steady_clock::now();
  const bool fresh = own_incarnation_ == mine && now - own_checked_ < std::chrono::seconds(1);
  if (!fresh || own_state_ == OwnWriter::Unknown) {
    own_checked_ = now;
    own_incarnation_ = mine;
    auto r = read_writer(self);
    if (!r) {
      // Not readable now: keep a verdict taken on this segment before; none yet -> Unknown.
      if (own_state_ != OwnWriter::Exported) own_state_ = OwnWriter::Unknown;
    } else if (r->issued.incarnation != 0 && r->issued.incarnation != mine) {
      if (own_state_ != OwnWriter::Other && ctx_.log)
        ctx_.log(fabric::LogLevel::Error,
                 "COH0109 this process numbers its invalidations in " + writer.name() +
                     " (incarnation " + to_hex(mine) + "), but node " + self +
                     "'s writer region as the homes read it is another one (incarnation " +
                     to_hex(r->issued.incarnation) + "): a cloned node, or a host that is not " +
                     self +
                     " using its name? No home's fence covers these updates: each needs every "
                     "home's acknowledgement (COH0108 when one does not come)");
      own_state_ = OwnWriter::Other;
    } else {
      own_state_ = OwnWriter::Exported;
    }
  }
  return own_state_ == OwnWriter::Exported;
}

void ClusterClient::sign_as(const std::string& node, fabric::NodeKey key) {
  ctx_.sign_node = node;
  ctx_.sign_key = std::move(key);
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

  const auto apps = topo_.app_nodes();
  out.homes = apps.size();
  const auto bound = std::chrono::milliseconds(topo_.coherence.fence_bound_ms());
  // Numbered before anything is sent (and before the skip marks are read): from now on no home
  // can renew its fence without holding this invalidation, so after the bound an unconfirmed home
  // is fenced; and a mark read below as set is cleared, if ever, after this number was issued.
  // The idle pooled connections are taken first (connect() never connects): a number is then
  // usually in flight for microseconds only.
  std::vector<NodePool*> pools;
  for (const NodeInfo* a : apps) pools.push_back(&node(a->name));
  std::vector<std::unique_ptr<NodePool::Conn>> idle(pools.size());
  for (size_t i = 0; i < pools.size(); ++i) idle[i] = borrow_idle(*pools[i]);
  const bool covered = own_writer_exported(writer, self);
  out.number = writer.issue();
  const auto numbered = Clock::now();
  const uint64_t now_ns = fabric::monotonic_ns();
  const uint64_t bound_ns = uint64_t(std::chrono::nanoseconds(bound).count());
  std::vector<NodePool*> homes;
  std::map<const NodePool*, size_t> index;
  for (size_t i = 0; i < pools.size(); ++i) {
    uint64_t m = writer.skip_word(i);
    if (covered && skip_state(m) == SkipState::Since && now_ns >= m + bound_ns) {
      // Marked since the bound or longer: this home vouches for nothing until the mark is
      // cleared, and it must hold this number before it vouches again.
      out.skipped.push_back(pools[i]->info->name);
      if (idle[i]) Borrowed(*pools[i], std::move(idle[i]), ctx_.tuning.retry_after).done();
      continue;
    }
    index[pools[i]] = i;
    homes.push_back(pools[i]);
  }
  InvalidationRound round(homes, ctx_, std::move(req));
  if (!covered) round.require_acks();
  for (size_t i = 0; i < pools.size(); ++i)
    if (idle[i]) round.adopt(*pools[i], std::move(idle[i]));
  const auto fence_at = numbered + bound;
  // Giving up early (a Pend whose COMMIT is then not sent): the rounds end at stop_at, not at the
  // bound; such a round marks nothing (it may end before half the bound).
  const bool may_give_up = give_up_after.count() > 0 && numbered + give_up_after < fence_at;
  const auto stop_at = may_give_up ? numbered + give_up_after : fence_at;
  round.number(out.number, stop_at);
  if (!may_give_up)
    round.at_checkpoint(numbered + bound / 2, [&](NodePool& p) {
      size_t i = index.at(&p);
      uint64_t before = writer.skip_word(i);
      uint64_t m = writer.mark_skip(i);
      if (m != 0 && before == 0) {
        out.marked.push_back(p.info->name);
        if (ctx_.log)
          ctx_.log(fabric::LogLevel::Warn,
                   "COH0107 home " + p.info->name + " did not acknowledge invalidation " +
                       std::to_string(out.number.number) + " of " + self + " within " +
                       std::to_string(bound.count() / 2) +
                       " ms: marked in the writer region; from one fence bound on, updates of this "
                       "node stop waiting for it (it cannot vouch until the node's writer agent "
                       "clears the mark, once it answers again)");
      }
    });
  const bool settled = round.run();
  out.acked = round.acked();
  if (!settled && may_give_up) {
    out.gave_up_on = round.unsettled_homes();
    for (auto& h : round.unsettled_homes(true)) out.gave_up_on.push_back(h);
    out.rounds = round.rounds();
    out.elapsed = Clock::now() - t0;
    return out;
  }
  // Never earlier than the bound: the homes not confirmed may still vouch until then.
  if (!settled) std::this_thread::sleep_until(fence_at);
  out.fenced = round.unsettled_homes();
  out.unconfirmed = round.unsettled_homes(true);
  if (!out.unconfirmed.empty() && ctx_.log) {
    std::string list;
    for (const auto& u : out.unconfirmed) list += (list.empty() ? "" : ", ") + u;
    ctx_.log(fabric::LogLevel::Error,
             "COH0108 invalidation " + std::to_string(out.number.number) + " of " + self +
                 " is not confirmed at " + list +
                 ": a home of another topology did not acknowledge it within the bound, and its "
                 "fence may not cover this node; its pages may be stale until it is restarted with "
                 "this topology or RCacheMaxAge (docs/coherence.md \"Changing the topology\")");
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
