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

// A borrowed connection: returned to the pool on success, dropped (and the node marked down for
// retry_after) when the operation failed.
class Lease {
 public:
  Lease(ClusterClient::Node& n, std::unique_ptr<ClusterClient::Node::Conn> c,
        std::chrono::milliseconds retry_after)
      : n_(n), c_(std::move(c)), retry_after_(retry_after) {}
  ~Lease() {
    std::lock_guard lk(n_.mu);
    if (ok_) {
      n_.idle.push_back(std::move(c_));
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
  try {
    fabric::ClientOptions o;
    o.secret = secret;
    o.connect_timeout = t.connect_timeout;
    o.op_timeout = t.op_timeout;
    auto c = std::make_unique<ClusterClient::Node::Conn>();
    c->c = fabric::connect(n.uri, o);
    return c;
  } catch (const std::exception& e) {
    std::lock_guard lk(n.mu);
    --n.total;
    n.down_until = Clock::now() + t.retry_after;
    n.cv.notify_one();
    if (log)
      log(fabric::LogLevel::Warn, "COH0101 cannot reach " + n.info->name + " at " + n.uri + ": " +
                                      e.what() + " (its pages are not served from cache for " +
                                      std::to_string(t.retry_after.count()) + " ms)");
    return nullptr;
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
  auto all_missing = [&](const std::string& why) {
    for (auto* a : apps) out.missing.push_back(a->name + " (" + why + ")");
    return finish();
  };

  // 1. An ack slot on this node: claim it (cas owner 0 -> token), note the counter's base.
  Node& me = node(self);
  auto c = borrow(me, secret_, tuning_, log_);
  if (!c) return all_missing("own memd unreachable: no ack counter");
  Lease ml(me, std::move(c), tuning_.retry_after);
  uint64_t token = fabric::random_u64() | 1;
  uint32_t slot = 0;
  uint64_t base = 0;
  try {
    const auto& acks = region(*ml, true);
    uint64_t n_slots = acks.len >= 64 ? (acks.len - 64) / 16 : 0;
    bool claimed = false;
    uint64_t start = fabric::random_u64();
    for (uint64_t i = 0; i < n_slots && i < 256 && !claimed; ++i) {
      slot = uint32_t((start + i) % n_slots);
      claimed = ml->c->cas64(acks, ack_owner_offset(slot), 0, token) == 0;
    }
    if (!claimed) return all_missing("no free ack slot on " + self);
    ml->c->read(acks, ack_counter_offset(slot), &base, 8);
  } catch (const std::exception& e) {
    return all_missing(std::string("ack slot: ") + e.what());
  }

  // 2. Send to every home (one-way); a home that cannot be reached will not ack.
  InvalidateRequest req;
  req.scheme = scheme;
  req.ack_slot = slot;
  req.ack_token = token;
  req.origin = self;
  if (scheme == Scheme::DependencyLists) req.deps.assign(deps.begin(), deps.end());
  auto body = encode(req);
  std::vector<bool> sent(apps.size(), false);
  size_t n_sent = 0;
  for (size_t i = 0; i < apps.size(); ++i) {
    Node& h = node(apps[i]->name);
    auto hc = borrow(h, secret_, tuning_, log_);
    if (!hc) continue;
    Lease hl(h, std::move(hc), tuning_.retry_after);
    try {
      hl->c->send(kInvalidateService, body);
      hl.done();
      sent[i] = true;
      ++n_sent;
    } catch (const std::exception& e) {
      if (log_)
        log_(fabric::LogLevel::Warn,
             "COH0103 invalidation to " + apps[i]->name + " not sent: " + e.what());
    }
  }

  // 3. Wait for the acks (each home fetch-and-adds our counter once).
  uint64_t count = 0;
  const auto& acks = *ml->acks;
  try {
    for (int spins = 0;; ++spins) {
      ml->c->read(acks, ack_counter_offset(slot), &count, 8);
      if (count - base >= n_sent || Clock::now() >= until) break;
      if (spins > 200) std::this_thread::sleep_for(std::chrono::microseconds(spins > 2000 ? 200 : 20));
    }
  } catch (const std::exception& e) {
    if (log_) log_(fabric::LogLevel::Warn, std::string("COH0104 ack counter: ") + e.what());
  }
  out.acked = std::min<uint64_t>(count - base, n_sent);
  bool complete = n_sent == apps.size() && count - base >= n_sent;
  if (!complete) {
    // A home we could not reach may still be readable by proxies that mapped it (shm) until its
    // lease lapses: never return before the full deadline (callers keep it above the lease).
    std::this_thread::sleep_until(until);
    for (size_t i = 0; i < apps.size(); ++i)
      if (!sent[i]) out.missing.push_back(apps[i]->name + " (unreachable)");
    if (count - base < n_sent)
      out.missing.push_back(std::to_string(n_sent - (count - base)) + " of the homes sent to (no ack within " +
                            std::to_string(deadline.count()) + " ms)");
  }
  // 4. Release the slot, or poison it for good when an ack may still arrive late: a late ack
  //    must never count for a later round that reuses the slot.
  try {
    ml->c->cas64(acks, ack_owner_offset(slot), token,
                 count - base >= n_sent ? 0 : kPoisoned);
    ml.done();
  } catch (const std::exception&) {
  }
  return finish();
}

void ClusterClient::acknowledge(const std::string& origin, uint32_t slot) {
  Node& n = node(origin);
  std::string why = "unreachable";
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto c = borrow(n, secret_, tuning_, log_, attempt > 0);
    if (!c) continue;
    Lease l(n, std::move(c), tuning_.retry_after);
    try {
      l->c->faa64(region(*l, true), ack_counter_offset(slot), 1);
      l.done();
      return;
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  throw std::runtime_error(why);
}

}  // namespace tierce::coherence
