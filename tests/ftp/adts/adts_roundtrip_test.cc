// tests/ftp/adts/adts_roundtrip_test.cc — files and memory moved over real tcp/ptcp sessions on
// loopback, in both directions, checked byte for byte: sizes around the block size, ~10 MiB of
// random data, offsets (REST), 1/4/8 streams, zero copy on and off; persistent sessions.
#define BOOST_TEST_MODULE adts_roundtrip
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include "tests/ftp/adts/adts_test_util.h"

using namespace adts_test;
using tierce_test::TempDir;

namespace {

constexpr size_t kBlock = 64 << 10;

struct Channel {
  ChannelKind kind;
  unsigned streams;
};
const Channel kChannels[] = {{ChannelKind::Tcp, 1},
                             {ChannelKind::ParallelTcp, 1},
                             {ChannelKind::ParallelTcp, 4},
                             {ChannelKind::ParallelTcp, 8}};

SessionParams params(const Channel& c, bool zero_copy, size_t block = kBlock) {
  SessionParams p;
  p.kind = c.kind;
  p.streams = c.streams;
  p.block = block;
  p.zero_copy = zero_copy;
  p.timeout = std::chrono::seconds(20);
  p.cookie = 0x5f0c2a99d3e1b7a4ULL;
  return p;
}

std::string label(const Channel& c, bool zc) {
  return std::string(to_string(c.kind)) + "x" + std::to_string(c.streams) +
         (zc ? " zero-copy" : " pipelined");
}

// Sends `data` (as a file at src_off) from `from` to `to` (into a file at dst_off) and checks
// the result byte for byte, and the zero-copy accounting.
void file_round_trip(Session& from, Session& to, const std::vector<uint8_t>& data, uint64_t src_off,
                     uint64_t dst_off, bool zero_copy, const TempDir& dir, const std::string& what) {
  BOOST_TEST_CONTEXT(what << " size " << data.size() << " src_off " << src_off << " dst_off "
                          << dst_off) {
    std::vector<uint8_t> in(src_off, 0xEE);
    in.insert(in.end(), data.begin(), data.end());
    std::string src_path = dir / "src", dst_path = dir / "dst";
    write_bytes(src_path, in);
    std::vector<uint8_t> pre(dst_off, 0xAB);  // what REST leaves in place
    write_bytes(dst_path, pre);
    SessionStats s0 = from.stats(), r0 = to.stats();
    FileFd sfd(src_path, O_RDONLY), dfd(dst_path, O_WRONLY);
    uint64_t last_progress = 0;
    auto [so, ro] = transfer(
        [&] { return from.send(Source{sfd.fd, src_off, data.size(), {}}); },
        [&] {
          Sink sink;
          sink.fd = dfd.fd;
          sink.offset = dst_off;
          return to.receive(sink, [&](uint64_t d, uint64_t t) {
            BOOST_CHECK_LE(d, t);
            last_progress = d;
          });
        });
    BOOST_REQUIRE_MESSAGE(!so.error, "send failed: " << so.what);
    BOOST_REQUIRE_MESSAGE(!ro.error, "receive failed: " << ro.what);
    BOOST_CHECK_EQUAL(so.bytes, data.size());
    BOOST_CHECK_EQUAL(ro.bytes, data.size());
    if (!data.empty()) BOOST_CHECK_EQUAL(last_progress, data.size());
    std::vector<uint8_t> out = read_bytes(dst_path);
    BOOST_REQUIRE_EQUAL(out.size(), dst_off + data.size());
    BOOST_CHECK(std::equal(pre.begin(), pre.end(), out.begin()));
    BOOST_CHECK(std::equal(data.begin(), data.end(), out.begin() + long(dst_off)));
    SessionStats s1 = from.stats(), r1 = to.stats();
    BOOST_CHECK_EQUAL(s1.transfers, s0.transfers + 1);
    BOOST_CHECK_EQUAL(s1.bytes_sent - s0.bytes_sent, data.size());
    BOOST_CHECK_EQUAL(r1.bytes_received - r0.bytes_received, data.size());
    uint64_t zc = (s1.zero_copy_bytes - s0.zero_copy_bytes) + (r1.zero_copy_bytes - r0.zero_copy_bytes);
    uint64_t cp = (s1.copied_bytes - s0.copied_bytes) + (r1.copied_bytes - r0.copied_bytes);
    if (zero_copy) {
      BOOST_CHECK_EQUAL(s1.zero_copy_bytes - s0.zero_copy_bytes, data.size());
      // splice(2) socket -> pipe -> file works on the filesystems tests run on (ext4, tmpfs)
      BOOST_CHECK_EQUAL(r1.zero_copy_bytes - r0.zero_copy_bytes, data.size());
      BOOST_CHECK_EQUAL(zc + cp, 2 * data.size());
    } else {
      BOOST_CHECK_EQUAL(zc, 0u);
      BOOST_CHECK_EQUAL(cp, 2 * data.size());
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(files_of_edge_sizes_every_channel) {
  TempDir dir;
  const size_t sizes[] = {0, 1, kBlock - 1, kBlock, kBlock + 1, 3 * kBlock + 17};
  for (const Channel& c : kChannels)
    for (bool zc : {true, false}) {
      SessionPair sp = make_pair(params(c, zc));
      BOOST_CHECK_EQUAL(sp.client->streams(), c.streams);
      BOOST_CHECK(sp.client->kind() == c.kind);
      uint32_t seed = 1;
      for (size_t n : sizes) {
        auto data = random_bytes(n, seed++);
        // server -> client (RETR) and client -> server (STOR) on the same persistent session
        file_round_trip(*sp.server, *sp.client, data, 0, 0, zc, dir, label(c, zc) + " RETR");
        file_round_trip(*sp.client, *sp.server, data, 0, 0, zc, dir, label(c, zc) + " STOR");
      }
      BOOST_CHECK(!sp.server->broken());
      BOOST_CHECK(!sp.client->broken());
    }
}

BOOST_AUTO_TEST_CASE(ten_mib_random_with_offsets) {
  TempDir dir;
  auto data = random_bytes((10 << 20) + 12345, 42);
  for (const Channel& c : kChannels)
    for (bool zc : {true, false}) {
      // the default 1 MiB block for one, small blocks for the others
      SessionPair sp = make_pair(params(c, zc, c.streams == 4 ? (1 << 20) : kBlock));
      file_round_trip(*sp.server, *sp.client, data, 0, 0, zc, dir, label(c, zc));
      // REST: resume from the middle of the source into the middle of the target
      std::vector<uint8_t> tail(data.begin() + 4097, data.end());
      file_round_trip(*sp.client, *sp.server, tail, 4097, 4097, zc, dir, label(c, zc) + " REST");
    }
}

BOOST_AUTO_TEST_CASE(memory_source_and_sink) {
  TempDir dir;
  for (const Channel& c : kChannels) {
    SessionPair sp = make_pair(params(c, true));
    for (size_t n : {size_t(0), size_t(1), kBlock + 1, size_t(1 << 20) + 3}) {
      auto data = random_bytes(n, uint32_t(n));
      std::vector<uint8_t> got = {'x', 'y'};  // a memory sink appends
      auto [so, ro] = transfer([&] { return sp.server->send(Source{-1, 0, 0, data}); },
                               [&] {
                                 Sink s;
                                 s.memory = &got;
                                 return sp.client->receive(s);
                               });
      BOOST_REQUIRE_MESSAGE(!so.error && !ro.error, so.what << " / " << ro.what);
      BOOST_CHECK_EQUAL(ro.bytes, n);
      BOOST_REQUIRE_EQUAL(got.size(), n + 2);
      BOOST_CHECK(std::equal(data.begin(), data.end(), got.begin() + 2));
      // memory -> file and file -> memory
      std::string path = dir / "m";
      write_bytes(path, {});
      {
        FileFd out(path, O_WRONLY);
        auto [so2, ro2] = transfer([&] { return sp.client->send(Source{-1, 0, 0, data}); },
                                   [&] {
                                     Sink s;
                                     s.fd = out.fd;
                                     return sp.server->receive(s);
                                   });
        BOOST_REQUIRE_MESSAGE(!so2.error && !ro2.error, so2.what << " / " << ro2.what);
      }
      BOOST_CHECK(read_bytes(path) == data);
      std::vector<uint8_t> back;
      FileFd in(path, O_RDONLY);
      auto [so3, ro3] = transfer([&] { return sp.server->send(Source{in.fd, 0, n, {}}); },
                                 [&] {
                                   Sink s;
                                   s.memory = &back;
                                   return sp.client->receive(s);
                                 });
      BOOST_REQUIRE_MESSAGE(!so3.error && !ro3.error, so3.what << " / " << ro3.what);
      BOOST_CHECK(back == data);
    }
  }
}

BOOST_AUTO_TEST_CASE(hundred_transfers_on_one_persistent_session) {
  TempDir dir;
  for (bool zc : {true, false}) {
    SessionPair sp = make_pair(params({ChannelKind::ParallelTcp, 4}, zc));
    for (int i = 0; i < 100; ++i) {
      auto data = random_bytes(size_t(i) * 3001 + (i % 7 == 0 ? kBlock : 0), uint32_t(i));
      bool up = i % 2;
      Session& from = up ? *sp.client : *sp.server;
      Session& to = up ? *sp.server : *sp.client;
      std::string path = dir / ("f" + std::to_string(i));
      write_bytes(path, data);
      std::string outp = path + ".out";
      write_bytes(outp, {});
      FileFd in(path, O_RDONLY), out(outp, O_WRONLY);
      auto [so, ro] = transfer([&] { return from.send(Source{in.fd, 0, data.size(), {}}); },
                               [&] {
                                 Sink s;
                                 s.fd = out.fd;
                                 return to.receive(s);
                               });
      BOOST_REQUIRE_MESSAGE(!so.error && !ro.error, "transfer " << i << ": " << so.what << " / "
                                                                 << ro.what);
      BOOST_REQUIRE(read_bytes(outp) == data);
    }
    SessionStats a = sp.server->stats(), b = sp.client->stats();
    BOOST_CHECK_EQUAL(a.transfers + b.transfers, 200u);  // each transfer counted on both sides
    BOOST_CHECK_EQUAL(a.bytes_sent, b.bytes_received);
    BOOST_CHECK_EQUAL(b.bytes_sent, a.bytes_received);
    if (zc) {
      BOOST_CHECK_GT(a.zero_copy_bytes, 0u);
    } else {
      BOOST_CHECK_EQUAL(a.zero_copy_bytes + b.zero_copy_bytes, 0u);
      // pool buffers are registered once per process and then reused: the shared pool's
      // count bounds the misses of both sides together
      BOOST_CHECK_LE(a.registration_misses + b.registration_misses, 16u);
      BOOST_CHECK_GT(a.registration_hits + b.registration_hits, 100u);
    }
  }
}

BOOST_AUTO_TEST_CASE(listener_port_range) {
  SessionParams p = params({ChannelKind::Tcp, 1}, true);
  uint16_t base = tierce_test::free_port();
  Listener a("127.0.0.1", base, base, p);
  BOOST_CHECK_EQUAL(a.port(), base);
  // the only port is taken: Config
  try {
    Listener b("127.0.0.1", base, base, p);
    BOOST_FAIL("a busy port range must be refused");
  } catch (const AdtsError& e) {
    BOOST_CHECK(e.code() == AdtsError::Code::Config);
  }
}

BOOST_AUTO_TEST_CASE(bad_params_are_config_errors) {
  SessionParams p;
  p.kind = ChannelKind::ParallelTcp;
  for (unsigned n : {0u, kMaxStreams + 1}) {
    p.streams = n;
    try {
      Listener l("127.0.0.1", 0, 0, p);
      BOOST_FAIL("streams " << n << " accepted");
    } catch (const AdtsError& e) {
      BOOST_CHECK(e.code() == AdtsError::Code::Config);
    }
  }
  p.kind = ChannelKind::Tcp;
  p.streams = 2;
  BOOST_CHECK_THROW(connect("127.0.0.1", 1, p), AdtsError);
  BOOST_CHECK_EQUAL(to_string(ChannelKind::ParallelTcp), "PTCP");
}
