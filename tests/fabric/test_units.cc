// tests/fabric/test_units.cc — the fabric's pure parts: frame codec, auth proofs, addresses,
// segments, and the responder's checks without a network.
#define BOOST_TEST_MODULE fabric_units
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fabric/auth.h"
#include "fabric/fabric.h"
#include "fabric/identity.h"
#include "fabric/protect.h"
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
  auto d = wire::decode_header(b);
  BOOST_REQUIRE(d.ok());
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
  auto why = [](std::span<const uint8_t> bytes) { return wire::decode_header(bytes).message(); };
  BOOST_TEST(why(std::span(b, 47)) == "short header");
  b[0] = 0;
  BOOST_TEST(why(b) == "bad magic");
  b[0] = wire::kMagic;
  b[1] = 77;
  BOOST_TEST(why(b) == "unknown opcode");
  b[1] = uint8_t(wire::Op::Read);
  b[2] = 1;  // status in a request
  BOOST_TEST(why(b) == "status set in a request");
  BOOST_TEST((wire::decode_header(b).status().code() == tierce::base::Code::InvalidArgument));
  b[2] = 0;
  b[7] = 0xff;  // length 4 GiB-ish
  BOOST_TEST(why(b) == "payload length over the limit");
}

BOOST_AUTO_TEST_CASE(service_payload) {
  std::vector<uint8_t> p;
  std::vector<uint8_t> body{9, 8, 7};
  wire::encode_service_payload(p, "lock", body);
  auto sp = wire::decode_service_payload(p);
  BOOST_REQUIRE(sp.ok());
  BOOST_TEST(sp->service == "lock");
  BOOST_TEST(std::vector<uint8_t>(sp->body.begin(), sp->body.end()) == body);
  std::vector<uint8_t> bad{200, 0, 'x'};
  BOOST_TEST(wire::decode_service_payload(bad).message() == "bad service name length");
  std::vector<uint8_t> empty_name{0, 0};
  BOOST_TEST(!wire::decode_service_payload(empty_name).ok());
  BOOST_TEST(wire::decode_service_payload(std::vector<uint8_t>{1}).message() ==
             "service payload shorter than its length field");
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

// The message of the FabricError f() throws ("" when it does not throw).
static std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const FabricError& e) {
    return e.what();
  }
  return "";
}

// Issue 32: the file's bytes are stretched with scrypt (auth.h) before any proof uses them. The
// expected key is Python's hashlib.scrypt of the same input (an independent implementation):
//   hashlib.scrypt(b"a-good-long-shared-secret", salt=b"tierce cluster secret v4",
//                  n=16384, r=8, p=1, dklen=32)
BOOST_AUTO_TEST_CASE(the_secret_is_stretched_with_scrypt) {
  const Secret s("a-good-long-shared-secret");
  std::string hex;
  for (unsigned char c : s.key()) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", c);
    hex += b;
  }
  BOOST_TEST(hex == "d883e23a42dd7332c61e01da40ef732352f8055f8fa98dad172c1916ae7e4a67");
  BOOST_TEST(s.key().find("a-good-long") == std::string::npos);
  // The proofs are made from the key: the same secret proves, another does not.
  Nonce sn = make_nonce(), cn = make_nonce();
  BOOST_TEST(mac_equal(client_proof(s, sn, cn), client_proof(Secret("a-good-long-shared-secret"), sn, cn)));
  BOOST_TEST(!mac_equal(client_proof(s, sn, cn), client_proof(Secret("a-good-long-shared-secreT"), sn, cn)));
  BOOST_TEST(!(s == Secret("a-good-long-shared-secreT")));
}

BOOST_AUTO_TEST_CASE(secret_file_permissions) {
  char path[] = "/tmp/tierce-secret-XXXXXX";
  int fd = mkstemp(path);
  BOOST_REQUIRE(fd >= 0);
  std::string content = "  a-good-long-shared-secret\n";
  BOOST_REQUIRE(write(fd, content.data(), content.size()) == ssize_t(content.size()));
  close(fd);
  BOOST_REQUIRE(chmod(path, 0600) == 0);
  BOOST_TEST((Secret::from_file(path) == Secret("a-good-long-shared-secret")));
  BOOST_REQUIRE(chmod(path, 0400) == 0);
  BOOST_TEST((Secret::from_file(path) == Secret("a-good-long-shared-secret")));
  // Group- or world-readable (or writable): refused, and the message says the fix.
  for (mode_t m : {0644, 0640, 0604, 0620, 0602, 0660}) {
    BOOST_REQUIRE(chmod(path, m) == 0);
    std::string e = error_of([&] { Secret::from_file(path); });
    BOOST_TEST_INFO("mode " << std::oct << m);
    BOOST_TEST(e.find("chmod 600 " + std::string(path)) != std::string::npos);
  }
  // Owned by someone else than this user or root: refused (needs root to arrange).
  BOOST_REQUIRE(chmod(path, 0600) == 0);
  if (geteuid() == 0) {
    BOOST_REQUIRE(chown(path, 65534, 65534) == 0);
    std::string e = error_of([&] { Secret::from_file(path); });
    BOOST_TEST(e.find("owned by uid 65534") != std::string::npos);
    BOOST_TEST(e.find("chmod 600") != std::string::npos);
    BOOST_REQUIRE(chown(path, 0, 0) == 0);
    BOOST_TEST((Secret::from_file(path) == Secret("a-good-long-shared-secret")));  // root's: fine
  } else {
    BOOST_TEST_MESSAGE("not root: the foreign-owner case needs chown, skipped");
  }
  unlink(path);
  BOOST_CHECK_THROW(Secret::from_file(path), FabricError);
}

// RFC 5869 test case 1: the first 32 bytes of OKM are T(1), which is what we derive.
BOOST_AUTO_TEST_CASE(hkdf_matches_rfc5869) {
  std::vector<uint8_t> ikm(22, 0x0b), salt, info;
  for (int i = 0; i <= 0x0c; ++i) salt.push_back(uint8_t(i));
  for (int i = 0xf0; i <= 0xf9; ++i) info.push_back(uint8_t(i));
  uint8_t out[32];
  hkdf_sha256_32(salt.data(), salt.size(), ikm.data(), ikm.size(), info.data(), info.size(), out);
  const uint8_t expect[32] = {0x3c, 0xb2, 0x5f, 0x25, 0xfa, 0xac, 0xd5, 0x7a, 0x90, 0x43, 0x4f,
                              0x64, 0xd0, 0x36, 0x2f, 0x2a, 0x2d, 0x2d, 0x0a, 0x90, 0xcf, 0x1a,
                              0x5a, 0x4c, 0x5d, 0xb0, 0x2d, 0x56, 0xec, 0xc4, 0xc5, 0xbf};
  BOOST_TEST(std::memcmp(out, expect, 32) == 0);
}

namespace {
struct SealedFrame {
  uint8_t hdr[wire::kHeaderSize];
  std::vector<uint8_t> payload;
  uint8_t tag[FrameProtector::kTagSize];
};
SealedFrame seal(FrameProtector& p, uint64_t id, std::string_view text) {
  SealedFrame f;
  wire::Header h;
  h.op = wire::Op::Write;
  h.id = id;
  h.length = uint32_t(text.size());
  wire::encode_header(h, f.hdr);
  f.payload.assign(text.begin(), text.end());
  p.seal(f.hdr, f.payload.data(), f.payload.size(), f.tag);
  return f;
}
bool open(FrameProtector& p, SealedFrame f) {  // by value: a refused frame leaves the original
  return p.open(f.hdr, f.payload.data(), f.payload.size(), f.tag);
}
}  // namespace

BOOST_AUTO_TEST_CASE(frame_protection_refuses_tampering_replay_and_reordering) {
  Secret s("0123456789abcdef-secret");
  for (Protection mode : {Protection::Mac, Protection::Encrypt}) {
    BOOST_TEST_CONTEXT("mode " << to_string(mode)) {
      Nonce sn = make_nonce(), cn = make_nonce();
      FrameProtector client(s, sn, cn, mode, true), server(s, sn, cn, mode, false);
      // In order: accepted, and the payload comes out as sent (encrypted on the way in Encrypt).
      SealedFrame a = seal(client, 1, "first frame payload");
      BOOST_TEST((std::string(a.payload.begin(), a.payload.end()) != "first frame payload") ==
                 (mode == Protection::Encrypt));
      SealedFrame a2 = a;
      BOOST_TEST(server.open(a2.hdr, a2.payload.data(), a2.payload.size(), a2.tag));
      BOOST_TEST(std::string(a2.payload.begin(), a2.payload.end()) == "first frame payload");
      // Replay of the frame just accepted: refused (the receiver expects the next number).
      {
        FrameProtector c2(s, sn, cn, mode, true), s2(s, sn, cn, mode, false);
        SealedFrame f0 = seal(c2, 1, "x"), f1 = seal(c2, 2, "y");
        BOOST_TEST(open(s2, f0));
        BOOST_TEST(!open(s2, f0));  // replayed
      }
      // Reordered: the second frame first is refused.
      {
        FrameProtector c2(s, sn, cn, mode, true), s2(s, sn, cn, mode, false);
        SealedFrame f0 = seal(c2, 1, "x"), f1 = seal(c2, 2, "y");
        BOOST_TEST(!open(s2, f1));
      }
      // Tampered header, payload or tag: refused.
      for (int what = 0; what < 3; ++what) {
        FrameProtector c2(s, sn, cn, mode, true), s2(s, sn, cn, mode, false);
        SealedFrame f = seal(c2, 7, "payload to tamper with");
        if (what == 0) f.hdr[16] ^= 1;       // a0: the address
        if (what == 1) f.payload[3] ^= 0x80;  // the data
        if (what == 2) f.tag[15] ^= 1;
        BOOST_TEST(!open(s2, f));
      }
      // A frame sealed for the other direction (reflected back to its sender): refused.
      {
        FrameProtector c2(s, sn, cn, mode, true);
        SealedFrame f = seal(c2, 1, "reflected");
        BOOST_TEST(!open(c2, f));
      }
      // Another connection's keys (other nonces) or another secret: refused.
      {
        FrameProtector c2(s, sn, cn, mode, true);
        FrameProtector other(s, make_nonce(), cn, mode, false);
        FrameProtector other_secret(Secret("another-secret-of-16+"), sn, cn, mode, false);
        SealedFrame f = seal(c2, 1, "x");
        BOOST_TEST(!open(other, f));
        BOOST_TEST(!open(other_secret, f));
      }
    }
  }
  // Mac and Encrypt derive different keys: a frame of one does not open under the other.
  Nonce sn = make_nonce(), cn = make_nonce();
  FrameProtector mac(s, sn, cn, Protection::Mac, true), enc(s, sn, cn, Protection::Encrypt, false);
  BOOST_TEST(!open(enc, seal(mac, 1, "")));
}

BOOST_AUTO_TEST_CASE(proofs_bind_version_and_protection) {
  Secret s("0123456789abcdef-secret");
  Nonce sn = make_nonce(), cn = make_nonce();
  HandshakeParams enc{uint8_t(wire::kProtocolVersion), Protection::Encrypt, Protection::Mac};
  HandshakeParams downgraded{uint8_t(wire::kProtocolVersion), Protection::Mac, Protection::Mac};
  HandshakeParams old_version{1, Protection::Encrypt, Protection::Mac};
  BOOST_TEST(!mac_equal(client_proof(s, sn, cn, enc), client_proof(s, sn, cn, downgraded)));
  BOOST_TEST(!mac_equal(client_proof(s, sn, cn, enc), client_proof(s, sn, cn, old_version)));
  BOOST_TEST(!mac_equal(server_proof(s, sn, cn, enc), server_proof(s, sn, cn, downgraded)));
  BOOST_TEST(int(enc.agreed()) == int(Protection::Encrypt));
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

// A segment larger than /dev/shm's free space would map and then SIGBUS its user when the pages
// run out (seen: mod_rcache children in a container with the default 64 MiB /dev/shm): refused at
// creation, with the fix in the message, and nothing is left in /dev/shm.
BOOST_AUTO_TEST_CASE(a_segment_larger_than_dev_shm_is_refused) {
  struct statfs fs {};
  BOOST_REQUIRE(statfs("/dev/shm", &fs) == 0);
  if (fs.f_blocks == 0) {
    BOOST_TEST_MESSAGE("SKIP: /dev/shm has no size limit here");
    return;
  }
  const size_t too_big = size_t(fs.f_bavail) * size_t(fs.f_bsize) + (size_t(64) << 20);
  const std::string name = "/tierce-unit-big-" + std::to_string(getpid());
  try {
    SharedSegment::create(name, too_big);
    BOOST_FAIL("a segment larger than /dev/shm's free space was created");
  } catch (const FabricError& e) {
    BOOST_TEST(int(e.code()) == int(Errc::Config));
    BOOST_TEST(std::string(e.what()).find("MiB free: enlarge /dev/shm") != std::string::npos, e.what());
  }
  BOOST_CHECK_THROW(SharedSegment::open(name), FabricError);  // not published
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

// Issue 32: a name pre-created by someone else (another owner, or a wider mode) is refused, not
// used: its creator could read or change what the segment holds (a writer's counter).
BOOST_AUTO_TEST_CASE(open_or_create_refuses_a_segment_it_could_not_have_created) {
  std::string name = "/tierce-unit-ooc-foreign-" + std::to_string(getpid());
  SharedSegment::unlink(name);
  {
    auto mine = SharedSegment::create(name, 64, 0600);
    ::fchmod(mine.fd(), 0666);  // as a local user pre-creating the name would
    try {
      SharedSegment::open_or_create(name, 64, 0600);
      BOOST_FAIL("a mode-0666 segment was used");
    } catch (const FabricError& e) {
      BOOST_TEST((e.code() == Errc::NotPermitted));
      BOOST_TEST(std::string(e.what()).find("mode 0666") != std::string::npos, e.what());
    }
    ::fchmod(mine.fd(), 0640);  // group read: wider than 0600 as well
    BOOST_CHECK_THROW(SharedSegment::open_or_create(name, 64, 0600), FabricError);
    BOOST_CHECK_NO_THROW(SharedSegment::open_or_create(name, 64, 0640));  // what was asked for
    if (::geteuid() == 0) {  // another owner (root can give it away)
      ::fchmod(mine.fd(), 0600);
      BOOST_REQUIRE(::fchown(mine.fd(), 65534, 65534) == 0);
      try {
        SharedSegment::open_or_create(name, 64, 0600);
        BOOST_FAIL("a segment of uid 65534 was used");
      } catch (const FabricError& e) {
        BOOST_TEST(std::string(e.what()).find("owned by uid 65534") != std::string::npos,
                   e.what());
      }
    }
    SharedSegment::unlink(name);
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

// Node keys (fabric/identity.h): a key file written is read back to the same key; a file its
// group or others can read, a non-key file or a missing one is refused saying what to do; public
// keys parse only in their one spelling; a signature verifies with its key only, and not for
// another message.
BOOST_AUTO_TEST_CASE(node_keys_round_trip_and_bad_files_are_refused) {
  char dir[] = "/tmp/tierce-keys-XXXXXX";
  BOOST_REQUIRE(::mkdtemp(dir));
  const std::string path = std::string(dir) + "/node.key";
  NodeKey k = NodeKey::generate();
  k.write_file(path);
  struct stat st {};
  BOOST_REQUIRE(::stat(path.c_str(), &st) == 0);
  BOOST_TEST((st.st_mode & 0777) == 0600u);
  NodeKey back = NodeKey::from_file(path);
  BOOST_TEST(back.public_key() == k.public_key());
  BOOST_CHECK_THROW(k.write_file(path), FabricError);  // never overwrites a key

  const std::vector<uint8_t> msg{1, 2, 3};
  Signature sig = back.sign(msg);
  BOOST_TEST(verify_signature(k.public_key(), msg, sig));
  BOOST_TEST(!verify_signature(NodeKey::generate().public_key(), msg, sig));
  BOOST_TEST(!verify_signature(k.public_key(), std::vector<uint8_t>{1, 2, 4}, sig));

  auto refused = [](const std::string& p, const std::string& says) {
    try {
      NodeKey::from_file(p);
    } catch (const FabricError& e) {
      BOOST_TEST(std::string(e.what()).find(says) != std::string::npos, e.what());
      return;
    }
    BOOST_ERROR("accepted " + p);
  };
  BOOST_REQUIRE(::chmod(path.c_str(), 0640) == 0);
  refused(path, "chmod 600");
  const std::string junk = std::string(dir) + "/junk.key";
  {
    int fd = ::open(junk.c_str(), O_WRONLY | O_CREAT, 0600);
    BOOST_REQUIRE(fd >= 0);
    BOOST_REQUIRE(::write(fd, "not a key\n", 10) == 10);
    ::close(fd);
  }
  refused(junk, "tierce-fabric keygen");
  refused(std::string(dir) + "/missing.key", "missing.key");

  const std::string text = format_public_key(k.public_key());
  BOOST_TEST(text.rfind("ed25519:", 0) == 0u);
  BOOST_TEST(parse_public_key(text).value() == k.public_key());
  for (std::string bad : {std::string(""), text.substr(8), "rsa:" + text.substr(8),
                          text.substr(0, text.size() - 2), text + "A", "ed25519:" + std::string(44, '*')})
    BOOST_TEST(!parse_public_key(bad).has_value(), bad);
  ::unlink(path.c_str());
  ::unlink(junk.c_str());
  ::rmdir(dir);
}
