// agents/memd/memd.cc — reconciling configured regions with the segments their owners create,
// watching owners, and the memd.list / memd.status services.
//
// Identity of a segment: memd holds the mapped object open, so the (st_dev, st_ino) of the name
// tells at each rescan, without mapping anything, whether the name still denotes the object
// exported (an open tmpfs inode keeps its number; a re-created segment is a new inode). The
// header's incarnation then says which creation it is, for logs and memd.list.
#include "agents/memd/memd.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "agents/memd/arbiter_db.h"
#include "base/metrics.h"
#include "coherence/layout.h"
#include "fabric/errors.h"
#include "fabric/segment.h"
#include "fabric/socket.h"

#ifndef TIERCE_VERSION
#define TIERCE_VERSION "0.0.0"
#endif

namespace tierce::memd {

using fabric::LogLevel;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

std::string_view to_string(RegionState s) {
  switch (s) {
    case RegionState::Pending:
      return "pending";
    case RegionState::NotReady:
      return "not-ready";
    case RegionState::Failed:
      return "failed";
    case RegionState::Exported:
      return "exported";
    case RegionState::Revoked:
      return "revoked";
  }
  return "?";
}

namespace {

using UniqueFd = fabric::Fd;  // RAII descriptor (fabric/socket.h)

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string q(const std::string& s) {
  return "'" + s + "'";
}

// Whether `pid` has terminated, without a pidfd: kill(pid, 0) and, for a zombie that kill still
// finds, /proc/PID/stat. EPERM means it exists (another user's process).
bool process_exited(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  auto close = line.rfind(')');  // comm may contain spaces and ')'
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

bool fd_readable_now(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

// Opens a pidfd for `pid` (Linux >= 5.3): readable once the process exits. -1 when the kernel or
// a seccomp filter refuses pidfds; *exited is set when the process is already gone.
int open_pidfd(pid_t pid, bool* exited) {
  *exited = false;
#ifdef SYS_pidfd_open
  long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) {
    if (fd_readable_now(int(fd))) {
      ::close(int(fd));
      *exited = true;
      return -1;
    }
    return int(fd);  // close-on-exec already
  }
  if (errno == ESRCH) {
    *exited = true;
    return -1;
  }
#endif
  *exited = process_exited(pid);
  return -1;
}

}  // namespace

struct Memd::Region {
  RegionConfig cfg;
  RegionState state = RegionState::Pending;
  std::string detail;
  std::string last_logged;  // a steady problem is logged once, not at every rescan
  std::shared_ptr<fabric::SharedSegment> seg;  // while exported
  // The object last judged (exported, revoked): a rescan that finds the same one skips it.
  dev_t dev = 0;
  ino_t ino = 0;
  bool known_object = false;
  uint64_t incarnation = 0;
  pid_t owner = 0;
  UniqueFd pidfd;  // while exported with follow_owner, when the kernel has pidfds
  uint32_t id = 0;
  uint64_t addr = 0, len = 0, key = 0;
  std::chrono::system_clock::time_point since = std::chrono::system_clock::now();
};

Memd::Memd(Config cfg, fabric::Secret secret, fabric::LogSink log)
    : cfg_(std::move(cfg)), secret_(std::move(secret)), log_(std::move(log)) {
  if (!log_) log_ = fabric::stderr_sink("tierce-memd");
  fabric::ServerOptions o;
  o.name = cfg_.node;
  o.secret = secret_;
  o.listen = cfg_.listen;
  o.heartbeat = cfg_.heartbeat;
  o.spin = cfg_.spin;
  o.lease = cfg_.lease;
  o.max_connections = cfg_.max_connections;
  o.max_connections_per_ip = cfg_.max_connections_per_ip;
  o.max_preauth_frame = cfg_.max_preauth_frame;
  o.protection = cfg_.protection;
  o.identity.key = cfg_.node_key;  // proves this node to clients that expect it (keyed cluster)
  // Roles: the cluster's public keys make a client that does not sign a reader (PeerInfo::member).
  std::string roles_topology = cfg_.topology;
  if (roles_topology.empty() && cfg_.coherence.enabled) roles_topology = cfg_.coherence.topology;
  if (roles_topology.empty() && cfg_.writer.enabled) roles_topology = cfg_.writer.topology;
  if (!roles_topology.empty())
    for (const auto& n : coherence::Topology::load(roles_topology).nodes)
      if (n.public_key) o.identity.peers[n.name] = *n.public_key;
  o.log = log_;
  server_ = std::make_unique<fabric::Server>(std::move(o));
  started_ = steady_clock::now();
  next_rescan_ = started_;
  for (auto& rc : cfg_.regions) {
    auto r = std::make_unique<Region>();
    r->cfg = rc;
    regions_.push_back(std::move(r));
  }
  server_->on_call("memd.list", [this](const fabric::PeerInfo&, std::span<const uint8_t>) {
    std::string s = list_text();
    return std::vector<uint8_t>(s.begin(), s.end());
  }, fabric::Callers::Anyone);
  server_->on_call("memd.status", [this](const fabric::PeerInfo&, std::span<const uint8_t>) {
    std::string s = status_text();
    return std::vector<uint8_t>(s.begin(), s.end());
  }, fabric::Callers::Anyone);
  server_->on_call("memd.metrics", [this](const fabric::PeerInfo&, std::span<const uint8_t>) {
    std::string s = metrics_text();
    return std::vector<uint8_t>(s.begin(), s.end());
  }, fabric::Callers::Anyone);
  if (cfg_.coherence.enabled) {
    // The home role: a fresh version table (new random bases) on every start.
    auto topo = coherence::Topology::load(cfg_.coherence.topology);
    topo.require_app_nodes();
    if (const auto* me = topo.find(cfg_.node))
      home_segments_ = {me->segment_prefix + coherence::kVersionsSuffix,
                        me->segment_prefix + coherence::kAcksSuffix};
    coherence::HomeServiceOptions ho;
    ho.limits.max_keys = cfg_.coherence.max_keys;
    ho.limits.log_entries = cfg_.coherence.log_entries;
    ho.limits.max_pending_marks = cfg_.coherence.pending_marks;
    ho.ack_cells = uint32_t(cfg_.coherence.ack_slots);
    ho.exporter_lease = cfg_.lease;
    if (topo.arbiter.enabled())  // the database drops lost app nodes (docs/coherence.md)
      ho.arbiter = std::make_shared<MariaDbArbiter>(topo.arbiter);
    try {
      home_ = std::make_unique<coherence::HomeService>(*server_, std::move(topo), cfg_.node,
                                                       secret_, ho, log_);
    } catch (const coherence::TopologyError& e) {
      throw coherence::TopologyError(
          std::string(e.what()) + " ([memd] node must name an app node of the topology in [coherence] topology)");
    }
  }
  if (cfg_.writer.enabled)
    writer_ = std::make_unique<WriterRole>(*server_, cfg_.node, cfg_.writer, secret_, log_,
                                           cfg_.node_key);
  if (cfg_.pool.enabled) pool_ = std::make_unique<PoolRole>(*server_, cfg_.node, cfg_.pool, log_);
  if (cfg_.coop.enabled) coop_ = std::make_unique<CoopRole>(*server_, cfg_.node, cfg_.coop, log_);
}

Memd::~Memd() {
  stop();
}

void Memd::log(LogLevel l, const std::string& line) const {
  log_(l, line);
}

std::vector<std::string> Memd::bound_uris() const {
  return server_->bound_uris();
}

std::vector<std::string> Memd::created_files() const {
  std::vector<std::string> files;
  for (const std::string& uri : cfg_.listen) {
    fabric::Address a = fabric::parse_address(uri);
    if (a.transport == fabric::Transport::Shm) files.push_back(a.path);
  }
  // glibc's POSIX shm objects live in /dev/shm (the assumption coherence/arena.cc makes too).
  auto shm = [&](const std::string& name) { files.push_back("/dev/shm/" + name.substr(name.find_first_not_of('/'))); };
  if (home_) for (const std::string& n : home_segments_) shm(n);
  if (pool_) shm(pool_->segment_name());
  if (coop_) shm(coop_->segment_name());
  return files;
}

void Memd::set_state(Region& r, RegionState s, const std::string& detail) {
  if (r.state != s) r.since = std::chrono::system_clock::now();
  r.state = s;
  r.detail = detail;
}

void Memd::note_problem(Region& r, RegionState s, LogLevel l, const std::string& line) {
  // The detail shown by memd.status is the line without its id.
  set_state(r, s, line.size() > 9 && line.compare(0, 4, "MEMD") == 0 ? line.substr(9) : line);
  if (line != r.last_logged) {
    log(l, line);
    r.last_logged = line;
  }
}

void Memd::withdraw(Region& r, RegionState next, const std::string& why, bool revoke) {
  if (r.state == RegionState::Exported && r.seg) {
    // Revoke before unexporting: no lookup in between can hand out a descriptor of memory that
    // is going away, and shm peers that mapped it fail their next op (Revoked) instead of
    // waiting for the lease to lapse.
    if (revoke) {
      r.seg->revoke();
      ++counters_.revocations;
    }
    server_->unexport_region(r.cfg.name);
  }
  r.seg.reset();
  r.pidfd.reset();
  r.id = 0;
  r.addr = r.key = 0;
  set_state(r, next, why);
}

void Memd::watch_owner(Region& r) {
  r.pidfd.reset();
  if (!r.cfg.follow_owner || r.owner <= 0) return;
  bool exited = false;
  int fd = open_pidfd(r.owner, &exited);
  if (fd >= 0) r.pidfd = UniqueFd(fd);
  // An exit between the export and here is caught by check_owners() right after.
}

void Memd::segment_open_failed(Region& r, int e) {
  const std::string& name = r.cfg.name;
  const std::string& segname = r.cfg.segment;
  if (e == ENOENT) {
    if (r.state == RegionState::Exported) {
      withdraw(r, RegionState::Pending, "", true);
      log(LogLevel::Warn,
          "MEMD0107 region " + q(name) + ": segment " + segname +
              " was removed (shm_unlink) by its owner; region revoked and withdrawn, "
              "exported again once the segment is created again");
      r.last_logged.clear();
    }
    r.known_object = false;
    note_problem(r, RegionState::Pending, LogLevel::Info,
                 "MEMD0102 region " + q(name) + " is pending: segment " + segname +
                     " does not exist yet; memd exports it within rescan_ms (" +
                     std::to_string(cfg_.rescan.count()) + " ms) of its owner creating it");
    return;
  }
  std::string why = std::strerror(e);
  if (r.state == RegionState::Exported) {
    // We still hold the object we export; a later permission change does not withdraw it.
    if (r.last_logged != why) {
      log(LogLevel::Warn, "MEMD0117 region " + q(name) + ": cannot re-open segment " + segname +
                              " (" + why + "); still exporting the object opened before");
      r.last_logged = why;
    }
    return;
  }
  note_problem(r, RegionState::Failed, LogLevel::Error,
               "MEMD0103 region " + q(name) + ": cannot open segment " + segname + ": " + why +
                   (e == EACCES ? "; memd (uid " + std::to_string(::geteuid()) +
                                      ") needs read-write access: create the segment with a mode "
                                      "and owner that allow it (e.g. 0660 and memd's group)"
                                : std::string()) +
                   "; retrying every rescan_ms");
}

void Memd::rescan_one(Region& r) {
  const std::string& name = r.cfg.name;
  const std::string& segname = r.cfg.segment;
  UniqueFd fd(::shm_open(segname.c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd) {
    int e = errno;
    segment_open_failed(r, e);
    return;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    note_problem(r, r.state == RegionState::Exported ? r.state : RegionState::Failed,
                 LogLevel::Error,
                 "MEMD0103 region " + q(name) + ": cannot stat segment " + segname + ": " +
                     std::strerror(errno) + "; retrying every rescan_ms");
    return;
  }
  bool same_object = r.known_object && st.st_dev == r.dev && st.st_ino == r.ino;
  if (same_object && r.state == RegionState::Exported) {
    if (!r.seg->live()) {
      withdraw(r, RegionState::Revoked, "revoked by its owner", false);
      note_problem(
          r, RegionState::Revoked, LogLevel::Warn,
          "MEMD0108 region " + q(name) + ": segment " + segname +
              " was revoked by its owner; region withdrawn until the owner creates it again");
    }
    return;
  }
  if (same_object && r.state == RegionState::Revoked) return;  // still the dead object: wait

  // A new object, or one not exported yet: map it and read its header.
  fabric::SharedSegment seg;
  try {
    seg = fabric::SharedSegment::from_fd(fd.release(), segname);
  } catch (const std::exception& e) {
    if (r.state == RegionState::Exported) {
      log(LogLevel::Warn, "MEMD0105 region " + q(name) + ": segment " + segname +
                              " was re-created by its owner; old incarnation " +
                              hex(r.incarnation) +
                              " revoked, the new one is exported once complete");
      withdraw(r, RegionState::NotReady, "", true);
    }
    r.known_object = false;
    note_problem(
        r, RegionState::NotReady, LogLevel::Warn,
        "MEMD0104 region " + q(name) + ": segment " + segname + " is not usable yet: " + e.what() +
            "; memd retries every rescan_ms (if this persists, the object was not created by "
            "fabric::SharedSegment::create)");
    return;
  }
  adopt_segment(r, std::move(seg), st);
}

void Memd::adopt_segment(Region& r, fabric::SharedSegment seg, const struct stat& st) {
  const std::string& name = r.cfg.name;
  const std::string& segname = r.cfg.segment;
  auto* h = seg.header();
  auto state = fabric::SegmentState(h->state.load(std::memory_order_acquire));
  uint64_t incarnation = h->incarnation;
  uint64_t creator = h->creator_pid;
  bool was_exported = r.state == RegionState::Exported;
  uint64_t old_incarnation = r.incarnation;

  if (state == fabric::SegmentState::Creating) {
    if (was_exported) withdraw(r, RegionState::NotReady, "", true);
    r.known_object = false;
    note_problem(r, RegionState::NotReady, LogLevel::Info,
                 "MEMD0104 region " + q(name) + ": segment " + segname +
                     " is still being created; memd retries every rescan_ms");
    return;
  }
  if (state != fabric::SegmentState::Live) {
    if (was_exported) withdraw(r, RegionState::Revoked, "", true);
    r.known_object = true;
    r.dev = st.st_dev;
    r.ino = st.st_ino;
    r.incarnation = incarnation;
    note_problem(
        r, RegionState::Revoked, LogLevel::Warn,
        "MEMD0108 region " + q(name) + ": segment " + segname + " (incarnation " +
            hex(incarnation) +
            ") is revoked (its owner withdrew it, or memd revoked it when its owner exited); "
            "not exported until its owner creates it again");
    return;
  }

  pid_t owner = creator > 0 && creator <= uint64_t(INT_MAX) ? pid_t(creator) : 0;
  if (r.cfg.follow_owner && owner > 0) {
    bool exited = false;
    UniqueFd pidfd(open_pidfd(owner, &exited));
    if (exited) {
      // Nobody will update this memory any more: make sure no peer reads it as current.
      seg.revoke();
      ++counters_.revocations;
      ++counters_.owner_exits;
      if (was_exported) withdraw(r, RegionState::Revoked, "", true);
      r.known_object = true;
      r.dev = st.st_dev;
      r.ino = st.st_ino;
      r.incarnation = incarnation;
      r.owner = owner;
      note_problem(
          r, RegionState::Revoked, LogLevel::Warn,
          "MEMD0106 region " + q(name) + ": owner pid " + std::to_string(owner) + " of segment " +
              segname +
              " has exited; segment revoked and region withdrawn (it comes back when "
              "the segment is created again; set follow_owner = false to export segments that "
              "outlive their creator)");
      return;
    }
    r.pidfd = std::move(pidfd);
  } else {
    r.pidfd.reset();
  }

  export_segment(r, std::move(seg), st, incarnation, owner, was_exported, old_incarnation);
}

void Memd::export_segment(Region& r, fabric::SharedSegment seg, const struct stat& st,
                          uint64_t incarnation, pid_t owner, bool was_exported,
                          uint64_t old_incarnation) {
  const std::string& name = r.cfg.name;
  const std::string& segname = r.cfg.segment;
  // Export: a re-export replaces the name's entry at once (new id and key), then the abandoned
  // incarnation is revoked so its descriptors fail fast everywhere.
  auto sp = std::make_shared<fabric::SharedSegment>(std::move(seg));
  std::shared_ptr<fabric::SharedSegment> old = r.seg;
  fabric::ExportInfo info;
  try {
    info = server_->export_region(name, sp);
  } catch (const std::exception& e) {
    r.pidfd.reset();
    if (was_exported) withdraw(r, RegionState::Failed, "", true);
    r.known_object = false;
    note_problem(r, RegionState::Failed, LogLevel::Error,
                 "MEMD0114 region " + q(name) + ": exporting segment " + segname +
                     " failed: " + e.what() + "; retrying every rescan_ms");
    return;
  }
  ++counters_.exports;
  if (was_exported && old) {
    old->revoke();
    ++counters_.revocations;
    ++counters_.reexports;
  }
  r.seg = sp;
  r.known_object = true;
  r.dev = st.st_dev;
  r.ino = st.st_ino;
  r.incarnation = incarnation;
  r.owner = owner;
  r.id = info.id;
  r.len = info.len;
  r.addr = info.addr;
  r.key = info.key;
  set_state(r, RegionState::Exported, "");
  r.last_logged.clear();
  std::string what = "segment " + segname + ", " + std::to_string(info.len) +
                     " bytes, incarnation " + hex(incarnation) + ", owner pid " +
                     std::to_string(owner) +
                     (r.cfg.follow_owner ? r.pidfd ? " (watched)" : " (checked every rescan_ms)"
                                         : " (not followed)");
  if (was_exported)
    log(LogLevel::Warn,
        "MEMD0105 region " + q(name) + ": segment re-created by its owner (incarnation " +
            hex(old_incarnation) + " -> " + hex(incarnation) +
            "); old descriptors revoked, re-exported with a new descriptor: " + what);
  else
    log(LogLevel::Info, "MEMD0101 region " + q(name) + " exported: " + what);
}

void Memd::rescan() {
  std::lock_guard g(mu_);
  ++counters_.rescans;
  for (auto& r : regions_) rescan_one(*r);
  next_rescan_ = steady_clock::now() + cfg_.rescan;
  // Owners that exited between two rescans are caught here when pidfds are unavailable.
  withdraw_exited_owners();
}

void Memd::withdraw_exited_owners() {
  for (auto& r : regions_) {
    if (!owner_exited(*r)) continue;
    ++counters_.owner_exits;
    pid_t owner = r->owner;
    withdraw(*r, RegionState::Revoked, "", true);
    note_problem(*r, RegionState::Revoked, LogLevel::Warn,
                 "MEMD0106 region " + q(r->cfg.name) + ": owner pid " + std::to_string(owner) +
                     " of segment " + r->cfg.segment +
                     " has exited; segment revoked and region withdrawn (it comes back when the "
                     "segment is created again)");
  }
}

bool Memd::owner_exited(Region& r) {
  if (r.state != RegionState::Exported || !r.cfg.follow_owner || r.owner <= 0) return false;
  if (r.pidfd) return fd_readable_now(r.pidfd.get());
  return process_exited(r.owner);
}

void Memd::check_owners() {
  std::lock_guard g(mu_);
  withdraw_exited_owners();
}

bool Memd::poll_once(int extra_fd, milliseconds max_wait) {
  std::vector<pollfd> fds;
  if (extra_fd >= 0) fds.push_back(pollfd{extra_fd, POLLIN, 0});
  milliseconds wait;
  {
    std::lock_guard g(mu_);
    for (auto& r : regions_)
      if (r->pidfd) fds.push_back(pollfd{r->pidfd.get(), POLLIN, 0});
    auto due = std::chrono::ceil<milliseconds>(next_rescan_ - steady_clock::now());
    wait = std::clamp(due, milliseconds(0), max_wait);
  }
  int n = ::poll(fds.data(), fds.size(), int(wait.count()));
  bool extra = false, owners = false;
  if (n > 0) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      if (extra_fd >= 0 && i == 0)
        extra = true;
      else
        owners = true;
    }
  }
  if (owners) check_owners();
  if (steady_clock::now() >= next_rescan_) rescan();
  return extra;
}

ReloadOutcome Memd::reload(Config next) {
  ReloadOutcome out;
  {
    std::lock_guard g(mu_);
    ++counters_.reloads;
    auto restart = [&](const char* key, bool differs) {
      if (!differs) return;
      out.need_restart.push_back(key);
      log(LogLevel::Warn, std::string("MEMD0120 [memd] ") + key +
                              " changed in the configuration; the running value stays in effect: "
                              "restart memd to apply it (exported regions and peers' descriptors "
                              "change on restart)");
    };
    restart("node", next.node != cfg_.node);
    restart("listen", next.listen != cfg_.listen);
    restart("coherence", !(next.coherence == cfg_.coherence));
    restart("writer", !(next.writer == cfg_.writer));
    restart("pool", !(next.pool == cfg_.pool));
    restart("coop", !(next.coop == cfg_.coop));
    restart("secret_file", next.secret_file != cfg_.secret_file);
    restart("pid_file", next.pid_file != cfg_.pid_file);
    restart("ready_file", next.ready_file != cfg_.ready_file);
    restart("user", next.user != cfg_.user);
    restart("log", next.log != cfg_.log);
    restart("heartbeat_ms", next.heartbeat != cfg_.heartbeat);
    restart("lease_ms", next.lease != cfg_.lease);
    restart("max_connections", next.max_connections != cfg_.max_connections);
    restart("spin_us", next.spin != cfg_.spin);
    restart("max_connections_per_ip", next.max_connections_per_ip != cfg_.max_connections_per_ip);
    restart("max_preauth_frame", next.max_preauth_frame != cfg_.max_preauth_frame);
    restart("protection", next.protection != cfg_.protection);
    cfg_.rescan = next.rescan;
    cfg_.log_level = next.log_level;

    std::map<std::string, std::unique_ptr<Region>> old;
    for (auto& r : regions_) old.emplace(r->cfg.name, std::move(r));
    regions_.clear();
    for (auto& rc : next.regions) {
      auto it = old.find(rc.name);
      if (it == old.end()) {
        auto r = std::make_unique<Region>();
        r->cfg = rc;
        log(LogLevel::Info,
            "MEMD0110 region " + q(rc.name) + " added (segment " + rc.segment + ")");
        out.added.push_back(rc.name);
        regions_.push_back(std::move(r));
        continue;
      }
      std::unique_ptr<Region> r = std::move(it->second);
      old.erase(it);
      if (r->cfg.segment != rc.segment) {
        // Another segment under the same name: peers must look it up again.
        withdraw(*r, RegionState::Pending, "", false);
        log(LogLevel::Info, "MEMD0111 region " + q(rc.name) + " now names segment " + rc.segment +
                                " instead of " + r->cfg.segment);
        auto fresh = std::make_unique<Region>();
        fresh->cfg = rc;
        r = std::move(fresh);
        out.changed.push_back(rc.name);
      } else if (r->cfg.follow_owner != rc.follow_owner) {
        r->cfg.follow_owner = rc.follow_owner;
        if (r->state == RegionState::Exported) watch_owner(*r);
        log(LogLevel::Info, "MEMD0111 region " + q(rc.name) + ": follow_owner is now " +
                                (rc.follow_owner ? "true" : "false"));
        out.changed.push_back(rc.name);
      }
      regions_.push_back(std::move(r));
    }
    for (auto& [name, r] : old) {
      // Not revoked: the owner lives on and another memd (or this one, later) may export it;
      // shm peers lose it when its lease lapses, tcp peers at once (NoSuchRegion).
      withdraw(*r, RegionState::Pending, "", false);
      log(LogLevel::Info,
          "MEMD0109 region " + q(name) + " removed from the configuration: no longer exported");
      out.removed.push_back(name);
    }
    cfg_.regions = next.regions;
    next_rescan_ = steady_clock::now();
  }
  rescan();
  return out;
}

void Memd::note_failed_reload() {
  std::lock_guard g(mu_);
  ++counters_.failed_reloads;
}

RegionStatus Memd::snapshot(const Region& r) const {
  RegionStatus s;
  s.config = r.cfg;
  s.state = r.state;
  s.detail = r.detail;
  s.incarnation = r.incarnation;
  s.owner = r.owner;
  s.owner_watched = bool(r.pidfd);
  s.id = r.id;
  s.addr = r.addr;
  s.len = r.state == RegionState::Exported ? r.len : 0;
  s.key = r.key;
  s.since = r.since;
  return s;
}

std::vector<RegionStatus> Memd::regions() const {
  std::lock_guard g(mu_);
  std::vector<RegionStatus> v;
  for (auto& r : regions_) v.push_back(snapshot(*r));
  return v;
}

MemdCounters Memd::counters() const {
  std::lock_guard g(mu_);
  return counters_;
}

fabric::ServerStats Memd::server_stats() const {
  return server_->stats();
}

std::string Memd::list_text() const {
  std::lock_guard g(mu_);
  std::string s;
  for (auto& r : regions_) {
    if (r->state != RegionState::Exported) continue;
    s += r->cfg.name + " " + hex(r->addr) + " " + std::to_string(r->len) + " " +
         (r->key ? hex(r->key) : std::string("-")) + " " + r->cfg.segment + " " +
         hex(r->incarnation) + "\n";
  }
  return s;
}

std::string Memd::status_text() const {
  std::ostringstream o;
  auto st = server_->stats();
  auto uptime = std::chrono::duration_cast<std::chrono::seconds>(steady_clock::now() - started_);
  o << "node " << cfg_.node << "\n"
    << "version " << TIERCE_VERSION << "\n"
    << "pid " << ::getpid() << "\n"
    << "uptime_s " << uptime.count() << "\n";
  for (auto& u : server_->bound_uris()) o << "listen " << u << "\n";
  o << "connections_accepted " << st.connections_accepted << "\n"
    << "auth_failures " << st.auth_failures << "\n"
    << "malformed_frames " << st.malformed_frames << "\n"
    << "one_sided_ops " << st.one_sided_ops << "\n"
    << "rejected_ops " << st.rejected_ops << "\n"
    << "messages " << st.messages << "\n"
    << "streams " << st.streams << "\n";
  std::lock_guard g(mu_);
  o << "rescans " << counters_.rescans << "\n"
    << "exports " << counters_.exports << "\n"
    << "reexports " << counters_.reexports << "\n"
    << "revocations " << counters_.revocations << "\n"
    << "owner_exits " << counters_.owner_exits << "\n"
    << "reloads " << counters_.reloads << "\n"
    << "failed_reloads " << counters_.failed_reloads << "\n";
  for (auto& r : regions_) {
    auto since =
        std::chrono::duration_cast<std::chrono::seconds>(r->since.time_since_epoch()).count();
    o << "region " << r->cfg.name << " " << to_string(r->state) << " segment=" << r->cfg.segment
      << " since=" << since;
    if (r->state == RegionState::Exported || r->state == RegionState::Revoked)
      o << " incarnation=" << hex(r->incarnation) << " owner=" << r->owner;
    if (r->state == RegionState::Exported)
      o << " len=" << r->len << " id=" << r->id
        << " follow_owner=" << (r->cfg.follow_owner ? "true" : "false") << " owner_watch="
        << (!r->cfg.follow_owner ? "off"
            : r->pidfd           ? "pidfd"
                                 : "poll");
    if (!r->detail.empty()) o << " why=\"" << r->detail << "\"";
    o << "\n";
  }
  if (home_) {
    std::istringstream in(home_->status_text());
    for (std::string line; std::getline(in, line);) o << "coherence_" << line << "\n";
  }
  if (writer_) {
    std::istringstream in(writer_->status_text());
    for (std::string line; std::getline(in, line);) o << "writer_" << line << "\n";
  }
  if (pool_) {
    std::istringstream in(pool_->status_text());
    for (std::string line; std::getline(in, line);) o << "pool_" << line << "\n";
  }
  if (coop_) {
    std::istringstream in(coop_->status_text());
    for (std::string line; std::getline(in, line);) o << "coop_" << line << "\n";
  }
  return o.str();
}

std::string Memd::metrics_text() const {
  base::Metrics m({{"node", cfg_.node}});
  auto st = server_->stats();
  auto uptime = std::chrono::duration<double>(steady_clock::now() - started_).count();
  m.gauge("tierce_memd_info", "Always 1; the labels say which memd this is.", uint64_t(1),
          {{"version", TIERCE_VERSION}});
  m.gauge("tierce_memd_uptime_seconds", "Seconds since this memd started.", uptime);
  m.counter("tierce_memd_connections_accepted_total", "Fabric connections accepted.",
            st.connections_accepted);
  m.counter("tierce_memd_auth_failures_total", "Fabric handshakes that failed authentication.",
            st.auth_failures);
  m.counter("tierce_memd_malformed_frames_total", "Fabric frames refused as malformed.",
            st.malformed_frames);
  m.counter("tierce_memd_one_sided_ops_total",
            "One-sided reads, writes and atomics served for peers (tcp/shm responders).",
            st.one_sided_ops);
  m.counter("tierce_memd_rejected_ops_total",
            "One-sided operations refused (unknown region, bad key, out of bounds).",
            st.rejected_ops);
  m.counter("tierce_memd_messages_total", "Messages and calls served.", st.messages);
  m.counter("tierce_memd_streams_total", "Bulk streams served.", st.streams);
  {
    std::lock_guard g(mu_);
    m.counter("tierce_memd_rescans_total", "Region rescans.", counters_.rescans);
    m.counter("tierce_memd_exports_total", "Regions exported.", counters_.exports);
    m.counter("tierce_memd_reexports_total", "Regions exported again after their owner came back.",
              counters_.reexports);
    m.counter("tierce_memd_revocations_total", "Regions revoked.", counters_.revocations);
    m.counter("tierce_memd_owner_exits_total", "Region owners seen exiting.",
              counters_.owner_exits);
    m.counter("tierce_memd_reloads_total", "Configuration reloads applied (SIGHUP).",
              counters_.reloads);
    m.counter("tierce_memd_failed_reloads_total",
              "Configuration reloads refused (the running configuration kept).",
              counters_.failed_reloads);
    std::map<std::string, uint64_t> by_state;
    for (auto& r : regions_) ++by_state[std::string(to_string(r->state))];
    for (auto& [state, n] : by_state)
      m.gauge("tierce_memd_regions", "Configured regions, by state.", n, {{"state", state}});
    for (auto& r : regions_)
      if (r->state == RegionState::Exported)
        m.gauge("tierce_memd_region_bytes", "Length of each exported region in bytes.",
                uint64_t(r->len), {{"region", r->cfg.name}});
    if (home_) home_->metrics(m);
  }
  if (writer_) writer_->metrics(m);
  if (pool_) pool_->metrics(m);
  if (coop_) coop_->metrics(m);
  return m.text();
}

void Memd::stop() {
  // Ends this incarnation: its regions are revoked and unlinked. Taken out of home_ under mu_:
  // the server still runs, and status_text() reads home_ under mu_ from a connection thread (a
  // data race on the pointer, and a use of the destroyed role, found by the TSan build). Destroyed
  // outside the lock.
  std::unique_ptr<coherence::HomeService> home;
  {
    std::lock_guard g(mu_);
    home = std::move(home_);
  }
  home.reset();
  if (server_) server_->stop();
  // After the server stopped (its connection threads joined): no pool.* or coop.dir.* handler
  // can run on a destroyed role. The pool and directory segments are revoked and unlinked.
  pool_.reset();
  coop_.reset();
  writer_.reset();
  std::lock_guard g(mu_);
  for (auto& r : regions_) {
    r->seg.reset();
    r->pidfd.reset();
  }
}

}  // namespace tierce::memd
