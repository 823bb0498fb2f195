// agents/memd/pool_role.cc — the [pool] role inside memd (see pool_role.h).
#include "agents/memd/pool_role.h"

#include <fcntl.h>

#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "coherence/slab_pool_wire.h"

namespace tierce::memd {

using coherence::PoolStatus;
namespace poolwire = coherence::poolwire;

namespace {

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

uint64_t PoolRole::now_ms() {
  return uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

PoolRole::PoolRole(fabric::Server& server, const std::string& node, const PoolConfig& cfg,
                   fabric::LogSink log)
    : server_(server), node_(node), cfg_(cfg), log_(std::move(log)) {
  segment_name_ = pool_segment_name(node_);
  fabric::SharedSegment seg;
  try {
    seg = fabric::SharedSegment::create(segment_name_, cfg_.bytes, 0600);
  } catch (const std::exception& e) {
    throw std::runtime_error("[pool] cannot create segment " + segment_name_ + " of " +
                             std::to_string(cfg_.bytes) + " bytes: " + e.what());
  }
  // Reserve every page now: tmpfs grows lazily, and a pool larger than /dev/shm's free space
  // would otherwise fail later with SIGBUS in whoever touches a page first (memd zeroing a slab).
  if (int rc = ::posix_fallocate(seg.fd(), 0, off_t(fabric::kHeaderSize + cfg_.bytes)); rc != 0) {
    fabric::SharedSegment::unlink(segment_name_);
    throw std::runtime_error("[pool] cannot reserve " + std::to_string(cfg_.bytes) +
                             " bytes for segment " + segment_name_ + ": " + std::strerror(rc) +
                             "; lower [pool] bytes or give /dev/shm more room (df -h /dev/shm)");
  }
  segment_ = std::make_shared<fabric::SharedSegment>(std::move(seg));
  coherence::SlabPoolOptions o;
  o.slab_bytes = cfg_.slab_bytes;
  o.lease_ms = uint64_t(cfg_.lease.count());
  o.max_slabs_per_owner = cfg_.max_slabs_per_owner;
  pool_ = std::make_unique<coherence::SlabPool>(segment_->data(), cfg_.bytes, o);
  // Readers (the proxies' httpd children, which hold no node key) write their slabs' slots: what
  // they write is self-verifying (coop_slot.h), a bad slot is a miss (docs/SECURITY.md "Roles").
  server_.export_region(poolwire::kRegion, segment_, fabric::RegionAccess{true});
  server_.on_call(
      poolwire::kAllocService,
      [this](const fabric::PeerInfo&, std::span<const uint8_t> b) { return handle(Op::Alloc, b); },
      fabric::Callers::Anyone);
  server_.on_call(
      poolwire::kFreeService,
      [this](const fabric::PeerInfo&, std::span<const uint8_t> b) { return handle(Op::Free, b); },
      fabric::Callers::Anyone);
  server_.on_call(
      poolwire::kRenewService,
      [this](const fabric::PeerInfo&, std::span<const uint8_t> b) { return handle(Op::Renew, b); },
      fabric::Callers::Anyone);
  server_.on_call(poolwire::kStatusService,
                  [this](const fabric::PeerInfo&, std::span<const uint8_t>) {
                    std::string s = status_text();
                    return std::vector<uint8_t>(s.begin(), s.end());
                  }, fabric::Callers::Anyone);
  server_.on_call(poolwire::kMetricsService,
                  [this](const fabric::PeerInfo&, std::span<const uint8_t>) {
                    std::string s = metrics_text();
                    return std::vector<uint8_t>(s.begin(), s.end());
                  }, fabric::Callers::Anyone);
  if (log_)
    log_(fabric::LogLevel::Info,
         "MEMD0130 pool: " + std::to_string(pool_->slab_count()) + " slabs of " +
             std::to_string(cfg_.slab_bytes) + " bytes in segment " + segment_name_ +
             " (incarnation " + hex(incarnation()) + "), exported as region \"pool\"; lease " +
             std::to_string(cfg_.lease.count()) + " ms" +
             (cfg_.max_slabs_per_owner
                  ? ", at most " + std::to_string(cfg_.max_slabs_per_owner) + " slabs per owner"
                  : std::string()));
  reclaimer_ = std::thread([this] { reclaim_loop(); });
}

PoolRole::~PoolRole() {
  {
    std::lock_guard g(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (reclaimer_.joinable()) reclaimer_.join();
  try {
    server_.unexport_region(poolwire::kRegion);
  } catch (const std::exception&) {
  }
  // This incarnation ends: shm peers that mapped it fail their next op (Revoked); a restarted memd
  // creates a new segment, so no descriptor handed out now is ever valid again.
  segment_->revoke();
  fabric::SharedSegment::unlink(segment_name_);
}

void PoolRole::log_reclaimed(const coherence::Reclaimed& r) {
  if (!log_) return;
  if (r.why == coherence::Reclaimed::Why::LeaseExpired)
    log_(fabric::LogLevel::Warn,
         "MEMD0131 pool: owner " + r.owner + " (incarnation " + hex(r.incarnation) +
             ") did not renew its lease within " + std::to_string(cfg_.lease.count()) +
             " ms: its " + std::to_string(r.slabs.size()) +
             " slab(s) were reclaimed and zeroed (an owner renews every lease/3 or so; a stopped "
             "or partitioned owner loses its memory)");
  else
    log_(fabric::LogLevel::Info, "MEMD0132 pool: owner " + r.owner +
                                     " speaks with a new incarnation: the " +
                                     std::to_string(r.slabs.size()) + " slab(s) of incarnation " +
                                     hex(r.incarnation) + " were reclaimed and zeroed");
}

size_t PoolRole::reclaim_now() {
  auto v = pool_->reclaim_expired(now_ms());
  for (auto& r : v) log_reclaimed(r);
  return v.size();
}

void PoolRole::reclaim_loop() {
  const auto period = std::max(cfg_.lease / 4, std::chrono::milliseconds(1));
  for (;;) {
    {
      std::unique_lock lk(mu_);
      if (cv_.wait_for(lk, period, [&] { return stopping_; })) return;
    }
    try {
      reclaim_now();
    } catch (const std::exception& e) {
      if (log_)
        log_(fabric::LogLevel::Error, std::string("MEMD0135 pool: reclaim failed: ") + e.what() +
                                          "; retried in " + std::to_string(period.count()) + " ms");
    }
  }
}

std::vector<uint8_t> PoolRole::handle(Op op, std::span<const uint8_t> body) {
  poolwire::Reply rep;
  rep.slab_bytes = pool_->slab_bytes();
  rep.pool_incarnation = incarnation();
  rep.lease_ms = uint64_t(cfg_.lease.count());
  try {
    coherence::PoolResult r;
    switch (op) {
      case Op::Alloc: {
        auto q = poolwire::decode_alloc(body);
        r = pool_->alloc(q.owner, q.incarnation, q.count, now_ms());
        if (r.ok())
          for (uint32_t s : r.slabs) rep.slabs.push_back(pool_->descriptor(s));
        break;
      }
      case Op::Free: {
        auto q = poolwire::decode_free(body);
        r = pool_->free(q.owner, q.incarnation, q.slabs, now_ms());
        break;
      }
      case Op::Renew: {
        auto q = poolwire::decode_renew(body);
        r = pool_->renew(q.owner, q.incarnation, now_ms());
        break;
      }
    }
    if (r.replaced) log_reclaimed(*r.replaced);
    rep.status = r.status;
    rep.message = r.message;
    rep.held = r.held;
    rep.free_slabs = pool_->free_slabs();
  } catch (const poolwire::PoolWireError& e) {
    if (bad_requests_.fetch_add(1, std::memory_order_relaxed) % 1000 == 0 && log_)
      log_(fabric::LogLevel::Warn, std::string("MEMD0134 pool: malformed request refused: ") +
                                       e.what() +
                                       " (logged once per 1000; a client of another "
                                       "version, or a bug)");
    rep.status = PoolStatus::BadRequest;
    rep.message = e.what();
    rep.free_slabs = pool_->free_slabs();
  }
  return poolwire::encode(rep);
}

std::string PoolRole::status_text() const {
  auto s = pool_->snapshot(now_ms());
  const auto& c = s.counters;
  std::ostringstream o;
  o << "segment " << segment_name_ << "\nincarnation " << hex(segment_->incarnation())
    << "\nslab_bytes " << s.slab_bytes << "\nslabs " << s.slab_count << "\nfree " << s.free_slabs
    << "\nzeroing " << s.zeroing_slabs << "\nlease_ms " << s.lease_ms << "\nmax_slabs_per_owner "
    << s.max_slabs_per_owner << "\nalloc_requests " << c.alloc_requests << "\nalloc_refusals "
    << c.alloc_refusals << "\nslabs_allocated " << c.slabs_allocated << "\nfree_requests "
    << c.free_requests << "\nfree_refusals " << c.free_refusals << "\nslabs_freed " << c.slabs_freed
    << "\nrenewals " << c.renewals << "\nrenew_refusals " << c.renew_refusals << "\nleases_expired "
    << c.leases_expired << "\nincarnations_replaced " << c.incarnations_replaced
    << "\nslabs_reclaimed " << c.slabs_reclaimed << "\nbytes_zeroed " << c.bytes_zeroed
    << "\nbad_requests " << bad_requests_.load() << "\n";
  for (auto& u : s.owners)
    o << "owner " << u.owner << " active=" << (u.active ? 1 : 0) << " slabs=" << u.slabs
      << " bytes=" << u.bytes << " allocs=" << u.allocs << " frees=" << u.frees
      << " reclaimed=" << u.reclaimed << " incarnation=" << hex(u.incarnation)
      << " lease_ms_left=" << u.lease_ms_left << "\n";
  return o.str();
}

void PoolRole::metrics(base::Metrics& m) const {
  auto s = pool_->snapshot(now_ms());
  const auto& c = s.counters;
  m.gauge("tierce_pool_slabs", "Slabs in this node's pool.", uint64_t(s.slab_count));
  m.gauge("tierce_pool_free_slabs", "Slabs free to allocate.", uint64_t(s.free_slabs));
  m.gauge("tierce_pool_slab_bytes", "Size of one slab in bytes.", uint64_t(s.slab_bytes));
  m.counter("tierce_pool_alloc_requests_total", "pool.alloc requests.", c.alloc_requests);
  m.counter("tierce_pool_alloc_refusals_total",
            "pool.alloc requests refused (not enough free, over quota, lease lost, bad).",
            c.alloc_refusals);
  m.counter("tierce_pool_slabs_allocated_total", "Slabs handed out.", c.slabs_allocated);
  m.counter("tierce_pool_free_requests_total", "pool.free requests.", c.free_requests);
  m.counter("tierce_pool_free_refusals_total",
            "pool.free requests refused (slab not held, out of range, bad).", c.free_refusals);
  m.counter("tierce_pool_slabs_freed_total", "Slabs freed by their owner.", c.slabs_freed);
  m.counter("tierce_pool_renewals_total", "Leases renewed.", c.renewals);
  m.counter("tierce_pool_leases_expired_total",
            "Owners that lost their slabs because they did not renew in time.", c.leases_expired);
  m.counter("tierce_pool_incarnations_replaced_total",
            "Owners whose old incarnation's slabs were dropped for a new one.",
            c.incarnations_replaced);
  m.counter("tierce_pool_slabs_reclaimed_total", "Slabs taken back from owners.",
            c.slabs_reclaimed);
  m.counter("tierce_pool_bytes_zeroed_total", "Bytes zeroed before reuse.", c.bytes_zeroed);
  m.counter("tierce_pool_bad_requests_total", "Malformed pool requests refused.",
            bad_requests_.load());
  for (auto& u : s.owners)
    m.gauge("tierce_pool_owner_slabs", "Slabs an owner holds.", uint64_t(u.slabs),
            {{"owner", u.owner}});
  for (auto& u : s.owners)
    m.counter("tierce_pool_owner_reclaimed_slabs_total", "Slabs taken back from an owner.",
              u.reclaimed, {{"owner", u.owner}});
}

std::string PoolRole::metrics_text() const {
  base::Metrics m({{"node", node_}});
  metrics(m);
  return m.text();
}

}  // namespace tierce::memd
