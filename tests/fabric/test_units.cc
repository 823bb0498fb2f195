// tests/fabric/test_units.cc — the fabric's pure parts: frame codec, auth proofs, addresses,
// segments, and the responder's checks without a network.
#define BOOST_TEST_MODULE fabric_units
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "fabric/auth.h"
#include "fabric/fabric.h"
#include "fabric/responder.h"
#include "fabric/segment.h"
#include "fabric/wire.h"

using namespace tierce::fabric;

BOOST_AUTO_TEST_CASE(header_round_trip) {
  wire::Header h;
  h.op = wire::Op::Cas;
  h.reply = true;
  h.status = Errc::BadKey;
  h.length = 1234;
  h.id = 0x0102030405060708ull;
  h.a0 = 1, h.a1 = ~0ull, h.a2 = 3, h.a3 = 0x8000000000000000ull;
  uint8_t b[wire::kHeaderSize];
  wire::encode_header(h, b);
  std::string why;
  auto d = wire::decode_header(b, &why);
  BOOST_REQUIRE(d.has_value());
  BOOST_TEST(int(d->op) == int(h.op));
  BOOST_TEST(d->reply);
  BOOST_TEST(int(d->status) == int(Errc::BadKey));
  BOOST_TEST(d->length == 1234u);
  BOOST_TEST(d->id == h.id);
  BOOST_TEST(d->a1 == h.a1);
  BOOST_TEST(d->a3 == h.a3);
}

BOOST_AUTO_TEST_CASE(malformed_headers_are_named) {
  wire::Header h;
  h.op = wire::Op::Read;
  uint8_t b[wire::kHeaderSize];
  wire::encode_header(h, b);
  std::string why;
  BOOST_TEST(!wire::decode_header(std::span(b, 47), &why));
  BOOST_TEST(why == "short header");
  b[0] = 0;
  BOOST_TEST(!wire::decode_header(b, &why));
  BOOST_TEST(why == "bad magic");
  b[0] = wire::kMagic;
  b[1] = 77;
  BOOST_TEST(!wire::decode_header(b, &why));
  BOOST_TEST(why == "unknown opcode");
  b[1] = uint8_t(wire::Op::Read);
  b[2] = 1;  // status in a request
  BOOST_TEST(!wire::decode_header(b, &why));
  b[2] = 0;
  b[7] = 0xff;  // length 4 GiB-ish
  BOOST_TEST(!wire::decode_header(b, &why));
  BOOST_TEST(why == "payload length over the limit");
}

BOOST_AUTO_TEST_CASE(service_payload) {
  std::vector<uint8_t> p;
  std::vector<uint8_t> body{9, 8, 7};
  wire::encode_service_payload(p, "lock", body);
  std::string_view svc;
  std::span<const uint8_t> b;
  std::string why;
  BOOST_REQUIRE(wire::decode_service_payload(p, &svc, &b, &why));
  BOOST_TEST(svc == "lock");
  BOOST_TEST(std::vector<uint8_t>(b.begin(), b.end()) == body);
  std::vector<uint8_t> bad{200, 0, 'x'};
  BOOST_TEST(!wire::decode_service_payload(bad, &svc, &b, &why));
  std::vector<uint8_t> empty_name{0, 0};
  BOOST_TEST(!wire::decode_service_payload(empty_name, &svc, &b, &why));
}

BOOST_AUTO_TEST_CASE(auth_proofs) {
  Secret s("0123456789abcdef-secret");
  Nonce sn = make_nonce(), cn = make_nonce();
  BOOST_TEST(sn != cn);
  Mac c = client_proof(s, sn, cn), sv = server_proof(s, sn, cn);
  BOOST_TEST(c != sv);  // the two directions never prove each other
  BOOST_TEST(mac_equal(c, client_proof(s, sn, cn)));
  BOOST_TEST(!mac_equal(c, client_proof(Secret("another-secret-of-16+"), sn, cn)));
  BOOST_TEST(!mac_equal(c, client_proof(s, cn, sn)));
  BOOST_CHECK_THROW(Secret("short"), FabricError);
}

BOOST_AUTO_TEST_CASE(secret_file_permissions) {
  char path[] = "/tmp/tierce-secret-XXXXXX";
  int fd = mkstemp(path);
  BOOST_REQUIRE(fd >= 0);
  std::string content = "  a-good-long-shared-secret\n";
  BOOST_REQUIRE(write(fd, content.data(), content.size()) == ssize_t(content.size()));
  close(fd);
  chmod(path, 0600);
  BOOST_TEST(Secret::from_file(path).bytes() == "a-good-long-shared-secret");
  chmod(path, 0644);
  BOOST_CHECK_THROW(Secret::from_file(path), FabricError);
  unlink(path);
  BOOST_CHECK_THROW(Secret::from_file(path), FabricError);
}

BOOST_AUTO_TEST_CASE(addresses) {
  auto a = parse_address("tcp://127.0.0.1:7101");
  BOOST_TEST(int(a.transport) == int(Transport::Tcp));
  BOOST_TEST(a.host == "127.0.0.1");
  BOOST_TEST(a.port == 7101);
  BOOST_TEST(a.uri() == "tcp://127.0.0.1:7101");
  auto v6 = parse_address("verbs://[::1]:9");
  BOOST_TEST(v6.host == "::1");
  BOOST_TEST(v6.uri() == "verbs://[::1]:9");
  auto s = parse_address("shm:///run/tierce/memd.sock");
  BOOST_TEST(s.path == "/run/tierce/memd.sock");
  BOOST_TEST(s.uri() == "shm:///run/tierce/memd.sock");
  for (const char* bad : {"127.0.0.1:80", "udp://x:1", "tcp://:80", "tcp://host", "tcp://h:99999",
                          "tcp://h:8x", "shm://relative.sock", "tcp://[::1:80"})
    BOOST_CHECK_THROW(parse_address(bad), FabricError);
  BOOST_TEST(int(parse_transport("shm")) == int(Transport::Shm));
  BOOST_CHECK_THROW(parse_transport("rdma"), FabricError);
  BOOST_TEST(int(resolve_auto(Transport::Auto, true)) == int(Transport::Shm));
  BOOST_TEST(int(resolve_auto(Transport::Tcp, true)) == int(Transport::Tcp));
}

BOOST_AUTO_TEST_CASE(segments_validate_their_header) {
  std::string name = "/tierce-unit-" + std::to_string(getpid());
  {
    auto seg = SharedSegment::create(name, 12345);
    BOOST_TEST(seg.size() == 12345u);
    BOOST_TEST(seg.live());
    BOOST_TEST(reinterpret_cast<uintptr_t>(seg.data()) % 4096 == 0u);
    seg.data()[100] = 42;
    auto again = SharedSegment::open(name);
    BOOST_TEST(again.incarnation() == seg.incarnation());
    BOOST_TEST(again.data()[100] == 42);
    auto fresh = SharedSegment::create(name, 8);  // re-creation: a new incarnation
    BOOST_TEST(fresh.incarnation() != seg.incarnation());
    seg.revoke();
    BOOST_TEST(!again.live());
  }
  SharedSegment::unlink(name);
  BOOST_CHECK_THROW(SharedSegment::open(name), FabricError);
  BOOST_CHECK_THROW(SharedSegment::create("no-slash", 8), FabricError);
  BOOST_CHECK_THROW(SharedSegment::create("/a/b", 8), FabricError);
  // A shm object that is not ours is refused, not trusted.
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
  BOOST_REQUIRE(fd >= 0);
  BOOST_REQUIRE(ftruncate(fd, 8192) == 0);
  close(fd);
  BOOST_CHECK_THROW(SharedSegment::open(name), FabricError);
  SharedSegment::unlink(name);
}

BOOST_AUTO_TEST_CASE(open_or_create_never_replaces_and_still_named_tells_a_replacement) {
  std::string name = "/tierce-unit-ooc-" + std::to_string(getpid());
  SharedSegment::unlink(name);
  {
    auto a = SharedSegment::open_or_create(name, 64);  // created
    auto b = SharedSegment::open_or_create(name, 64);  // opened: the same object
    BOOST_TEST(a.incarnation() == b.incarnation());
    a.data()[0] = 7;
    BOOST_TEST(b.data()[0] == 7);
    BOOST_TEST(a.still_named());
    BOOST_CHECK_THROW(SharedSegment::open_or_create(name, 1 << 20), FabricError);  // too small
    auto c = SharedSegment::create(name, 64);  // someone replaces it
    BOOST_TEST(!a.still_named());
    BOOST_TEST(c.still_named());
    SharedSegment::unlink(name);
    BOOST_TEST(!c.still_named());
  }
}

BOOST_AUTO_TEST_CASE(lease_cap_bounds_every_renewal) {
  auto seg = SharedSegment::create_anonymous("cap", 64);
  SegmentHeader* h = seg.header();
  renew_lease(h, 500'000'000);
  uint64_t now = monotonic_ns();
  BOOST_TEST(h->lease_deadline_ns.load() > now);
  BOOST_TEST(h->lease_deadline_wall_ns.load() > realtime_ns());
  BOOST_TEST(!past_lease_cap(h, now));  // uncapped
  // A cap in the past: renewals no longer extend the lease, in either clock.
  raise_lease_cap(h, now - 1);
  renew_lease(h, 500'000'000);
  BOOST_TEST(h->lease_deadline_ns.load() <= now);
  BOOST_TEST(h->lease_deadline_wall_ns.load() < realtime_ns());
  BOOST_TEST(past_lease_cap(h, monotonic_ns()));
  // The cap only moves forward.
  BOOST_TEST(raise_lease_cap(h, 5) == now - 1);
  uint64_t later = monotonic_ns() + 100'000'000;
  BOOST_TEST(raise_lease_cap(h, later) == later);
  renew_lease(h, 500'000'000);
  BOOST_TEST(h->lease_deadline_ns.load() == later);
  withdraw_lease(h);
  BOOST_TEST(h->lease_deadline_wall_ns.load() == 0u);
}

// verbs peers judge the header words they read with their own wall clock: absolute, so a stalled
// deadline is refused on the very first read (a relative "has it moved?" check trusted it once).
BOOST_AUTO_TEST_CASE(remote_lease_judge_is_absolute) {
  const uint64_t now = 1'000'000'000'000ull, skew = 50'000'000;
  RemoteLeaseWords w{uint64_t(SegmentState::Live), 1, 42, 0, now + 500'000'000};
  BOOST_TEST(int(judge_remote_lease(w, 42, now, skew)) == int(Errc::Ok));
  // A frozen exporter's word, seen for the first time after its deadline: refused.
  w.deadline_wall_ns = now - 1;
  BOOST_TEST(int(judge_remote_lease(w, 42, now, skew)) == int(Errc::PeerDead));
  // Within the clock skew of the deadline: refused too (the other host's clock may be ahead).
  w.deadline_wall_ns = now + skew;
  BOOST_TEST(int(judge_remote_lease(w, 42, now, skew)) == int(Errc::PeerDead));
  w.deadline_wall_ns = 0;  // withdrawn
  BOOST_TEST(int(judge_remote_lease(w, 42, now, skew)) == int(Errc::PeerDead));
  w.deadline_wall_ns = now + 500'000'000;
  BOOST_TEST(int(judge_remote_lease(w, 43, now, skew)) == int(Errc::Revoked));  // re-exported
  w.state = uint64_t(SegmentState::Revoked);
  BOOST_TEST(int(judge_remote_lease(w, 42, now, skew)) == int(Errc::Revoked));
}

BOOST_AUTO_TEST_CASE(responder_checks_every_field) {
  RegionTable regions;
  ServiceTable services;
  Counters counters;
  auto seg = std::make_shared<SharedSegment>(SharedSegment::create_anonymous("unit", 4096));
  auto info = regions.add("r", seg);
  auto r = regions.by_name("r");
  Responder resp(regions, services, counters);
  PeerInfo peer;
  TransportView view;
  Reply out;
  auto ask = [&](wire::Op op, uint64_t addr, uint64_t key, uint64_t a2 = 8,
                 std::vector<uint8_t> payload = {}) {
    wire::Header h;
    h.op = op;
    h.a0 = addr;
    h.a1 = key;
    h.a2 = a2;
    resp.handle(h, payload, peer, view, &out);
    return out.header.status;
  };
  uint64_t base = Responder::address_of(info.id, 0);
  BOOST_TEST(int(ask(wire::Op::Read, base, r->key)) == int(Errc::Ok));
  BOOST_TEST(int(ask(wire::Op::Read, base + 4088, r->key, 8)) == int(Errc::Ok));
  BOOST_TEST(int(ask(wire::Op::Read, base + 4089, r->key, 8)) == int(Errc::OutOfBounds));
  BOOST_TEST(int(ask(wire::Op::Read, base, r->key, wire::kMaxTransfer + 1)) == int(Errc::TooLarge));
  BOOST_TEST(int(ask(wire::Op::Read, base, r->key + 1)) == int(Errc::BadKey));
  BOOST_TEST(int(ask(wire::Op::Faa, base + 4, r->key)) == int(Errc::Misaligned));
  BOOST_TEST(int(ask(wire::Op::Faa, Responder::address_of(info.id + 1, 0), r->key)) ==
             int(Errc::NoSuchRegion));
  BOOST_TEST(int(ask(wire::Op::Map, base, r->key)) == int(Errc::NotPermitted));  // tcp view
  BOOST_TEST(int(ask(wire::Op::Lookup, 0, 0, 0, {'r'})) == int(Errc::Ok));
  BOOST_TEST(out.header.a1 == r->key);
  BOOST_TEST(int(ask(wire::Op::Lookup, 0, 0, 0, {})) == int(Errc::BadRequest));
  BOOST_TEST(int(ask(wire::Op::Call, 0, 0, 0, {1})) == int(Errc::BadRequest));
  // Ids are never reused: re-exporting gives a new id and key, the old descriptor misses.
  auto info2 = regions.add("r", seg);
  BOOST_TEST(info2.id != info.id);
  BOOST_TEST(int(ask(wire::Op::Read, base, r->key)) == int(Errc::NoSuchRegion));
  BOOST_TEST(counters.rejected_ops.load() >= 7u);
}
