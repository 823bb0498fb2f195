// coherence/arena.cc — the cache arena: a log-structured ring of self-describing entries plus an
// open-addressing index, in one shared segment, with lock-free readers and mutex-serialised
// writers.
//
// Data area of the segment (all offsets from SharedSegment::data(), little-endian):
//
//   0             Header: magic "TIERCARN" (written last), layout version, sizeof(Header), ring
//                 size, bucket count, index and ring offsets, the writers' robust process-shared
//                 mutex, head and tail (absolute byte positions in the ring: they only grow, the
//                 offset of position p is p % ring), the ArenaCounters.
//   index_offset  buckets x {key hash, absolute position} (atomic u64 each). Hash 0 = empty,
//                 ~0 = tombstone; real hashes of 0 / ~0 are remapped to 1 / ~0-1.
//   ring_offset   the ring (page-aligned, a multiple of 64 bytes long).
//
// An entry starts at a 64-byte aligned position with an EntryHeader (magic, lengths, hash, its
// own absolute position, tag, time), then the key, then the payload, padded to 64. It never
// wraps: when it would not fit before the ring's end the writer skips to the ring start, leaving
// a padding marker when there is room for one.
//
// Why this is safe without reader locks (a seqlock over the tail):
//  - The writer frees space by moving `tail` past the oldest entries (store-release, then a
//    release fence) BEFORE it writes a byte there, and it publishes an entry (head, then the
//    index bucket, store-release) only AFTER the entry is complete.
//  - A reader takes a position from the index (load-acquire), checks pos >= tail, copies, then
//    fences (acquire) and re-reads tail: if the tail has passed pos, the writer may have been
//    writing while we copied, and the copy is discarded as a miss. Every length read from shared
//    memory is bounds-checked before it is used, so a torn header can only cause a miss.
//  - A writer that dies holding the mutex leaves at worst: tail advanced (space freed early),
//    bytes beyond head (never published), or an index bucket whose hash and position disagree
//    (the reader checks the entry's own hash, position and key, so that is a miss). The next
//    writer gets EOWNERDEAD, marks the mutex consistent and carries on.
//  - A writer that is frozen holding the mutex (SIGSTOP) is not dead: the others wait for it at
//    most kLockTimeoutNs (pthread_mutex_timedlock), then skip their store/erase. Readers never
//    wait for it.
#include "coherence/arena.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <new>
#include <stdexcept>

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include "base/check.h"
#include "base/tsan.h"
#include "fabric/errors.h"
#include "fabric/random.h"

namespace tierce::coherence {

namespace {

constexpr uint64_t kArenaMagic = 0x4e52414352454954ull;  // "TIERCARN" little-endian
constexpr uint32_t kArenaLayout =
    4;  // 2: + counters expired, lock_timeouts; 3: entry checksum,
        // coop counters; 4: + counter tag_mismatches, per-home counters
constexpr uint32_t kEntryMagic = 0x52544e45u;  // "ENTR"
constexpr uint32_t kPadMagic = 0x47444150u;    // "PADG": skipped gap up to the ring's end
constexpr uint64_t kAlign = 64;
constexpr uint64_t kMinRing = uint64_t(1) << 20;
constexpr uint64_t kMinBuckets = 1024;
constexpr uint64_t kBytesPerBucket = 256;
constexpr size_t kMaxProbe = 32;
constexpr uint64_t kEmpty = 0;
constexpr uint64_t kTombstone = ~uint64_t(0);

constexpr uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Hash values 0 and ~0 mark empty and deleted buckets: real keys with those hashes move aside.
uint64_t remap(uint64_t h) {
  if (h == kEmpty) return 1;
  if (h == kTombstone) return kTombstone - 1;
  return h;
}

uint64_t buckets_for(uint64_t ring) {
  return std::max<uint64_t>(kMinBuckets, std::bit_ceil((ring + kBytesPerBucket - 1) /
                                                       kBytesPerBucket));
}

// memcpy with a possibly null source (an empty string_view) and n == 0 is still undefined.
void copy_bytes(uint8_t* dst, const char* src, size_t n) {
  if (n) std::memcpy(dst, src, n);
}

int64_t realtime_us() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

size_t latency_bucket(uint64_t ns) {
  if (ns < 16) return size_t(ns);
  unsigned e = 63u - unsigned(std::countl_zero(ns));  // >= 4
  size_t i = size_t(e - 2) * 8 + size_t((ns >> (e - 3)) & 7);
  return std::min(i, ArenaCounters::kLatencyBuckets - 1);
}

}  // namespace

struct CacheArena::Header {
  std::atomic<uint64_t> magic;  // stored (release) last at creation
  uint32_t layout;
  uint32_t header_bytes;  // sizeof(Header): catches builds that disagree on pthread_mutex_t
  uint64_t ring_bytes;
  uint64_t buckets;
  uint64_t index_offset;
  uint64_t ring_offset;
  alignas(64) pthread_mutex_t mutex;
  // Written by the writer of the moment, loaded by every lookup: kept off the counters' line,
  // which every child bumps.
  alignas(64) std::atomic<uint64_t> head;
  std::atomic<uint64_t> tail;
  alignas(64) ArenaCounters counters;
};

struct CacheArena::Bucket {
  std::atomic<uint64_t> hash;
  std::atomic<uint64_t> pos;
};

struct CacheArena::EntryHeader {
  uint32_t magic;
  uint32_t key_len;
  uint64_t total;        // bytes this entry (or gap) occupies in the ring, a multiple of 64
  uint64_t payload_len;
  uint64_t key_hash;     // remapped
  uint64_t pos;          // its own absolute position: tells a stale copy at that offset apart
  uint64_t tag_slot;
  uint64_t tag_version;
  uint32_t tag_home;
  uint32_t reserved;
  int64_t stored_at_us;
  // XXH3-64 of the header's first kChecksummedHeader bytes, the key and the payload: what lets a
  // peer's one-sided read of the entry (no tail to re-check) prove it read one whole entry.
  uint64_t checksum;
};

namespace {
constexpr size_t kChecksummedHeader = 72;  // every EntryHeader field before `checksum`
}

void (*CacheArena::test_store_hook_)(int) = nullptr;

namespace {

struct Geometry {
  uint64_t ring, buckets, index_offset, ring_offset, total;
};

template <class H>
Geometry geometry_for(uint64_t ring) {
  Geometry g;
  g.ring = ring;
  g.buckets = buckets_for(ring);
  g.index_offset = round_up(sizeof(H), kAlign);
  g.ring_offset = round_up(g.index_offset + g.buckets * 16, 4096);
  g.total = g.ring_offset + ring;
  return g;
}

uint64_t ring_for(size_t bytes) {
  if (bytes < kMinRing)
    throw fabric::FabricError(fabric::Errc::Config,
                              "cache arena of " + std::to_string(bytes) +
                                  " bytes: it must be at least 1 MiB");
  return round_up(bytes, kAlign);
}

}  // namespace

CacheArena::CacheArena(fabric::SharedSegment seg) : seg_(std::move(seg)) {
  static_assert(sizeof(Bucket) == 16 && sizeof(EntryHeader) == 80 &&
                    offsetof(EntryHeader, checksum) == kChecksummedHeader,
                "stored layout changed");
  static_assert(alignof(Header) <= 4096, "the data area is page-aligned");
  // The caller validated the header (or just wrote it). Still, derive every pointer from ONE
  // read of the ring size, re-checked here, rather than from shared fields that could change
  // between that validation and now.
  uint64_t ring = hdr()->ring_bytes;
  auto changed = [&] {
    return std::runtime_error("segment " + seg_.name() + ": cache arena geometry changed under us");
  };
  if (ring < kMinRing || ring % kAlign != 0 || ring > seg_.size()) throw changed();
  Geometry g = geometry_for<Header>(ring);
  if (g.total > seg_.size()) throw changed();
  index_ = reinterpret_cast<Bucket*>(seg_.data() + g.index_offset);
  mask_ = g.buckets - 1;
  ring_ = seg_.data() + g.ring_offset;
  ring_bytes_ = ring;
}

CacheArena::~CacheArena() = default;

CacheArena::Header* CacheArena::hdr() const {
  return reinterpret_cast<Header*>(seg_.data());
}

namespace {

// Lays out a fresh (zero-filled) data area; the magic goes last so that a reader that sees it
// sees everything else.
template <class H>
void initialise(uint8_t* data, const Geometry& g) {
  auto* h = new (data) H{};
  h->layout = kArenaLayout;
  h->header_bytes = uint32_t(sizeof(H));
  h->ring_bytes = g.ring;
  h->buckets = g.buckets;
  h->index_offset = g.index_offset;
  h->ring_offset = g.ring_offset;
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  int r = pthread_mutex_init(&h->mutex, &a);
  pthread_mutexattr_destroy(&a);
  if (r != 0) {
    errno = r;
    fabric::throw_errno("cache arena: pthread_mutex_init");
  }
  h->head.store(0, std::memory_order_relaxed);
  h->tail.store(0, std::memory_order_relaxed);
  // ftruncate gave zeroes, but the index must be empty whatever the memory held.
  std::memset(data + g.index_offset, 0, g.buckets * 16);
  h->magic.store(kArenaMagic, std::memory_order_release);
}

}  // namespace

std::unique_ptr<CacheArena> CacheArena::create(const std::string& segment_name, size_t bytes) {
  Geometry g = geometry_for<Header>(ring_for(bytes));
  // SharedSegment::create publishes its name before we could write the arena header, so build
  // under a private name, initialise, then rename into place (atomically replacing an old one).
  char tag[48];
  snprintf(tag, sizeof tag, ".arena.%d.%016llx", int(getpid()),
           (unsigned long long)fabric::random_u64());
  std::string tmp = segment_name + tag;
  uint64_t incarnation = 0;
  {
    fabric::SharedSegment seg = fabric::SharedSegment::create(tmp, g.total);
    try {
      initialise<Header>(seg.data(), g);
    } catch (...) {
      fabric::SharedSegment::unlink(tmp);
      throw;
    }
    incarnation = seg.incarnation();
  }
  // Same /dev/shm assumption as SharedSegment::create (glibc's POSIX shm directory).
  if (::rename(("/dev/shm" + tmp).c_str(), ("/dev/shm" + segment_name).c_str()) != 0) {
    int e = errno;
    fabric::SharedSegment::unlink(tmp);
    errno = e;
    fabric::throw_errno("publish cache arena " + segment_name + " (rename in /dev/shm)");
  }
  // Map it under its real name, so segment().name() is the one peers and memd know.
  fabric::SharedSegment seg = fabric::SharedSegment::open(segment_name);
  if (seg.incarnation() != incarnation)
    throw std::runtime_error("cache arena " + segment_name +
                             " was replaced by another creator while being published");
  return std::unique_ptr<CacheArena>(new CacheArena(std::move(seg)));
}

std::unique_ptr<CacheArena> CacheArena::create_anonymous(size_t bytes) {
  Geometry g = geometry_for<Header>(ring_for(bytes));
  fabric::SharedSegment seg = fabric::SharedSegment::create_anonymous("tierce-arena", g.total);
  initialise<Header>(seg.data(), g);
  return std::unique_ptr<CacheArena>(new CacheArena(std::move(seg)));
}

std::unique_ptr<CacheArena> CacheArena::open(const std::string& segment_name) {
  fabric::SharedSegment seg = fabric::SharedSegment::open(segment_name);
  auto bad = [&](const std::string& why) {
    return std::runtime_error("segment " + segment_name + " is not a usable cache arena: " + why);
  };
  if (seg.size() < sizeof(Header))
    throw bad("its data area (" + std::to_string(seg.size()) + " bytes) is smaller than the " +
              "arena header");
  const auto* h = reinterpret_cast<const Header*>(seg.data());
  if (h->magic.load(std::memory_order_acquire) != kArenaMagic)
    throw bad("bad magic (not created by CacheArena::create)");
  if (h->layout != kArenaLayout)
    throw bad("layout version " + std::to_string(h->layout) + ", this build reads " +
              std::to_string(kArenaLayout));
  if (h->header_bytes != sizeof(Header))
    throw bad("header of " + std::to_string(h->header_bytes) + " bytes, this build's is " +
              std::to_string(sizeof(Header)) + " (different build or platform)");
  uint64_t ring = h->ring_bytes;
  if (ring < kMinRing || ring % kAlign != 0 || ring > seg.size())
    throw bad("ring size " + std::to_string(ring) + " is invalid");
  Geometry g = geometry_for<Header>(ring);
  if (h->buckets != g.buckets || h->index_offset != g.index_offset ||
      h->ring_offset != g.ring_offset)
    throw bad("index geometry (" + std::to_string(h->buckets) + " buckets at " +
              std::to_string(h->index_offset) + ", ring at " + std::to_string(h->ring_offset) +
              ") does not match its ring size");
  if (g.total > seg.size())
    throw bad("ring ends at " + std::to_string(g.total) + ", past the segment's " +
              std::to_string(seg.size()) + " bytes");
  // Tail first: writers may be storing meanwhile, and tail never passes the head of its time.
  // (head - tail may briefly exceed the ring between the two loads, so that is not checked.)
  uint64_t tail = h->tail.load(std::memory_order_acquire);
  uint64_t head = h->head.load(std::memory_order_acquire);
  if (tail > head) throw bad("its tail is ahead of its head");
  return std::unique_ptr<CacheArena>(new CacheArena(std::move(seg)));
}

size_t CacheArena::max_entry_bytes() const { return size_t(ring_bytes_ / 4); }

ArenaCounters& CacheArena::counters() const { return hdr()->counters; }

CacheArena::LockResult CacheArena::lock() const {
  static_assert(kLockTimeoutNs > 0 && kLockTimeoutNs < 1'000'000'000, "a bound below 1 s");
  timespec deadline{};
  clock_gettime(CLOCK_REALTIME, &deadline);  // the clock pthread_mutex_timedlock measures on
  deadline.tv_nsec += kLockTimeoutNs;
  if (deadline.tv_nsec >= 1'000'000'000) {
    deadline.tv_nsec -= 1'000'000'000;
    deadline.tv_sec += 1;
  }
  int r;
  while ((r = pthread_mutex_timedlock(&hdr()->mutex, &deadline)) == EINTR) {
  }
  if (r == EOWNERDEAD) {
    // The previous writer died inside store()/erase(); every step of those leaves the arena
    // consistent (see the file comment), so its half-done work needs no repair.
    pthread_mutex_consistent(&hdr()->mutex);
    base::tsan_note_robust_lock_recovered(&hdr()->mutex);  // no-op outside TSan builds
    return LockResult::Locked;
  }
  if (r == ETIMEDOUT) {
    hdr()->counters.lock_timeouts.fetch_add(1, std::memory_order_relaxed);
    return LockResult::TimedOut;
  }
  return r == 0 ? LockResult::Locked : LockResult::Failed;
}

void CacheArena::unlock() const { pthread_mutex_unlock(&hdr()->mutex); }

// --- writer side ----------------------------------------------------------------------------

bool CacheArena::entry_has_key_locked(uint64_t pos, uint64_t hash, std::string_view key) const {
  Header* h = hdr();
  if (pos < h->tail.load(std::memory_order_relaxed) ||
      pos >= h->head.load(std::memory_order_relaxed))
    return false;
  uint64_t off = pos % ring_bytes_;
  if (ring_bytes_ - off < sizeof(EntryHeader)) return false;
  EntryHeader e;
  std::memcpy(&e, ring_ + off, sizeof e);
  if (e.magic != kEntryMagic || e.pos != pos || e.key_hash != hash || e.key_len != key.size() ||
      e.total > ring_bytes_ - off || sizeof e + uint64_t(e.key_len) > e.total)
    return false;
  return key.empty() || std::memcmp(ring_ + off + sizeof e, key.data(), key.size()) == 0;
}

size_t CacheArena::find_bucket_locked(uint64_t hash, std::string_view key) const {
  for (size_t i = 0; i < kMaxProbe; ++i) {
    size_t j = size_t((hash + i) & mask_);
    uint64_t bh = index_[j].hash.load(std::memory_order_relaxed);
    if (bh == kEmpty) break;
    if (bh == hash && entry_has_key_locked(index_[j].pos.load(std::memory_order_relaxed), hash, key))
      return j;
  }
  return SIZE_MAX;
}

void CacheArena::drop_bucket_locked(size_t i) {
  // A tombstone keeps later buckets of the probe chain reachable. If the next bucket is empty
  // no chain runs through this one, so it (and the tombstones just before it) can become empty
  // again: deleted keys then do not slowly fill the index with tombstones.
  if (index_[(i + 1) & mask_].hash.load(std::memory_order_relaxed) != kEmpty) {
    index_[i].hash.store(kTombstone, std::memory_order_release);
    return;
  }
  index_[i].hash.store(kEmpty, std::memory_order_release);
  for (uint64_t n = 0; n < mask_; ++n) {
    i = size_t((i + mask_) & mask_);  // i - 1
    if (index_[i].hash.load(std::memory_order_relaxed) != kTombstone) break;
    index_[i].hash.store(kEmpty, std::memory_order_release);
  }
}

// Moves tail past the oldest entry (or padding gap), unindexing it first.
void CacheArena::evict_oldest_locked(std::vector<Evicted>* evicted) {
  Header* h = hdr();
  uint64_t tail = h->tail.load(std::memory_order_relaxed);
  uint64_t head = h->head.load(std::memory_order_relaxed);
  uint64_t off = tail % ring_bytes_;
  uint64_t to_ring_end = ring_bytes_ - off;
  uint64_t advance = to_ring_end;  // an unmarked gap (too short for a header) or a bad header
  if (to_ring_end >= sizeof(EntryHeader)) {
    EntryHeader e;
    std::memcpy(&e, ring_ + off, sizeof e);
    bool sane = e.pos == tail && e.total >= kAlign && e.total % kAlign == 0 &&
                e.total <= to_ring_end;
    if (sane && e.magic == kEntryMagic) {
      advance = e.total;
      uint64_t hash = e.key_hash;
      for (size_t i = 0; i < kMaxProbe; ++i) {
        size_t j = size_t((hash + i) & mask_);
        uint64_t bh = index_[j].hash.load(std::memory_order_relaxed);
        if (bh == kEmpty) break;
        if (bh == hash && index_[j].pos.load(std::memory_order_relaxed) == tail) {
          // Copied out whole and sane only (the writer wrote it whole under the mutex).
          if (evicted && e.payload_len <= e.total &&
              sizeof e + uint64_t(e.key_len) + e.payload_len <= e.total) {
            Evicted v;
            v.key_hash = hash;
            const char* k = reinterpret_cast<const char*>(ring_ + off + sizeof e);
            v.entry.key.assign(k, e.key_len);
            v.entry.payload.assign(k + e.key_len, size_t(e.payload_len));
            v.entry.tag = Tag{e.tag_home, e.tag_slot, e.tag_version};
            v.entry.stored_at_us = e.stored_at_us;
            v.where = ArenaCopy{uint64_t(ring_ - seg_.data()) + off, tail, e.total};
            evicted->push_back(std::move(v));
          }
          drop_bucket_locked(j);
          h->counters.evictions.fetch_add(1, std::memory_order_relaxed);
          break;
        }
      }
    } else if (sane && e.magic == kPadMagic) {
      advance = e.total;
    }
    // Anything else cannot be between tail and head (entries there were written whole, under
    // the mutex): drop the rest of this lap rather than trust it.
  }
  uint64_t next = std::min(tail + advance, head);
  h->tail.store(next, std::memory_order_release);
}

bool CacheArena::store(uint64_t key_hash, std::string_view key, const Tag& tag,
                       std::string_view payload, int64_t first_stored_us) {
  return store_located(key_hash, key, tag, payload, first_stored_us).has_value();
}

bool CacheArena::fits_without_eviction(size_t key_bytes, size_t payload_bytes) const {
  const Header* h = hdr();
  uint64_t need = round_up(sizeof(EntryHeader) + uint64_t(key_bytes) + payload_bytes, kAlign);
  if (need > max_entry_bytes()) return false;
  uint64_t tail = h->tail.load(std::memory_order_relaxed);
  uint64_t head = h->head.load(std::memory_order_relaxed);
  uint64_t off = head % ring_bytes_;
  uint64_t start = ring_bytes_ - off < need ? head + (ring_bytes_ - off) : head;
  return start + need - tail <= ring_bytes_;
}

std::optional<ArenaCopy> CacheArena::store_located(uint64_t key_hash, std::string_view key,
                                                   const Tag& tag, std::string_view payload,
                                                   int64_t first_stored_us,
                                                   std::vector<Evicted>* evicted) {
  Header* h = hdr();
  uint64_t need = round_up(sizeof(EntryHeader) + uint64_t(key.size()) + payload.size(), kAlign);
  if (need > max_entry_bytes() || key.size() > UINT32_MAX || !seg_.live()) {
    h->counters.store_refused.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  uint64_t hash = remap(key_hash);
  if (lock() != LockResult::Locked) {  // a timeout is counted in lock_timeouts as well
    h->counters.store_refused.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  uint64_t head = h->head.load(std::memory_order_relaxed);
  uint64_t off = head % ring_bytes_;
  uint64_t start = ring_bytes_ - off < need ? head + (ring_bytes_ - off) : head;
  uint64_t end = start + need;
  // Free [head, end) — it must not overlap [tail, head) modulo the ring — before writing there.
  while (end - h->tail.load(std::memory_order_relaxed) > ring_bytes_ &&
         h->tail.load(std::memory_order_relaxed) < head)
    evict_oldest_locked(evicted);
  // The seqlock's premise (file comment): a writer writes only bytes no live entry holds, and
  // an entry never wraps the ring's end. Both follow from the arithmetic above (need <= ring/4).
  TIERCE_CHECK(end - h->tail.load(std::memory_order_relaxed) <= ring_bytes_,
               "a new entry does not overlap the live entries [tail, head)");
  TIERCE_CHECK(start % ring_bytes_ + need <= ring_bytes_ && start % kAlign == 0,
               "an entry starts aligned and never wraps the ring's end");
  // Orders the tail stores above before the byte stores below, for readers that re-check tail
  // after copying (seqlock: the writer's release fence pairs with the reader's acquire fence).
  std::atomic_thread_fence(std::memory_order_release);
  if (test_store_hook_) test_store_hook_(1);

  if (start != head && start - head >= sizeof(EntryHeader)) {
    EntryHeader pad{};
    pad.magic = kPadMagic;
    pad.total = start - head;
    pad.pos = head;
    std::memcpy(ring_ + off, &pad, sizeof pad);
  }
  EntryHeader e{};
  e.magic = kEntryMagic;
  e.key_len = uint32_t(key.size());
  e.total = need;
  e.payload_len = payload.size();
  e.key_hash = hash;
  e.pos = start;
  e.tag_slot = tag.slot;
  e.tag_version = tag.version;
  e.tag_home = tag.home;
  // The page's first store, never later than now (see store() in arena.h).
  const int64_t now = realtime_us();
  e.stored_at_us = first_stored_us != 0 && first_stored_us < now ? first_stored_us : now;
  {
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, &e, kChecksummedHeader);
    XXH3_64bits_update(&st, key.data(), key.size());
    XXH3_64bits_update(&st, payload.data(), payload.size());
    e.checksum = XXH3_64bits_digest(&st);
  }
  uint8_t* p = ring_ + start % ring_bytes_;
  std::memcpy(p, &e, sizeof e);
  copy_bytes(p + sizeof e, key.data(), key.size());
  size_t half = payload.size() / 2;
  copy_bytes(p + sizeof e + key.size(), payload.data(), half);
  if (test_store_hook_) test_store_hook_(2);
  copy_bytes(p + sizeof e + key.size() + half, payload.data() + half, payload.size() - half);
  h->head.store(end, std::memory_order_release);

  // Publish in the index: replace the bucket of the same key, else take the first empty or
  // tombstoned (or dead: pointing behind tail) bucket, else overwrite the oldest in the window.
  uint64_t tail = h->tail.load(std::memory_order_relaxed);
  size_t same = SIZE_MAX, free_b = SIZE_MAX, oldest = SIZE_MAX;
  uint64_t oldest_pos = UINT64_MAX;
  for (size_t i = 0; i < kMaxProbe; ++i) {
    size_t j = size_t((hash + i) & mask_);
    uint64_t bh = index_[j].hash.load(std::memory_order_relaxed);
    uint64_t bp = index_[j].pos.load(std::memory_order_relaxed);
    if (bh == kEmpty) {
      if (free_b == SIZE_MAX) free_b = j;
      break;
    }
    if (bh == kTombstone || bp < tail) {
      if (free_b == SIZE_MAX) free_b = j;
      continue;
    }
    if (bh == hash && entry_has_key_locked(bp, hash, key)) {
      same = j;
      break;
    }
    if (bp < oldest_pos) oldest_pos = bp, oldest = j;
  }
  if (same != SIZE_MAX) {
    index_[same].pos.store(start, std::memory_order_release);
  } else {
    size_t j = free_b != SIZE_MAX ? free_b : oldest;
    if (free_b == SIZE_MAX) h->counters.evictions.fetch_add(1, std::memory_order_relaxed);
    // Position first: a reader that sees the new hash (acquire) then sees the new position. One
    // that pairs the old hash with the new position finds an entry of another hash: a miss.
    index_[j].pos.store(start, std::memory_order_release);
    index_[j].hash.store(hash, std::memory_order_release);
  }
  h->counters.stores.fetch_add(1, std::memory_order_relaxed);
  unlock();
  return ArenaCopy{uint64_t(ring_ - seg_.data()) + start % ring_bytes_, start, need};
}

void CacheArena::erase(uint64_t key_hash, std::string_view key) {
  uint64_t hash = remap(key_hash);
  if (lock() != LockResult::Locked) return;  // skipped: see erase() in arena.h
  size_t j = find_bucket_locked(hash, key);
  if (j != SIZE_MAX) {
    drop_bucket_locked(j);
    hdr()->counters.erased.fetch_add(1, std::memory_order_relaxed);
  }
  unlock();
}

// --- reader side ----------------------------------------------------------------------------

std::optional<CachedEntry> CacheArena::read_entry(uint64_t pos, uint64_t hash,
                                                  std::string_view key) const {
  const Header* h = hdr();
  if (pos < h->tail.load(std::memory_order_acquire) ||
      pos >= h->head.load(std::memory_order_acquire))
    return std::nullopt;
  uint64_t off = pos % ring_bytes_;
  if (ring_bytes_ - off < sizeof(EntryHeader)) return std::nullopt;
  EntryHeader e;
  CachedEntry out;
  {
    // The seqlock copy: these reads race with a writer that has moved tail past pos and reuses
    // the bytes (by design, see the file comment). Nothing read here is trusted before the tail
    // re-check below; lengths are bounds-checked first. Not recorded by ThreadSanitizer (no-op
    // in other builds).
    TIERCE_TSAN_RACY_READS();
    std::memcpy(&e, ring_ + off, sizeof e);
    // Possibly torn: validate everything used for addressing against the ring and the entry.
    if (e.magic != kEntryMagic || e.pos != pos || e.key_hash != hash || e.key_len != key.size() ||
        e.total % kAlign != 0 || e.total > ring_bytes_ - off || e.payload_len > e.total ||
        sizeof e + uint64_t(e.key_len) + e.payload_len > e.total)
      return std::nullopt;
    const uint8_t* k = ring_ + off + sizeof e;
    // Cheap rejection of a same-hash other key before copying its payload; re-done on the copy.
    if (!key.empty() && std::memcmp(k, key.data(), key.size()) != 0) return std::nullopt;
    out.key.assign(reinterpret_cast<const char*>(k), key.size());
    out.payload.assign(reinterpret_cast<const char*>(k + key.size()), size_t(e.payload_len));
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  if (h->tail.load(std::memory_order_relaxed) > pos) return std::nullopt;  // overwritten meanwhile
  if (out.key != key) return std::nullopt;
  out.tag.home = e.tag_home;
  out.tag.slot = e.tag_slot;
  out.tag.version = e.tag_version;
  out.stored_at_us = e.stored_at_us;
  return out;
}

std::variant<CachedEntry, MissReason> CacheArena::verify_copy(std::span<const uint8_t> bytes,
                                                             uint64_t pos, uint64_t key_hash,
                                                             std::string_view key) {
  if (bytes.size() < sizeof(EntryHeader)) return MissReason::LengthOutOfBounds;
  EntryHeader e;
  std::memcpy(&e, bytes.data(), sizeof e);
  // Another entry (or a gap, or the middle of one) now starts at that offset: the ring moved on.
  if (e.magic != kEntryMagic || e.pos != pos) return MissReason::GenerationChanged;
  if (e.key_hash != remap(key_hash) || e.key_len != key.size()) return MissReason::KeyMismatch;
  // 64-bit arithmetic on 32/64-bit fields: no overflow before the comparison.
  if (e.total % kAlign != 0 || e.total > bytes.size() || e.payload_len > e.total ||
      sizeof e + uint64_t(e.key_len) + e.payload_len > e.total)
    return MissReason::LengthOutOfBounds;
  const uint8_t* k = bytes.data() + sizeof e;
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, &e, kChecksummedHeader);
  XXH3_64bits_update(&st, k, e.key_len + e.payload_len);
  if (XXH3_64bits_digest(&st) != e.checksum) return MissReason::Checksum;
  if (!key.empty() && std::memcmp(k, key.data(), key.size()) != 0) return MissReason::KeyMismatch;
  CachedEntry out;
  out.key.assign(key);
  out.payload.assign(reinterpret_cast<const char*>(k + key.size()), size_t(e.payload_len));
  out.tag.home = e.tag_home;
  out.tag.slot = e.tag_slot;
  out.tag.version = e.tag_version;
  out.stored_at_us = e.stored_at_us;
  return out;
}

std::optional<CachedEntry> CacheArena::lookup(uint64_t key_hash, std::string_view key) const {
  uint64_t hash = remap(key_hash);
  for (size_t i = 0; i < kMaxProbe; ++i) {
    const Bucket& b = index_[(hash + i) & mask_];
    uint64_t bh = b.hash.load(std::memory_order_acquire);
    if (bh == kEmpty) break;
    if (bh != hash) continue;
    // Not this key (collision), or an entry being replaced: keep probing.
    if (auto e = read_entry(b.pos.load(std::memory_order_acquire), hash, key)) return e;
  }
  return std::nullopt;
}

// --- stats and latency ----------------------------------------------------------------------

ArenaStats CacheArena::stats() const {
  const Header* h = hdr();
  ArenaStats s;
  s.capacity_bytes = ring_bytes_;
  s.index_buckets = mask_ + 1;
  uint64_t tail = h->tail.load(std::memory_order_acquire);
  uint64_t head = h->head.load(std::memory_order_acquire);
  s.used_bytes = head >= tail ? head - tail : 0;
  for (uint64_t i = 0; i <= mask_; ++i) {
    uint64_t bh = index_[i].hash.load(std::memory_order_relaxed);
    if (bh != kEmpty && bh != kTombstone && index_[i].pos.load(std::memory_order_relaxed) >= tail)
      ++s.entries;
  }
  return s;
}

uint64_t CacheArena::latency_bucket_lo(size_t i) {
  if (i >= ArenaCounters::kLatencyBuckets) return UINT64_MAX;
  size_t g = i / 8, sub = i % 8;
  if (g == 0) return sub;
  return uint64_t(8 + sub) << (g - 1);
}

void CacheArena::record_latency(uint64_t ns) const {
  hdr()->counters.latency[latency_bucket(ns)].fetch_add(1, std::memory_order_relaxed);
}

uint64_t CacheArena::latency_percentile(double p) const {
  const auto& lat = hdr()->counters.latency;
  uint64_t counts[ArenaCounters::kLatencyBuckets];
  uint64_t total = 0;
  for (size_t i = 0; i < ArenaCounters::kLatencyBuckets; ++i)
    total += counts[i] = lat[i].load(std::memory_order_relaxed);
  if (total == 0) return 0;
  if (!(p > 0)) p = 0;  // also NaN
  if (p > 1) p = 1;
  // Nearest rank: the smallest sample with at least p of all samples at or below it.
  uint64_t rank = std::clamp<uint64_t>(uint64_t(std::ceil(p * double(total))), 1, total);
  uint64_t seen = 0;
  for (size_t i = 0; i < ArenaCounters::kLatencyBuckets; ++i) {
    seen += counts[i];
    if (seen >= rank) return latency_bucket_lo(i);
  }
  return latency_bucket_lo(ArenaCounters::kLatencyBuckets - 1);
}

}  // namespace tierce::coherence
