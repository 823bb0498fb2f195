// coherence/pool.cc — per-node connection pools (see pool.h).
#include "base/status.h"
#include "coherence/pool.h"

#include <array>

#include "cluster/hash.h"
#include "coherence/coop_directory_wire.h"
#include "coherence/slab_pool_wire.h"
#include "coherence/key.h"
#include "coherence/layout.h"

namespace tierce::coherence {

Borrowed::~Borrowed() {
  std::lock_guard lk(n_.mu);
  if (ok_) {
    n_.idle.push_back(std::move(c_));
    n_.down_until = {};  // it answered: back in service (e.g. reached again over a fresh one)
  } else {
    --n_.total;
    n_.down_until = NodePool::Clock::now() + retry_after_;
  }
  n_.cv.notify_one();
}

namespace {

// Connects to `n` for a slot the caller already counted in n.total; on failure gives the slot
// back, marks the node down for retry_after and says why (Unavailable).
base::Result<std::unique_ptr<NodePool::Conn>> connect_counted(NodePool& n, const PoolContext& ctx) {
  try {
    fabric::ClientOptions o;
    o.secret = ctx.secret;
    o.connect_timeout = ctx.tuning.connect_timeout;
    o.op_timeout = ctx.tuning.op_timeout;
    o.clock_skew = ctx.clock_skew;
    if (n.info) o.identity = cluster::expect(*n.info);  // its memd or writer agent must prove it
    if (!ctx.sign_node.empty()) {  // and we prove ours: a member, not a reader
      o.identity.node = ctx.sign_node;
      o.identity.key = ctx.sign_key;
    }
    auto c = std::make_unique<NodePool::Conn>();
    if (n.info) c->node = n.info->name;
    c->c = fabric::connect(n.uri, o);
    return c;
  } catch (const std::exception& e) {
    std::lock_guard lk(n.mu);
    --n.total;
    n.down_until = NodePool::Clock::now() + ctx.tuning.retry_after;
    n.cv.notify_one();
    return base::Status(base::Code::Unavailable, e.what());
  }
}

}  // namespace

std::unique_ptr<NodePool::Conn> borrow(NodePool& n, const PoolContext& ctx, bool ignore_down) {
  const ClientTuning& t = ctx.tuning;
  {
    std::unique_lock lk(n.mu);
    auto deadline = NodePool::Clock::now() + t.op_timeout;
    for (;;) {
      if (!ignore_down && NodePool::Clock::now() < n.down_until) return nullptr;
      if (!n.idle.empty()) {
        auto c = std::move(n.idle.back());
        n.idle.pop_back();
        return c;
      }
      if (n.total < t.max_connections_per_node) {
        ++n.total;
        break;
      }
      if (n.cv.wait_until(lk, deadline) == std::cv_status::timeout) return nullptr;
    }
  }
  auto c = connect_counted(n, ctx);
  if (!c && ctx.log)
    ctx.log(fabric::LogLevel::Warn, "COH0101 cannot reach " + n.info->name + " at " + n.uri + ": " +
                                        c.message() + " (its pages are not served from cache for " +
                                        std::to_string(t.retry_after.count()) + " ms)");
  return c ? std::move(c).value() : nullptr;
}

std::unique_ptr<NodePool::Conn> borrow_idle(NodePool& n) {
  std::lock_guard lk(n.mu);
  if (NodePool::Clock::now() < n.down_until || n.idle.empty()) return nullptr;
  auto c = std::move(n.idle.back());
  n.idle.pop_back();
  return c;
}

std::unique_ptr<NodePool::Conn> borrow_fresh(NodePool& n, const PoolContext& ctx) {
  std::vector<std::unique_ptr<NodePool::Conn>> stale;
  {
    std::lock_guard lk(n.mu);
    stale.swap(n.idle);
    n.total -= stale.size();
    ++n.total;  // may exceed max_connections_per_node by the callers doing this at once
  }
  stale.clear();  // closed outside the lock
  auto c = connect_counted(n, ctx);  // a failure marks the node down (the caller sees nullptr)
  return c ? std::move(c).value() : nullptr;
}

const fabric::RemoteRegion& region(NodePool::Conn& c, RegionKind kind, const PoolContext& ctx) {
  switch (kind) {
    case RegionKind::Acks:
      if (!c.acks) {
        fabric::RemoteRegion r = c.c->lookup(kAcksRegion);
        // The home's digest (layout.h), read once per connection: a writer of another topology
        // may not count on that home's fence (invalidation.cc).
        uint64_t hdr[3] = {};
        if (r.len >= kAckCellsOffset) c.c->read(r, 0, hdr, sizeof hdr);
        c.acks_digest = hdr[0] == kAcksMagic ? hdr[kAcksDigestOffset / 8] : 0;
        c.acks = r;
      }
      return *c.acks;
    case RegionKind::Writer:
      if (!c.writer) c.writer = c.c->lookup(kWriterRegion);
      return *c.writer;
    case RegionKind::Arena:
      if (!c.arena) c.arena = c.c->lookup(kArenaRegion);
      return *c.arena;
    case RegionKind::Pool:
      if (!c.pool) c.pool = c.c->lookup(poolwire::kRegion);
      return *c.pool;
    case RegionKind::CoopDir:
      if (!c.coop_dir) {
        fabric::RemoteRegion r = c.c->lookup(dirwire::kRegion);
        std::array<uint8_t, kDirHeaderSize> hdr{};
        if (r.len < kDirHeaderSize)
          throw fabric::FabricError(fabric::Errc::Fenced, "region coop.dir is too small for a directory");
        c.c->read(r, 0, hdr.data(), hdr.size());
        auto g = parse_directory_header(hdr);
        if (auto* miss = std::get_if<DirMiss>(&g))
          throw fabric::FabricError(fabric::Errc::Fenced,
                                    "region coop.dir is not a usable directory (" +
                                        std::string(to_string(miss->reason)) + ")");
        auto& geo = std::get<DirectoryGeometry>(g);
        if (geo.total_bytes() > r.len)
          throw fabric::FabricError(fabric::Errc::Fenced,
                                    "region coop.dir is shorter than its header's geometry");
        c.coop_geometry = geo;
        c.coop_dir = r;
      }
      return *c.coop_dir;
    case RegionKind::Versions:
      break;
  }
  if (!c.versions) {
    fabric::RemoteRegion r = c.c->lookup(kVersionsRegion);
    uint64_t hdr[kVersionsHeaderBytes / 8] = {};
    if (r.len < kVersionsHeaderBytes)
      throw fabric::FabricError(fabric::Errc::Fenced, "region versions is too small for a table");
    c.c->read(r, 0, hdr, sizeof hdr);
    if (hdr[0] != kVersionsMagic)
      throw fabric::FabricError(fabric::Errc::Fenced, "region versions is not a version table");
    if (hdr[kDigestOffset / 8] != ctx.digest)
      throw fabric::FabricError(
          fabric::Errc::Fenced,
          "the home's version table was made from another topology (digest " +
              to_hex(hdr[kDigestOffset / 8]) + ", ours " + to_hex(ctx.digest) +
              "): version_slots, [coherence] or the app nodes differ between the files");
    const uint64_t stamped = hdr[kHomeNodeOffset / 8];
    if (!c.node.empty() && stamped != 0 && stamped != cluster::hash64(c.node))
      throw fabric::FabricError(
          fabric::Errc::Fenced,
          "the version table served for node " + c.node + " belongs to another node (identity " +
              to_hex(stamped) + ", " + c.node + "'s is " + to_hex(cluster::hash64(c.node)) +
              "): two nodes share a segment_prefix, or a memd runs with another node's name");
    c.versions = r;
  }
  return *c.versions;
}

}  // namespace tierce::coherence
