// fabric/segment.cc — creating, opening and validating shared segments.
#include "fabric/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "fabric/errors.h"
#include "fabric/random.h"

namespace tierce::fabric {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

uint64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void renew_lease(SegmentHeader* h, uint64_t lease_ns) {
  uint64_t now = monotonic_ns();
  uint64_t wall = realtime_ns();
  uint64_t deadline = now + lease_ns;
  uint64_t cap = h->lease_cap_ns.load(std::memory_order_acquire);
  if (cap != 0 && cap < deadline) deadline = cap;
  // A deadline already past is written as such (1 ns): 0 means "withdrawn" to verbs peers.
  uint64_t wall_deadline = deadline > now ? wall + (deadline - now) : 1;
  h->lease_deadline_ns.store(deadline, std::memory_order_release);
  h->lease_deadline_wall_ns.store(wall_deadline, std::memory_order_release);
  // The cap may have been lowered since it was loaded (lower_lease_cap): never leave a deadline
  // above it. (seq_cst: this load comes after the stores above, as lower_lease_cap's deadline
  // update comes after its cap store, so one of the two sees the other.)
  std::atomic_thread_fence(std::memory_order_seq_cst);
  uint64_t cap2 = h->lease_cap_ns.load(std::memory_order_seq_cst);
  if (cap2 != 0 && cap2 < deadline) {
    h->lease_deadline_ns.store(cap2, std::memory_order_release);
    h->lease_deadline_wall_ns.store(cap2 > now ? wall + (cap2 - now) : 1,
                                    std::memory_order_release);
  }
}

void lower_lease_cap(SegmentHeader* h, uint64_t cap_ns) {
  if (cap_ns == 0) cap_ns = 1;  // 0 would mean "no cap"
  uint64_t cur = h->lease_cap_ns.load(std::memory_order_acquire);
  while ((cur == 0 || cur > cap_ns) &&
         !h->lease_cap_ns.compare_exchange_weak(cur, cap_ns, std::memory_order_seq_cst)) {
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint64_t now = monotonic_ns();
  uint64_t d = h->lease_deadline_ns.load(std::memory_order_acquire);
  while (d > cap_ns &&
         !h->lease_deadline_ns.compare_exchange_weak(d, cap_ns, std::memory_order_acq_rel)) {
  }
  // 1 ns: past (0 would read as "withdrawn"; both fail a verbs peer's check).
  if (cap_ns <= now)
    h->lease_deadline_wall_ns.store(1, std::memory_order_release);
  else {
    uint64_t w = realtime_ns() + (cap_ns - now), cw = h->lease_deadline_wall_ns.load();
    while (cw > w && !h->lease_deadline_wall_ns.compare_exchange_weak(cw, w)) {
    }
  }
}

HostClocks read_host_clocks() {
  auto read = [](clockid_t id) {
    timespec ts;
    clock_gettime(id, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
  };
  HostClocks c;
  for (int tries = 0;; ++tries) {
    uint64_t b1 = read(CLOCK_BOOTTIME);
    c.monotonic_ns = read(CLOCK_MONOTONIC);
    c.realtime_ns = read(CLOCK_REALTIME);
    uint64_t b2 = read(CLOCK_BOOTTIME);
    c.boottime_ns = b1;
    if (b2 - b1 < 1'000'000 || tries == 9) return c;
  }
}

uint64_t ClockPauseDetector::missed_ns(const HostClocks& now) {
  const HostClocks prev = last_;
  const bool primed = primed_;
  last_ = now;
  primed_ = true;
  if (!primed) return 0;
  auto ahead = [](uint64_t a_now, uint64_t a_prev, uint64_t mono_delta) -> uint64_t {
    if (a_now < a_prev) return 0;  // a wall clock stepped back
    uint64_t d = a_now - a_prev;
    return d > mono_delta ? d - mono_delta : 0;
  };
  const uint64_t dm =
      now.monotonic_ns >= prev.monotonic_ns ? now.monotonic_ns - prev.monotonic_ns : 0;
  const uint64_t missed = std::max(ahead(now.boottime_ns, prev.boottime_ns, dm),
                                   ahead(now.realtime_ns, prev.realtime_ns, dm));
  return missed > threshold_ns_ ? missed : 0;
}

void withdraw_lease(SegmentHeader* h) {
  h->lease_deadline_ns.store(0, std::memory_order_release);
  h->lease_deadline_wall_ns.store(0, std::memory_order_release);
}

uint64_t raise_lease_cap(SegmentHeader* h, uint64_t cap_ns) {
  uint64_t cur = h->lease_cap_ns.load(std::memory_order_acquire);
  while (cur < cap_ns &&
         !h->lease_cap_ns.compare_exchange_weak(cur, cap_ns, std::memory_order_acq_rel)) {
  }
  return std::max(cur, cap_ns);
}

Errc judge_remote_lease(const RemoteLeaseWords& w, uint64_t expected_key, uint64_t now_wall_ns,
                        uint64_t clock_skew_ns) {
  if (w.state != uint64_t(SegmentState::Live)) return Errc::Revoked;
  if (w.export_key == 0 || w.export_key != expected_key) return Errc::Revoked;
  if (w.deadline_wall_ns == 0) return Errc::PeerDead;  // withdrawn (clean stop)
  if (now_wall_ns + clock_skew_ns >= w.deadline_wall_ns) return Errc::PeerDead;
  return Errc::Ok;
}

namespace {
void check_name(const std::string& name) {
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos ||
      name.size() > 200)
    throw FabricError(
        Errc::Config,
        "segment name '" + name +
            "' must start with '/' and contain no other '/' (e.g. /tierce.app1.versions)");
}
constexpr size_t kMaxSegment = size_t(1)
                               << 40;  // matches the 40-bit offset field of tcp/shm addresses
}  // namespace

SharedSegment SharedSegment::map_fd(int fd, const std::string& name, bool init, size_t data_len) {
  if (init) {
    if (data_len == 0 || data_len > kMaxSegment) {
      ::close(fd);
      throw FabricError(Errc::Config, "segment " + name + ": data length must be in 1 B .. 1 TiB");
    }
    // A tmpfs (/dev/shm) gives a segment its pages only when they are first touched: a segment
    // larger than the free space maps fine and then kills its user with SIGBUS when the space
    // runs out (a container's /dev/shm is 64 MiB by default). Refuse it here, with the fix.
    struct statfs fs {};
    if (fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC && fs.f_blocks != 0) {  // 0: unlimited
      const unsigned long long free_bytes =
          (unsigned long long)fs.f_bavail * (unsigned long long)fs.f_bsize;
      if (free_bytes < kHeaderSize + data_len) {
        ::close(fd);
        throw FabricError(Errc::Config,
                          "segment " + name + " needs " + std::to_string((kHeaderSize + data_len) >> 20) +
                              " MiB but its shared-memory filesystem (/dev/shm) has only " +
                              std::to_string(free_bytes >> 20) +
                              " MiB free: enlarge /dev/shm (containers: --shm-size, compose shm_size) "
                              "or configure a smaller segment (e.g. RCacheSize)");
      }
    }
    if (ftruncate(fd, off_t(kHeaderSize + data_len)) != 0) {
      int e = errno;
      ::close(fd);
      errno = e;
      throw_errno("ftruncate segment " + name);
    }
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    throw_errno("fstat segment " + name);
  }
  if (size_t(st.st_size) < kHeaderSize) {
    ::close(fd);
    throw FabricError(Errc::BadRequest,
                      "segment " + name + " is smaller than its header: not a Tierce segment");
  }
  // A descriptor opened read-only (a reader's MAP) is mapped read-only: the kernel refuses more.
  const int flags = fcntl(fd, F_GETFL);
  const bool writable = flags < 0 || (flags & O_ACCMODE) != O_RDONLY;
  if (!writable && init) {
    ::close(fd);
    throw FabricError(Errc::NotPermitted, "segment " + name + ": a read-only descriptor cannot be initialised");
  }
  void* p = mmap(nullptr, size_t(st.st_size), writable ? PROT_READ | PROT_WRITE : PROT_READ,
                 MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    ::close(fd);
    throw_errno("mmap segment " + name);
  }
  SharedSegment s;
  s.base_ = p;
  s.map_len_ = size_t(st.st_size);
  s.fd_ = fd;
  s.writable_ = writable;
  s.name_ = name;
  auto* h = s.header();
  if (init) {
    std::memset(p, 0, kHeaderSize);
    h->magic = kSegmentMagic;
    h->layout = kSegmentLayout;
    h->data_offset = kHeaderSize;
    h->data_len = data_len;
    h->incarnation = random_u64();
    h->creator_pid = uint64_t(getpid());
    h->lease_deadline_ns.store(0, std::memory_order_relaxed);
    h->lease_cap_ns.store(0, std::memory_order_relaxed);
    h->lease_deadline_wall_ns.store(0, std::memory_order_relaxed);
    // Publish: everything above is visible to any mapper that sees Live.
    h->state.store(uint64_t(SegmentState::Live), std::memory_order_release);
  } else if (h->magic != kSegmentMagic || h->layout != kSegmentLayout ||
             h->data_offset != kHeaderSize || h->data_len > s.map_len_ - kHeaderSize) {
    throw FabricError(
        Errc::BadRequest,
        "segment " + name + " has a bad header (not created by Tierce, or another layout version)");
  }
  return s;
}

SharedSegment SharedSegment::create(const std::string& name, size_t data_len, unsigned mode) {
  check_name(name);
  char tag[40];
  snprintf(tag, sizeof tag, ".new.%d.%016llx", int(getpid()), (unsigned long long)random_u64());
  std::string tmp = name + tag;
  int fd = shm_open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) throw_errno("shm_open(" + tmp + ")");
  SharedSegment s;
  try {
    s = map_fd(fd, name, true, data_len);
  } catch (...) {
    shm_unlink(tmp.c_str());
    throw;
  }
  // glibc keeps POSIX shm objects in /dev/shm: an atomic rename publishes the finished segment
  // and replaces an older one of the same name in one step.
  if (::rename(("/dev/shm" + tmp).c_str(), ("/dev/shm" + name).c_str()) != 0) {
    int e = errno;
    shm_unlink(tmp.c_str());
    errno = e;
    throw_errno("publish segment " + name + " (rename in /dev/shm)");
  }
  return s;
}

SharedSegment SharedSegment::open_or_create(const std::string& name, size_t data_len,
                                            unsigned mode) {
  check_name(name);
  for (int attempt = 0; attempt < 8; ++attempt) {
    int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd >= 0) {
      // An existing object is used only if it is one we could have created: owned by this user
      // (or by root, who may create it for services of several users), no permission beyond
      // `mode`. Else someone else created it first (e.g. a local user pre-creating the name,
      // mode 0666) and could still read or write what we put there.
      struct stat st {};
      if (::fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        errno = e;
        throw_errno("fstat segment " + name);
      }
      if ((st.st_uid != ::geteuid() && st.st_uid != 0) || (st.st_mode & 0777 & ~mode) != 0) {
        ::close(fd);
        char m[8], w[8];
        std::snprintf(m, sizeof m, "%04o", unsigned(st.st_mode & 07777));
        std::snprintf(w, sizeof w, "%04o", mode & 0777);
        throw FabricError(Errc::NotPermitted,
                          "segment " + name + " exists, owned by uid " +
                              std::to_string(st.st_uid) + " with mode " + m +
                              "; this process (uid " + std::to_string(::geteuid()) +
                              ") uses only a segment that it or root owns, with at most mode " + w +
                              ": another user may have created it to read or change it; remove "
                              "it (rm /dev/shm" + name + ") and start again");
      }
      SharedSegment s = map_fd(fd, name, false, 0);
      if (s.size() < data_len)
        throw FabricError(Errc::BadRequest, "segment " + name + " holds " +
                                                std::to_string(s.size()) + " bytes, " +
                                                std::to_string(data_len) +
                                                " expected: another layout? remove it");
      return s;
    }
    if (errno != ENOENT) throw_errno("shm_open(" + name + ")");
    char tag[40];
    snprintf(tag, sizeof tag, ".new.%d.%016llx", int(getpid()), (unsigned long long)random_u64());
    std::string tmp = name + tag;
    int nfd = shm_open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (nfd < 0) throw_errno("shm_open(" + tmp + ")");
    SharedSegment s;
    try {
      s = map_fd(nfd, name, true, data_len);
    } catch (...) {
      shm_unlink(tmp.c_str());
      throw;
    }
    // link(2), not rename(2): it fails when the name exists, so a segment that another process
    // published meanwhile (and may be using) is never replaced; then we map that one instead.
    int rc = ::link(("/dev/shm" + tmp).c_str(), ("/dev/shm" + name).c_str());
    int e = errno;
    shm_unlink(tmp.c_str());
    if (rc == 0) return s;
    if (e != EEXIST) {
      errno = e;
      throw_errno("publish segment " + name + " (link in /dev/shm)");
    }
  }
  throw FabricError(Errc::System, "segment " + name + ": created and removed by others 8 times in a row");
}

bool SharedSegment::still_named() const {
  if (!base_ || name_.empty() || name_[0] != '/') return false;
  struct stat named {}, mine {};
  if (::stat(("/dev/shm" + name_).c_str(), &named) != 0) return false;
  if (::fstat(fd_, &mine) != 0) return false;
  return named.st_ino == mine.st_ino && named.st_dev == mine.st_dev;
}

SharedSegment SharedSegment::create_anonymous(const std::string& debug_name, size_t data_len) {
  int fd = memfd_create(debug_name.c_str(), MFD_CLOEXEC);
  if (fd < 0) throw_errno("memfd_create(" + debug_name + ")");
  return map_fd(fd, debug_name, true, data_len);
}

SharedSegment SharedSegment::open(const std::string& name) {
  check_name(name);
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) throw_errno("shm_open(" + name + ")");
  return map_fd(fd, name, false, 0);
}

SharedSegment SharedSegment::from_fd(int fd, const std::string& debug_name) {
  return map_fd(fd, debug_name, false, 0);
}

void SharedSegment::unlink(const std::string& name) {
  shm_unlink(name.c_str());
}

SharedSegment::SharedSegment(SharedSegment&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)),
      map_len_(std::exchange(o.map_len_, 0)),
      fd_(std::exchange(o.fd_, -1)),
      writable_(o.writable_),
      name_(std::move(o.name_)) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& o) noexcept {
  if (this != &o) {
    reset();
    base_ = std::exchange(o.base_, nullptr);
    map_len_ = std::exchange(o.map_len_, 0);
    fd_ = std::exchange(o.fd_, -1);
    writable_ = o.writable_;
    name_ = std::move(o.name_);
  }
  return *this;
}

SharedSegment::~SharedSegment() {
  reset();
}

void SharedSegment::reset() {
  if (base_) munmap(base_, map_len_);
  if (fd_ >= 0) ::close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

}  // namespace tierce::fabric
