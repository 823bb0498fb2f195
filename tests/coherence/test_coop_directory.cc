// tests/coherence/test_coop_directory.cc — the cooperative cache's directory
// (coherence/coop_directory.h, coop_directory_wire.h): publish / withdraw / withdraw_node /
// invalidate semantics, a full bucket and a key with all its copies, the remote reader's checks
// (every miss reason forced), random corruption of a bucket that must never yield an entry, the
// update messages' round trips and strict decoders over forged and corrupted bodies, and the home
// choice over the topology's proxies.
#define BOOST_TEST_MODULE coop_directory
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "coherence/coop_directory.h"
#include "coherence/coop_directory_wire.h"
#include "coherence/key.h"

#include <xxhash.h>

using namespace tierce::coherence;

namespace {

struct Aligned {
  struct Free {
    void operator()(uint8_t* q) const { std::free(q); }
  };
  explicit Aligned(size_t n) : size(n), p(static_cast<uint8_t*>(std::aligned_alloc(64, n))) {
    std::memset(p.get(), 0xAB, n);  // garbage, as in reused memory
  }
  std::span<uint8_t> span() { return {p.get(), size}; }
  size_t size;
  std::unique_ptr<uint8_t, Free> p;
};

struct Dir {
  explicit Dir(uint64_t buckets, uint16_t nodes = 8)
      : mem(CoopDirectory::bytes_for(buckets)),
        d(CoopDirectory::create(mem.span(), buckets, nodes, 77)) {}
  Aligned mem;
  std::unique_ptr<CoopDirectory> d;
  // What a remote read of the key's bucket returns: a private copy of the 640 bytes.
  std::vector<uint8_t> bucket_of(uint64_t key_hash) const {
    auto m = d->memory();
    auto off = d->geometry().bucket_offset(key_hash);
    return {m.begin() + off, m.begin() + off + kDirBucketSize};
  }
};

struct Key {
  std::string k;
  uint64_t h, c;
  explicit Key(std::string s) : k(std::move(s)), h(hash64(k)), c(coop_key_check(k)) {}
};

Location pool(uint16_t node, uint64_t off, uint64_t gen = 2, uint32_t size = 4096) {
  return Location{node, CopyRegion::Pool, off, gen, size};
}

DirEntry hit(const DirReadResult& r) {
  BOOST_REQUIRE(std::holds_alternative<DirEntry>(r));
  return std::get<DirEntry>(r);
}
DirMissReason reason(const DirReadResult& r) {
  BOOST_REQUIRE(std::holds_alternative<DirMiss>(r));
  return std::get<DirMiss>(r).reason;
}

// Keys that all fall in bucket 0 of a directory of `buckets`.
std::vector<Key> keys_in_bucket0(const DirectoryGeometry& g, size_t n) {
  std::vector<Key> out;
  for (int i = 0; out.size() < n; ++i) {
    Key k("GET /k" + std::to_string(i));
    if (g.bucket_index(k.h) == 0) out.push_back(k);
  }
  return out;
}

// Recomputes a forged bucket's checksum, so that the checks after it are reached.
void reseal(std::vector<uint8_t>& b) {
  uint64_t sum = XXH3_64bits(b.data() + 8, kDirBucketSize - 8);
  std::memcpy(b.data(), &sum, 8);
}

bool same(const DirEntry& a, const DirEntry& b) {
  if (a.key_hash != b.key_hash || a.key_check != b.key_check || a.length != b.length ||
      a.tag.home != b.tag.home || a.tag.slot != b.tag.slot || a.tag.version != b.tag.version ||
      a.count != b.count)
    return false;
  for (size_t j = 0; j < a.count; ++j)
    if (!(a.locations[j] == b.locations[j])) return false;
  return true;
}

}  // namespace

BOOST_AUTO_TEST_CASE(header_round_trip_and_forged_headers) {
  Dir x(64, 5);
  auto g = parse_directory_header(x.d->memory());
  BOOST_REQUIRE(std::holds_alternative<DirectoryGeometry>(g));
  auto geo = std::get<DirectoryGeometry>(g);
  BOOST_TEST(geo.buckets == 64u);
  BOOST_TEST(geo.nodes == 5u);
  BOOST_TEST(geo.digest == 77u);
  BOOST_TEST(geo.incarnation == x.d->geometry().incarnation);
  BOOST_TEST(geo.total_bytes() == CoopDirectory::bytes_for(64));
  std::vector<uint8_t> h(x.d->memory().begin(), x.d->memory().begin() + kDirHeaderSize);
  BOOST_TEST(std::get<DirMiss>(parse_directory_header(std::span(h).first(63))).reason ==
             DirMissReason::ShortRead);
  for (size_t i = 0; i < kDirHeaderSize; ++i)
    for (uint8_t bit : {1, 0x80}) {
      auto f = h;
      f[i] ^= bit;
      auto r = parse_directory_header(f);
      BOOST_REQUIRE(std::holds_alternative<DirMiss>(r));
      BOOST_TEST(std::get<DirMiss>(r).reason == DirMissReason::BadHeader);
    }
  BOOST_CHECK_THROW(CoopDirectory::create(x.mem.span(), 3, 5, 0), std::invalid_argument);
  BOOST_CHECK_THROW(CoopDirectory::create(x.mem.span(), 128, 5, 0), std::invalid_argument);
  BOOST_CHECK_THROW(CoopDirectory::create(x.mem.span(), 64, 0, 0), std::invalid_argument);
  BOOST_CHECK_THROW(CoopDirectory::create(x.mem.span().subspan(8), 1, 5, 0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(publish_replace_withdraw_invalidate) {
  Dir x(16);
  Key k("https://shop\n/item?id=1");
  const Tag tag{1, 42, 7};
  BOOST_TEST(reason(x.d->lookup(k.h, k.c)) == DirMissReason::NotFound);

  auto r = x.d->publish(k.h, k.c, tag, 1000, pool(2, 4096, 4));
  BOOST_TEST(r.status == UpdateStatus::Added);
  auto e = hit(x.d->lookup(k.h, k.c));
  BOOST_TEST(e.length == 1000u);
  BOOST_TEST(e.tag.slot == 42u);
  BOOST_TEST(e.tag.version == 7u);
  BOOST_REQUIRE(e.count == 1u);
  BOOST_TEST((e.locations[0] == pool(2, 4096, 4)));

  // A second copy elsewhere, then the same place rewritten (new generation): replaced, not added.
  BOOST_TEST(
      x.d->publish(k.h, k.c, tag, 1000, Location{3, CopyRegion::Arena, 123, 9, 1200}).status ==
      UpdateStatus::Added);
  BOOST_TEST(x.d->publish(k.h, k.c, tag, 1000, pool(2, 4096, 6)).status == UpdateStatus::Replaced);
  e = hit(x.d->lookup(k.h, k.c));
  BOOST_REQUIRE(e.count == 2u);
  BOOST_TEST(e.locations[0].generation == 6u);
  BOOST_TEST((e.locations[1].kind == CopyRegion::Arena));
  // Same node and offset but another region kind: another copy.
  BOOST_TEST(x.d->publish(k.h, k.c, tag, 1000, pool(3, 123 * 64, 2)).status == UpdateStatus::Added);
  BOOST_TEST(hit(x.d->lookup(k.h, k.c)).count == 3u);

  // Another process's view: the geometry from the header, then the seqlock copy.
  {
    auto g2 = std::get<DirectoryGeometry>(parse_directory_header(x.d->memory()));
    BOOST_TEST(same(hit(lookup_local(x.d->memory(), g2, k.h, k.c)), hit(x.d->lookup(k.h, k.c))));
    BOOST_TEST(reason(lookup_local(x.d->memory().first(100), g2, k.h, k.c)) ==
               DirMissReason::ShortRead);
  }
  // The remote reader sees what the local one sees.
  auto b = x.bucket_of(k.h);
  BOOST_TEST(same(hit(read_entry(x.d->geometry(), b, k.h, k.c)), hit(x.d->lookup(k.h, k.c))));
  BOOST_TEST(hit(read_entry(x.d->geometry(), b, k.h, k.c)).sequence ==
             x.d->bucket_sequence(x.d->geometry().bucket_index(k.h)));
  // Another key check (a 64-bit collision of the key hash) is not this entry.
  BOOST_TEST(reason(read_entry(x.d->geometry(), b, k.h, k.c ^ 1)) == DirMissReason::NotFound);

  // Withdraw: the wrong generation keeps the (newer) copy; the right one drops it.
  BOOST_TEST(x.d->withdraw(k.h, k.c, 2, CopyRegion::Pool, 4096, 4).status ==
             UpdateStatus::GenerationMismatch);
  BOOST_TEST(x.d->withdraw(k.h, k.c, 2, CopyRegion::Pool, 4096, 6).status ==
             UpdateStatus::Withdrawn);
  BOOST_TEST(x.d->withdraw(k.h, k.c, 2, CopyRegion::Pool, 4096, 6).status ==
             UpdateStatus::NotFound);
  BOOST_TEST(hit(x.d->lookup(k.h, k.c)).count == 2u);
  BOOST_TEST(x.d->withdraw(k.h, k.c, 3, CopyRegion::Arena, 123, 9).status ==
             UpdateStatus::Withdrawn);
  // The last copy withdrawn: the entry goes.
  BOOST_TEST(x.d->withdraw(k.h, k.c, 3, CopyRegion::Pool, 123 * 64, 2).status ==
             UpdateStatus::Withdrawn);
  BOOST_TEST(reason(x.d->lookup(k.h, k.c)) == DirMissReason::NotFound);
  BOOST_TEST(x.d->entries() == 0u);

  // Invalidate drops the whole entry; twice is a no-op.
  x.d->publish(k.h, k.c, tag, 1000, pool(1, 0));
  x.d->publish(k.h, k.c, tag, 1000, pool(4, 0));
  BOOST_TEST(x.d->invalidate(k.h, k.c).status == UpdateStatus::Invalidated);
  BOOST_TEST(x.d->invalidate(k.h, k.c).status == UpdateStatus::NotFound);
  BOOST_TEST(reason(x.d->lookup(k.h, k.c)) == DirMissReason::NotFound);

  auto c = x.d->update_counters();
  BOOST_TEST(c[size_t(UpdateStatus::Added)] == 5u);
  BOOST_TEST(c[size_t(UpdateStatus::Replaced)] == 1u);
  BOOST_TEST(c[size_t(UpdateStatus::Withdrawn)] == 3u);
  BOOST_TEST(c[size_t(UpdateStatus::GenerationMismatch)] == 1u);
}

BOOST_AUTO_TEST_CASE(newer_tag_supersedes_older_is_refused) {
  Dir x(4);
  Key k("k");
  x.d->publish(k.h, k.c, Tag{0, 5, 10}, 100, pool(1, 0));
  x.d->publish(k.h, k.c, Tag{0, 5, 10}, 100, pool(2, 0));
  auto r = x.d->publish(k.h, k.c, Tag{0, 5, 9}, 100, pool(3, 0));
  BOOST_TEST(r.status == UpdateStatus::StaleTag);
  BOOST_TEST(!r.why.empty());
  r = x.d->publish(k.h, k.c, Tag{0, 5, 10}, 101, pool(3, 0));
  BOOST_TEST(r.status == UpdateStatus::LengthMismatch);
  BOOST_TEST(hit(x.d->lookup(k.h, k.c)).count == 2u);
  // A newer version: the older copies go, this one stays (with its own length).
  BOOST_TEST(x.d->publish(k.h, k.c, Tag{0, 5, 11}, 300, pool(3, 64)).status ==
             UpdateStatus::Superseded);
  auto e = hit(x.d->lookup(k.h, k.c));
  BOOST_TEST(e.count == 1u);
  BOOST_TEST(e.length == 300u);
  BOOST_TEST(e.tag.version == 11u);
  BOOST_TEST(e.locations[0].node == 3u);
}

BOOST_AUTO_TEST_CASE(full_bucket_and_full_entry_are_refused_without_change) {
  Dir x(8);
  auto keys = keys_in_bucket0(x.d->geometry(), 5);
  for (size_t i = 0; i < 4; ++i)
    BOOST_TEST(x.d->publish(keys[i].h, keys[i].c, Tag{0, i, 1}, 10, pool(1, 64 * i)).status ==
               UpdateStatus::Added);
  const uint64_t seq = x.d->bucket_sequence(0);
  auto r = x.d->publish(keys[4].h, keys[4].c, Tag{0, 9, 1}, 10, pool(1, 0));
  BOOST_TEST(r.status == UpdateStatus::BucketFull);
  BOOST_TEST(r.why.find("unpublished") != std::string::npos);
  BOOST_TEST(x.d->bucket_sequence(0) == seq);  // nothing written
  BOOST_TEST(reason(x.d->lookup(keys[4].h, keys[4].c)) == DirMissReason::NotFound);
  // Room again once one goes.
  x.d->invalidate(keys[0].h, keys[0].c);
  BOOST_TEST(x.d->publish(keys[4].h, keys[4].c, Tag{0, 9, 1}, 10, pool(1, 0)).status ==
             UpdateStatus::Added);

  for (uint16_t n = 2; n < 5; ++n)
    BOOST_TEST(x.d->publish(keys[1].h, keys[1].c, Tag{0, 1, 1}, 10, pool(n, 0)).status ==
               UpdateStatus::Added);
  BOOST_TEST(hit(x.d->lookup(keys[1].h, keys[1].c)).count == 4u);
  r = x.d->publish(keys[1].h, keys[1].c, Tag{0, 1, 1}, 10, pool(6, 0));
  BOOST_TEST(r.status == UpdateStatus::LocationsFull);
  BOOST_TEST(!update_ok(r.status));
  // Replacing one of the four is still fine.
  BOOST_TEST(x.d->publish(keys[1].h, keys[1].c, Tag{0, 1, 1}, 10, pool(4, 0, 8)).status ==
             UpdateStatus::Replaced);
}

BOOST_AUTO_TEST_CASE(bad_locations_are_refused) {
  Dir x(4, 4);
  Key k("k");
  const Tag t{0, 1, 1};
  BOOST_TEST(x.d->publish(k.h, k.c, t, 10, pool(4, 0)).status == UpdateStatus::BadLocation);
  BOOST_TEST(x.d->publish(k.h, k.c, t, 10, pool(1, 32)).status == UpdateStatus::BadLocation);
  BOOST_TEST(x.d->publish(k.h, k.c, t, 10, pool(1, 0, 3)).status == UpdateStatus::BadLocation);
  BOOST_TEST(x.d->publish(k.h, k.c, t, 10, pool(1, 0, 2, 100)).status == UpdateStatus::BadLocation);
  BOOST_TEST(x.d->publish(k.h, k.c, t, 5000, pool(1, 0)).status == UpdateStatus::BadLocation);
  BOOST_TEST(x.d->publish(k.h, k.c, t, 10, Location{1, CopyRegion(7), 0, 0, 64}).status ==
             UpdateStatus::BadLocation);
  BOOST_TEST(x.d->publish(k.h, k.c, t, 0, Location{1, CopyRegion::Arena, 0, 0, 0}).status ==
             UpdateStatus::BadLocation);
  // An arena copy has no alignment rule.
  BOOST_TEST(x.d->publish(k.h, k.c, t, 10, Location{1, CopyRegion::Arena, 13, 5, 17}).status ==
             UpdateStatus::Added);
  BOOST_TEST(x.d->withdraw_node(4).status == UpdateStatus::BadLocation);
  BOOST_TEST(x.d->withdraw(k.h, k.c, 9, CopyRegion::Arena, 13, 5).status ==
             UpdateStatus::BadLocation);
}

BOOST_AUTO_TEST_CASE(withdraw_node_drops_its_copies_everywhere) {
  Dir x(32);
  std::vector<Key> keys;
  for (int i = 0; i < 40; ++i) keys.emplace_back("key" + std::to_string(i));
  size_t on3 = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto& k = keys[i];
    auto r = x.d->publish(k.h, k.c, Tag{0, i, 1}, 10, pool(3, 64 * i));
    if (r.status == UpdateStatus::BucketFull) continue;
    ++on3;
    if (i % 2 == 0) x.d->publish(k.h, k.c, Tag{0, i, 1}, 10, pool(5, 64 * i));
  }
  auto r = x.d->withdraw_node(3);
  BOOST_TEST(r.status == UpdateStatus::NodeWithdrawn);
  BOOST_TEST(r.count == on3);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto res = x.d->lookup(keys[i].h, keys[i].c);
    if (auto* e = std::get_if<DirEntry>(&res)) {
      BOOST_TEST(i % 2 == 0u);
      BOOST_TEST(e->count == 1u);
      BOOST_TEST(e->locations[0].node == 5u);
    }
  }
  BOOST_TEST(x.d->withdraw_node(3).count == 0u);
  x.d->withdraw_node(5);
  BOOST_TEST(x.d->entries() == 0u);
}

BOOST_AUTO_TEST_CASE(remote_reader_forced_misses) {
  Dir x(16);
  Key k("k");
  x.d->publish(k.h, k.c, Tag{0, 1, 1}, 10, pool(1, 0));
  const auto& g = x.d->geometry();
  auto b = x.bucket_of(k.h);
  hit(read_entry(g, b, k.h, k.c));
  BOOST_TEST(reason(read_entry(g, std::span(b).first(639), k.h, k.c)) == DirMissReason::ShortRead);
  BOOST_TEST(reason(read_entry(DirectoryGeometry{}, b, k.h, k.c)) == DirMissReason::BadHeader);
  // Odd sequence: the owner was mid-write.
  auto t = b;
  t[dir_offset::kSequence] |= 1;
  BOOST_TEST(reason(read_entry(g, t, k.h, k.c)) == DirMissReason::Torn);
  // The earlier checksum and sequence, then the later body (a read that started before the
  // owner's write and finished after it): a checksum miss.
  x.d->publish(k.h, k.c, Tag{0, 1, 1}, 10, pool(2, 0));
  auto later = x.bucket_of(k.h);
  auto mix = later;
  std::memcpy(mix.data(), b.data(), 16);
  BOOST_TEST(reason(read_entry(g, mix, k.h, k.c)) == DirMissReason::Checksum);
  // Another bucket's bytes (a wrong offset): WrongBucket even though they verify.
  auto m = x.d->memory();
  uint64_t other = (g.bucket_index(k.h) + 1) % g.buckets;
  std::vector<uint8_t> ob(m.begin() + kDirHeaderSize + other * kDirBucketSize,
                          m.begin() + kDirHeaderSize + (other + 1) * kDirBucketSize);
  BOOST_TEST(reason(read_entry(g, ob, k.h, k.c)) == DirMissReason::WrongBucket);
  // A bucket with a valid checksum but a count out of range (another format): BadBucket.
  auto forged = later;
  uint32_t five = 5;
  std::memcpy(forged.data() + dir_offset::kCount, &five, 4);
  reseal(forged);
  BOOST_TEST(reason(read_entry(g, forged, k.h, k.c)) == DirMissReason::BadBucket);
  forged = later;
  forged[dir_offset::kFirstEntry + dir_offset::kLocCount] = 9;  // 9 locations
  reseal(forged);
  BOOST_TEST(reason(read_entry(g, forged, k.h, k.c)) == DirMissReason::BadBucket);
  forged = later;
  forged[dir_offset::kFirstEntry + dir_offset::kFirstLocation + dir_offset::kNode] = 200;  // node
  reseal(forged);
  BOOST_TEST(reason(read_entry(g, forged, k.h, k.c)) == DirMissReason::BadBucket);
  forged = later;
  forged[639] = 1;  // reserved tail
  reseal(forged);
  BOOST_TEST(reason(read_entry(g, forged, k.h, k.c)) == DirMissReason::BadBucket);
  BOOST_TEST(std::holds_alternative<DirMiss>(read_bucket(g, forged, g.bucket_index(k.h))));

  DirReadCounters c;
  c.count(read_entry(g, later, k.h, k.c));
  c.count(read_entry(g, t, k.h, k.c));
  c.count(read_entry(g, mix, k.h, k.c));
  DirReadCounters c2 = c;
  c2 += c;
  BOOST_TEST(c2.hits == 2u);
  BOOST_TEST(c2.miss(DirMissReason::Torn) == 2u);
  BOOST_TEST(c2.total_misses() == 4u);
  BOOST_TEST(to_string(DirMissReason::Checksum) == "checksum");
}

// 200 000 random corruptions of a real bucket (1-4 byte flips anywhere, or a short read): never a
// crash, and never an accepted entry — every byte of a bucket is vouched for by the checksum.
BOOST_AUTO_TEST_CASE(random_corruption_never_yields_an_entry) {
  Dir x(8);
  auto keys = keys_in_bucket0(x.d->geometry(), 4);
  for (size_t i = 0; i < 4; ++i)
    for (uint16_t n = 0; n <= i; ++n)
      x.d->publish(keys[i].h, keys[i].c, Tag{uint32_t(i), 3 * i, 5}, 100 + i,
                   pool(n, 64 * i, 2 * i));
  auto good = x.bucket_of(keys[0].h);
  const auto& g = x.d->geometry();
  std::mt19937_64 r(42);
  DirReadCounters c;
  uint64_t accepted = 0;
  for (int it = 0; it < 200000; ++it) {
    auto v = good;
    if (r() % 8 == 0) {
      v.resize(r() % v.size());
    } else {
      int flips = 1 + int(r() % 4);
      for (int f = 0; f < flips; ++f) v[r() % v.size()] ^= uint8_t(1 + r() % 255);
    }
    const Key& k = keys[r() % 4];
    auto res = read_entry(g, v, k.h, k.c);
    c.count(res);
    if (std::holds_alternative<DirEntry>(res)) ++accepted;
    auto all = read_bucket(g, v, 0);
    if (std::holds_alternative<DirBucket>(all)) ++accepted;
  }
  BOOST_TEST(accepted == 0u);
  BOOST_TEST(c.miss(DirMissReason::Checksum) > 100000u);
  BOOST_TEST(c.miss(DirMissReason::ShortRead) > 10000u);
  BOOST_TEST(c.miss(DirMissReason::Torn) > 0u);
  // The intact bucket: all four keys.
  for (const auto& k : keys) BOOST_TEST(hit(read_entry(g, good, k.h, k.c)).count >= 1u);
  BOOST_TEST(std::get<DirBucket>(read_bucket(g, good, 0)).entries.size() == 4u);
}

// ---- messages ----------------------------------------------------------------------------------

namespace {
std::vector<dirwire::Message> sample_messages() {
  using namespace dirwire;
  return {Publish{1, 2, 300, Tag{4, 5, 6}, Location{7, CopyRegion::Pool, 4096, 8, 512}},
          Publish{~0ull, ~0ull, 0, Tag{~0u, ~0ull, ~0ull},
                  Location{0xFFFF, CopyRegion::Arena, ~0ull, ~0ull, ~0u}},
          Withdraw{9, 10, 11, CopyRegion::Arena, 12, 13}, WithdrawNode{14}, Invalidate{15, 16}};
}
}  // namespace

BOOST_AUTO_TEST_CASE(message_round_trips) {
  using namespace dirwire;
  for (const auto& m : sample_messages()) {
    auto b = encode(m);
    auto d = decode_message(b);
    BOOST_TEST(d.index() == m.index());
    BOOST_TEST((encode(d) == b));
  }
  BOOST_TEST(encode(sample_messages()[0]).size() == kPublishBytes);
  BOOST_TEST(encode(sample_messages()[2]).size() == kWithdrawBytes);
  BOOST_TEST(encode(sample_messages()[3]).size() == kWithdrawNodeBytes);
  BOOST_TEST(encode(sample_messages()[4]).size() == kInvalidateBytes);
  auto p = std::get<Publish>(decode_message(encode(sample_messages()[0])));
  BOOST_TEST(p.where.slot_size == 512u);
  BOOST_TEST(p.tag.version == 6u);
  Reply rp{UpdateStatus::BucketFull, 3, "why"};
  auto rb = decode_reply(encode(rp));
  BOOST_TEST((rb.status == UpdateStatus::BucketFull));
  BOOST_TEST(rb.count == 3u);
  BOOST_TEST(rb.message == "why");
}

BOOST_AUTO_TEST_CASE(strict_decoders_refuse_forged_bodies) {
  using namespace dirwire;
  auto refused = [](std::vector<uint8_t> b) {
    try {
      decode_message(b);
    } catch (const DirWireError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto pub = encode(sample_messages()[0]);
  BOOST_TEST(refused({}).find("shorter") != std::string::npos);
  auto v = pub;
  v[0] = 2;
  BOOST_TEST(refused(v).find("version 2") != std::string::npos);
  v = pub;
  v[1] = 5;
  BOOST_TEST(refused(v).find("unknown message type") != std::string::npos);
  v = pub;
  v[1] = 0;
  BOOST_TEST(!refused(v).empty());
  v = pub;
  v.push_back(0);
  BOOST_TEST(refused(v).find("expected 80") != std::string::npos);
  v = pub;
  v.pop_back();
  BOOST_TEST(!refused(v).empty());
  for (size_t at : {2u, 3u, 4u, 7u, 36u, 39u, 59u}) {
    v = pub;
    v[at] = 1;
    BOOST_TEST(refused(v).find("reserved byte") != std::string::npos);
  }
  v = pub;
  v[58] = 3;
  BOOST_TEST(refused(v).find("region kind 3") != std::string::npos);
  v = pub;
  std::memset(v.data() + 60, 0, 4);
  BOOST_TEST(refused(v).find("slot size 0") != std::string::npos);
  v = pub;
  std::memset(v.data() + 24, 0xFF, 8);  // length beyond the slot
  BOOST_TEST(refused(v).find("exceeds") != std::string::npos);
  auto wd = encode(sample_messages()[2]);
  for (size_t at : {27u, 28u, 31u}) {
    v = wd;
    v[at] = 1;
    BOOST_TEST(refused(v).find("reserved byte") != std::string::npos);
  }
  v = wd;
  v[26] = 0;
  BOOST_TEST(refused(v).find("region kind 0") != std::string::npos);
  v = encode(sample_messages()[3]);
  v[15] = 1;
  BOOST_TEST(!refused(v).empty());
  // Replies.
  auto rep = encode(Reply{UpdateStatus::Added, 1, "ok"});
  auto rrefused = [](std::vector<uint8_t> b) {
    try {
      decode_reply(b);
    } catch (const DirWireError&) {
      return true;
    }
    return false;
  };
  v = rep;
  v[1] = uint8_t(kUpdateStatusCount);
  BOOST_TEST(rrefused(v));
  v = rep;
  v.push_back('x');
  BOOST_TEST(rrefused(v));
  v = rep;
  v[0] = 9;
  BOOST_TEST(rrefused(v));
  BOOST_TEST(rrefused(std::vector<uint8_t>(rep.begin(), rep.begin() + 7)));
}

// Random byte flips over encoded messages: the decoder throws DirWireError or returns a message
// that encodes back to exactly those bytes (one encoding per message: nothing is silently
// normalised), and apply() on any body answers with a reply, never throws.
BOOST_AUTO_TEST_CASE(random_message_corruption_never_crashes_or_normalises) {
  using namespace dirwire;
  Dir x(16, 16);
  std::mt19937_64 r(7);
  auto samples = sample_messages();
  uint64_t refused = 0, accepted = 0, bad_request = 0;
  for (int it = 0; it < 200000; ++it) {
    auto v = encode(samples[r() % samples.size()]);
    const int mode = int(r() % 8);
    if (mode == 0) {
      v.resize(r() % (v.size() + 8));
    } else {
      int flips = 1 + int(r() % 4);
      for (int f = 0; f < flips; ++f) v[r() % v.size()] ^= uint8_t(1 + r() % 255);
    }
    try {
      auto m = decode_message(v);
      ++accepted;
      BOOST_REQUIRE((encode(m) == v));
    } catch (const DirWireError&) {
      ++refused;
    }
    if (it % 4 == 0) {
      auto rep = decode_reply(apply_body(*x.d, v));
      if (rep.status == UpdateStatus::BadRequest) ++bad_request;
    }
    try {
      decode_reply(v);
    } catch (const DirWireError&) {
    }
  }
  BOOST_TEST_MESSAGE("messages: " << accepted << " decoded, " << refused << " refused");
  BOOST_TEST(refused > 100000u);
  BOOST_TEST(accepted > 0u);
  BOOST_TEST(bad_request > 0u);
}

BOOST_AUTO_TEST_CASE(apply_runs_messages_against_the_directory) {
  using namespace dirwire;
  Dir x(16, 8);
  Key k("k");
  auto rep =
      decode_reply(apply_body(*x.d, encode(Publish{k.h, k.c, 10, Tag{0, 1, 1}, pool(2, 0)})));
  BOOST_TEST((rep.status == UpdateStatus::Added));
  BOOST_TEST(hit(x.d->lookup(k.h, k.c)).count == 1u);
  rep = decode_reply(apply_body(*x.d, encode(Publish{k.h, k.c, 10, Tag{0, 1, 1}, pool(9, 0)})));
  BOOST_TEST((rep.status == UpdateStatus::BadLocation));
  BOOST_TEST(rep.message.find("node index 9") != std::string::npos);
  rep = decode_reply(apply_body(*x.d, encode(Withdraw{k.h, k.c, 2, CopyRegion::Pool, 0, 2})));
  BOOST_TEST((rep.status == UpdateStatus::Withdrawn));
  x.d->publish(k.h, k.c, Tag{0, 1, 1}, 10, pool(2, 0));
  rep = decode_reply(apply_body(*x.d, encode(WithdrawNode{2})));
  BOOST_TEST((rep.status == UpdateStatus::NodeWithdrawn));
  BOOST_TEST(rep.count == 1u);
  x.d->publish(k.h, k.c, Tag{0, 1, 1}, 10, pool(2, 0));
  rep = decode_reply(apply_body(*x.d, encode(Invalidate{k.h, k.c})));
  BOOST_TEST((rep.status == UpdateStatus::Invalidated));
  rep = decode_reply(apply_body(*x.d, std::vector<uint8_t>{1, 2, 3}));
  BOOST_TEST((rep.status == UpdateStatus::BadRequest));
  BOOST_TEST(!rep.message.empty());
}

BOOST_AUTO_TEST_CASE(home_is_a_proxy_by_rendezvous) {
  auto t = Topology::parse(
      "[cluster]\nsecret_file=\"/s\"\n"
      "[[node]]\nname=\"app1\"\nrole=\"app\"\nmemd=[\"tcp://h:1\"]\n"
      "[[node]]\nname=\"p1\"\nrole=\"proxy\"\nmemd=[\"tcp://h:2\"]\n"
      "[[node]]\nname=\"p2\"\nrole=\"proxy\"\nmemd=[\"tcp://h:3\"]\n"
      "[[node]]\nname=\"p3\"\nrole=\"proxy\"\nmemd=[\"tcp://h:4\"]\n",
      "c.toml");
  std::map<std::string, int> count;
  for (int i = 0; i < 9000; ++i) {
    uint64_t h = hash64("k" + std::to_string(i));
    const auto& n = directory_home_of(t, h);
    BOOST_REQUIRE(n.role == Role::Proxy);
    BOOST_REQUIRE(&n == &directory_home_of(t, h));
    ++count[n.name];
  }
  for (const char* p : {"p1", "p2", "p3"}) BOOST_TEST(count[p] > 2500);
  BOOST_TEST(node_index(t, "p2") == 2u);
  BOOST_CHECK_THROW(node_index(t, "nope"), TopologyError);
  // Removing a proxy moves only its keys.
  auto t2 = t;
  t2.nodes.pop_back();
  for (int i = 0; i < 3000; ++i) {
    uint64_t h = hash64("k" + std::to_string(i));
    if (directory_home_of(t, h).name != "p3")
      BOOST_REQUIRE(directory_home_of(t2, h).name == directory_home_of(t, h).name);
  }
  auto apps_only = Topology::parse(
      "[cluster]\nsecret_file=\"/s\"\n[[node]]\nname=\"a\"\nrole=\"app\"\nmemd=[\"tcp://h:1\"]\n",
      "c.toml");
  BOOST_CHECK_THROW(directory_home_of(apps_only, 1), TopologyError);
}
