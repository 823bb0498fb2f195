// coherence/coop_directory.cc — the directory's owner (updates), local and remote readers, and the
// home choice of cooperative caching (coop_directory.h).
#include "coherence/coop_directory.h"
#include "coherence/bytes.h"

#include <xxhash.h>

#include <atomic>
#include <bit>
#include <cstring>
#include <random>
#include <stdexcept>

#include "base/check.h"
#include "base/tsan.h"
#include "coherence/key.h"

namespace tierce::coherence {

// Fields are stored in host order and the sequence word is a CPU atomic shared with local
// readers: the documented little-endian layout holds on little-endian hosts only.
static_assert(std::endian::native == std::endian::little,
              "coop_directory.h's layout is little-endian");
static_assert(std::atomic_ref<uint64_t>::required_alignment <= 8);

namespace {

using namespace dir_offset;

using bytes::load;
using bytes::store;

constexpr uint64_t kKeyCheckSeed = 0x642D656372656974ull;  // "tierce-d"

std::atomic_ref<uint64_t> sequence_word(const uint8_t* bucket) {
  // Buckets are 64-byte aligned in 64-byte-aligned memory (checked at create), so offset 8 is
  // 8-aligned.
  return std::atomic_ref<uint64_t>(
      *reinterpret_cast<uint64_t*>(const_cast<uint8_t*>(bucket) + kSequence));
}

uint64_t bucket_checksum(const uint8_t* b) {
  return XXH3_64bits(b + kChecksummed, kDirBucketSize - kChecksummed);
}

// Empty when `l` may be stored for an object of `length` bytes in a directory of `nodes` nodes,
// else why not. Shared by publish (refusal) and the readers (BadBucket).
std::string check_location(const Location& l, uint64_t length, uint16_t nodes) {
  if (l.node >= nodes)
    return "node index " + std::to_string(l.node) + " is not below the directory's node count " +
           std::to_string(nodes);
  if (l.kind != CopyRegion::Arena && l.kind != CopyRegion::Pool)
    return "region kind " + std::to_string(unsigned(l.kind)) + " is neither arena (1) nor pool (2)";
  if (l.slot_size == 0) return "slot size 0";
  if (length > l.slot_size)
    return "object length " + std::to_string(length) + " exceeds the slot size " +
           std::to_string(l.slot_size);
  if (l.kind == CopyRegion::Pool) {
    if (l.offset % 64 != 0 || l.slot_size % 64 != 0)
      return "a pool slot's offset and size are multiples of 64";
    if (l.generation % 2 != 0) return "a pool slot's generation is even once written";
  }
  return {};
}

void encode_location(uint8_t* p, const Location& l) {
  store<uint16_t>(p + kNode, l.node);
  p[kKind] = uint8_t(l.kind);
  p[kKind + 1] = 0;
  store<uint32_t>(p + kSlotSize, l.slot_size);
  store<uint64_t>(p + kOffset, l.offset);
  store<uint64_t>(p + kGeneration, l.generation);
}

Location decode_location(const uint8_t* p) {
  Location l;
  l.node = load<uint16_t>(p + kNode);
  l.kind = CopyRegion(p[kKind]);
  l.slot_size = load<uint32_t>(p + kSlotSize);
  l.offset = load<uint64_t>(p + kOffset);
  l.generation = load<uint64_t>(p + kGeneration);
  return l;
}

// Entry `e` of a bucket whose count was bounds-checked. nullopt when its own fields are out of
// range (location count, reserved bytes, locations).
std::optional<DirEntry> decode_entry(const uint8_t* e, uint16_t nodes) {
  DirEntry d;
  d.key_hash = load<uint64_t>(e + kKeyHash);
  d.key_check = load<uint64_t>(e + kKeyCheck);
  d.length = load<uint64_t>(e + kLength);
  d.tag.home = load<uint32_t>(e + kTagHome);
  d.tag.slot = load<uint64_t>(e + kTagSlot);
  d.tag.version = load<uint64_t>(e + kTagVersion);
  const uint32_t n = load<uint32_t>(e + kLocCount);
  if (n == 0 || n > kDirLocations) return std::nullopt;
  d.count = n;
  for (size_t j = 0; j < kDirLocations; ++j) {
    const uint8_t* p = e + kFirstLocation + j * kDirLocationSize;
    if (j < n) {
      d.locations[j] = decode_location(p);
      if (p[kKind + 1] != 0 || !check_location(d.locations[j], d.length, nodes).empty())
        return std::nullopt;
    } else {
      for (size_t k = 0; k < kDirLocationSize; ++k)
        if (p[k] != 0) return std::nullopt;
    }
  }
  return d;
}

void encode_entry(uint8_t* e, const DirEntry& d) {
  std::memset(e, 0, kDirEntrySize);
  store<uint64_t>(e + kKeyHash, d.key_hash);
  store<uint64_t>(e + kKeyCheck, d.key_check);
  store<uint64_t>(e + kLength, d.length);
  store<uint32_t>(e + kTagHome, d.tag.home);
  store<uint32_t>(e + kLocCount, d.count);
  store<uint64_t>(e + kTagSlot, d.tag.slot);
  store<uint64_t>(e + kTagVersion, d.tag.version);
  for (size_t j = 0; j < d.count; ++j)
    encode_location(e + kFirstLocation + j * kDirLocationSize, d.locations[j]);
}

// The checks common to read_entry and read_bucket, in order: size, odd sequence, checksum, index,
// count, reserved bytes. Returns the entry count.
std::variant<uint32_t, DirMiss> verify_bucket(std::span<const uint8_t> b, uint64_t expected_index) {
  if (b.size() < kDirBucketSize) return DirMiss{DirMissReason::ShortRead};
  const uint8_t* p = b.data();
  if (load<uint64_t>(p + kSequence) % 2 != 0) return DirMiss{DirMissReason::Torn};
  if (bucket_checksum(p) != load<uint64_t>(p + kChecksum)) return DirMiss{DirMissReason::Checksum};
  if (load<uint64_t>(p + kIndex) != expected_index) return DirMiss{DirMissReason::WrongBucket};
  const uint32_t count = load<uint32_t>(p + kCount);
  if (count > kDirEntriesPerBucket || load<uint32_t>(p + kCount + 4) != 0)
    return DirMiss{DirMissReason::BadBucket};
  for (size_t k = kDirBucketHeader + kDirEntriesPerBucket * kDirEntrySize; k < kDirBucketSize; ++k)
    if (p[k] != 0) return DirMiss{DirMissReason::BadBucket};
  return count;
}

uint64_t header_checksum(const uint8_t* h) {
  return XXH3_64bits(h, kHeaderChecksummed);
}

uint64_t random_nonzero() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = uint64_t(rd()) << 32 ^ rd();
  return v;
}

}  // namespace

// ---- names
// ---------------------------------------------------------------------------------------

std::string_view to_string(CopyRegion k) {
  switch (k) {
    case CopyRegion::Arena:
      return "arena";
    case CopyRegion::Pool:
      return "pool";
  }
  return "unknown";
}

std::string_view to_string(DirMissReason r) {
  switch (r) {
    case DirMissReason::NotFound:
      return "not_found";
    case DirMissReason::Torn:
      return "torn";
    case DirMissReason::Checksum:
      return "checksum";
    case DirMissReason::ShortRead:
      return "short_read";
    case DirMissReason::WrongBucket:
      return "wrong_bucket";
    case DirMissReason::BadBucket:
      return "bad_bucket";
    case DirMissReason::BadHeader:
      return "bad_header";
  }
  return "unknown";
}
std::ostream& operator<<(std::ostream& o, DirMissReason r) {
  return o << to_string(r);
}

std::string_view to_string(UpdateStatus s) {
  switch (s) {
    case UpdateStatus::Added:
      return "added";
    case UpdateStatus::Replaced:
      return "replaced";
    case UpdateStatus::Superseded:
      return "superseded";
    case UpdateStatus::Withdrawn:
      return "withdrawn";
    case UpdateStatus::Invalidated:
      return "invalidated";
    case UpdateStatus::NodeWithdrawn:
      return "node_withdrawn";
    case UpdateStatus::NotFound:
      return "not_found";
    case UpdateStatus::GenerationMismatch:
      return "generation_mismatch";
    case UpdateStatus::BucketFull:
      return "bucket_full";
    case UpdateStatus::LocationsFull:
      return "locations_full";
    case UpdateStatus::StaleTag:
      return "stale_tag";
    case UpdateStatus::LengthMismatch:
      return "length_mismatch";
    case UpdateStatus::BadLocation:
      return "bad_location";
    case UpdateStatus::BadRequest:
      return "bad_request";
  }
  return "unknown";
}
std::ostream& operator<<(std::ostream& o, UpdateStatus s) {
  return o << to_string(s);
}

bool update_ok(UpdateStatus s) {
  switch (s) {
    case UpdateStatus::Added:
    case UpdateStatus::Replaced:
    case UpdateStatus::Superseded:
    case UpdateStatus::Withdrawn:
    case UpdateStatus::Invalidated:
    case UpdateStatus::NodeWithdrawn:
    case UpdateStatus::NotFound:
      return true;
    default:
      return false;
  }
}

// ---- counters
// --------------------------------------------------------------------------------------

void DirReadCounters::count(const DirReadResult& r) {
  if (const DirMiss* m = std::get_if<DirMiss>(&r))
    ++misses[size_t(m->reason)];
  else
    ++hits;
}
uint64_t DirReadCounters::total_misses() const {
  uint64_t n = 0;
  for (uint64_t m : misses) n += m;
  return n;
}
DirReadCounters& DirReadCounters::operator+=(const DirReadCounters& o) {
  hits += o.hits;
  for (size_t i = 0; i < kDirMissReasonCount; ++i) misses[i] += o.misses[i];
  return *this;
}

// ---- readers
// ---------------------------------------------------------------------------------------

uint64_t DirectoryGeometry::bucket_index(uint64_t key_hash) const {
  // A mix independent of the bits that chose the home (rendezvous) and the version slot
  // (slot_of): the keys of one home spread over all its buckets.
  uint64_t x = key_hash ^ 0xD6E8FEB86659FD93ull;
  x = (x ^ (x >> 32)) * 0xD6E8FEB86659FD93ull;
  x = (x ^ (x >> 32)) * 0xD6E8FEB86659FD93ull;
  x ^= x >> 32;
  return buckets ? x & (buckets - 1) : 0;
}

std::variant<DirectoryGeometry, DirMiss> parse_directory_header(std::span<const uint8_t> b) {
  if (b.size() < kDirHeaderSize) return DirMiss{DirMissReason::ShortRead};
  const uint8_t* p = b.data();
  const DirMiss bad{DirMissReason::BadHeader};
  if (load<uint32_t>(p + kMagic) != kDirMagic || load<uint16_t>(p + kVersion) != kDirVersion ||
      load<uint16_t>(p + kEntries) != kDirEntriesPerBucket ||
      load<uint16_t>(p + kLocations) != kDirLocations ||
      load<uint32_t>(p + kBucketSize) != kDirBucketSize)
    return bad;
  if (header_checksum(p) != load<uint64_t>(p + kHeaderChecksum)) return bad;
  for (size_t k = 48; k < kDirHeaderSize; ++k)
    if (p[k] != 0) return bad;
  DirectoryGeometry g;
  g.buckets = load<uint64_t>(p + kBuckets);
  g.nodes = load<uint16_t>(p + kNodes);
  g.digest = load<uint64_t>(p + kDigest);
  g.incarnation = load<uint64_t>(p + kIncarnation);
  if (g.buckets == 0 || g.buckets > kDirMaxBuckets || !std::has_single_bit(g.buckets) ||
      g.nodes == 0 || g.incarnation == 0)
    return bad;
  return g;
}

uint64_t coop_key_check(std::string_view key) {
  return XXH3_64bits_withSeed(key.data(), key.size(), kKeyCheckSeed);
}

DirReadResult read_entry(const DirectoryGeometry& g, std::span<const uint8_t> b, uint64_t key_hash,
                         uint64_t key_check) {
  if (g.buckets == 0 || g.nodes == 0) return DirMiss{DirMissReason::BadHeader};
  auto v = verify_bucket(b, g.bucket_index(key_hash));
  if (auto* m = std::get_if<DirMiss>(&v)) return *m;
  const uint32_t count = std::get<uint32_t>(v);
  const uint8_t* p = b.data();
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* e = p + kFirstEntry + i * kDirEntrySize;
    if (load<uint64_t>(e + kKeyHash) != key_hash || load<uint64_t>(e + kKeyCheck) != key_check)
      continue;
    auto d = decode_entry(e, g.nodes);
    if (!d) return DirMiss{DirMissReason::BadBucket};
    d->sequence = load<uint64_t>(p + kSequence);
    return *d;
  }
  return DirMiss{DirMissReason::NotFound};
}

std::variant<DirBucket, DirMiss> read_bucket(const DirectoryGeometry& g, std::span<const uint8_t> b,
                                             uint64_t expected_index) {
  if (g.buckets == 0 || g.nodes == 0) return DirMiss{DirMissReason::BadHeader};
  auto v = verify_bucket(b, expected_index);
  if (auto* m = std::get_if<DirMiss>(&v)) return *m;
  const uint32_t count = std::get<uint32_t>(v);
  DirBucket out;
  out.sequence = load<uint64_t>(b.data() + kSequence);
  for (size_t i = 0; i < kDirEntriesPerBucket; ++i) {
    const uint8_t* e = b.data() + kFirstEntry + i * kDirEntrySize;
    if (i >= count) {
      for (size_t k = 0; k < kDirEntrySize; ++k)
        if (e[k] != 0) return DirMiss{DirMissReason::BadBucket};
      continue;
    }
    auto d = decode_entry(e, g.nodes);
    if (!d) return DirMiss{DirMissReason::BadBucket};
    d->sequence = out.sequence;
    out.entries.push_back(*d);
  }
  return out;
}

// ---- home choice
// -----------------------------------------------------------------------------------

const NodeInfo& directory_home_of(const Topology& t, uint64_t key_hash) {
  const NodeInfo* best = nullptr;
  uint64_t best_w = 0;
  const std::string key = to_hex(key_hash) + "@";
  for (const NodeInfo& n : t.nodes) {
    if (n.role != Role::Proxy) continue;
    const uint64_t w = hash64(key + n.name);
    if (!best || w > best_w) {
      best = &n;
      best_w = w;
    }
  }
  if (!best)
    throw TopologyError(
        (t.path.empty() ? std::string("topology") : t.path) +
        ": no node has role = \"proxy\": cooperative caching needs directory homes");
  return *best;
}

uint16_t node_index(const Topology& t, std::string_view name) {
  if (t.nodes.size() > 0xFFFF)
    throw TopologyError("topology: more than 65535 nodes do not fit a directory location");
  for (size_t i = 0; i < t.nodes.size(); ++i)
    if (t.nodes[i].name == name) return uint16_t(i);
  throw TopologyError((t.path.empty() ? std::string("topology") : t.path) + ": no node \"" +
                      std::string(name) + "\"");
}

// ---- owner
// -----------------------------------------------------------------------------------------

struct CoopDirectory::Image {
  uint64_t sequence = 0;
  uint32_t count = 0;
  std::array<DirEntry, kDirEntriesPerBucket> entries{};

  int find(uint64_t key_hash, uint64_t key_check) const {
    for (uint32_t i = 0; i < count; ++i)
      if (entries[i].key_hash == key_hash && entries[i].key_check == key_check) return int(i);
    return -1;
  }
  void erase(int i) {
    for (uint32_t k = uint32_t(i); k + 1 < count; ++k) entries[k] = entries[k + 1];
    entries[--count] = DirEntry{};
  }
};

namespace {
void erase_location(DirEntry& d, uint32_t j) {
  for (uint32_t k = j; k + 1 < d.count; ++k) d.locations[k] = d.locations[k + 1];
  d.locations[--d.count] = Location{};
}
}  // namespace

CoopDirectory::CoopDirectory(std::span<uint8_t> memory, DirectoryGeometry g,
                             std::shared_ptr<fabric::SharedSegment> seg)
    : mem_(memory), geo_(g), seg_(std::move(seg)) {}

std::unique_ptr<CoopDirectory> CoopDirectory::create(std::span<uint8_t> memory, uint64_t buckets,
                                                     uint16_t nodes, uint64_t digest) {
  if (buckets == 0 || buckets > kDirMaxBuckets || !std::has_single_bit(buckets))
    throw std::invalid_argument("coop directory: bucket count " + std::to_string(buckets) +
                                " must be a power of two in 1.." + std::to_string(kDirMaxBuckets));
  if (nodes == 0) throw std::invalid_argument("coop directory: node count 0");
  if (reinterpret_cast<uintptr_t>(memory.data()) % 64 != 0 || memory.size() < bytes_for(buckets))
    throw std::invalid_argument("coop directory: memory must be 64-byte aligned and hold " +
                                std::to_string(bytes_for(buckets)) + " bytes");
  DirectoryGeometry g;
  g.buckets = buckets;
  g.nodes = nodes;
  g.digest = digest;
  g.incarnation = random_nonzero();
  // Buckets first (sequence 0, empty, each with its checksum), the header last: a reader that
  // validates the header sees formatted buckets (the release fence orders them for local readers;
  // remote ones only get the region once the owner exports it, after this returns).
  uint8_t* p = memory.data();
  for (uint64_t i = 0; i < buckets; ++i) {
    uint8_t* b = p + kDirHeaderSize + i * kDirBucketSize;
    std::memset(b, 0, kDirBucketSize);
    store<uint64_t>(b + kIndex, i);
    store<uint64_t>(b + kChecksum, bucket_checksum(b));
  }
  std::memset(p, 0, kDirHeaderSize);
  store<uint32_t>(p + kMagic, kDirMagic);
  store<uint16_t>(p + kVersion, kDirVersion);
  store<uint16_t>(p + kEntries, uint16_t(kDirEntriesPerBucket));
  store<uint16_t>(p + kLocations, uint16_t(kDirLocations));
  store<uint16_t>(p + kNodes, nodes);
  store<uint32_t>(p + kBucketSize, uint32_t(kDirBucketSize));
  store<uint64_t>(p + kBuckets, buckets);
  store<uint64_t>(p + kDigest, digest);
  store<uint64_t>(p + kIncarnation, g.incarnation);
  store<uint64_t>(p + kHeaderChecksum, header_checksum(p));
  std::atomic_thread_fence(std::memory_order_release);
  return std::unique_ptr<CoopDirectory>(new CoopDirectory(memory, g, nullptr));
}

std::unique_ptr<CoopDirectory> CoopDirectory::create_segment(const std::string& name,
                                                             uint64_t buckets, uint16_t nodes,
                                                             uint64_t digest) {
  if (buckets == 0 || buckets > kDirMaxBuckets || !std::has_single_bit(buckets))
    throw std::invalid_argument("coop directory: bucket count " + std::to_string(buckets) +
                                " must be a power of two in 1.." + std::to_string(kDirMaxBuckets));
  const size_t len = bytes_for(buckets);
  auto seg = std::make_shared<fabric::SharedSegment>(
      name.empty() ? fabric::SharedSegment::create_anonymous("coop.dir", len)
                   : fabric::SharedSegment::create(name, len));
  // The data area starts page-aligned (segment.h), so it is 64-byte aligned.
  auto d = create(std::span<uint8_t>(seg->data(), len), buckets, nodes, digest);
  d->seg_ = std::move(seg);
  return d;
}

uint64_t CoopDirectory::bucket_sequence(uint64_t i) const {
  if (i >= geo_.buckets) throw std::out_of_range("coop directory: bucket index out of range");
  return sequence_word(bucket(i)).load(std::memory_order_acquire);
}

CoopDirectory::Image CoopDirectory::load_locked(uint64_t i) const {
  // The owner is the only writer and holds the mutex: its own bucket bytes are stable and were
  // written by encode_entry, so they decode without range checks failing.
  const uint8_t* b = bucket(i);
  Image img;
  img.sequence = load<uint64_t>(b + kSequence);
  img.count = load<uint32_t>(b + kCount);
  if (img.count > kDirEntriesPerBucket)
    throw std::logic_error("coop directory: bucket count corrupted in the owner's memory");
  for (uint32_t k = 0; k < img.count; ++k) {
    auto d = decode_entry(b + kFirstEntry + k * kDirEntrySize, geo_.nodes);
    if (!d) throw std::logic_error("coop directory: entry corrupted in the owner's memory");
    img.entries[k] = *d;
  }
  return img;
}

// Seqlock writer: the new image is built and checksummed privately; the shared bucket is odd only
// for the copy of 632 bytes.
void CoopDirectory::store_locked(uint64_t i, const Image& img) {
  // The image was loaded (checked) and edited by this owner only: its count fits the bucket, and
  // its sequence is even (no store of this owner is half done while it holds the mutex).
  TIERCE_CHECK(img.count <= kDirEntriesPerBucket && img.sequence % 2 == 0,
               "the owner's bucket image fits a bucket and is not mid-update");
  TIERCE_DCHECK(i < geo_.buckets, "a bucket of this directory");
  alignas(64) uint8_t next[kDirBucketSize] = {};
  const uint64_t seq = img.sequence + 2;
  store<uint64_t>(next + kSequence, seq);
  store<uint64_t>(next + kIndex, i);
  store<uint32_t>(next + kCount, img.count);
  for (uint32_t k = 0; k < img.count; ++k)
    encode_entry(next + kFirstEntry + k * kDirEntrySize, img.entries[k]);
  store<uint64_t>(next + kChecksum, bucket_checksum(next));

  uint8_t* b = bucket(i);
  // Odd first; the release fence orders it before every byte store below (pairs with the local
  // reader's acquire fence in lookup()): a reader that sees a new byte sees the odd value on its
  // reload. Remote readers (tcp responder, shm peer, HCA) see odd, or a checksum mismatch.
  sequence_word(b).store(seq - 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(b + kChecksum, next + kChecksum, 8);
  std::memcpy(b + kIndex, next + kIndex, kDirBucketSize - kIndex);
  // Publishes the even sequence after every byte (release).
  sequence_word(b).store(seq, std::memory_order_release);
}

UpdateResult CoopDirectory::done_locked(UpdateResult r) {
  ++counters_[size_t(r.status)];
  return r;
}

UpdateResult CoopDirectory::publish(uint64_t key_hash, uint64_t key_check, const Tag& tag,
                                    uint64_t length, const Location& where) {
  std::lock_guard lk(mu_);
  if (std::string why = check_location(where, length, geo_.nodes); !why.empty())
    return done_locked({UpdateStatus::BadLocation, 0, "publish refused: " + why});
  const uint64_t bi = geo_.bucket_index(key_hash);
  Image img = load_locked(bi);
  int i = img.find(key_hash, key_check);
  UpdateStatus st = UpdateStatus::Added;
  if (i < 0) {
    if (img.count == kDirEntriesPerBucket)
      return done_locked(
          {UpdateStatus::BucketFull, 0,
           "the key's directory bucket holds 4 other keys: keep the copy unpublished (it serves "
           "this node only), or withdraw/invalidate a less useful key of that bucket and publish "
           "again; frequent refusals mean the directory needs more buckets"});
    i = int(img.count++);
    DirEntry& d = img.entries[size_t(i)];
    d = DirEntry{};
    d.key_hash = key_hash;
    d.key_check = key_check;
    d.length = length;
    d.tag = tag;
  } else {
    DirEntry& d = img.entries[size_t(i)];
    const bool same_object = d.tag.home == tag.home && d.tag.slot == tag.slot;
    if (same_object && tag.version < d.tag.version)
      return done_locked({UpdateStatus::StaleTag, 0,
                          "the directory has version " + std::to_string(d.tag.version) +
                              " of this object: drop the copy of version " +
                              std::to_string(tag.version) + ", it is stale"});
    if (!same_object || tag.version > d.tag.version) {
      d.count = 0;
      d.locations = {};
      d.length = length;
      d.tag = tag;
      st = UpdateStatus::Superseded;
    } else if (d.length != length) {
      return done_locked({UpdateStatus::LengthMismatch, 0,
                          "the entry says " + std::to_string(d.length) +
                              " bytes for this version, the copy has " + std::to_string(length) +
                              ": do not publish it (a caller bug or a corrupted copy)"});
    }
  }
  DirEntry& d = img.entries[size_t(i)];
  bool replaced = false;
  for (uint32_t j = 0; j < d.count; ++j) {
    Location& l = d.locations[j];
    if (l.node == where.node && l.kind == where.kind && l.offset == where.offset) {
      l = where;
      replaced = true;
      break;
    }
  }
  if (!replaced) {
    if (d.count == kDirLocations)
      return done_locked({UpdateStatus::LocationsFull, 0,
                          "the key already has 4 copies: keep this one unpublished, or withdraw "
                          "one of the others first"});
    d.locations[d.count++] = where;
  } else if (st == UpdateStatus::Added) {
    st = UpdateStatus::Replaced;
  }
  store_locked(bi, img);
  return done_locked({st, 1, {}});
}

UpdateResult CoopDirectory::withdraw(uint64_t key_hash, uint64_t key_check, uint16_t node,
                                     CopyRegion kind, uint64_t offset, uint64_t generation) {
  std::lock_guard lk(mu_);
  if (node >= geo_.nodes || (kind != CopyRegion::Arena && kind != CopyRegion::Pool))
    return done_locked(
        {UpdateStatus::BadLocation, 0, "withdraw refused: node index or region kind out of range"});
  const uint64_t bi = geo_.bucket_index(key_hash);
  Image img = load_locked(bi);
  const int i = img.find(key_hash, key_check);
  if (i < 0) return done_locked({UpdateStatus::NotFound, 0, {}});
  DirEntry& d = img.entries[size_t(i)];
  for (uint32_t j = 0; j < d.count; ++j) {
    const Location& l = d.locations[j];
    if (l.node != node || l.kind != kind || l.offset != offset) continue;
    if (l.generation != generation)
      return done_locked({UpdateStatus::GenerationMismatch, 0,
                          "that place holds generation " + std::to_string(l.generation) +
                              " (a newer copy): nothing withdrawn"});
    erase_location(d, j);
    if (d.count == 0) img.erase(i);
    store_locked(bi, img);
    return done_locked({UpdateStatus::Withdrawn, 1, {}});
  }
  return done_locked({UpdateStatus::NotFound, 0, {}});
}

UpdateResult CoopDirectory::withdraw_node(uint16_t node) {
  std::lock_guard lk(mu_);
  if (node >= geo_.nodes)
    return done_locked({UpdateStatus::BadLocation, 0, "withdraw_node refused: node out of range"});
  uint32_t removed = 0;
  for (uint64_t bi = 0; bi < geo_.buckets; ++bi) {
    if (load<uint32_t>(bucket(bi) + kCount) == 0) continue;  // the owner's own memory
    Image img = load_locked(bi);
    bool changed = false;
    for (int i = int(img.count) - 1; i >= 0; --i) {
      DirEntry& d = img.entries[size_t(i)];
      for (int j = int(d.count) - 1; j >= 0; --j)
        if (d.locations[size_t(j)].node == node) {
          erase_location(d, uint32_t(j));
          ++removed;
          changed = true;
        }
      if (d.count == 0) img.erase(i);
    }
    if (changed) store_locked(bi, img);
  }
  return done_locked({UpdateStatus::NodeWithdrawn, removed, {}});
}

UpdateResult CoopDirectory::invalidate(uint64_t key_hash, uint64_t key_check) {
  std::lock_guard lk(mu_);
  const uint64_t bi = geo_.bucket_index(key_hash);
  Image img = load_locked(bi);
  const int i = img.find(key_hash, key_check);
  if (i < 0) return done_locked({UpdateStatus::NotFound, 0, {}});
  img.erase(i);
  store_locked(bi, img);
  return done_locked({UpdateStatus::Invalidated, 1, {}});
}

DirReadResult lookup_local(std::span<const uint8_t> memory, const DirectoryGeometry& g,
                           uint64_t key_hash, uint64_t key_check) {
  if (g.buckets == 0 || g.nodes == 0) return DirMiss{DirMissReason::BadHeader};
  if (memory.size() < g.total_bytes()) return DirMiss{DirMissReason::ShortRead};
  if (reinterpret_cast<uintptr_t>(memory.data()) % 8 != 0)
    throw std::invalid_argument("lookup_local: directory memory must be 8-byte aligned");
  const uint8_t* b = memory.data() + g.bucket_offset(key_hash);
  alignas(64) uint8_t copy[kDirBucketSize];
  const uint64_t before = sequence_word(b).load(std::memory_order_acquire);
  if (before % 2 != 0) return DirMiss{DirMissReason::Torn};
  {
    // Seqlock copy: races with the owner's rewrite by design; the sequence re-check below (and
    // read_entry's checksum) throws a torn copy away. Not recorded by ThreadSanitizer.
    TIERCE_TSAN_RACY_READS();
    std::memcpy(copy, b, kDirBucketSize);
  }
  // Orders the copy's loads before the reload (pairs with the writer's release fence).
  std::atomic_thread_fence(std::memory_order_acquire);
  if (sequence_word(b).load(std::memory_order_relaxed) != before)
    return DirMiss{DirMissReason::Torn};
  return read_entry(g, copy, key_hash, key_check);
}

DirReadResult CoopDirectory::lookup(uint64_t key_hash, uint64_t key_check) const {
  return lookup_local(mem_, geo_, key_hash, key_check);
}

std::array<uint64_t, kUpdateStatusCount> CoopDirectory::update_counters() const {
  std::lock_guard lk(mu_);
  return counters_;
}

size_t CoopDirectory::entries() const {
  std::lock_guard lk(mu_);
  size_t n = 0;
  for (uint64_t bi = 0; bi < geo_.buckets; ++bi) n += load<uint32_t>(bucket(bi) + kCount);
  return n;
}

}  // namespace tierce::coherence
