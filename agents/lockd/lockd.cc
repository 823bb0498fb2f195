// agents/lockd/lockd.cc — the lockd agent: fabric server, peers, heartbeats, recovery (lockd.h).
#include "agents/lockd/lockd.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/metrics.h"
#include "cluster/hash.h"
#include "dlm/messages.h"
#include "fabric/random.h"

namespace tierce::lockd {

using Clock = std::chrono::steady_clock;

struct Lockd::Peer {
  uint32_t rank = 0;
  std::string name;
  std::string uri;
  // Three connections, one per use, so that none waits behind another: one-sided operations
  // (under the engine's mutex), one-way messages (any thread), calls (heartbeat, resolve,
  // recovery). `ops` is opened with reset_on_close (see table_ops).
  std::mutex ops_mu, msg_mu, call_mu;
  std::unique_ptr<fabric::Connection> ops, msg, calls;
  fabric::RemoteRegion table;
  Clock::time_point msg_retry_at{};
  // Liveness (under Lockd::mu_).
  Clock::time_point last_heard{};   // it called our heartbeat
  Clock::time_point last_answer{};  // send time of our heartbeat that it answered
  // last_answer for the engine's grant-time lease check (read without Lockd::mu_, which the
  // heartbeat logic holds while it calls the engine); nanoseconds of Clock.
  std::atomic<int64_t> last_answer_ns{0};
  uint64_t incarnation = 0;         // as last seen
  // up: its answers are fresh (lease - guard): this node trusts its holds on the member's locks.
  // dead: not heard from (its heartbeats) for a whole lease: its holds here may be given away.
  // Cleared as soon as it is heard from again (not when it is up again: see heard_within_lease).
  // Not dead at this lockd's start: a member not heard from yet may already be using this
  // node's table (it saw this node up first: heartbeats are answered before ours are) — a
  // recovery must ask it, so it is dead only once silent for a whole lease since our start.
  // Starting dead, a recovery at a restarted home skipped a member that had already queued on
  // the new table: its entries and holds stayed at the old generation, unknown to the home, and
  // the lock waited for ever (dlm_stress_ncosed_{tcp,shm}: about 1 run in 12 under load).
  bool up = false;
  bool dead = false;
  std::string why_down = "not heard from yet";
  uint64_t send_failures = 0;
  uint64_t old_incarnation_msgs = 0;  // dropped (note_incarnation), under Lockd::mu_

  // Protocol messages (dlm.msg) to this member, while it is up, are numbered within a stream
  // and kept until its heartbeat answers acknowledge them: a write that fails or misses its
  // deadline (the member is alive but slow) is re-sent, in order, and so is anything not
  // acknowledged in time (lost with a broken connection); the member delivers each once, in
  // order (below). Before, such a message was simply lost, and with a live member nothing ever
  // repaired it: that lock's queue waited for ever. When the member goes down or restarts the
  // queue is dropped and a new stream begins — the recovery repairs what was in flight, as it
  // repairs everything a down member missed. Under msg_mu.
  struct Outgoing {
    uint64_t seq = 0;
    std::vector<uint8_t> body;  // the messages + trailer (stream, seq)
    Clock::time_point written{};
  };
  std::deque<Outgoing> outbox;
  size_t unsent = 0;  // outbox[unsent..] not written yet
  uint64_t out_stream = 1, out_seq = 0;
  uint64_t resends = 0;
  // What this node delivered of the member's messages (under in_mu, held while the engine
  // handles one: its messages are handled one at a time, in order). Lock order: in_mu before
  // Lockd::mu_ (the engine may ask for a recovery), never the other way.
  std::mutex in_mu;
  uint64_t in_incarnation = 0, in_stream = 0, in_seq = 0;
  uint64_t duplicates = 0, out_of_order = 0;
};

namespace {

// After a dlm.msg body's 56-byte messages: u64 stream, u64 sequence number (Peer::outbox).
// After a heartbeat answer: the same pair, the last message delivered from the caller.
constexpr size_t kMsgTrailer = 16;

void store_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

// Adds to `homes` the homes, other than `to` and `self`, of the locks the messages of a dlm.msg
// body (its trailer aside) are about.
void add_homes(std::span<const uint8_t> body, uint32_t to, uint32_t self,
               std::vector<uint32_t>& homes) {
  for (size_t at = 0; at + dlm::kMsgBytes <= body.size(); at += dlm::kMsgBytes) {
    auto m = dlm::Msg::decode(body.subspan(at, dlm::kMsgBytes));
    if (m && m->home != to && m->home != self &&
        std::find(homes.begin(), homes.end(), m->home) == homes.end())
      homes.push_back(m->home);
  }
}

// Its connections to the lockd of `to`: `protection` the least it accepts, the same as its own
// server imposes (LockdOptions::protection), and the server's spin. In a keyed cluster `to` must
// prove it is that node (a lock table is compare-and-swapped only at its own home), and this
// lockd signs as `self`.
fabric::ClientOptions client_options(const fabric::Secret& s, const cluster::Topology& t,
                                     const LockdOptions& lo, const std::string& self,
                                     const std::string& to) {
  fabric::ClientOptions o;
  if (const cluster::NodeInfo* n = t.find(to)) o.identity = cluster::expect(*n);
  o.identity.node = self;
  o.identity.key = lo.node_key;
  o.secret = s;
  o.protection = lo.protection;
  o.spin = lo.spin;
  o.connect_timeout = std::chrono::milliseconds(std::max<uint32_t>(100, t.dlm.heartbeat_ms * 2));
  o.op_timeout = std::chrono::milliseconds(std::max<uint32_t>(50, t.dlm.lease_ms / 4));
  return o;
}

}  // namespace

uint64_t Lockd::next_epoch(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error("LOCKD0010 cannot create the state directory " + dir + ": " +
                             ec.message() + " (give --state-dir a writable directory)");
  const std::string path = dir + "/epoch";
  uint64_t old = 0;
  {
    std::ifstream in(path);
    if (in && !(in >> old))
      throw std::runtime_error("LOCKD0011 " + path +
                               " does not hold a number: it is lockd's restart counter; remove "
                               "it only if no lock token of this node may still be in use");
  }
  const uint64_t epoch = old + 1;
  if (epoch >= (1ull << (64 - dlm::kEpochShift)))
    throw std::runtime_error("LOCKD0012 " + path + ": the epoch is exhausted");
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw std::runtime_error("LOCKD0010 cannot write " + tmp + ": " + std::strerror(errno));
  std::string text = std::to_string(epoch) + "\n";
  bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("LOCKD0010 cannot write " + path + ": " + std::strerror(errno));
  return epoch;
}

Lockd::Lockd(cluster::Topology topo, std::string node, fabric::Secret secret, LockdOptions opts)
    : topo_(std::move(topo)), node_(std::move(node)), secret_(std::move(secret)),
      opts_(std::move(opts)) {
  rank_ = topo_.rank_of(node_);  // throws: not a member
  const auto members = topo_.lockd_nodes();
  epoch_ = next_epoch(opts_.state_dir);
  // Ordered by the epoch (note_incarnation); the random half tells two processes of one epoch
  // apart (two lockds started on one state directory by mistake).
  incarnation_ = (epoch_ << 32) | (fabric::random_u64() & 0xffffffffu) | 1;
  digest_ = topo_.dlm_digest();
  auto log = [this](fabric::LogLevel l, const std::string& s) {
    if (opts_.log) opts_.log(l, s);
  };

  peers_.resize(members.size() + 1);
  for (size_t i = 0; i < members.size(); ++i) {
    auto p = std::make_unique<Peer>();
    p->rank = uint32_t(i + 1);
    p->name = members[i]->name;
    p->uri = topo_.lockd_uri_of(*members[i]);
    peers_[i + 1] = std::move(p);
  }

  const size_t table_bytes = size_t(topo_.dlm.lock_slots) * dlm::kSlotBytes;
  table_ = std::make_shared<fabric::SharedSegment>(
      fabric::SharedSegment::create_anonymous("tierce-dlm-" + node_, table_bytes));

  fabric::ServerOptions so;
  so.name = node_;
  so.identity.key = opts_.node_key;  // proves this node to the others (a keyed cluster)
  for (const auto& n : topo_.nodes)  // and checks the lockds that sign as they connect
    if (n.public_key) so.identity.peers[n.name] = *n.public_key;
  so.secret = secret_;
  so.listen = topo_.node(node_).lockd;
  so.log = opts_.log;
  so.protection = opts_.protection;
  so.max_preauth_frame = opts_.max_preauth_frame;
  so.max_connections = opts_.max_connections;
  so.max_connections_per_ip = opts_.max_connections_per_ip;
  so.spin = opts_.spin;
  server_ = std::make_unique<fabric::Server>(so);
  server_->export_region("dlm.table", table_);

  dlm::EngineOptions eo;
  eo.algorithm = topo_.dlm.algorithm;
  eo.self_rank = rank_;
  eo.members = uint32_t(members.size());
  eo.lock_slots = topo_.dlm.lock_slots;
  eo.epoch = epoch_;
  eo.incarnation = incarnation_;
  eo.home_of = [this](const std::string& name) {
    return topo_.rank_of(topo_.lock_home_of(cluster::hash64(name)).name);
  };
  eo.uncertain_release_delay = std::chrono::milliseconds(topo_.dlm.lease_ms);
  // A hold revoked on a lapse stays held at the home until its client read the revocation,
  // a lease at most (EngineOptions::revoke_wait).
  eo.revoke_wait = std::chrono::milliseconds(topo_.dlm.lease_ms);
  eo.lease_until = [this](uint32_t home) { return lease_until(home); };
  eo.request_recovery = [this] {
    {
      std::lock_guard lk(mu_);
      recovery_needed_ = true;
    }
    cv_.notify_all();
  };
  eo.log = opts_.log;
  engine_ = std::make_unique<dlm::LockEngine>(eo, std::span(table_->data(), table_bytes), *this);
  for (uint32_t r = 1; r < peers_.size(); ++r)
    if (r != rank_) engine_->member_down(r, "not heard from yet");

  server_->on_call("dlm.msg", [this](const fabric::PeerInfo&, std::span<const uint8_t> b) {
    auto m = dlm::Msg::decode(b.first(std::min(b.size(), dlm::kMsgBytes)));
    const bool member = m && m->sender > 0 && m->sender < peers_.size() && m->sender != rank_;
    if (member && note_incarnation(m->sender, m->from) == Incarnation::Old)
      return std::vector<uint8_t>{};  // sent by a process that is gone: its state was dropped
    if (!member || b.size() % dlm::kMsgBytes != kMsgTrailer) {
      engine_->on_message(b);  // malformed: the engine counts and logs it
      return std::vector<uint8_t>{};
    }
    const uint64_t stream = load_le64(b.data() + b.size() - kMsgTrailer);
    const uint64_t seq = load_le64(b.data() + b.size() - 8);
    Peer& p = *peers_[m->sender];
    std::lock_guard lk(p.in_mu);
    if (m->from != p.in_incarnation) {  // a new process (an old one was refused just above)
      p.in_incarnation = m->from;       // numbers its messages from the start
      p.in_stream = 0;
      p.in_seq = 0;
    }
    if (stream < p.in_stream || (stream == p.in_stream && seq <= p.in_seq)) {
      ++p.duplicates;  // a re-sent message that had arrived after all
      return std::vector<uint8_t>{};
    }
    if (seq != (stream == p.in_stream ? p.in_seq + 1 : 1)) {
      ++p.out_of_order;  // one before it is missing: the sender re-sends from that one
      return std::vector<uint8_t>{};
    }
    p.in_stream = stream;
    p.in_seq = seq;
    engine_->on_message(b.first(b.size() - kMsgTrailer));
    return std::vector<uint8_t>{};
  });
  server_->on_call("dlm.resolve", [this](const fabric::PeerInfo&, std::span<const uint8_t> b) {
    return engine_->on_resolve(b);
  });
  server_->on_call("dlm.recover", [this](const fabric::PeerInfo&, std::span<const uint8_t> b) {
    return engine_->on_recover(b);
  });
  server_->on_call("dlm.heartbeat", [this](const fabric::PeerInfo&, std::span<const uint8_t> b) {
    return on_heartbeat(b);
  });
  server_->on_call("dlm.status", [this](const fabric::PeerInfo&, std::span<const uint8_t>) {
    std::string s = status_text();
    return std::vector<uint8_t>(s.begin(), s.end());
  }, fabric::Callers::Anyone);

  server_->on_call("dlm.metrics", [this](const fabric::PeerInfo&, std::span<const uint8_t>) {
    std::string s = metrics_text();
    return std::vector<uint8_t>(s.begin(), s.end());
  }, fabric::Callers::Anyone);

  IpcOptions ipc_opts = opts_.ipc;
  ipc_opts.metrics = [this] { return metrics_text(); };
  ipc_ = std::make_unique<IpcServer>(opts_.socket_path, *engine_, opts_.log, ipc_opts);
  ipc_view_.store(ipc_.get(), std::memory_order_release);
  heartbeats_started_ = Clock::now();
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
  recovery_ = std::thread([this] { recovery_loop(); });
  log(fabric::LogLevel::Info,
      "LOCKD0001 node " + node_ + " is lock manager member " + std::to_string(rank_) + " of " +
          std::to_string(members.size()) + " (" + std::string(cluster::to_string(topo_.dlm.algorithm)) +
          ", epoch " + std::to_string(epoch_) + "), clients on " + opts_.socket_path);
}

Lockd::~Lockd() { stop(); }

void Lockd::stop() {
  {
    std::lock_guard lk(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (ipc_) ipc_->stop();
  if (heartbeat_.joinable()) heartbeat_.join();
  // The recovery thread may be in recover_all(), asking a member that is down but not yet dead
  // until it answers or is dead; with the heartbeat thread gone nothing declares it dead any
  // more, so that would never end: the engine's stop() makes it give up (a hang of
  // dlm_cluster_*: a node stopped while another was down, the test cluster's destructor).
  if (engine_) engine_->stop();
  if (recovery_.joinable()) recovery_.join();
  if (server_) server_->stop();
}

std::vector<std::string> Lockd::bound_uris() const { return server_->bound_uris(); }

Lockd::Peer& Lockd::peer(uint32_t rank) {
  if (rank == 0 || rank >= peers_.size())
    throw std::runtime_error("no lock manager member of rank " + std::to_string(rank));
  return *peers_[rank];
}

// Whether the member called our heartbeat within the last lease (counting from the start of
// our heartbeats when it has not yet): not dead. The recovery's census asks every such member,
// read at the moment it asks: a member can hold one of our locks at time t only if we answered
// a heartbeat it sent after t - (lease - guard), which we received (last_heard) no earlier than
// that, so at t it is heard within the lease. The `dead` flag lags by up to a heartbeat period
// and used to be cleared only when the member's answers were fresh again too: a member heard
// from (its lease on us renewed, our locks granted to it) but whose answers to us were late or
// lost was skipped by the census, and the rebuilt queue gave its hold away — two valid holders
// (issue 33's nemesis: ncosed seed 13, dqnl seed 15; fence.py returning_member).
bool Lockd::heard_within_lease(const Peer& p, Clock::time_point now) const {
  const auto lease = std::chrono::milliseconds(topo_.dlm.lease_ms);
  return now - std::max(p.last_heard, heartbeats_started_) <= lease;
}

bool Lockd::member_dead(uint32_t rank) const {
  std::lock_guard lk(mu_);
  return rank < peers_.size() && peers_[rank] && peers_[rank]->dead;
}

size_t Lockd::members_up() const {
  size_t n = 1;
  for (uint32_t r = 1; r < peers_.size(); ++r)
    if (r != rank_ && engine_->member_alive(r)) ++n;
  return n;
}

// ---------------------------------------------------------------------------------------------
// dlm::Network

// This node's lease on `home`: lease - lease/4 from the sending of the last heartbeat it
// answered. The home gives this node's holds away only after a whole lease without hearing from
// it (LOCKD0034), and it heard this node after that sending: a quarter lease is left for the
// client to read its grant and for the two clocks' rates. Lock-free (the engine asks under its
// mutex; the heartbeat logic holds mu_ while it calls the engine).
uint64_t Lockd::lease_until(uint32_t home) const {
  if (home == 0 || home >= peers_.size() || home == rank_) return UINT64_MAX;
  const int64_t answered = peers_[home]->last_answer_ns.load(std::memory_order_acquire);
  if (answered <= 0) return 0;
  const auto lease = std::chrono::milliseconds(topo_.dlm.lease_ms);
  return uint64_t(answered) + uint64_t(std::chrono::nanoseconds(lease - lease / 4).count());
}

bool Lockd::lease_valid(uint32_t home) const {
  return uint64_t(Clock::now().time_since_epoch().count()) < lease_until(home);
}

void Lockd::open_ops(Peer& p) {
  // SO_LINGER {1, 0} from the start (fabric::ClientOptions::reset_on_close): when this process
  // dies, its kernel resets the connection and drops what it still queues, instead of
  // retransmitting it for minutes. Else a release's WRITE K queued during a partition could
  // land at the home after the home declared this lockd dead and recovered the lock, and set
  // K below the recovery token (the spin model's -DLATE_OPS). A connection this process gives
  // up on is reset too (fabric does that on any failure), so this covers the crash.
  auto o = client_options(secret_, topo_, opts_, node_, p.name);
  o.reset_on_close = true;
  p.ops = fabric::connect(p.uri, o);
  p.table = p.ops->lookup("dlm.table");
}

void Lockd::table_ops(uint32_t home, std::span<fabric::OneSidedOp> ops) {
  Peer& p = peer(home);
  // Nothing is posted to a home on a lapsed lease: after this lockd was frozen or cut off, the
  // home may have recovered the lock, and an operation of the old state (a release's WRITE K)
  // landing after that recovery would set K back.
  if (!lease_valid(home))
    throw dlm::OpNotSent("this lockd's lease on member " + std::to_string(home) + " (" + p.name +
                         ") has lapsed: no operation on its table until renewed");
  std::lock_guard lk(p.ops_mu);
  try {
    if (!p.ops) open_ops(p);
    for (auto& op : ops) op.region = &p.table;
    p.ops->execute(ops);
  } catch (...) {
    p.ops.reset();  // reconnect and look the table up again next time (the home may restart)
    throw;
  }
}

void Lockd::send(uint32_t rank, const std::vector<uint8_t>& msg) {
  if (rank == 0 || rank >= peers_.size() || rank == rank_) return;  // the engine validated it
  Peer& p = peer(rank);
  std::lock_guard lk(p.msg_mu);
  Peer::Outgoing out;
  out.seq = ++p.out_seq;
  out.body.reserve(msg.size() + kMsgTrailer);
  out.body = msg;
  out.body.resize(msg.size() + kMsgTrailer);
  store_le64(out.body.data() + msg.size(), p.out_stream);
  store_le64(out.body.data() + msg.size() + 8, out.seq);
  p.outbox.push_back(std::move(out));
  if (p.outbox.size() % 10000 == 0 && opts_.log)
    opts_.log(fabric::LogLevel::Warn,
              "LOCKD0021 " + std::to_string(p.outbox.size()) + " messages to member " +
                  std::to_string(rank) + " (" + p.name + ") wait for its acknowledgement; they "
                  "are kept until it acknowledges them or restarts");
  flush_locked(p, false, SIZE_MAX);
}

void Lockd::flush_locked(Peer& p, bool resend_all, size_t budget) {
  if (resend_all) {
    p.unsent = 0;
    p.msg.reset();  // whatever the old connection still holds is sent again on a fresh one
  }
  while (p.unsent < p.outbox.size() && budget-- > 0) {
    Peer::Outgoing& out = p.outbox[p.unsent];
    try {
      if (!p.msg) {
        if (Clock::now() < p.msg_retry_at) return;  // reconnect backoff: the next flush retries
        p.msg = fabric::connect(p.uri, client_options(secret_, topo_, opts_, node_, p.name));
      }
      const auto loss = opts_.lose_message ? opts_.lose_message(p.rank) : LockdOptions::Loss::None;
      if (loss == LockdOptions::Loss::FailWrite) throw std::runtime_error("message lost (test)");
      if (loss == LockdOptions::Loss::None) p.msg->send("dlm.msg", out.body);
      out.written = Clock::now();
      ++p.unsent;
    } catch (const std::exception& e) {
      p.msg.reset();
      p.msg_retry_at = Clock::now() + std::chrono::milliseconds(100);
      if (p.send_failures++ % 100 == 0 && opts_.log)
        opts_.log(fabric::LogLevel::Warn,
                  "LOCKD0020 cannot send to member " + std::to_string(p.rank) + " (" + p.name +
                      ", " + p.uri + "): " + e.what() + "; " +
                      std::to_string(p.outbox.size() - p.unsent) +
                      " message(s) kept and re-sent while it is up (recovered if it goes down)");
      return;
    }
  }
}

void Lockd::note_ack(Peer& p, uint64_t stream, uint64_t seq) {
  std::lock_guard lk(p.msg_mu);
  if (stream == p.out_stream) {
    while (!p.outbox.empty() && p.outbox.front().seq <= seq) {
      p.outbox.pop_front();
      if (p.unsent) --p.unsent;
    }
  }
  // Written but not acknowledged for this long: lost with a broken connection (or dropped by
  // the member as out of order after a lost one) — send everything again, in order.
  const auto overdue = std::max(std::chrono::milliseconds(4 * topo_.dlm.heartbeat_ms),
                                std::chrono::milliseconds(200));
  const bool resend = !p.outbox.empty() && p.unsent > 0 &&
                      Clock::now() - p.outbox.front().written > overdue;
  if (resend) ++p.resends;
  // Bounded per heartbeat round: a long queue to a slow member must not hold the heartbeats
  // to the others back.
  if (resend || p.unsent < p.outbox.size()) flush_locked(p, resend, 256);
}

std::vector<uint8_t> Lockd::call(uint32_t rank, std::string_view service,
                                 std::span<const uint8_t> body) {
  Peer& p = peer(rank);
  std::lock_guard lk(p.call_mu);
  try {
    if (!p.calls)
      p.calls = fabric::connect(p.uri, client_options(secret_, topo_, opts_, node_, p.name));
    return p.calls->call(service, body);
  } catch (...) {
    p.calls.reset();
    throw;
  }
}

// ---------------------------------------------------------------------------------------------
// Heartbeats

std::vector<uint8_t> Lockd::on_heartbeat(std::span<const uint8_t> body) {
  auto hb = dlm::Heartbeat::decode(body);
  if (!hb || hb->rank == 0 || hb->rank >= peers_.size() || hb->rank == rank_)
    throw std::runtime_error("malformed heartbeat (or a rank that is not a member)");
  if (hb->digest != digest_) {
    if (opts_.log)
      opts_.log(fabric::LogLevel::Error,
                "LOCKD0030 member " + std::to_string(hb->rank) +
                    " runs with another topology (members, algorithm, lease or lock_slots "
                    "differ): refused; give every lockd the same file");
    throw std::runtime_error("topology mismatch: members, algorithm, lease or lock_slots differ");
  }
  if (note_incarnation(hb->rank, hb->incarnation) == Incarnation::Old)
    throw std::runtime_error("a heartbeat of an old incarnation (the process is gone)");
  {
    std::lock_guard lk(mu_);
    Peer& p = *peers_[hb->rank];
    p.last_heard = Clock::now();
  }
  dlm::Heartbeat me{rank_, digest_, incarnation_, epoch_};
  std::vector<uint8_t> out = me.encode();
  // The acknowledgement of its messages (Peer::outbox).
  Peer& p = *peers_[hb->rank];
  const size_t at = out.size();
  out.resize(at + kMsgTrailer);
  {
    std::lock_guard lk(p.in_mu);
    store_le64(out.data() + at, p.in_stream);
    store_le64(out.data() + at + 8, p.in_seq);
  }
  return out;
}

void Lockd::heartbeat_loop() {
  const auto period = std::chrono::milliseconds(topo_.dlm.heartbeat_ms);
  const auto lease = std::chrono::milliseconds(topo_.dlm.lease_ms);
  const auto guard = lease / 4;
  auto log = [this](fabric::LogLevel l, const std::string& s) {
    if (opts_.log) opts_.log(l, s);
  };
  std::unique_lock lk(mu_);
  while (!stopping_) {
    lk.unlock();
    for (uint32_t r = 1; r < peers_.size(); ++r) {
      if (r == rank_) continue;
      Peer& p = *peers_[r];
      const auto sent = Clock::now();
      std::optional<dlm::Heartbeat> answer;
      std::optional<std::pair<uint64_t, uint64_t>> ack;  // (stream, seq) it delivered from us
      std::string err;
      const auto fault = opts_.heartbeat_fault ? opts_.heartbeat_fault(r)
                                               : LockdOptions::HeartbeatFault::None;
      try {
        if (fault == LockdOptions::HeartbeatFault::Skip)
          throw std::runtime_error("test: heartbeat not sent");
        dlm::Heartbeat me{rank_, digest_, incarnation_, epoch_};
        auto reply = call(r, "dlm.heartbeat", me.encode());
        if (fault == LockdOptions::HeartbeatFault::DropAnswer)
          throw std::runtime_error("test: answer dropped");
        if (reply.size() >= kMsgTrailer) {
          ack = std::pair(load_le64(reply.data() + reply.size() - kMsgTrailer),
                          load_le64(reply.data() + reply.size() - 8));
          reply.resize(reply.size() - kMsgTrailer);
        }
        answer = dlm::Heartbeat::decode(reply);
        if (!answer || answer->rank != r) err = "malformed heartbeat answer";
        else if (answer->digest != digest_) err = "topology mismatch";
      } catch (const std::exception& e) {
        err = e.what();
      }
      if (err.empty() && note_incarnation(r, answer->incarnation) == Incarnation::Old)
        err = "an answer of an old incarnation (that process is gone)";
      if (err.empty() && ack) note_ack(p, ack->first, ack->second);
      if (err.empty()) warm_connections(p);
      std::lock_guard plk(mu_);
      const auto now = Clock::now();
      // Our lease on its locks had lapsed before this heartbeat left, yet it answers: this lockd
      // was frozen (or cut off) and is back. The member may have declared us down and given our
      // holds on its locks away, and dropped what it kept for our locks' queues: revoke ours
      // before the fresh answer renews the lease (a grant checks the lease: it sees the lapse
      // until then), and rebuild our own locks' queues by asking it (it is alive).
      if (err.empty() && p.up && p.last_answer != Clock::time_point{} &&
          sent - p.last_answer > lease - guard) {
        const std::string why =
            "this lockd had no answer from it for " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(sent - p.last_answer)
                               .count()) +
            " ms (was it frozen, or cut off?)";
        p.up = false;
        p.why_down = why;
        log(fabric::LogLevel::Warn, "LOCKD0035 lease on member " + std::to_string(r) + " (" +
                                        p.name + ") lapsed: " + why +
                                        "; holds on its locks are revoked (LeaseLost) and this "
                                        "node's locks are rebuilt");
        engine_->member_down(r, why);
        recovery_needed_ = true;
        cv_.notify_all();
      }
      if (err.empty()) {
        p.last_answer = sent;
        p.last_answer_ns.store(sent.time_since_epoch().count(), std::memory_order_release);
      }
      // Grace at our own start: peers get one lease to show up before they count as down.
      const bool heard = heard_within_lease(p, now);
      auto answered = p.last_answer;
      bool fresh = heard && answered != Clock::time_point{} && now - answered <= lease - guard;
      if (p.up && !fresh) {
        std::string why = !heard
                              ? "no heartbeat from it for " + std::to_string(topo_.dlm.lease_ms) + " ms"
                              : "it has not answered our heartbeats for " +
                                    std::to_string((lease - guard).count()) + " ms" +
                                    (err.empty() ? "" : " (" + err + ")");
        p.up = false;
        p.why_down = why;
        // Messages about a third node's locks queued for it: that home recovers them (the
        // link may stay cut while both reach it); this node's own locks are recovered below.
        std::vector<uint32_t> homes;
        {
          std::lock_guard mlk(p.msg_mu);
          for (const auto& o : p.outbox) add_homes(o.body, r, rank_, homes);
        }
        reset_connections(p, false);
        log(fabric::LogLevel::Warn, "LOCKD0031 member " + std::to_string(r) + " (" + p.name +
                                        ") is down: " + why +
                                        "; its holds are released and the locks it was home of "
                                        "fail with HomeDown until it is back");
        engine_->member_down(r, why);
        for (uint32_t h : homes) engine_->ask_recovery(h);
        recovery_needed_ = true;  // waits for its answers, or for it to be dead (below)
        cv_.notify_all();
      }
      // Dead: none of its heartbeats reached us for a whole lease. Only now are its holds on our
      // locks given away: its lease on us runs from the sending of its last heartbeat we
      // answered, which we received no later than `heard`, so that lease ended (lease - guard
      // after the sending) a quarter lease ago at least. Our own heartbeats going unanswered
      // does NOT make it dead: over an asymmetric path (a delay or a cut on our connection to it
      // only) it renews its lease on us through its own connection and goes on using its holds
      // — found by the nemesis (issue 33: a 305 ms delay on the link n2->n3 made n2 give away
      // n3's hold on n2's lock while n3's client used it; tests/dlm/nemesis.py --seed 1).
      if (!p.dead && !heard) {
        p.dead = true;
        log(fabric::LogLevel::Warn,
            "LOCKD0034 member " + std::to_string(r) + " (" + p.name + ") is dead: silent for " +
                std::to_string(topo_.dlm.lease_ms) + " ms; its holds on this node's locks are "
                "given away (it revoked them itself a quarter lease ago)");
        engine_->member_dead(r);
        recovery_needed_ = true;
        cv_.notify_all();
      }
      // Heard from again: alive, whether or not its answers to us are fresh yet. It renews its
      // lease on us with each heartbeat we answer and may take our locks from now on, so a
      // recovery here must ask it (recovery_loop reads heard_within_lease itself, not this flag).
      if (p.dead && heard) {
        p.dead = false;
        log(fabric::LogLevel::Info, "LOCKD0037 member " + std::to_string(r) + " (" + p.name +
                                        ") is heard from again: no longer dead; it is up once "
                                        "it also answers this node's heartbeats");
      }
      if (!p.up && fresh) {
        p.up = true;
        p.dead = false;
        engine_->member_up(r);
        log(fabric::LogLevel::Info,
            "LOCKD0032 member " + std::to_string(r) + " (" + p.name + ") is up");
      }
    }
    lk.lock();
    cv_.wait_for(lk, period, [this] { return stopping_; });
  }
}

void Lockd::warm_connections(Peer& p) {
  {
    std::unique_lock lk(p.msg_mu, std::try_to_lock);
    if (lk.owns_lock() && !p.msg && Clock::now() >= p.msg_retry_at) {
      try {
        p.msg = fabric::connect(p.uri, client_options(secret_, topo_, opts_, node_, p.name));
      } catch (const std::exception&) {
        // The next send connects again and says why it cannot (LOCKD0020).
        p.msg_retry_at = Clock::now() + std::chrono::milliseconds(100);
      }
    }
  }
  std::unique_lock lk(p.ops_mu, std::try_to_lock);
  if (lk.owns_lock() && !p.ops) {
    try {
      open_ops(p);
    } catch (const std::exception&) {
      p.ops.reset();  // table_ops connects again and fails the operation with the reason
    }
  }
}

void Lockd::reset_connections(Peer& p, bool restarted) {
  {
    std::lock_guard lk(p.msg_mu);
    p.msg.reset();
    p.msg_retry_at = {};
    p.unsent = 0;  // what it has not acknowledged goes again, in order, on a new connection
    // Restarted: its old process is gone with what it had delivered, and the recoveries repair
    // what it missed; a new stream. Only down (same process): the messages are kept and sent
    // once it answers again. They used to be dropped here too, but the recoveries repair only
    // the locks homed at this node or at the member: a hand-off to its record in the queue of a
    // lock homed at a third node was lost, and that lock waited until one of them restarted
    // (issue 33, nemesis; test a_hand_off_to_a_member_that_was_down_is_delivered_when_it_is_up).
    if (restarted) {
      p.outbox.clear();
      ++p.out_stream;
      p.out_seq = 0;
    }
  }
  {
    std::lock_guard lk(p.ops_mu);
    p.ops.reset();
  }
}

Lockd::Incarnation Lockd::note_incarnation(uint32_t rank, uint64_t incarnation) {
  if (incarnation == 0) return Incarnation::Current;
  std::lock_guard lk(mu_);
  Peer& p = *peers_[rank];
  if (p.incarnation == incarnation) return Incarnation::Current;
  // Older: a message or answer of the previous process, arriving after its successor's (the old
  // process's kernel may still send what it had queued). Taking it for another restart would drop
  // the member's state again, here and at nobody else.
  if (p.incarnation != 0 && (incarnation >> 32) < (p.incarnation >> 32)) {
    if (p.old_incarnation_msgs++ % 100 == 0 && opts_.log)
      opts_.log(fabric::LogLevel::Warn,
                "LOCKD0036 dropped a message of member " + std::to_string(rank) + " (" + p.name +
                    ")'s old incarnation (epoch " + std::to_string(incarnation >> 32) +
                    "; it runs epoch " + std::to_string(p.incarnation >> 32) +
                    "). If that member's state directory was reset, it is refused until it is "
                    "restarted with a number above " + std::to_string(p.incarnation >> 32) +
                    " in its <state-dir>/epoch (its tokens must stay above those it issued)");
    return Incarnation::Old;
  }
  const bool restart = p.incarnation != 0;
  p.incarnation = incarnation;
  if (!restart) return Incarnation::Current;
  reset_connections(p, true);
  const std::string why = "it restarted (new incarnation)";
  if (opts_.log)
    opts_.log(fabric::LogLevel::Warn,
              "LOCKD0033 member " + std::to_string(rank) + " (" + p.name + ") " + why +
                  ": its old holds are released, the holds on locks it was home of are revoked");
  engine_->member_down(rank, why, /*restarted=*/true);
  engine_->member_dead(rank);  // the old incarnation is gone: its holds here with it
  p.up = false;
  p.why_down = why;
  // Up again at the next heartbeat round, once both directions are fresh.
  recovery_needed_ = true;
  cv_.notify_all();
  return Incarnation::Restarted;
}

void Lockd::recovery_loop() {
  std::unique_lock lk(mu_);
  while (!stopping_) {
    cv_.wait(lk, [this] { return stopping_ || recovery_needed_; });
    if (stopping_) break;
    recovery_needed_ = false;
    lk.unlock();
    // Asked for its holds until it answers or is dead: a member whose answers are merely late
    // may still hold, and its holds are kept until it is silent for a whole lease.
    engine_->recover_all([this](uint32_t r) {
      std::lock_guard lk(mu_);
      return r < peers_.size() && peers_[r] && heard_within_lease(*peers_[r], Clock::now());
    });
    lk.lock();
  }
}

void Lockd::set_quotas(size_t max_holds_per_client, size_t max_locks_per_uid,
                       size_t max_clients_per_uid) {
  if (ipc_) ipc_->set_quotas(max_holds_per_client, max_locks_per_uid, max_clients_per_uid);
}

std::string Lockd::status_text() {
  std::ostringstream o;
  o << "tierce-lockd node " << node_ << " (member " << rank_ << "), clients on "
    << opts_.socket_path << "\n";
  {
    std::lock_guard lk(mu_);
    const auto now = Clock::now();
    for (uint32_t r = 1; r < peers_.size(); ++r) {
      if (r == rank_) continue;
      const Peer& p = *peers_[r];
      o << "peer " << r << " " << p.name << " " << p.uri << ": " << (p.up ? "up" : "DOWN");
      if (!p.up) o << " (" << p.why_down << ")";
      if (p.last_heard != Clock::time_point{})
        o << ", heard "
          << std::chrono::duration_cast<std::chrono::milliseconds>(now - p.last_heard).count()
          << " ms ago";
      o << "\n";
    }
  }
  // Outside mu_ (lock order: in_mu before mu_).
  for (uint32_t r = 1; r < peers_.size(); ++r) {
    if (r == rank_) continue;
    Peer& p = *peers_[r];
    o << "messages to " << p.name << ": ";
    {
      std::lock_guard mk(p.msg_mu);
      o << p.outbox.size() << " unacknowledged, " << p.resends << " re-sent rounds, "
        << p.send_failures << " send failures";
    }
    {
      std::lock_guard ik(p.in_mu);
      o << "; from it: " << p.duplicates << " duplicates and " << p.out_of_order
        << " out of order dropped\n";
    }
  }
  o << engine_->status_text();
  if (ipc_) o << "local clients: " << ipc_->clients() << "\n";
  return o.str();
}

namespace {

// The engine's gauges and counters (metrics_text).
void engine_metrics(base::Metrics& m, const dlm::EngineGauges& g, const dlm::EngineCounters& c) {
  // The engine's view of the members (the one grants and recoveries go by).
  m.gauge("tierce_lockd_members", "Lock manager members, by state (this one included).",
          uint64_t(g.members_alive), {{"state", "up"}});
  m.gauge("tierce_lockd_members", "Lock manager members, by state (this one included).",
          uint64_t(g.members - g.members_alive), {{"state", "down"}});
  m.gauge("tierce_lockd_home_locks", "Slots of this home's lock table in use.",
          uint64_t(g.home_locks));
  m.gauge("tierce_lockd_home_lock_slots", "Slots of this home's lock table.",
          uint64_t(g.lock_slots));
  m.gauge("tierce_lockd_locks_held", "Holds of this node's clients.", uint64_t(g.held));
  m.gauge("tierce_lockd_locks_revoked", "Holds revoked on a lapse, not acknowledged yet.",
          uint64_t(g.revoked));
  m.gauge("tierce_lockd_locks_waiting",
          "Requests of this node's clients not granted yet (or withdrawn, not finished).",
          uint64_t(g.waiting));
  m.gauge("tierce_lockd_queue_records", "Queue records kept for this node's requests.",
          uint64_t(g.records));
  m.counter("tierce_lockd_acquires_total", "Acquisitions asked for by local clients.",
            c.acquires);
  m.counter("tierce_lockd_grants_total", "Locks granted to local clients.", c.grants);
  m.counter("tierce_lockd_immediate_grants_total",
            "Of the grants, those without waiting in a queue.", c.immediate_grants);
  m.counter("tierce_lockd_releases_total", "Holds released.", c.releases);
  m.counter("tierce_lockd_timeouts_total", "Acquisitions that timed out.", c.timeouts);
  m.counter("tierce_lockd_would_block_total", "Try-locks answered WouldBlock.", c.would_block);
  m.counter("tierce_lockd_home_down_total", "Requests failed because the lock's home was down.",
            c.home_down);
  m.counter("tierce_lockd_unanswered_ops_total",
            "Atomic operations at a home that missed their deadline (the request waited for the "
            "home's recovery and started again).",
            c.unanswered_ops);
  m.counter("tierce_lockd_not_sent_ops_total",
            "Atomic operations refused before they were posted (the lease on the home had "
            "lapsed; the request tried again).",
            c.not_sent_ops);
  m.counter("tierce_lockd_revoked_total", "Holds revoked (LeaseLost).", c.revoked);
  const char* ended = "Holds revoked on a lapse, released to their home once their client "
                      "acknowledged (or left), or after a lease without an acknowledgement.";
  m.counter("tierce_lockd_revocations_ended_total", ended, c.revocations_acknowledged,
            {{"acknowledged", "yes"}});
  m.counter("tierce_lockd_revocations_ended_total", ended, c.revocations_unacknowledged,
            {{"acknowledged", "no"}});
  m.counter("tierce_lockd_cas_retries_total", "Remote compare-and-swaps retried.",
            c.cas_retries);
  m.counter("tierce_lockd_protocol_messages_received_total", "Protocol messages handled.",
            c.messages_in);
  m.counter("tierce_lockd_protocol_messages_sent_total", "Protocol messages sent.",
            c.messages_out);
  m.counter("tierce_lockd_stale_messages_total", "Protocol messages dropped as stale.",
            c.stale_messages);
  m.counter("tierce_lockd_malformed_messages_total", "Protocol messages refused as malformed.",
            c.bad_messages);
  m.counter("tierce_lockd_recoveries_total", "Lock recoveries run by this home.", c.recoveries);
  m.counter("tierce_lockd_renormalisations_total", "Lock word count resets.",
            c.renormalisations);
}

}  // namespace

std::string Lockd::metrics_text() {
  base::Metrics m({{"node", node_}});
  m.gauge("tierce_lockd_info", "Always 1; the labels say which lockd this is.", uint64_t(1),
          {{"version", TIERCE_VERSION},
           {"algorithm", std::string(cluster::to_string(topo_.dlm.algorithm))}});
  m.gauge("tierce_lockd_member_rank", "This lockd's rank among the members.", uint64_t(rank_));
  m.gauge("tierce_lockd_epoch", "This lockd's restart counter (state_dir/epoch).", epoch_);
  m.gauge("tierce_lockd_uptime_seconds", "Seconds since this lockd started.",
          std::chrono::duration<double>(Clock::now() - started_).count());
  engine_metrics(m, engine_->gauges(), engine_->counters());

  // Per member: the liveness (under mu_), then the message streams (msg_mu, in_mu: taken one at a
  // time, never with mu_ held; lock order in_mu before mu_).
  const auto now = Clock::now();
  {
    std::lock_guard lk(mu_);
    for (uint32_t r = 1; r < peers_.size(); ++r) {
      if (r == rank_) continue;
      const Peer& p = *peers_[r];
      const base::MetricLabels peer = {{"peer", p.name}};
      m.gauge("tierce_lockd_peer_up", "1 while this lockd trusts the member's answers.",
              uint64_t(p.up ? 1 : 0), peer);
      if (p.last_heard != Clock::time_point{})
        m.gauge("tierce_lockd_peer_last_heard_seconds",
                "Seconds since the member last called this lockd's heartbeat.",
                std::chrono::duration<double>(now - p.last_heard).count(), peer);
      m.counter("tierce_lockd_peer_send_failures_total",
                "Protocol message writes to the member that failed.", p.send_failures, peer);
      m.counter("tierce_lockd_peer_old_incarnation_messages_total",
                "Messages of a former incarnation of the member, dropped.",
                p.old_incarnation_msgs, peer);
    }
  }
  for (uint32_t r = 1; r < peers_.size(); ++r) {
    if (r == rank_) continue;
    Peer& p = *peers_[r];
    const base::MetricLabels peer = {{"peer", p.name}};
    {
      std::lock_guard mk(p.msg_mu);
      m.gauge("tierce_lockd_peer_unacknowledged_messages",
              "Protocol messages to the member not acknowledged yet.", uint64_t(p.outbox.size()),
              peer);
      m.counter("tierce_lockd_peer_resent_rounds_total",
                "Rounds of re-sending unacknowledged messages to the member.", p.resends, peer);
    }
    {
      std::lock_guard ik(p.in_mu);
      m.counter("tierce_lockd_peer_duplicate_messages_total",
                "Messages from the member dropped as duplicates.", p.duplicates, peer);
      m.counter("tierce_lockd_peer_out_of_order_messages_total",
                "Messages from the member dropped as out of order.", p.out_of_order, peer);
    }
  }

  if (IpcServer* ipc = ipc_view_.load(std::memory_order_acquire)) {
    const auto ic = ipc->counters();
    m.gauge("tierce_lockd_clients", "Local clients connected.", uint64_t(ipc->clients()));
    m.counter("tierce_lockd_client_connections_total", "Local client connections accepted.",
              ic.accepted);
    m.counter("tierce_lockd_client_refusals_total", "Local client connections refused, by limit.",
              ic.refused - ic.uid_refused, {{"limit", "max_clients"}});
    m.counter("tierce_lockd_client_refusals_total", "Local client connections refused, by limit.",
              ic.uid_refused, {{"limit", "max_clients_per_uid"}});
    m.counter("tierce_lockd_client_requests_total", "Well-formed requests of local clients.",
              ic.requests);
    m.counter("tierce_lockd_client_malformed_frames_total",
              "Frames of local clients refused as malformed.", ic.malformed);
    m.counter("tierce_lockd_quota_refusals_total", "LOCKs answered TooMany, by quota.",
              ic.over_client_quota, {{"quota", "max_locks_per_client"}});
    m.counter("tierce_lockd_quota_refusals_total", "LOCKs answered TooMany, by quota.",
              ic.over_uid_quota, {{"quota", "max_locks_per_uid"}});
    m.counter("tierce_lockd_revocations_sent_total", "REVOKED events sent to local clients.",
              ic.revoked_sent);
    m.counter("tierce_lockd_late_grants_total",
              "Grants that arrived after their client had gone (released).", ic.late_grants);
    m.counter("tierce_lockd_slow_clients_total",
              "Local clients disconnected because they did not read their replies.",
              ic.slow_clients);
  }

  if (server_) {
    const auto st = server_->stats();
    m.counter("tierce_lockd_fabric_connections_accepted_total",
              "Fabric connections accepted (other lockds).", st.connections_accepted);
    m.counter("tierce_lockd_fabric_connections_refused_total",
              "Fabric connections refused (max_connections, max_connections_per_ip).",
              st.connections_refused);
    m.counter("tierce_lockd_fabric_auth_failures_total",
              "Fabric handshakes that failed authentication.", st.auth_failures);
    m.counter("tierce_lockd_fabric_malformed_frames_total", "Fabric frames refused as malformed.",
              st.malformed_frames);
    m.counter("tierce_lockd_fabric_calls_total", "Fabric messages and calls served.",
              st.messages);
  }
  m.counter("tierce_lockd_reloads_total", "Configuration reloads applied (SIGHUP).",
            reloads_.load());
  m.counter("tierce_lockd_failed_reloads_total",
            "Configuration reloads refused (the running configuration kept).",
            failed_reloads_.load());
  return m.text();
}

}  // namespace tierce::lockd
