// tests/dlm/client/ipc_codec_test.cc — the local IPC frames (dlm/ipc.h): byte layout, round
// trips, and strict rejection of garbage (random bytes, truncations, oversize and bad names,
// wrong magic/version, reserved bits) without crashing.
#define BOOST_TEST_MODULE dlm_ipc_codec
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <random>

#include "dlm/ipc.h"

using namespace tierce::dlm;
using namespace tierce::dlm::ipc;

namespace tierce::dlm {
std::ostream& operator<<(std::ostream& o, Status s) {
  return o << to_string(s);
}
}  // namespace tierce::dlm

namespace {

std::vector<uint8_t> bytes(const Frame& f) {
  return {f.bytes, f.bytes + f.size};
}

template <class T>
std::vector<uint8_t> enc(const T& x) {
  Frame f;
  encode(x, &f);
  return bytes(f);
}

LockRequest sample_lock() {
  LockRequest r;
  r.req_id = 0x0102030405060708ull;
  r.mode = Mode::Shared;
  r.timeout_ms = -1;
  r.name = "orders/42";
  return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(lock_frame_layout_is_as_documented) {
  auto b = enc(sample_lock());
  BOOST_TEST_REQUIRE(b.size() == kLockFixed + 9);
  BOOST_TEST(b[0] == 0xD1);
  BOOST_TEST(b[1] == 2);
  BOOST_TEST(b[2] == 1);  // LOCK
  BOOST_TEST(b[3] == 0);
  BOOST_TEST(b[4] == 0x08);  // req_id little-endian
  BOOST_TEST(b[11] == 0x01);
  BOOST_TEST(b[12] == 0xff);  // timeout -1
  BOOST_TEST(b[15] == 0xff);
  BOOST_TEST(b[16] == 1);  // shared
  BOOST_TEST(b[17] == 0);
  BOOST_TEST(b[18] == 9);
  BOOST_TEST(b[19] == 0);
  BOOST_TEST(std::string(b.begin() + 20, b.end()) == "orders/42");

  Reply r;
  r.req_id = 7;
  r.status = Status::Ok;
  r.hold = 0x1122;
  r.token = 0x3344;
  r.valid_until = 0x5566;
  r.message = "hi";
  auto rb = enc(r);
  BOOST_TEST_REQUIRE(rb.size() == kReplyFixed + 2);
  BOOST_TEST(kReplyFixed == 40u);
  BOOST_TEST(rb[1] == 2);
  BOOST_TEST(rb[2] == 0x81);
  BOOST_TEST(rb[4] == 7);
  BOOST_TEST(rb[12] == 0x22);
  BOOST_TEST(rb[13] == 0x11);
  BOOST_TEST(rb[20] == 0x44);
  BOOST_TEST(rb[28] == 0x66);
  BOOST_TEST(rb[29] == 0x55);
  BOOST_TEST(rb[36] == 0);  // Status::Ok
  BOOST_TEST(rb[37] == 0);
  BOOST_TEST(rb[38] == 2);
  BOOST_TEST(rb[40] == 'h');
}

BOOST_AUTO_TEST_CASE(requests_round_trip) {
  for (int32_t t : {-1, 0, 1, 5000, INT32_MAX, INT32_MIN}) {
    for (Mode m : {Mode::Shared, Mode::Exclusive}) {
      LockRequest r = sample_lock();
      r.timeout_ms = t;
      r.mode = m;
      r.name = std::string(kMaxNameBytes, 'n');
      DecodeError err;
      auto d = decode_request(enc(r), &err);
      BOOST_TEST_REQUIRE(d.has_value(), err.why);
      auto* l = std::get_if<LockRequest>(&*d);
      BOOST_TEST_REQUIRE(l != nullptr);
      BOOST_TEST(l->req_id == r.req_id);
      BOOST_TEST(l->timeout_ms == t);
      BOOST_TEST(int(l->mode) == int(m));
      BOOST_TEST(l->name == r.name);
    }
  }
  DecodeError err;
  auto u = decode_request(enc(UnlockRequest{9, 0xffffffffffffffffull}), &err);
  BOOST_TEST_REQUIRE(u.has_value());
  BOOST_TEST(std::get<UnlockRequest>(*u).req_id == 9u);
  BOOST_TEST(std::get<UnlockRequest>(*u).hold == 0xffffffffffffffffull);
  auto s = decode_request(enc(StatusRequest{77}), &err);
  BOOST_TEST_REQUIRE(s.has_value());
  BOOST_TEST(std::get<StatusRequest>(*s).req_id == 77u);
  BOOST_TEST(!std::get<StatusRequest>(*s).metrics);
  // Flag METRICS: the same frame with bit 2 of the flags (what tierce-lock --metrics sends).
  auto mf = enc(StatusRequest{78, true});
  BOOST_TEST(mf.size() == kStatusSize);
  BOOST_TEST(mf[3] == kFlagMetrics);
  auto m = decode_request(mf, &err);
  BOOST_TEST_REQUIRE(m.has_value());
  BOOST_TEST(std::get<StatusRequest>(*m).req_id == 78u);
  BOOST_TEST(std::get<StatusRequest>(*m).metrics);
}

BOOST_AUTO_TEST_CASE(metrics_flag_only_on_status) {
  DecodeError err;
  auto lock = enc(sample_lock());
  lock[3] = kFlagMetrics;
  BOOST_TEST(!decode_request(lock, &err).has_value());
  BOOST_TEST(err.status == Status::BadRequest);
  auto unlock = enc(UnlockRequest{3, 4});
  unlock[3] = kFlagMetrics;
  BOOST_TEST(!decode_request(unlock, &err).has_value());
  auto status = enc(StatusRequest{5});
  status[3] = kFlagMetrics | kFlagMore;  // MORE is a reply's flag
  BOOST_TEST(!decode_request(status, &err).has_value());
  BOOST_TEST_REQUIRE(err.req_id.has_value());  // answerable: an old lockd answers BadRequest
  BOOST_TEST(*err.req_id == 5u);
}

BOOST_AUTO_TEST_CASE(events_round_trip) {
  for (int st = 0; st <= int(Status::Internal); ++st) {
    Reply r;
    r.req_id = 123456789;
    r.status = Status(st);
    r.hold = 42;
    r.token = 1ull << 50;
    r.valid_until = 0xfedcba9876543210ull - uint64_t(st);
    r.message = "message " + std::to_string(st);
    r.more = st % 2;
    DecodeError err;
    auto e = decode_event(enc(r), &err);
    BOOST_TEST_REQUIRE(e.has_value(), err.why);
    auto& d = std::get<Reply>(*e);
    BOOST_TEST(d.req_id == r.req_id);
    BOOST_TEST(d.status == r.status);
    BOOST_TEST(d.hold == 42u);
    BOOST_TEST(d.token == r.token);
    BOOST_TEST(d.valid_until == r.valid_until);
    BOOST_TEST(d.message == r.message);
    BOOST_TEST(d.more == r.more);
  }
  DecodeError err;
  auto e = decode_event(enc(RevokedEvent{5, "lease lost: home n2 silent for 1500 ms"}), &err);
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST(std::get<RevokedEvent>(*e).hold == 5u);
  BOOST_TEST(std::get<RevokedEvent>(*e).why == "lease lost: home n2 silent for 1500 ms");
}

BOOST_AUTO_TEST_CASE(long_messages_are_cut_to_one_frame) {
  Reply r;
  r.req_id = 1;
  r.status = Status::Internal;
  r.message = std::string(10000, 'm');
  Frame f;
  encode(r, &f);
  BOOST_TEST(f.size == kMaxFrame);
  DecodeError err;
  auto e = decode_event(f.view(), &err);
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST(std::get<Reply>(*e).message.size() == kMaxReplyMessage);
  encode(RevokedEvent{1, std::string(10000, 'w')}, &f);
  BOOST_TEST(f.size == kMaxFrame);
  BOOST_TEST(decode_event(f.view(), &err).has_value());
}

BOOST_AUTO_TEST_CASE(every_truncation_is_rejected) {
  std::vector<std::vector<uint8_t>> reqs = {enc(sample_lock()), enc(UnlockRequest{3, 4}),
                                            enc(StatusRequest{5})};
  for (auto& full : reqs) {
    for (size_t n = 0; n < full.size(); ++n) {
      DecodeError err;
      auto d = decode_request(std::span(full.data(), n), &err);
      BOOST_TEST(!d.has_value(), "prefix " << n << " of " << full.size());
      BOOST_TEST(!err.why.empty());
      BOOST_TEST(err.status == Status::BadRequest);
    }
    // ...and so is a byte too many.
    auto longer = full;
    longer.push_back(0);
    DecodeError err;
    BOOST_TEST(!decode_request(longer, &err).has_value());
    BOOST_TEST(err.req_id.has_value());  // the id is readable: lockd can answer
  }
  Reply r;
  r.message = "abc";
  std::vector<std::vector<uint8_t>> evs = {enc(r), enc(RevokedEvent{1, "why"})};
  for (auto& full : evs) {
    for (size_t n = 0; n < full.size(); ++n) {
      DecodeError err;
      BOOST_TEST(!decode_event(std::span(full.data(), n), &err).has_value());
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_names_are_refused_with_bad_name) {
  auto check = [](const std::string& name) {
    // Build by hand: the encoder cuts names at kMaxNameBytes.
    std::vector<uint8_t> b = enc(sample_lock());
    b.resize(kLockFixed);
    b[18] = uint8_t(name.size());
    b[19] = uint8_t(name.size() >> 8);
    b.insert(b.end(), name.begin(), name.end());
    DecodeError err;
    BOOST_TEST(!decode_request(b, &err).has_value());
    BOOST_TEST(err.status == Status::BadName);
    BOOST_TEST_REQUIRE(err.req_id.has_value());
    BOOST_TEST(*err.req_id == sample_lock().req_id);
  };
  check("");
  check(std::string(kMaxNameBytes + 1, 'x'));
  check(std::string(1000, 'x'));
  check(std::string("a\0b", 3));
  BOOST_TEST(name_problem(std::string(kMaxNameBytes, 'x')).empty());
  BOOST_TEST(name_problem(std::string(kMaxNameBytes + 1, 'x')) == "the lock name is longer than 255 bytes");
  BOOST_TEST(name_problem("") == "the lock name is empty");
  BOOST_TEST(name_problem(std::string("a\0b", 3)) == "the lock name contains a NUL byte");
}

BOOST_AUTO_TEST_CASE(header_and_field_violations_are_refused) {
  auto mutate = [](std::vector<uint8_t> b, size_t at, uint8_t v) {
    b[at] = v;
    return b;
  };
  auto lock = enc(sample_lock());
  DecodeError err;
  BOOST_TEST(!decode_request(mutate(lock, 0, 0xC7), &err).has_value());  // fabric's magic
  BOOST_TEST(err.why.find("magic") != std::string::npos);
  BOOST_TEST(!err.req_id.has_value());

  BOOST_TEST(!decode_request(mutate(lock, 1, 3), &err).has_value());  // a newer version
  BOOST_TEST(err.why.find("version 3") != std::string::npos, err.why);
  BOOST_TEST(err.req_id.has_value());
  BOOST_TEST(!decode_request(mutate(lock, 1, 1), &err).has_value());  // version 1 (no valid_until)
  BOOST_TEST(err.why.find("version 1") != std::string::npos, err.why);
  BOOST_TEST(err.req_id.has_value());  // bytes 0..11 are stable: answerable

  BOOST_TEST(!decode_request(mutate(lock, 2, 9), &err).has_value());     // unknown type
  BOOST_TEST(!decode_request(mutate(lock, 2, 0x81), &err).has_value());  // a reply as a request
  BOOST_TEST(!decode_request(mutate(lock, 3, 1), &err).has_value());     // flags
  BOOST_TEST(!decode_request(mutate(lock, 16, 0), &err).has_value());    // mode 0
  BOOST_TEST(!decode_request(mutate(lock, 16, 3), &err).has_value());    // mode 3
  BOOST_TEST(err.status == Status::BadRequest);
  BOOST_TEST(!decode_request(mutate(lock, 17, 1), &err).has_value());    // reserved
  BOOST_TEST(!decode_request(mutate(lock, 18, 200), &err).has_value());  // name_len lies

  Reply r;
  r.req_id = 1;
  auto rep = enc(r);
  BOOST_TEST(!decode_event(mutate(rep, 36, 11), &err).has_value());  // unknown status
  BOOST_TEST(!decode_event(mutate(rep, 37, 1), &err).has_value());   // reserved
  BOOST_TEST(!decode_event(mutate(rep, 1, 1), &err).has_value());    // version 1's REPLY
  BOOST_TEST(!decode_event(mutate(rep, 3, 2), &err).has_value());    // unknown flag
  BOOST_TEST(!decode_event(mutate(rep, 2, 1), &err).has_value());    // a request as an event
  BOOST_TEST(!decode_event(mutate(rep, 1, 0), &err).has_value());    // version 0

  std::vector<uint8_t> huge(kMaxFrame + 1, 0);
  huge[0] = kMagic;
  huge[1] = kVersion;
  huge[2] = 1;
  BOOST_TEST(!decode_request(huge, &err).has_value());
  BOOST_TEST(!decode_event(huge, &err).has_value());
}

// Random garbage and random mutations of valid frames: no crash (the sanitizer build checks
// every access), and whatever decodes re-encodes to exactly the same bytes (no field ignored).
BOOST_AUTO_TEST_CASE(garbage_never_crashes_and_accepted_frames_are_canonical) {
  std::mt19937_64 rng(20261121);
  std::vector<std::vector<uint8_t>> seeds = {enc(sample_lock()), enc(UnlockRequest{1, 2}),
                                             enc(StatusRequest{3}), enc(Reply{}),
                                             enc(RevokedEvent{4, "x"})};
  size_t accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    std::vector<uint8_t> b;
    if (i % 2) {
      b.resize(rng() % 64);
      for (auto& x : b) x = uint8_t(rng());
      if (!b.empty() && rng() % 2) b[0] = kMagic;
      if (b.size() > 1 && rng() % 2) b[1] = kVersion;
    } else {
      b = seeds[rng() % seeds.size()];
      int flips = 1 + int(rng() % 3);
      for (int k = 0; k < flips && !b.empty(); ++k) b[rng() % b.size()] = uint8_t(rng());
      if (rng() % 4 == 0) b.resize(rng() % (b.size() + 8));
    }
    DecodeError err;
    if (auto r = decode_request(b, &err)) {
      ++accepted;
      Frame f;
      encode(*r, &f);
      BOOST_TEST_REQUIRE(bytes(f) == b);
    } else {
      BOOST_TEST_REQUIRE(!err.why.empty());
    }
    if (auto e = decode_event(b, &err)) {
      ++accepted;
      Frame f;
      std::visit([&](const auto& x) { encode(x, &f); }, *e);
      BOOST_TEST_REQUIRE(bytes(f) == b);
    } else {
      BOOST_TEST_REQUIRE(!err.why.empty());
    }
  }
  BOOST_TEST(accepted > 0u);  // the mutations do hit valid frames (the check above ran)
}
