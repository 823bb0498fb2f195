// tests/agents/memd_coop_test.cc — memd's [coop] role: the configuration checks (in-process), and
// the real tierce-memd binary with [coop] over tcp and shm: a publish sent to "coop.dir.update" is
// found with ONE one-sided read of the key's bucket in region "coop.dir" (read_entry), withdraw
// and invalidate make it NotFound, malformed bodies get BadRequest replies and memd keeps serving,
// the status texts, a clean stop removes the segment, and --check refuses a bad [coop].
#define BOOST_TEST_MODULE memd_coop
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <variant>

#include "agents/memd/config.h"
#include "agents/memd/coop_role.h"
#include "coherence/coop_directory.h"
#include "coherence/coop_directory_wire.h"
#include "coherence/key.h"
#include "memd_test_util.h"

#ifndef TIERCE_MEMD_BINARY
#error "TIERCE_MEMD_BINARY must name the tierce-memd executable"
#endif

using namespace tierce;
using namespace memd_test;
using coherence::DirMissReason;
using coherence::UpdateStatus;
namespace dirwire = coherence::dirwire;

namespace tierce::fabric {
std::ostream& operator<<(std::ostream& o, Errc e) {
  return o << to_string(e);
}
}  // namespace tierce::fabric

namespace {

constexpr uint64_t kBuckets = 16;

// memd with [coop] buckets = 16; the directory segment is unlinked after a SIGKILL.
struct Fixture : MemdFixture {
  Fixture() : MemdFixture(TIERCE_MEMD_BINARY, "ct") {}
  ~Fixture() override {
    memd.kill_now();
    fabric::SharedSegment::unlink(memd::coop_segment_name(node));  // after a SIGKILL
  }
  std::string role_section() override {
    return "[coop]\nbuckets = " + std::to_string(kBuckets) + "\n";
  }
};

std::string text(const std::vector<uint8_t>& b) {
  return std::string(b.begin(), b.end());
}

// A peer of the directory's home: one connection, the region's descriptor and the geometry read
// once from the header.
struct Peer {
  std::unique_ptr<fabric::Connection> c;
  fabric::RemoteRegion region;
  coherence::DirectoryGeometry geo;
  uint64_t bucket_reads = 0;

  explicit Peer(std::unique_ptr<fabric::Connection> conn) : c(std::move(conn)) {
    region = c->lookup(dirwire::kRegion);
    std::vector<uint8_t> h(coherence::kDirHeaderSize);
    c->read(region, 0, h.data(), h.size());
    auto g = coherence::parse_directory_header(h);
    BOOST_TEST_REQUIRE(std::holds_alternative<coherence::DirectoryGeometry>(g));
    geo = std::get<coherence::DirectoryGeometry>(g);
  }
  dirwire::Reply update(const dirwire::Message& m) {
    return dirwire::decode_reply(c->call(dirwire::kUpdateService, dirwire::encode(m)));
  }
  dirwire::Reply raw(const std::vector<uint8_t>& body) {
    return dirwire::decode_reply(c->call(dirwire::kUpdateService, body));
  }
  // The lookup a peer does: ONE one-sided read of the key's bucket, verified with read_entry.
  coherence::DirReadResult lookup(uint64_t key_hash, uint64_t key_check) {
    std::vector<uint8_t> b(coherence::DirectoryGeometry::bucket_bytes());
    c->read(region, geo.bucket_offset(key_hash), b.data(), b.size());
    ++bucket_reads;
    return coherence::read_entry(geo, b, key_hash, key_check);
  }
};

DirMissReason miss_of(const coherence::DirReadResult& r) {
  BOOST_TEST_REQUIRE(std::holds_alternative<coherence::DirMiss>(r));
  return std::get<coherence::DirMiss>(r).reason;
}

dirwire::Publish publish_of(const std::string& key, uint16_t node, uint64_t offset) {
  dirwire::Publish p;
  p.key_hash = coherence::hash64(key);
  p.key_check = coherence::coop_key_check(key);
  p.length = 1000;
  p.tag = coherence::Tag{1, 42, 7};
  p.where.node = node;
  p.where.kind = coherence::CopyRegion::Pool;
  p.where.offset = offset;
  p.where.generation = 2;
  p.where.slot_size = 4096;
  return p;
}

memd::Config parse(const std::string& coop) {
  return memd::parse_config(
      "[memd]\nnode = \"n1\"\nlisten = [\"tcp://127.0.0.1:0\"]\nsecret_file = \"/s\"\n" + coop,
      "/etc/tierce/memd.toml");
}

std::string problems(const std::string& coop) {
  try {
    parse(coop);
  } catch (const memd::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(coop_config_and_refusals) {
  auto c = parse("[coop]\nbuckets = 65_536\n");
  BOOST_TEST(c.coop.enabled);
  BOOST_TEST(c.coop.buckets == 65536u);
  BOOST_TEST(!parse("").coop.enabled);
  BOOST_TEST(memd::coop_segment_name("n1") == "/tierce.n1.coop");
  BOOST_TEST(memd::CoopConfig::kMaxBuckets == long(coherence::kDirMaxBuckets));

  auto has = [](const std::string& all, const std::string& what) {
    BOOST_TEST_INFO("problems:\n" << all);
    BOOST_TEST(all.find(what) != std::string::npos);
  };
  has(problems("[coop]\n"), "[coop] buckets is required");
  has(problems("[coop]\nbuckets = \"64k\"\n"),
      "memd.toml:6:11: [coop] buckets: expected an integer, got a string");
  has(problems("[coop]\nbuckets = 0\n"),
      "memd.toml:6:11: [coop] buckets: 0 is out of range 1..67108864");
  has(problems("[coop]\nbuckets = 100_000_000\n"), "is out of range 1..67108864");
  has(problems("[coop]\nbuckets = 1000\n"),
      "memd.toml:6:11: [coop] buckets: 1000 is not a power of two; write e.g. buckets = 1024");
  has(problems("[coop]\nbuckets = 64\ntopology = \"/etc/tierce/cluster.toml\"\n"), "topology");
  has(problems("[coop]\nbuckets = 64\ntopology = \"/etc/tierce/cluster.toml\"\n"), "memd.toml:7");
  has(problems("coop = 3\n"), "coop");
  has(problems("[[region]]\nname = \"coop.dir\"\nsegment = \"/x\"\n[coop]\nbuckets = 64\n"),
      "a [[region]] is already named \"coop.dir\"");
  has(problems("[[region]]\nname = \"d\"\nsegment = \"/tierce.n1.coop\"\n[coop]\nbuckets = 64\n"),
      "which the coop role creates itself");
}

BOOST_FIXTURE_TEST_SUITE(memd_coop, Fixture)

BOOST_AUTO_TEST_CASE(publish_then_one_read_finds_it_withdraw_and_invalidate_over_tcp_and_shm) {
  start();
  BOOST_TEST(log().find("MEMD0140 coop: directory of 16 buckets") != std::string::npos);
  uint16_t node_index = 3;
  for (const char* scheme : {"tcp", "shm"}) {
    BOOST_TEST_CONTEXT("over " << scheme) {
      Peer p(connect(scheme));
      BOOST_TEST(p.region.len == coherence::CoopDirectory::bytes_for(kBuckets));
      BOOST_TEST(p.geo.buckets == kBuckets);
      BOOST_TEST(p.geo.nodes == 65535u);
      const std::string key = std::string("/page?id=") + scheme;
      auto pub = publish_of(key, ++node_index, 64 * 1024);
      BOOST_TEST(miss_of(p.lookup(pub.key_hash, pub.key_check)) == DirMissReason::NotFound);

      auto r = p.update(pub);
      BOOST_TEST_INFO(r.message);
      BOOST_TEST(r.status == UpdateStatus::Added);
      BOOST_TEST(r.count == 1u);

      const uint64_t reads = p.bucket_reads;
      auto found = p.lookup(pub.key_hash, pub.key_check);
      BOOST_TEST(p.bucket_reads == reads + 1);  // one one-sided read answers "where is K"
      BOOST_TEST_REQUIRE(std::holds_alternative<coherence::DirEntry>(found));
      const auto& e = std::get<coherence::DirEntry>(found);
      BOOST_TEST(e.key_hash == pub.key_hash);
      BOOST_TEST(e.key_check == pub.key_check);
      BOOST_TEST(e.length == pub.length);
      BOOST_TEST(e.tag.home == pub.tag.home);
      BOOST_TEST(e.tag.slot == pub.tag.slot);
      BOOST_TEST(e.tag.version == pub.tag.version);
      BOOST_TEST_REQUIRE(e.count == 1u);
      BOOST_TEST((e.locations[0] == pub.where));
      // Another key of no entry: NotFound, not someone else's data.
      BOOST_TEST(miss_of(p.lookup(coherence::hash64("other"),
                                  coherence::coop_key_check("other"))) == DirMissReason::NotFound);

      // Withdraw with another generation keeps the copy; with its own it goes.
      dirwire::Withdraw w{pub.key_hash,   pub.key_check,    pub.where.node,
                          pub.where.kind, pub.where.offset, 4};
      BOOST_TEST(p.update(w).status == UpdateStatus::GenerationMismatch);
      BOOST_TEST(
          std::holds_alternative<coherence::DirEntry>(p.lookup(pub.key_hash, pub.key_check)));
      w.generation = pub.where.generation;
      BOOST_TEST(p.update(w).status == UpdateStatus::Withdrawn);
      BOOST_TEST(miss_of(p.lookup(pub.key_hash, pub.key_check)) == DirMissReason::NotFound);

      // Published again (two copies), then invalidated: the entry is gone.
      BOOST_TEST(p.update(pub).status == UpdateStatus::Added);
      auto second = pub;
      second.where.offset += 4096;
      BOOST_TEST(p.update(second).status == UpdateStatus::Added);
      auto two = p.lookup(pub.key_hash, pub.key_check);
      BOOST_TEST_REQUIRE(std::holds_alternative<coherence::DirEntry>(two));
      BOOST_TEST(std::get<coherence::DirEntry>(two).count == 2u);
      BOOST_TEST(p.update(dirwire::Invalidate{pub.key_hash, pub.key_check}).status ==
                 UpdateStatus::Invalidated);
      BOOST_TEST(miss_of(p.lookup(pub.key_hash, pub.key_check)) == DirMissReason::NotFound);
      BOOST_TEST(p.update(dirwire::Invalidate{pub.key_hash, pub.key_check}).status ==
                 UpdateStatus::NotFound);
    }
  }
  std::string status = text(connect("tcp")->call(memd::CoopRole::kStatusService, {}));
  BOOST_TEST(status.find("buckets 16\n") != std::string::npos, status);
  BOOST_TEST(status.find("entries 0\n") != std::string::npos, status);
  BOOST_TEST(status.find("updates_added 6\n") != std::string::npos, status);
  BOOST_TEST(status.find("updates_invalidated 2\n") != std::string::npos, status);
  BOOST_TEST(status.find("segment " + memd::coop_segment_name(node) + "\n") != std::string::npos,
             status);

  // A clean stop revokes and unlinks the directory segment.
  stop();
  BOOST_TEST(errc_of([&] { fabric::SharedSegment::open(memd::coop_segment_name(node)); }) !=
             fabric::Errc::Ok);
}

BOOST_AUTO_TEST_CASE(malformed_bodies_get_error_replies_and_memd_keeps_serving) {
  start();
  Peer p(connect("shm"));
  auto pub = publish_of("/k", 1, 0);
  auto good = dirwire::encode(dirwire::Message{pub});
  std::vector<std::vector<uint8_t>> bad;
  bad.push_back({});                                                  // empty
  bad.push_back(std::vector<uint8_t>(good.begin(), good.end() - 1));  // short
  auto longer = good;
  longer.push_back(0);
  bad.push_back(longer);  // long
  auto v = good;
  v[0] = 9;  // unknown version
  bad.push_back(v);
  auto t = good;
  t[1] = 77;  // unknown type
  bad.push_back(t);
  auto r = good;
  r[3] = 1;  // reserved byte
  bad.push_back(r);
  auto k = good;
  k[58] = 9;  // unknown region kind
  bad.push_back(k);
  bad.push_back(std::vector<uint8_t>(4096, 0xff));  // garbage
  for (auto& b : bad) {
    BOOST_TEST_CONTEXT("body of " << b.size() << " bytes") {
      auto rep = p.raw(b);
      BOOST_TEST(rep.status == UpdateStatus::BadRequest);
      BOOST_TEST(!rep.message.empty());
    }
  }
  // Out of range for the directory (not a wire error): BadLocation, nothing changes.
  auto odd = pub;
  odd.where.offset = 100;  // a pool slot offset must be a multiple of 64
  BOOST_TEST(p.update(odd).status == UpdateStatus::BadLocation);
  BOOST_TEST(miss_of(p.lookup(pub.key_hash, pub.key_check)) == DirMissReason::NotFound);

  // Still serving, on this connection and on a new one.
  BOOST_TEST(p.raw(good).status == UpdateStatus::Added);
  Peer q(connect("tcp"));
  BOOST_TEST(std::holds_alternative<coherence::DirEntry>(q.lookup(pub.key_hash, pub.key_check)));
  std::string status = text(q.c->call("memd.status", {}));
  BOOST_TEST(
      status.find("coop_bad_requests " + std::to_string(bad.size()) + "\n") != std::string::npos,
      status);
  BOOST_TEST(status.find("coop_entries 1\n") != std::string::npos, status);
  BOOST_TEST(status.find("coop_updates_bad_location 1\n") != std::string::npos, status);
  BOOST_TEST(log().find("MEMD0141 coop: malformed coop.dir.update refused") != std::string::npos);
  stop();
}

BOOST_AUTO_TEST_CASE(cli_status_check_and_a_bad_coop_config) {
  start();
  std::string out;
  BOOST_TEST(run({"--status", "-c", config_path}, &out) == 0);
  BOOST_TEST(out.find("coop_buckets 16\n") != std::string::npos, out);
  BOOST_TEST(run({"--check", "-c", config_path}, &out) == 0);
  BOOST_TEST(out.find("coop directory of 16 buckets") != std::string::npos, out);

  std::string bad_path = dir / "bad.toml";
  write_file(bad_path, config_text("[coop]\nbuckets = 1000\n"));
  BOOST_TEST(run({"--check", "-c", bad_path}, &out) == 2);
  BOOST_TEST(out.find("bad.toml:13:11: [coop] buckets: 1000 is not a power of two; write e.g. "
                      "buckets = 1024") != std::string::npos,
             out);
  write_file(bad_path, config_text("[coop]\nbuckets = 64\nsize = 3\n"));
  BOOST_TEST(run({"--check", "-c", bad_path}, &out) == 2);
  BOOST_TEST(out.find("bad.toml:14") != std::string::npos, out);
  BOOST_TEST(out.find("size") != std::string::npos, out);
  write_file(bad_path, config_text("[coop]\n"));
  BOOST_TEST(run({"--check", "-c", bad_path}, &out) == 2);
  BOOST_TEST(out.find("[coop] buckets is required") != std::string::npos, out);
  BOOST_TEST(run({"--foreground", "-c", bad_path}, &out) == 2);
  stop();
}

BOOST_AUTO_TEST_SUITE_END()
