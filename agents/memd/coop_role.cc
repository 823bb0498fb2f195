// agents/memd/coop_role.cc — the [coop] role inside memd (see coop_role.h).
#include "agents/memd/coop_role.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "coherence/coop_directory.h"
#include "coherence/coop_directory_wire.h"

namespace tierce::memd {

namespace dirwire = coherence::dirwire;
using coherence::UpdateStatus;

namespace {

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

CoopRole::CoopRole(fabric::Server& server, const std::string& node, const CoopConfig& cfg,
                   fabric::LogSink log)
    : server_(server), node_(node), cfg_(cfg), log_(std::move(log)) {
  segment_name_ = coop_segment_name(node_);
  const size_t bytes = coherence::CoopDirectory::bytes_for(cfg_.buckets);
  // Formatting touches every bucket: a directory larger than /dev/shm's free space would fail
  // with SIGBUS there; refuse with a message instead.
  struct statvfs vfs {};
  if (::statvfs("/dev/shm", &vfs) == 0 &&
      uint64_t(vfs.f_bavail) * uint64_t(vfs.f_frsize) < uint64_t(bytes) + fabric::kHeaderSize)
    throw std::runtime_error("[coop] the directory of " + std::to_string(cfg_.buckets) +
                             " buckets needs " + std::to_string(bytes) +
                             " bytes and /dev/shm has less free; lower [coop] buckets or give "
                             "/dev/shm more room (df -h /dev/shm)");
  try {
    dir_ = coherence::CoopDirectory::create_segment(segment_name_, cfg_.buckets, kNodes, 0);
  } catch (const std::exception& e) {
    fabric::SharedSegment::unlink(segment_name_);
    throw std::runtime_error("[coop] cannot create the directory segment " + segment_name_ +
                             " of " + std::to_string(bytes) + " bytes: " + e.what());
  }
  server_.export_region(dirwire::kRegion, dir_->segment());
  server_.on_call(
      dirwire::kUpdateService,
      [this](const fabric::PeerInfo&, std::span<const uint8_t> b) { return handle_update(b); },
      fabric::Callers::Anyone);
  server_.on_call(
      kStatusService,
      [this](const fabric::PeerInfo&, std::span<const uint8_t>) {
        std::string s = status_text();
        return std::vector<uint8_t>(s.begin(), s.end());
      },
      fabric::Callers::Anyone);
  if (log_)
    log_(fabric::LogLevel::Info,
         "MEMD0140 coop: directory of " + std::to_string(cfg_.buckets) + " buckets (" +
             std::to_string(bytes) + " bytes) in segment " + segment_name_ + " (incarnation " +
             hex(dir_->geometry().incarnation) + "), exported as region \"coop.dir\"");
}

CoopRole::~CoopRole() {
  try {
    server_.unexport_region(dirwire::kRegion);
  } catch (const std::exception&) {
  }
  // This directory ends: shm peers that mapped it fail their next read (Revoked); a restarted
  // memd creates a new, empty one.
  dir_->segment()->revoke();
  fabric::SharedSegment::unlink(segment_name_);
}

std::vector<uint8_t> CoopRole::handle_update(std::span<const uint8_t> body) {
  std::vector<uint8_t> reply = dirwire::apply_body(*dir_, body);
  // Reply head: version u8 | status u8 | msg_len u16 | count u32 | message.
  if (reply.size() >= dirwire::kReplyHead &&
      reply[1] == static_cast<uint8_t>(UpdateStatus::BadRequest)) {
    if (bad_requests_.fetch_add(1, std::memory_order_relaxed) % 1000 == 0 && log_) {
      size_t n = size_t(reply[2]) | size_t(reply[3]) << 8;
      std::string why(
          reply.begin() + dirwire::kReplyHead,
          reply.begin() + dirwire::kReplyHead + std::min(n, reply.size() - dirwire::kReplyHead));
      log_(fabric::LogLevel::Warn, "MEMD0141 coop: malformed coop.dir.update refused: " + why +
                                       " (logged once per 1000; a client of another version, "
                                       "or a bug)");
    }
  }
  return reply;
}

std::string CoopRole::status_text() const {
  const auto& g = dir_->geometry();
  auto counters = dir_->update_counters();
  std::ostringstream o;
  o << "segment " << segment_name_ << "\nincarnation " << hex(g.incarnation) << "\nbuckets "
    << g.buckets << "\nbucket_bytes " << coherence::kDirBucketSize << "\nbytes " << g.total_bytes()
    << "\nnodes " << g.nodes << "\nentries " << dir_->entries() << "\n";
  for (size_t i = 0; i < coherence::kUpdateStatusCount; ++i) {
    auto s = static_cast<UpdateStatus>(i);
    if (s == UpdateStatus::BadRequest) continue;  // counted here, not by the directory
    o << "updates_" << coherence::to_string(s) << " " << counters[i] << "\n";
  }
  o << "bad_requests " << bad_requests_.load() << "\n";
  return o.str();
}

void CoopRole::metrics(base::Metrics& m) const {
  const auto& g = dir_->geometry();
  auto counters = dir_->update_counters();
  m.gauge("tierce_coopdir_buckets", "Buckets of the cooperative cache directory.",
          uint64_t(g.buckets));
  m.gauge("tierce_coopdir_bytes", "Size of the directory segment in bytes.",
          uint64_t(g.total_bytes()));
  m.gauge("tierce_coopdir_entries", "Directory entries in use.", uint64_t(dir_->entries()));
  for (size_t i = 0; i < coherence::kUpdateStatusCount; ++i) {
    auto s = static_cast<UpdateStatus>(i);
    if (s == UpdateStatus::BadRequest) continue;
    m.counter("tierce_coopdir_updates_total", "Directory updates, by outcome.", counters[i],
              {{"outcome", std::string(coherence::to_string(s))}});
  }
  m.counter("tierce_coopdir_bad_requests_total", "Malformed directory requests refused.",
            bad_requests_.load());
}

}  // namespace tierce::memd
