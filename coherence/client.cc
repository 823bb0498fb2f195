// coherence/client.cc — the client side of the app nodes (see client.h).
#include "coherence/client.h"

#include <condition_variable>
#include <thread>

#include "coherence/layout.h"
#include "coherence/protocol.h"
#include "fabric/random.h"

namespace tierce::coherence {

using Clock = std::chrono::steady_clock;

struct ClusterClient::Node {
  struct Conn {
    std::unique_ptr<fabric::Connection> c;
    std::optional<fabric::RemoteRegion> versions, acks;
  };
  const NodeInfo* info = nullptr;
  std::string uri;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<Conn>> idle;
  size_t total = 0;
  Clock::time_point down_until{};
};

namespace {

// A borrowed connection: returned to the pool on success (the node is then up), dropped (and the
// node marked down for retry_after) when the operation failed.
class Lease {
 public:
  Lease(ClusterClient::Node& n, std::unique_ptr<ClusterClient::Node::Conn> c,
        std::chrono::milliseconds retry_after)
      : n_(n), c_(std::move(c)), retry_after_(retry_after) {}
  ~Lease() {
    std::lock_guard lk(n_.mu);
    if (ok_) {
      n_.idle.push_back(std::move(c_));
      n_.down_until = {};  // it answered: back in service (e.g. reached again over a fresh one)
    } else {
      --n_.total;
      n_.down_until = Clock::now() + retry_after_;
    }
    n_.cv.notify_one();
  }
  ClusterClient::Node::Conn& operator*() { return *c_; }
  ClusterClient::Node::Conn* operator->() { return c_.get(); }
  void done() { ok_ = true; }

 private:
  ClusterClient::Node& n_;
  std::unique_ptr<ClusterClient::Node::Conn> c_;
  std::chrono::milliseconds retry_after_;
  bool ok_ = false;
};

}  // namespace

ClusterClient::ClusterClient(Topology topo, fabric::Secret secret, ClientTuning tuning,
                             fabric::LogSink log)
    : topo_(std::move(topo)), secret_(std::move(secret)), tuning_(tuning), log_(std::move(log)) {
  for (const auto& n : topo_.nodes) {
    auto node = std::make_unique<Node>();
    node->info = &n;
    if (n.role == Role::App) node->uri = topo_.uri_of(n);  // throws when it has none
    nodes_.push_back(std::move(node));
  }
}

ClusterClient::~ClusterClient() = default;

ClusterClient::Node& ClusterClient::node(const std::string& name) {
  for (auto& n : nodes_)
    if (n->info->name == name) return *n;
  throw TopologyError("no node named \"" + name + "\" in " + topo_.path);
}

namespace {

// Connects to `n` for a slot the caller already counted in n.total; on failure gives the slot
// back, marks the node down for retry_after, says why and returns nullptr.
std::unique_ptr<ClusterClient::Node::Conn> connect_counted(ClusterClient::Node& n,
                                                           const fabric::Secret& secret,
                                                           const ClientTuning& t,
                                                           std::string* why) {
  try {
    fabric::ClientOptions o;
    o.secret = secret;
    o.connect_timeout = t.connect_timeout;
    o.op_timeout = t.op_timeout;
    auto c = std::make_unique<ClusterClient::Node::Conn>();
    c->c = fabric::connect(n.uri, o);
    return c;
  } catch (const std::exception& e) {
    *why = e.what();
    std::lock_guard lk(n.mu);
    --n.total;
    n.down_until = Clock::now() + t.retry_after;
    n.cv.notify_one();
    return nullptr;
  }
}

// Borrows a connection of `n` (connecting when none is idle); nullptr when the node is marked
// down or unreachable (the caller fails closed).
std::unique_ptr<ClusterClient::Node::Conn> borrow(ClusterClient::Node& n,
                                                  const fabric::Secret& secret,
                                                  const ClientTuning& t,
                                                  const fabric::LogSink& log,
                                                  bool ignore_down = false) {
  {
    std::unique_lock lk(n.mu);
    auto deadline = Clock::now() + t.op_timeout;
    for (;;) {
      if (!ignore_down && Clock::now() < n.down_until) return nullptr;
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
  std::string why;
  auto c = connect_counted(n, secret, t, &why);
  if (!c && log)
    log(fabric::LogLevel::Warn, "COH0101 cannot reach " + n.info->name + " at " + n.uri + ": " +
                                    why + " (its pages are not served from cache for " +
                                    std::to_string(t.retry_after.count()) + " ms)");
  return c;
}

// A new connection to `n`, even while the node is marked down, after dropping its idle pooled
// ones (they may lead to a previous incarnation of its memd); nullptr when it cannot be reached.
// Quiet: the caller reports the node.
std::unique_ptr<ClusterClient::Node::Conn> borrow_fresh(ClusterClient::Node& n,
                                                        const fabric::Secret& secret,
                                                        const ClientTuning& t) {
  std::vector<std::unique_ptr<ClusterClient::Node::Conn>> stale;
  {
    std::lock_guard lk(n.mu);
    stale.swap(n.idle);
    n.total -= stale.size();
    ++n.total;  // may exceed max_connections_per_node by the callers doing this at once
  }
  stale.clear();  // closed outside the lock
  std::string why;
  return connect_counted(n, secret, t, &why);
}

// Whether a one-sided add that failed with `e` did not change the target's word (and may be
// retried on a fresh connection): the server refused a stale descriptor, or the connection (or
// the exporter) was gone — EPIPE/ECONNRESET on sending, or a peer that closed; a memd that died
// after applying it took the counter with it. Not a timeout: the request may have reached a slow
// responder that applies it later.
bool add_not_applied(fabric::Errc e) {
  using fabric::Errc;
  switch (e) {
    case Errc::BadKey:
    case Errc::NoSuchRegion:
    case Errc::Revoked:
    case Errc::PeerClosed:
    case Errc::PeerDead:
      return true;
    default:
      return false;
  }
}

const fabric::RemoteRegion& region(ClusterClient::Node::Conn& c, bool acks) {
  auto& r = acks ? c.acks : c.versions;
  if (!r) r = c.c->lookup(acks ? kAcksRegion : kVersionsRegion);
  return *r;
}

std::optional<uint64_t> read_word(ClusterClient::Node& n, const fabric::Secret& secret,
                                  const ClientTuning& t, const fabric::LogSink& log, bool acks,
                                  uint64_t off) {
  auto c = borrow(n, secret, t, log);
  if (!c) return std::nullopt;
  Lease l(n, std::move(c), t.retry_after);
  try {
    const auto& r = region(*l, acks);
    if (off + 8 > r.len) return std::nullopt;
    uint64_t v = 0;
    l->c->read(r, off, &v, 8);
    l.done();
    return v;
  } catch (const std::exception& e) {
    if (log)
      log(fabric::LogLevel::Debug,
          "COH0102 read at " + n.info->name + " failed: " + std::string(e.what()));
    return std::nullopt;
  }
}

}  // namespace

std::optional<uint64_t> ClusterClient::read_version(const std::string& home, uint64_t slot) {
  if (slot >= topo_.version_slots) return std::nullopt;
  return read_word(node(home), secret_, tuning_, log_, false, slot_offset(slot));
}

std::optional<uint64_t> ClusterClient::read_seq(const std::string& home) {
  return read_word(node(home), secret_, tuning_, log_, false, kSeqOffset);
}

RegisterResult ClusterClient::register_page(const std::string& home, uint64_t key, uint64_t slot,
                                            uint64_t seq_start, std::span<const uint64_t> deps) {
  RegisterResult res;
  Node& n = node(home);
  auto c = borrow(n, secret_, tuning_, log_);
  if (!c) {
    res.reason = "home " + home + " unreachable";
    return res;
  }
  Lease l(n, std::move(c), tuning_.retry_after);
  try {
    RegisterRequest req{key, slot, seq_start, {deps.begin(), deps.end()}};
    auto reply = l->c->call(kRegisterService, encode(req));
    res = decode_register_reply(reply);
    l.done();
  } catch (const std::exception& e) {
    res = RegisterResult{};
    res.reason = "register at " + home + " failed: " + e.what();
  }
  return res;
}

InvalidateOutcome ClusterClient::invalidate(const std::string& self,
                                            std::span<const uint64_t> deps, Scheme scheme,
                                            std::chrono::milliseconds deadline) {
  auto t0 = Clock::now();
  auto until = t0 + deadline;
  InvalidateOutcome out;
  auto apps = topo_.app_nodes();
  out.homes = apps.size();
  auto finish = [&] {
    out.elapsed = Clock::now() - t0;
    return out;
  };

  // The ack counters live in this node's memd. A pooled connection to it that fails (its memd
  // restarted) is replaced once by a fresh one, as acknowledge() does.
  Node& me = node(self);
  std::optional<Lease> ml;
  auto own = [&]() -> Node::Conn* {
    if (ml) return &**ml;
    for (int attempt = 0; attempt < 2 && !ml; ++attempt) {
      auto c = attempt == 0 ? borrow(me, secret_, tuning_, log_) : borrow_fresh(me, secret_, tuning_);
      if (!c) continue;
      ml.emplace(me, std::move(c), tuning_.retry_after);
      try {
        region(**ml, true);
      } catch (const std::exception&) {
        ml.reset();
      }
    }
    return ml ? &**ml : nullptr;
  };

  InvalidateRequest req;
  req.scheme = scheme;
  req.origin = self;
  if (scheme == Scheme::DependencyLists) req.deps.assign(deps.begin(), deps.end());

  // Rounds until every home acknowledged or the deadline passed. Each round claims a fresh ack
  // slot and sends to the homes not yet known to have applied the invalidation; a round whose
  // acks all arrived settles every home it reached. Homes are resent to after a round that fell
  // short, over fresh connections: a pooled connection may lead to a previous incarnation of
  // the home (a send into it can "succeed" and be lost), and a home marked down may be back —
  // a restarted home whose pages proxies validate again must get the invalidation too.
  // Invalidations are idempotent, so a home reached twice only bumps its versions twice.
  enum class Why { Unsent, Unreachable, NoAck };
  std::vector<Why> pending(apps.size(), Why::Unsent);
  std::vector<bool> done(apps.size(), false);
  size_t n_done = 0;
  std::string own_error;
  auto slice = std::max<std::chrono::milliseconds>(deadline / 8, std::chrono::milliseconds(10));
  for (int round = 0; n_done < apps.size() && Clock::now() < until; ++round) {
    auto round_end = std::min(until, Clock::now() + slice);
    slice = std::min(slice * 2, deadline);  // a home down for long retries many short rounds
    // 1. An ack slot on this node: claim it (cas owner 0 -> token), note the counter's base.
    uint64_t token = fabric::random_u64() | 1;
    uint32_t slot = 0;
    uint64_t base = 0;
    Node::Conn* oc = own();
    if (!oc) {
      own_error = "own memd unreachable: no ack counter";
      std::this_thread::sleep_until(round_end);
      continue;
    }
    try {
      const auto& acks = *oc->acks;
      uint64_t n_slots = acks.len >= 64 ? (acks.len - 64) / 16 : 0;
      bool claimed = false;
      uint64_t start = fabric::random_u64();
      for (uint64_t i = 0; i < n_slots && i < 256 && !claimed; ++i) {
        slot = uint32_t((start + i) % n_slots);
        claimed = oc->c->cas64(acks, ack_owner_offset(slot), 0, token) == 0;
      }
      if (!claimed) {
        own_error = "no free ack slot on " + self;
        break;  // not going to change before the deadline
      }
      oc->c->read(acks, ack_counter_offset(slot), &base, 8);
    } catch (const std::exception& e) {
      own_error = std::string("ack slot: ") + e.what();
      ml.reset();  // dropped; the next round reconnects
      std::this_thread::sleep_until(std::min(until, Clock::now() + std::chrono::milliseconds(10)));
      continue;
    }
    own_error.clear();

    // 2. Send to every unsettled home (one-way); a home that cannot be reached will not ack.
    req.ack_slot = slot;
    req.ack_token = token;
    auto body = encode(req);
    std::vector<size_t> sent;
    for (size_t i = 0; i < apps.size(); ++i) {
      if (done[i]) continue;
      Node& h = node(apps[i]->name);
      auto hc = round == 0 ? borrow(h, secret_, tuning_, log_) : borrow_fresh(h, secret_, tuning_);
      if (!hc) {
        pending[i] = Why::Unreachable;
        continue;
      }
      Lease hl(h, std::move(hc), tuning_.retry_after);
      try {
        hl->c->send(kInvalidateService, body);
        hl.done();
        sent.push_back(i);
        pending[i] = Why::NoAck;
      } catch (const std::exception& e) {
        pending[i] = Why::Unreachable;
        if (log_)
          log_(fabric::LogLevel::Warn,
               "COH0103 invalidation to " + apps[i]->name + " not sent: " + e.what());
      }
    }

    // 3. Wait for this round's acks (each home fetch-and-adds the counter once).
    uint64_t count = base;
    bool own_ok = true;
    try {
      for (int spins = 0;; ++spins) {
        oc->c->read(*oc->acks, ack_counter_offset(slot), &count, 8);
        if (count - base >= sent.size() || Clock::now() >= round_end) break;
        if (spins > 200)
          std::this_thread::sleep_for(std::chrono::microseconds(spins > 2000 ? 200 : 20));
      }
    } catch (const std::exception& e) {
      own_ok = false;
      if (log_) log_(fabric::LogLevel::Warn, std::string("COH0104 ack counter: ") + e.what());
    }
    bool settled = own_ok && count - base >= sent.size();
    if (settled) {
      for (size_t i : sent) {
        done[i] = true;
        ++n_done;
      }
    }
    // 4. Release the slot, or poison it for good when an ack may still arrive late: a late ack
    //    must never count for a later round that reuses the slot.
    if (own_ok) {
      try {
        oc->c->cas64(*oc->acks, ack_owner_offset(slot), token, settled ? 0 : kPoisoned);
      } catch (const std::exception&) {
        own_ok = false;
      }
    }
    if (!own_ok) ml.reset();
    // A round that reached every unsettled home but fell short waited its whole slice; one that
    // could not reach some home retries after a short pause instead of spinning on connect().
    if (n_done < apps.size() && sent.size() + n_done == apps.size() && !settled) continue;
    if (n_done < apps.size())
      std::this_thread::sleep_until(std::min(until, Clock::now() + std::chrono::milliseconds(10)));
  }
  if (ml) ml->done();
  out.acked = n_done;
  if (n_done < apps.size()) {
    // A home we could not reach may still be readable by proxies that mapped it (shm) until its
    // lease lapses: never return before the full deadline (callers keep it above the lease).
    std::this_thread::sleep_until(until);
    for (size_t i = 0; i < apps.size(); ++i) {
      if (done[i]) continue;
      const char* why = pending[i] == Why::NoAck ? "sent, no ack within " : "unreachable for ";
      out.missing.push_back(apps[i]->name + " (" + why + std::to_string(deadline.count()) +
                            " ms" + (own_error.empty() ? "" : "; " + own_error) + ")");
    }
  }
  return finish();
}

void ClusterClient::acknowledge(const std::string& origin, uint32_t slot) {
  // The add is retried (once, over a fresh connection: a pooled one may lead to a previous
  // incarnation of the origin's memd) only when it cannot have counted: no connection, the
  // region lookup failed, the server refused it, or the connection was gone. An add that timed
  // out may still be applied by a slow responder; a second one would count this home twice, and
  // the writer's round could settle while another home has not applied the invalidation. Such an
  // ack is given up instead: a lost ack costs the writer one resend round, never coherence.
  Node& n = node(origin);
  std::string why = "unreachable";
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto c = borrow(n, secret_, tuning_, log_, attempt > 0);
    if (!c) continue;
    Lease l(n, std::move(c), tuning_.retry_after);
    const fabric::RemoteRegion* acks = nullptr;
    try {
      acks = &region(*l, true);  // a lookup changes nothing: retried on any failure
    } catch (const std::exception& e) {
      why = e.what();
      continue;
    }
    try {
      l->c->faa64(*acks, ack_counter_offset(slot), 1);
      l.done();
      return;
    } catch (const fabric::FabricError& e) {
      why = e.what();
      if (!add_not_applied(e.code())) break;
    } catch (const std::exception& e) {
      why = e.what();
      break;
    }
  }
  throw std::runtime_error(why);
}

}  // namespace tierce::coherence
