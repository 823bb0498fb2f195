// coherence/coop_pool_store.cc — pooled copies: slabs as logs of self-verifying slots
// (coop_pool_store.h).
#include "coherence/coop_pool_store.h"

#include <bit>
#include <cstdlib>
#include <memory>

#include "coherence/bytes.h"
#include "coherence/client.h"
#include "coherence/coop_slot.h"
#include "fabric/random.h"

static_assert(std::endian::native == std::endian::little, "the pooled entry is little-endian");

namespace tierce::coherence {

std::string encode_pooled_entry(const Tag& tag, int64_t stored_at_us, std::string_view payload) {
  std::string out(kPooledEntryPrefix, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  bytes::store<uint32_t>(p, tag.home);
  bytes::store<uint64_t>(p + 4, tag.slot);
  bytes::store<uint64_t>(p + 12, tag.version);
  bytes::store<int64_t>(p + 20, stored_at_us);
  out.append(payload);
  return out;
}

std::optional<CachedEntry> decode_pooled_entry(std::string_view key,
                                               std::span<const uint8_t> b) {
  if (b.size() < kPooledEntryPrefix) return std::nullopt;
  CachedEntry e;
  e.key.assign(key);
  e.tag.home = bytes::get<uint32_t>(b, 0);
  e.tag.slot = bytes::get<uint64_t>(b, 4);
  e.tag.version = bytes::get<uint64_t>(b, 12);
  e.stored_at_us = bytes::get<int64_t>(b, 20);
  e.payload.assign(reinterpret_cast<const char*>(b.data()) + kPooledEntryPrefix,
                   b.size() - kPooledEntryPrefix);
  return e;
}

PoolStore::PoolStore(PoolOwner& owner, ClusterClient& client, const Topology& topo,
                     std::vector<uint16_t> donor_nodes, size_t max_slabs)
    : owner_(owner),
      client_(client),
      topo_(topo),
      donor_nodes_(std::move(donor_nodes)),
      max_slabs_(std::max<size_t>(max_slabs, 1)),
      // Even, non-zero, and unlikely to meet another process's at the same offset (a reader
      // checks key, checksum and tag anyway: a coincidence can only return the right bytes).
      generation_((fabric::random_u64() & 0x0000'7fff'ffff'fffeull) + 2) {}

std::optional<Location> PoolStore::put(uint64_t key_hash, std::string_view key, const Tag& tag,
                                       std::string_view payload, int64_t stored_at_us) {
  if (stored_at_us == 0) {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    stored_at_us = int64_t(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
  }
  std::string entry = encode_pooled_entry(tag, stored_at_us, payload);
  const uint64_t need =
      (kSlotHeaderSize + uint64_t(key.size()) + entry.size() + kSlotAlign - 1) / kSlotAlign *
      kSlotAlign;
  Location where;
  where.kind = CopyRegion::Pool;
  std::string donor;
  {
    std::lock_guard lk(mu_);
    auto fits = [&](const Slab& s) { return s.cursor + need <= s.s.slab.length; };
    bool have = !slabs_.empty() && fits(slabs_[current_]);
    if (!have && slabs_.size() < max_slabs_) {
      // None to be had: the store goes on in the slabs it holds (or is refused below); why not
      // shows in the owner's counters and donor status.
      auto got = owner_.alloc(1);
      if (got.ok()) {
        slabs_.push_back(Slab{got->front(), 0});
        current_ = slabs_.size() - 1;
        have = fits(slabs_[current_]);
      }
    }
    if (!have && !slabs_.empty()) {
      // Every slab is full and no more can be had: rewind the oldest (the next after the one
      // being filled, in allocation order).
      current_ = (current_ + 1) % slabs_.size();
      slabs_[current_].cursor = 0;
      ++stats_.slabs_reused;
      have = fits(slabs_[current_]);
    }
    if (!have || !owner_.writable(slabs_[current_].s.donor) ||
        slabs_[current_].s.donor >= donor_nodes_.size()) {
      ++stats_.put_failures;
      return std::nullopt;
    }
    Slab& s = slabs_[current_];
    where.node = donor_nodes_[s.s.donor];
    where.offset = s.s.slab.offset + s.cursor;
    where.slot_size = uint32_t(need);
    generation_ += 2;
    where.generation = generation_;
    s.cursor += need;
  }
  // The slot's image, built privately (64-byte aligned as write_slot wants) and written at once:
  // a reader that overlaps the write sees a mix, which the checksum refuses.
  std::unique_ptr<uint8_t, decltype(&std::free)> buf(
      static_cast<uint8_t*>(std::aligned_alloc(kSlotAlign, need)), &std::free);
  if (!buf) {
    std::lock_guard lk(mu_);
    ++stats_.put_failures;
    return std::nullopt;
  }
  std::span<uint8_t> slot(buf.get(), need);
  init_slot(slot);
  write_slot(slot, key_hash, key,
             {reinterpret_cast<const uint8_t*>(entry.data()), entry.size()}, where.generation);
  bool ok = where.node < topo_.nodes.size() &&
            client_.write_pool(topo_.nodes[where.node].name, where.offset, slot);
  std::lock_guard lk(mu_);
  if (!ok) {
    ++stats_.put_failures;
    return std::nullopt;
  }
  ++stats_.puts;
  stats_.bytes_written += need;
  return where;
}

void PoolStore::lost(const std::vector<OwnedSlab>& gone) {
  std::lock_guard lk(mu_);
  size_t before = slabs_.size();
  std::erase_if(slabs_, [&](const Slab& s) {
    for (const auto& g : gone)
      if (g.donor == s.s.donor && g.slab.slab == s.s.slab.slab &&
          g.pool_incarnation == s.s.pool_incarnation)
        return true;
    return false;
  });
  stats_.slabs_lost += before - slabs_.size();
  if (current_ >= slabs_.size()) current_ = slabs_.empty() ? 0 : slabs_.size() - 1;
}

PoolStoreStats PoolStore::stats() const {
  std::lock_guard lk(mu_);
  PoolStoreStats s = stats_;
  s.slabs_held = slabs_.size();
  return s;
}

}  // namespace tierce::coherence
