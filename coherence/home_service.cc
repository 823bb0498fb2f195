// coherence/home_service.cc — the home role inside an app node's memd (see home_service.h).
#include "coherence/home_service.h"

#include <algorithm>
#include <sstream>

#include "cluster/hash.h"
#include "coherence/key.h"
#include "coherence/layout.h"
#include "coherence/protocol.h"

namespace tierce::coherence {

namespace {
uint64_t ms_to_ns(uint64_t ms) { return ms * 1'000'000ull; }
// How soon a home that does not vouch tries again (a renewal is a few reads of the other app
// nodes' writer counters; a refused connect costs nothing).
constexpr std::chrono::milliseconds kFencedRetry{20};
// How often the fence loop compares the host's clocks (check_clock_pause): after a pause the
// home vouches on a stale cap for at most this long (plus the time to wake the thread).
constexpr std::chrono::milliseconds kPauseCheck{5};
}  // namespace

// A new incarnation must not acknowledge an invalidation while proxies can still validate pages
// against its predecessor's version table: after a crash (SIGKILL) that segment stays mapped by
// shm peers, and they read it until the lease the dead memd last renewed runs out (it never ran
// past the predecessor's fence). Otherwise a writer's invalidation, acknowledged here, could
// complete while a proxy still serves a page the old table vouches for. A clean stop revokes and
// unlinks the segments: nothing to wait for.
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
      log_(std::move(log)),
      ledger_(topo_.app_nodes().size()) {
  const NodeInfo& me = topo_.node(node_);
  if (me.role != Role::App)
    throw TopologyError(topo_.path + ": node " + node_ +
                        " has role proxy: only app nodes are homes (remove [coherence] from this "
                        "memd's config, or make the node an app node)");
  digest_ = topo_.coherence_digest();
  for (const NodeInfo* a : topo_.app_nodes()) {
    if (a->name == node_) self_ = origins_.size();
    origins_.push_back(a->name);
  }
  if (opts_.ack_cells == 0) throw std::invalid_argument("[coherence] ack_slots must be >= 1");
  await_predecessor_lease({me.segment_prefix + kVersionsSuffix, me.segment_prefix + kAcksSuffix});
  versions_ = std::make_shared<fabric::SharedSegment>(fabric::SharedSegment::create(
      me.segment_prefix + kVersionsSuffix, versions_bytes(topo_.version_slots)));
  // Fenced from birth: the home vouches only after its first renewal (fence_loop).
  fabric::raise_lease_cap(versions_->header(), 1);
  acks_ = std::make_shared<fabric::SharedSegment>(fabric::SharedSegment::create(
      me.segment_prefix + kAcksSuffix, acks_bytes(opts_.ack_cells)));
  word_at(acks_->data(), 0).store(kAcksMagic);
  word_at(acks_->data(), 8).store(opts_.ack_cells);
  word_at(acks_->data(), kAcksDigestOffset).store(digest_);
  writer_ = std::make_unique<WriterLog>(me.segment_prefix + kWriterSuffix);
  state_ = std::make_unique<HomeState>(versions_->data(), topo_.version_slots, opts_.limits, true,
                                       digest_, topo_.coherence.scheme, cluster::hash64(node_));
  ClientTuning t;
  t.op_timeout = opts_.peer_op_timeout.count() > 0
                     ? opts_.peer_op_timeout
                     : std::chrono::milliseconds(std::max<uint32_t>(topo_.coherence.lease_ms / 4, 1));
  t.connect_timeout = t.op_timeout;
  t.retry_after = std::chrono::milliseconds(0);  // the fence retries on its own schedule
  peers_ = std::make_unique<ClusterClient>(topo_, secret_, t, log_);
  probe_client_ = std::make_unique<ClusterClient>(topo_, secret_, t, log_);
  keeper_ = std::make_unique<SkipMarkKeeper>(*writer_, *probe_client_, origins_, node_, log_);
  server_.export_region(kVersionsRegion, versions_);
  server_.export_region(kAcksRegion, acks_);
  // The node's writer counter, unless its writer agent exports it (topology: `writer`): a
  // segment has one exporter (fabric/segment.h), and the agent's point is to outlive this memd.
  exports_writer_ = me.writer.empty();
  if (exports_writer_) server_.export_region(kWriterRegion, writer_->segment());
  server_.on_call(kRegisterService, [this](const fabric::PeerInfo&, std::span<const uint8_t> b) {
    return on_register(b);
  });
  server_.on_call(kInvalidateService,
                  [this](const fabric::PeerInfo&, std::span<const uint8_t> b) {
                    on_invalidate(b);
                    return std::vector<uint8_t>{};
                  });
  out_.assign(origins_.size(), false);
  server_.on_call(kMembershipService, [this](const fabric::PeerInfo&, std::span<const uint8_t> b) {
    return on_membership(b);
  });
  server_.on_call(kStatusService, [this](const fabric::PeerInfo&, std::span<const uint8_t>) {
    std::string s = status_text();
    return std::vector<uint8_t>(s.begin(), s.end());
  }, fabric::Callers::Anyone);
  if (log_)
    log_(fabric::LogLevel::Info,
         "COH0201 home " + node_ + ": version table " + me.segment_prefix + kVersionsSuffix +
             " (" + std::to_string(topo_.version_slots) + " slots, new incarnation), " +
             std::to_string(opts_.ack_cells) + " ack cells, writer counter " + writer_->name() +
             "; fence lease " + std::to_string(topo_.coherence.lease_ms) + " ms, scheme " +
             std::string(to_string(topo_.coherence.scheme)));
  arb_.assign(origins_.size(), ArbOrigin{});
  if (opts_.arbiter) {
    if (opts_.drop_after.count() <= 0)
      opts_.drop_after = std::chrono::milliseconds(topo_.arbiter_drop_after_ms());
    arb_probe_ = std::make_unique<ClusterClient>(topo_, secret_, t, log_);
    if (log_)
      log_(fabric::LogLevel::Info,
           "COH0230 home " + node_ + ": the database is the fence's arbiter (" +
               opts_.arbiter->describe() + "): an app node whose writer counter cannot be read for " +
               std::to_string(opts_.drop_after.count()) +
               " ms is dropped there (its writes refused) before this home vouches without it");
  }
  fence_thread_ = std::thread([this] { fence_loop(); });
  keeper_thread_ = std::thread([this] { keeper_loop(); });
  if (opts_.arbiter) arbiter_thread_ = std::thread([this] { arbiter_loop(); });
}

HomeService::~HomeService() {
  {
    std::lock_guard lk(fence_mu_);
    stopping_ = true;
  }
  fence_cv_.notify_all();
  if (fence_thread_.joinable()) fence_thread_.join();
  if (keeper_thread_.joinable()) keeper_thread_.join();
  if (arbiter_thread_.joinable()) arbiter_thread_.join();
  for (const char* r : {kVersionsRegion, kAcksRegion, kWriterRegion}) {
    if (r == kWriterRegion && !exports_writer_) continue;
    try {
      server_.unexport_region(r);
    } catch (const std::exception&) {
    }
  }
  // The writer segment stays: the node's httpd keeps numbering into it.
  for (auto& s : {versions_, acks_}) {
    s->revoke();
    fabric::SharedSegment::unlink(s->name());
  }
}

size_t HomeService::origin_index(const std::string& name) const {
  for (size_t i = 0; i < origins_.size(); ++i)
    if (origins_[i] == name) return i;
  return SIZE_MAX;
}

bool HomeService::vouching_now() const {
  return !fabric::past_lease_cap(versions_->header(), fabric::monotonic_ns());
}

// ---- the fence ---------------------------------------------------------------------------------

void HomeService::catch_up(const std::vector<IssuedNumber>& readings, const std::string& why) {
  // After the readings (they were taken before this): every page registered so far is bumped,
  // and renders that started before are refused (the log gets an invalidate-all), so every
  // invalidation numbered up to what was read is superseded here.
  InvalidateResult r = state_->invalidate({}, Scheme::InvalidateAll);
  for (size_t i = 0; i < readings.size(); ++i) ledger_.cover(i, readings[i]);
  {
    std::lock_guard lk(fence_mu_);
    ++fence_stats_.catch_ups;
  }
  if (log_)
    log_(r.keys_bumped ? fabric::LogLevel::Warn : fabric::LogLevel::Info,
         "COH0213 home " + node_ + " caught up (" + why + "): " + std::to_string(r.keys_bumped) +
             " registered pages invalidated; proxies refetch them");
}

std::string HomeService::read_origins(std::vector<IssuedNumber>& readings, std::vector<bool>& out,
                                      const std::vector<ArbState>& arb) {
  std::string failure;
  auto failed = [&](const std::string& why) { failure += (failure.empty() ? "" : "; ") + why; };
  for (size_t i = 0; i < origins_.size(); ++i) {
    if (out[i]) continue;  // taken out by an operator: not read, not waited for
    // Dropped in the database, and caught up after the drop: its writes are refused there.
    if (arb[i] == ArbState::Out) {
      out[i] = true;
      continue;
    }
    std::optional<WriterReading> r;
    // Our own node's counter from our own mapping, unless its writer agent numbers for the
    // httpd children (layout.h "agent"): then where every home reads it, at the agent.
    if (i == self_ && (exports_writer_ || !writer_->agent_numbering()))
      r = writer_->reading(self_);
    else
      r = peers_->read_writer(origins_[i], self_);
    if (!r && arb[i] == ArbState::Rejoining) {
      // Not recorded in the database yet: it cannot be back in without this home, so losing it
      // again only means it stays out.
      out[i] = true;
      std::lock_guard lk(arb_mu_);
      arb_[i].state = ArbState::Out;
      arb_[i].covered = false;
      if (log_)
        log_(fabric::LogLevel::Info, "COH0227 home " + node_ + ": " + origins_[i] +
                                         "'s writer counter is unreadable again before it was "
                                         "re-admitted: it stays out");
      continue;
    }
    if (!r) {
      if (opts_.arbiter) {
        std::lock_guard lk(arb_mu_);
        if (arb_[i].unreadable_since_ns == 0) arb_[i].unreadable_since_ns = fabric::monotonic_ns();
      }
      failed("cannot read " + origins_[i] + "'s writer counter" +
             (opts_.arbiter && i != self_
                  ? " (the arbiter drops it " + std::to_string(opts_.drop_after.count()) +
                        " ms after its first failed reading)"
                  : ""));
      continue;
    }
    if (opts_.arbiter) {
      std::lock_guard lk(arb_mu_);
      arb_[i].unreadable_since_ns = 0;
    }
    // A dropped node on its way back is read only when its reading is clean: it cannot write
    // (out in the database), so what would stop this home's fence only delays its re-admission.
    if (arb[i] == ArbState::Rejoining &&
        ((r->issued.number != 0 && r->digest != digest_) || r->skip != 0)) {
      out[i] = true;
      // This renewal vouches without it: its record must wait for a clean reading after this
      // one, or this cap could outlive the re-admission while its writers skip this home (found
      // by the arbiter's model: coherence/model, DIRTY_RECORD).
      std::lock_guard lk(arb_mu_);
      arb_[i].covered = false;
      continue;
    }
    readings[i] = r->issued;
    // A writer that numbers under another topology does not send to the homes this one knows
    // (or sends to homes this one does not know): this home cannot prove it holds its updates.
    if (r->issued.number != 0 && r->digest != digest_)
      failed(origins_[i] + " numbers its invalidations under another topology (digest " +
             to_hex(r->digest) + ", ours " + to_hex(digest_) +
             "): give every node the same topology file");
    // A writer that stopped waiting for us (skip mark): we must not vouch until it waits again.
    if (r->skip != 0)
      failed(origins_[i] + "'s writers stopped waiting for this home (skip mark " +
             (skip_state(r->skip) == SkipState::Pending ? "being set" : "set") +
             "); its writer agent clears it once this home answers");
  }
  return failure;
}

bool HomeService::await_current(const std::vector<IssuedNumber>& readings,
                                const std::vector<bool>& out) {
  const uint64_t grace_ms = topo_.coherence.lease_ms / 2;
  const uint64_t grace_end = fabric::monotonic_ns() + ms_to_ns(grace_ms);
  bool waited = false;
  for (;;) {
    std::string unknown, behind;
    for (size_t i = 0; i < origins_.size(); ++i) {
      if (out[i]) continue;
      Standing s = ledger_.standing(i, readings[i]);
      if (s == Standing::Unknown)
        unknown += (unknown.empty() ? "" : ", ") + origins_[i];
      else if (s == Standing::Behind)
        behind += (behind.empty() ? "" : ", ") + origins_[i] + " up to " +
                  std::to_string(readings[i].number) + " (applied " +
                  std::to_string(ledger_.view(i).covered) + ")";
    }
    if (!unknown.empty()) {
      catch_up(readings, "first reading, or a new incarnation, of the writer counter of " + unknown);
      break;
    }
    if (behind.empty()) break;
    if (fabric::monotonic_ns() >= grace_end) {
      catch_up(readings, "invalidations numbered by " + behind + " did not arrive within " +
                             std::to_string(grace_ms) + " ms");
      break;
    }
    if (!waited) {
      waited = true;
      std::lock_guard lk(fence_mu_);
      ++fence_stats_.gap_waits;
    }
    std::unique_lock lk(fence_mu_);
    if (fence_cv_.wait_for(lk, std::chrono::milliseconds(1), [&] { return stopping_; }))
      return false;
  }
  return true;
}

bool HomeService::renew_once() {
  std::lock_guard renew(renew_mu_);
  // The host's clocks with t_req: a pause between the reading and the raise of the cap (MONOTONIC
  // stood still while BOOTTIME/REALTIME went on) must not yield a cap counted from a t_req that
  // is older than it looks (found by the model, coherence/model: PAUSE_UNCHECKED).
  auto clocks = [this] { return opts_.host_clocks ? opts_.host_clocks() : fabric::read_host_clocks(); };
  fabric::ClockPauseDetector paused_since_req;
  paused_since_req.missed_ns(clocks());
  const uint64_t t_req = fabric::monotonic_ns();
  if (writer_->remap_if_replaced() && exports_writer_) {
    server_.export_region(kWriterRegion, writer_->segment());
    if (log_)
      log_(fabric::LogLevel::Warn, "COH0214 " + writer_->name() +
                                       " was removed or replaced behind memd's back: mapped and "
                                       "exported anew (a new incarnation: homes catch up)");
  }
  std::vector<IssuedNumber> readings(origins_.size());
  std::vector<bool> out;
  {
    std::lock_guard lk(out_mu_);
    out = out_;
  }
  std::vector<ArbState> arb(origins_.size(), ArbState::Tracked);
  if (opts_.arbiter) {
    std::lock_guard lk(arb_mu_);
    for (size_t i = 0; i < origins_.size(); ++i) arb[i] = arb_[i].state;
  }
  std::string failure = read_origins(readings, out, arb);
  auto fail = [&](const std::string& why) {
    std::lock_guard lk(fence_mu_);
    ++fence_stats_.failed_renewals;
    fence_stats_.last_failure = why;
    return false;
  };
  if (!failure.empty()) return fail(failure);

  // Every origin must be Current: numbers read that are not applied here yet are waited for
  // (they are usually in flight, microseconds behind; a writer stalled between numbering and
  // sending takes longer), then caught up with. Up to lease/2: the cap set before still covers
  // most of that wait, and a catch-up flushes every registered page of this home.
  if (!await_current(readings, out)) return false;
  if (paused_since_req.missed_ns(clocks()) != 0)
    return fail("this host was paused during the renewal (its monotonic clock missed time): "
                "its readings may be older than they look");
  // Renewed: vouch until t_req + lease (t_req preceded every reading).
  const bool was = vouching_now();
  fabric::raise_lease_cap(versions_->header(), t_req + ms_to_ns(topo_.coherence.lease_ms));
  fabric::renew_lease(versions_->header(),
                      uint64_t(std::chrono::nanoseconds(opts_.exporter_lease).count()));
  {
    std::lock_guard lk(fence_mu_);
    ++fence_stats_.renewals;
    fence_stats_.last_failure.clear();
  }
  if (opts_.arbiter) {
    // Every origin read above is covered now (the arbiter records only those in the database).
    std::lock_guard lk(arb_mu_);
    for (size_t i = 0; i < origins_.size(); ++i)
      if (!out[i] && arb_[i].state == arb[i]) arb_[i].covered = true;
  }
  if (!was && log_)
    log_(fabric::LogLevel::Info, "COH0212 home " + node_ +
                                     " vouches for its version table (it holds every "
                                     "invalidation numbered by every app node)");
  return true;
}

void HomeService::fence_loop() {
  const auto period = std::chrono::milliseconds(std::max<uint32_t>(topo_.coherence.lease_ms / 4, 1));
  std::string last_logged;
  for (;;) {
    bool ok = false;
    try {
      // Pending marks whose Release never came: expired here too, not only when a registration
      // or an invalidation happens to pass, so that they do not pile up on a quiet home.
      state_->expire_marks();
      ok = renew_once();
      check_clock_pause();  // a pause inside the renewal drops the cap it just set
    } catch (const std::exception& e) {
      // Never let the fence thread die: a home that cannot renew just stops vouching.
      std::lock_guard lk(fence_mu_);
      ++fence_stats_.failed_renewals;
      fence_stats_.last_failure = std::string("renewal failed: ") + e.what();
    }
    FenceStatus f = fence();
    if (!ok && log_ && f.renewals == 0) {
      // Starting: the other nodes' memd may not be up yet. Said once, quietly.
      if (last_logged.empty())
        log_(fabric::LogLevel::Info, "COH0215 home " + node_ +
                                         " does not vouch for its table until it has read every "
                                         "app node's writer counter: " + f.last_failure);
      last_logged = "starting";
    } else if (!ok && log_) {
      // Logged when the reason changes and when the home stops vouching, not every period.
      bool fenced = !f.vouching;
      std::string key = (fenced ? "fenced:" : "") + f.last_failure;
      if (key != last_logged)
        log_(fabric::LogLevel::Warn,
             std::string(fenced ? "COH0211 home " : "COH0210 home ") + node_ +
                 " cannot renew its fence: " + f.last_failure +
                 (fenced ? "; it vouches for nothing now: proxies forward its pages and "
                           "registrations are refused until it can prove it holds every "
                           "invalidation (check that node's memd and the network between them)"
                         : "; it stops vouching in " + std::to_string(f.vouch_ms_left) + " ms"));
      last_logged = key;
    } else if (ok) {
      last_logged.clear();
    }
    // A home that does not vouch retries sooner: until it does, its pages are not served from
    // cache (at start-up, until the other app nodes' memd are up; after a cut, until it heals).
    const auto wait = f.vouching ? period : std::min(period, kFencedRetry);
    if (wait_watching_clocks(wait)) return;
  }
}

// ---- paused clocks (issue 29, path 2) -----------------------------------------------------------
//
// The cap is a CLOCK_MONOTONIC instant. A host that was suspended (MONOTONIC stops, BOOTTIME does
// not) or a VM the hypervisor stopped or migrated (its clocks may stand still, the wall clock is
// stepped later) comes back with a cap that looks valid for as long as the pause lasted, while the
// writers elsewhere returned on their bound meanwhile. The fence thread compares the clocks every
// kPauseCheck, and right after each renewal (a pause inside renew_once, between its reading and
// its raise of the cap, is caught before the thread does anything else). When MONOTONIC missed
// time, the cap drops to "passed" (tcp responders refuse reads with Fenced, shm readers see the
// lease deadline gone) until a renewal whose reading came after the pause sets it again. That
// renewal is sound: its t_req is taken after this check (same thread, under renew_mu_).
bool HomeService::check_clock_pause() {
  std::lock_guard renew(renew_mu_);  // never between another renewal's reading and its raise
  const uint64_t missed = pause_detector_.missed_ns(opts_.host_clocks ? opts_.host_clocks()
                                                                      : fabric::read_host_clocks());
  if (missed == 0) return false;
  const bool was = vouching_now();
  fabric::lower_lease_cap(versions_->header(), 1);
  {
    std::lock_guard lk(fence_mu_);
    ++fence_stats_.pauses;
  }
  if (log_)
    log_(fabric::LogLevel::Warn,
         "COH0240 home " + node_ + ": this host's monotonic clock missed " +
             std::to_string(missed / 1'000'000) +
             " ms (suspended, or a paused or migrated VM, or the wall clock was stepped forward)" +
             (was ? "; its fence is dropped: it vouches for nothing until its next renewal"
                  : "; it was not vouching"));
  return true;
}

bool HomeService::wait_watching_clocks(std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    check_clock_pause();
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return false;
    std::unique_lock lk(fence_mu_);
    if (fence_cv_.wait_for(lk,
                           std::min<std::chrono::steady_clock::duration>(until - now, kPauseCheck),
                           [&] { return stopping_; }))
      return true;
  }
}

bool HomeService::renew_now() { return renew_once(); }

std::string HomeService::take_out(const std::string& node) {
  size_t i = origin_index(node);
  if (i == SIZE_MAX) return "no app node named \"" + node + "\" in " + topo_.path;
  if (i == self_) return "a home cannot take its own node out (stop this node instead)";
  // A catch-up first, as after a drop: invalidations the node numbered before it was lost may
  // never arrive (cut off, or it died between its COMMIT and sending them) while their updates
  // returned at the fence bound; vouching without the node and without a catch-up would
  // validate those pages again (found by the arbiter's model: coherence/model, OPERATOR=1).
  InvalidateResult r;
  {
    std::lock_guard renew(renew_mu_);
    std::lock_guard lk(out_mu_);
    if (out_[i]) return "";
    r = state_->invalidate({}, Scheme::InvalidateAll);
    ledger_.forget(i);
    out_[i] = true;
  }
  {
    std::lock_guard lk(fence_mu_);
    ++fence_stats_.catch_ups;
  }
  if (log_)
    log_(fabric::LogLevel::Warn,
         "COH0224 home " + node_ + ": node " + node +
             " taken OUT of the fence by an operator: caught up (" +
             std::to_string(r.keys_bumped) +
             " registered pages invalidated), its writer counter is no longer read, and this "
             "home vouches without it. Safe only while " +
             node +
             " cannot write (host off, or cut off from the database); take it back in with "
             "\"in " +
             node + "\" before it writes again");
  return "";
}

std::string HomeService::take_in(const std::string& node) {
  size_t i = origin_index(node);
  if (i == SIZE_MAX) return "no app node named \"" + node + "\" in " + topo_.path;
  std::lock_guard lk(out_mu_);
  if (!out_[i]) return "";
  out_[i] = false;
  ledger_.forget(i);  // the next reading of its counter is a first one: catch up, then vouch
  if (log_)
    log_(fabric::LogLevel::Info, "COH0225 home " + node_ + ": node " + node +
                                     " taken back into the fence (its counter is read again; "
                                     "this home catches up before it vouches)");
  return "";
}

std::vector<std::string> HomeService::taken_out() const {
  std::lock_guard lk(out_mu_);
  std::vector<std::string> v;
  for (size_t i = 0; i < origins_.size(); ++i)
    if (out_[i]) v.push_back(origins_[i]);
  return v;
}

std::vector<uint8_t> HomeService::on_membership(std::span<const uint8_t> body) {
  std::string text(body.begin(), body.end());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  std::string why;
  if (text.rfind("out ", 0) == 0)
    why = take_out(text.substr(4));
  else if (text.rfind("in ", 0) == 0)
    why = take_in(text.substr(3));
  else if (!text.empty())
    why =
        "unknown request \"" + text.substr(0, 64) + "\": send \"out NODE\", \"in NODE\" or nothing";
  std::string reply = why.empty() ? "out:" : "error: " + why + "\nout:";
  for (const auto& n : taken_out()) reply += " " + n;
  reply += "\n";
  return std::vector<uint8_t>(reply.begin(), reply.end());
}

void HomeService::keeper_loop() {
  const auto period =
      std::chrono::milliseconds(std::max<uint32_t>(topo_.coherence.lease_ms / 4, 1));
  for (;;) {
    try {
      std::lock_guard lk(keeper_mu_);
      keeper_->pass();
    } catch (const std::exception& e) {
      if (log_)
        log_(fabric::LogLevel::Warn, std::string("COH0222 skip-mark pass failed: ") + e.what());
    }
    std::unique_lock lk(fence_mu_);
    if (fence_cv_.wait_for(lk, period, [&] { return stopping_; })) return;
  }
}

// ---- the arbiter (issue 29 Part 2; arbiter.h, docs/coherence.md) -------------------------------
//
// Runs beside the fence, every lease/4, never under renew_mu_ while it talks to the database
// (a drop waits for the node's open transactions): it creates the rows, drops a node this home
// could not read for drop_after (then catches up, under renew_mu_, before any renewal skips the
// node), probes dropped nodes, and records in the database the nodes this home reads again — the
// homes together re-admit a node, never the node itself.

std::string_view to_string(ArbState s) {
  switch (s) {
    case ArbState::Tracked: return "tracked";
    case ArbState::Out: return "out";
    case ArbState::Rejoining: return "rejoining";
  }
  return "?";
}

void HomeService::drop_node(size_t i) {
  const std::string& n = origins_[i];
  const uint64_t epoch = opts_.arbiter->drop(n, node_);  // throws ArbiterError
  // The bump committed: every write transaction of n committed before it or writes nothing.
  // Catch up on the ones before it (their invalidations may never come), then stop reading n.
  InvalidateResult r;
  {
    std::lock_guard renew(renew_mu_);
    r = state_->invalidate({}, Scheme::InvalidateAll);
    ledger_.forget(i);  // when it is read again, that first reading catches up
    std::lock_guard lk(arb_mu_);
    arb_[i] = ArbOrigin{};
    arb_[i].state = ArbState::Out;
    arb_[i].epoch = epoch;
  }
  {
    std::lock_guard lk(fence_mu_);
    ++fence_stats_.drops;
    ++fence_stats_.catch_ups;
  }
  if (log_)
    log_(fabric::LogLevel::Warn,
         "COH0226 home " + node_ + " DROPPED app node " + n + " from the fence (epoch " +
             std::to_string(epoch) + " in " + opts_.arbiter->describe() +
             "): its writer counter was unreadable for " +
             std::to_string(opts_.drop_after.count()) +
             " ms; its writes are refused by the database until the homes re-admit it; caught "
             "up (" + std::to_string(r.keys_bumped) +
             " registered pages invalidated) and vouching without it");
}

void HomeService::arbiter_pass() {
  Arbiter& db = *opts_.arbiter;
  if (!arb_ensured_) {
    db.ensure(origins_);
    arb_ensured_ = true;
  }
  const auto rows = db.rows();
  const uint64_t now = fabric::monotonic_ns();
  const uint64_t drop_ns = uint64_t(opts_.drop_after.count()) * 1'000'000ull;
  for (size_t i = 0; i < origins_.size(); ++i) {
    const std::string& n = origins_[i];
    auto it = rows.find(n);
    if (it == rows.end()) {
      arb_ensured_ = false;  // someone deleted it: create it again (out) on the next pass
      continue;
    }
    const ArbiterRow& row = it->second;
    ArbOrigin a;
    {
      std::lock_guard lk(arb_mu_);
      a = arb_[i];
    }
    auto set = [&](auto&& f) {
      std::lock_guard renew(renew_mu_);
      std::lock_guard lk(arb_mu_);
      f(arb_[i]);
    };
    // Records that this home reads n at the row's epoch (the renewal covered it); the row flips
    // in when every home did.
    auto record = [&] {
      // Tracked BEFORE the database can count this home: from the moment the record commits the
      // node may be in, so losing it again must end in a drop, not in a silent "stays out".
      // Only on a reading that still stands: a renewal since that vouched without n cleared
      // `covered` (under renew_mu_, as here).
      bool stands = false;
      set([&](ArbOrigin& o) {
        if (o.state != a.state || !o.covered) return;
        stands = true;
        o.state = ArbState::Tracked;
        o.tracked_epoch = row.epoch;
      });
      if (!stands) return;
      ArbiterRow after = db.track(n, node_, row.epoch, origins_);
      set([&](ArbOrigin& o) { o.epoch = after.epoch; });
      if (after.epoch != row.epoch) return;  // dropped again meanwhile: recorded next pass
      if (after.in && !row.in) {
        {
          std::lock_guard lk(fence_mu_);
          ++fence_stats_.admissions;
        }
        if (log_)
          log_(fabric::LogLevel::Info, "COH0228 home " + node_ + ": app node " + n +
                                           " ADMITTED to the fence (epoch " +
                                           std::to_string(after.epoch) +
                                           "): every home reads its writer counter; its writes "
                                           "are accepted");
      }
    };
    switch (a.state) {
      case ArbState::Tracked:
        if (i != self_ && a.unreadable_since_ns != 0 && now - a.unreadable_since_ns >= drop_ns) {
          drop_node(i);
        } else if (!row.in && a.unreadable_since_ns == 0 && a.covered &&
                   a.tracked_epoch != row.epoch) {
          record();  // another home dropped it (or it is new): this one reads it
        } else if (a.epoch != row.epoch) {
          set([&](ArbOrigin& o) { o.epoch = row.epoch; });
        }
        break;
      case ArbState::Out:
        if (row.in) {
          // Not with this home's consent (an operator edited the row?): it may write, so it is
          // read again — a renewal fails until it is readable, and it is dropped again if not.
          set([&](ArbOrigin& o) {
            o = ArbOrigin{};
            o.epoch = row.epoch;
            o.unreadable_since_ns = now;
          });
          if (log_)
            log_(fabric::LogLevel::Error,
                 "COH0231 home " + node_ + ": app node " + n + " is IN (epoch " +
                     std::to_string(row.epoch) + ", by " + row.changed_by +
                     ") although this home never recorded it: reading it again before vouching "
                     "(only the homes re-admit a node; do not edit the arbiter's rows by hand)");
          break;
        }
        if (row.epoch != a.epoch) set([&](ArbOrigin& o) { o.epoch = row.epoch; });
        if (arb_probe_->read_writer(n, self_)) {
          set([&](ArbOrigin& o) {
            o.state = ArbState::Rejoining;
            o.covered = false;
          });
          if (log_)
            log_(fabric::LogLevel::Info,
                 "COH0227 home " + node_ + ": app node " + n +
                     "'s writer counter is readable again: reading it (a catch-up), then "
                     "recording it in the database for re-admission");
        }
        break;
      case ArbState::Rejoining:
        if (row.in) {
          set([&](ArbOrigin& o) {
            o.state = ArbState::Tracked;
            o.epoch = row.epoch;
          });
          break;
        }
        if (row.epoch != a.epoch) set([&](ArbOrigin& o) { o.epoch = row.epoch; });
        if (a.covered) record();
        break;
    }
  }
}

void HomeService::arbiter_pass_now() {
  if (!opts_.arbiter) return;
  arbiter_pass();
}

void HomeService::arbiter_loop() {
  const auto period =
      std::chrono::milliseconds(std::max<uint32_t>(topo_.coherence.lease_ms / 4, 1));
  for (;;) {
    std::string error;
    try {
      arbiter_pass();
    } catch (const std::exception& e) {
      error = e.what();
      std::lock_guard lk(fence_mu_);
      ++fence_stats_.arbiter_errors;
    }
    if (error != arb_last_error_ && log_) {
      if (error.empty())
        log_(fabric::LogLevel::Info,
             "COH0229 home " + node_ + ": the fence's arbiter answers again (" +
                 opts_.arbiter->describe() + ")");
      else
        log_(fabric::LogLevel::Warn,
             "COH0229 home " + node_ + ": the fence's arbiter failed: " + error +
                 " — a node this home cannot read is not dropped (this home stays fenced) until "
                 "the database answers");
    }
    arb_last_error_ = error;
    std::unique_lock lk(fence_mu_);
    if (fence_cv_.wait_for(lk, period, [&] { return stopping_; })) return;
  }
}

std::vector<ArbiterOriginStatus> HomeService::arbiter_status() const {
  std::vector<ArbiterOriginStatus> v;
  if (!opts_.arbiter) return v;
  const uint64_t now = fabric::monotonic_ns();
  std::lock_guard lk(arb_mu_);
  for (size_t i = 0; i < origins_.size(); ++i) {
    const ArbOrigin& a = arb_[i];
    v.push_back({origins_[i], a.state, a.epoch, a.tracked_epoch,
                 a.unreadable_since_ns ? int64_t((now - a.unreadable_since_ns) / 1'000'000) : 0});
  }
  return v;
}

SkipMarkStats HomeService::skip_marks() const {
  std::lock_guard lk(keeper_mu_);
  return keeper_->stats();
}

FenceStatus HomeService::fence() const {
  FenceStatus f;
  {
    std::lock_guard lk(fence_mu_);
    f = fence_stats_;
  }
  uint64_t cap = versions_->header()->lease_cap_ns.load(std::memory_order_acquire);
  uint64_t now = fabric::monotonic_ns();
  f.vouching = cap > now;
  f.vouch_ms_left = (int64_t(cap) - int64_t(now)) / 1'000'000;
  return f;
}

// ---- messages ----------------------------------------------------------------------------------

std::vector<uint8_t> HomeService::on_register(std::span<const uint8_t> body) {
  RegisterResult res;
  try {
    auto req = decode_register(body);
    if (req.digest != digest_) {
      refused_topology_.fetch_add(1, std::memory_order_relaxed);
      res.refusal = Refusal::OtherTopology;
      res.reason = "the registering node's topology differs from " + node_ + "'s (digest " +
                   to_hex(req.digest) + " vs " + to_hex(digest_) +
                   "): version_slots, [coherence] or the app nodes differ";
    } else if (topo_.home_of(req.key).name != node_) {
      res.refusal = Refusal::NotHome;
      res.reason = "key " + to_hex(req.key) + " belongs to " + topo_.home_of(req.key).name;
    } else if (!vouching_now()) {
      res.refusal = Refusal::Fenced;
      res.reason = std::string(to_string(Refusal::Fenced));
    } else {
      res = state_->register_page(req.key, req.seq_start, req.deps);
    }
  } catch (const ProtocolError& e) {
    bad_messages_.fetch_add(1, std::memory_order_relaxed);
    res.refusal = Refusal::BadRequest;
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
  // Applied whatever its digest or origin: bumping pages is always safe, and a writer of another
  // topology (a node being added, or one whose file differs) relies on our acknowledgement — it
  // cannot rely on our fence, which does not read its counter (docs/coherence.md "Topology").
  // The ack means "applied here". Its number enters the ledger only when it is an origin we read.
  size_t origin = origin_index(req.origin);
  if (req.digest != digest_ || origin == SIZE_MAX) {
    if (req.digest != digest_) {
      if (foreign_invalidations_.fetch_add(1, std::memory_order_relaxed) % 1000 == 0 && log_)
        log_(fabric::LogLevel::Error,
             "COH0206 invalidation from " + req.origin + " made with another topology (digest " +
                 to_hex(req.digest) + ", ours " + to_hex(digest_) +
                 "): applied and acknowledged, but this home's fence does not cover that writer; "
                 "give every node the same topology file");
    } else if (unknown_origin_.fetch_add(1, std::memory_order_relaxed) % 1000 == 0 && log_) {
      log_(fabric::LogLevel::Warn, "COH0203 invalidation from unknown node \"" + req.origin +
                                       "\": applied and acknowledged (topologies differ?)");
    }
    state_->invalidate(req.deps, req.scheme, req.mark);
    ack(req.ack_cell, req.ack_tag);
    return;
  }
  IssuedNumber n{req.writer_incarnation, req.number};
  // Versions first, ack second: the writer's response may leave once every home acked.
  // A resent round (a number held already) is only acknowledged: its mark, like its
  // invalidation, was applied the first time (a Pend resent after its Release must not mark
  // again).
  if (ledger_.needed(origin, n)) {
    state_->invalidate(req.deps, req.scheme, req.mark);
    ledger_.applied(origin, n);
  } else {
    duplicates_.fetch_add(1, std::memory_order_relaxed);
  }
  ack(req.ack_cell, req.ack_tag);
}

void HomeService::ack(uint32_t cell, uint64_t tag) {
  if (cell >= opts_.ack_cells) return;
  word_at(acks_->data(), ack_cell_offset(cell)).store(tag, std::memory_order_release);
  acks_sent_.fetch_add(1, std::memory_order_relaxed);
}

std::string HomeService::status_text() const {
  HomeStats s = state_->stats();
  FenceStatus f = fence();
  std::ostringstream o;
  o << "node " << node_ << "\nincarnation " << versions_->incarnation() << "\nseq " << state_->seq()
    << "\nslots " << state_->slots() << "\nscheme " << to_string(topo_.coherence.scheme)
    << "\ndigest " << to_hex(digest_) << "\nkeys " << s.keys << "\ndependencies " << s.dependencies
    << "\nregistrations " << s.registrations << "\nrefused_race " << s.refused_race
    << "\nrefused_log " << s.refused_log << "\nrefused_other " << s.refused_other
    << "\ninvalidations " << s.invalidations << "\nkeys_bumped " << s.keys_bumped
    << "\nslots_bumped " << s.slots_bumped << "\nevictions " << s.evictions << "\npending_marks "
    << s.pending_marks << "\npend_applied " << s.pend_applied << "\nreleased " << s.released
    << "\nexpired " << s.expired << "\nrefused_pending " << s.refused_pending << "\npend_overflows "
    << s.pend_overflows << "\nacks_sent " << acks_sent_.load() << "\nduplicate_invalidations "
    << duplicates_.load() << "\nrefused_topology " << refused_topology_.load()
    << "\nforeign_invalidations " << foreign_invalidations_.load() << "\nunknown_origin "
    << unknown_origin_.load() << "\nbad_messages " << bad_messages_.load() << "\nfence_vouching "
    << (f.vouching ? 1 : 0) << "\nfence_ms_left " << f.vouch_ms_left << "\nfence_renewals "
    << f.renewals << "\nfence_catch_ups " << f.catch_ups << "\nfence_failed_renewals "
    << f.failed_renewals << "\nfence_gap_waits " << f.gap_waits << "\n";
  {
    SkipMarkStats k = skip_marks();
    o << "skip_marks_held " << k.held << "\nskip_marks_cleared " << k.cleared << "\n";
  }
  {
    std::string out;
    for (const auto& n : taken_out()) out += " " + n;
    o << "nodes_out" << (out.empty() ? " -" : out) << "\n";
  }
  o << "fence_clock_pauses " << f.pauses << "\n";
  if (opts_.arbiter) {
    o << "arbiter " << opts_.arbiter->describe() << "\narbiter_drops " << f.drops
      << "\narbiter_admissions " << f.admissions << "\narbiter_errors " << f.arbiter_errors << "\n";
    for (const auto& a : arbiter_status())
      o << "arbiter_node " << a.node << " state=" << to_string(a.state) << " epoch=" << a.epoch
        << " tracked_epoch=" << a.tracked_epoch << " unreadable_ms=" << a.unreadable_ms << "\n";
  }
  for (size_t i = 0; i < origins_.size(); ++i) {
    auto v = ledger_.view(i);
    o << "origin_" << origins_[i] << "_covered " << v.covered << "\norigin_" << origins_[i]
      << "_pending " << v.above << "\n";
  }
  if (!f.last_failure.empty()) o << "fence_last_failure " << f.last_failure << "\n";
  return o.str();
}

void HomeService::metrics(base::Metrics& m) const {
  HomeStats s = state_->stats();
  FenceStatus f = fence();
  m.gauge("tierce_home_keys", "Pages registered with this home.", s.keys);
  m.gauge("tierce_home_dependencies", "Dependencies the registered pages name.", s.dependencies);
  m.gauge("tierce_home_version_slots", "Version words in the versions region.", state_->slots());
  m.counter("tierce_home_registrations_total", "Pages registered.", s.registrations);
  m.counter("tierce_home_refused_registrations_total",
            "Registrations refused (race: an invalidation since the read began; log: the log "
            "wrapped; pending: a pending mark; topology: unknown proxy; other).",
            s.refused_race, {{"reason", "race"}});
  m.counter("tierce_home_refused_registrations_total", "", s.refused_log, {{"reason", "log"}});
  m.counter("tierce_home_refused_registrations_total", "", s.refused_pending,
            {{"reason", "pending"}});
  m.counter("tierce_home_refused_registrations_total", "", refused_topology_.load(),
            {{"reason", "topology"}});
  m.counter("tierce_home_refused_registrations_total", "", s.refused_other, {{"reason", "other"}});
  m.counter("tierce_home_invalidations_total", "Invalidations applied.", s.invalidations);
  m.counter("tierce_home_duplicate_invalidations_total",
            "Invalidations received again (already applied).", duplicates_.load());
  m.counter("tierce_home_keys_bumped_total", "Page versions bumped by invalidations.",
            s.keys_bumped);
  m.counter("tierce_home_slots_bumped_total", "Version words bumped by invalidations.",
            s.slots_bumped);
  m.counter("tierce_home_evictions_total", "Registrations forgotten to make room.", s.evictions);
  m.gauge("tierce_home_pending_marks", "Pending marks held (linearizable mode).", s.pending_marks);
  m.counter("tierce_home_pend_applied_total", "Pends applied.", s.pend_applied);
  m.counter("tierce_home_released_total", "Pending marks released.", s.released);
  m.counter("tierce_home_pending_expired_total", "Pending marks that expired unreleased.",
            s.expired);
  m.counter("tierce_home_pend_overflows_total",
            "Pends applied as a global mark (max_pending_marks reached).", s.pend_overflows);
  m.counter("tierce_home_acks_sent_total", "Invalidation acknowledgements sent.",
            acks_sent_.load());
  m.counter("tierce_home_foreign_invalidations_total",
            "Invalidations made under another topology (applied and acknowledged; this home's "
            "fence does not cover their writer).",
            foreign_invalidations_.load());
  m.counter("tierce_home_unknown_origin_total", "Messages from an origin not in the topology.",
            unknown_origin_.load());
  m.counter("tierce_home_bad_messages_total", "Malformed coherence messages refused.",
            bad_messages_.load());
  m.gauge("tierce_home_fence_vouching",
          "1 while the home's lease is ahead of now (its version words may be trusted), 0 when "
          "fenced: proxies forward instead of serving.",
          uint64_t(f.vouching ? 1 : 0));
  m.gauge("tierce_home_fence_seconds_left", "Lease left (negative: fenced for that long).",
          double(f.vouch_ms_left) / 1000.0);
  m.counter("tierce_home_fence_renewals_total", "Fence lease renewals.", f.renewals);
  m.counter("tierce_home_fence_failed_renewals_total", "Fence lease renewals that failed.",
            f.failed_renewals);
  m.counter("tierce_home_fence_catch_ups_total", "Fence catch-ups.", f.catch_ups);
  m.counter("tierce_home_fence_gap_waits_total", "Fence gap waits.", f.gap_waits);
  SkipMarkStats k = skip_marks();
  m.gauge("tierce_home_skip_marks_held",
          "Homes marked in this node's writer region (its updates stop waiting for them).", k.held);
  m.counter("tierce_home_skip_marks_cleared_total",
            "Skip marks of this node's writer region lifted because the home answered again.",
            k.cleared);
  m.counter("tierce_home_fence_clock_pauses_total",
            "Pauses of this host's monotonic clock detected (suspend, stopped or migrated VM, "
            "wall clock stepped forward): the fence was dropped until the next renewal (COH0240).",
            f.pauses);
  if (opts_.arbiter) {
    m.counter("tierce_home_arbiter_drops_total",
              "App nodes this home dropped from the fence in the database (COH0226).", f.drops);
    m.counter("tierce_home_arbiter_admissions_total",
              "App nodes re-admitted by this home's record (the last home to read them, COH0228).",
              f.admissions);
    m.counter("tierce_home_arbiter_errors_total", "Arbiter passes that failed (COH0229).",
              f.arbiter_errors);
    for (const auto& a : arbiter_status())
      m.gauge("tierce_home_arbiter_node_out",
              "1 while this home vouches without reading the app node (dropped in the database).",
              uint64_t(a.state == ArbState::Out ? 1 : 0), {{"node", a.node}});
  }
  for (size_t i = 0; i < origins_.size(); ++i) {
    auto v = ledger_.view(i);
    m.gauge("tierce_home_origin_covered", "Invalidation sequence acknowledged by each origin.",
            v.covered, {{"origin", origins_[i]}});
    m.gauge("tierce_home_origin_pending", "Invalidations of each origin not yet covered.",
            v.above, {{"origin", origins_[i]}});
  }
}

}  // namespace tierce::coherence
