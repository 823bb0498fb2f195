// tests/ftp/adts/adts_order_test.cc — the receiver's write order and transfer ids (docs/ftp.md
// "ADTS wire format"): a file sink always holds exactly a prefix of the transfer, even when the
// receiving process is SIGKILLed in the middle of a parallel-TCP transfer (what REST resumes
// from); a stream that sends a lower offset after a higher one is a Protocol error at once, not a
// hang; ABORT keeps the prefix written; BEGIN ids go 1, 2, 3, ... per session.
#define BOOST_TEST_MODULE adts_order
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "ftp_adts/adts/wire.h"
#include "tests/ftp/adts/adts_test_util.h"

using namespace adts_test;
using namespace std::chrono_literals;
using tierce_test::TempDir;
using Code = AdtsError::Code;
namespace wire = tierce::adts::wire;

namespace {

constexpr uint64_t kCookie = 0x0dd0c0ffee123456ULL;

SessionParams params(unsigned streams, Millis timeout = 20s, size_t block = 1 << 20,
                     bool zero_copy = true) {
  SessionParams p;
  p.kind = streams == 1 ? ChannelKind::Tcp : ChannelKind::ParallelTcp;
  p.streams = streams;
  p.block = block;
  p.zero_copy = zero_copy;
  p.timeout = timeout;
  p.cookie = kCookie;
  return p;
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
}

// A server session whose `streams` clients are RawStreams that did their HELLO.
struct RawPeer {
  std::unique_ptr<Session> server;
  std::vector<std::unique_ptr<RawStream>> raw;
  explicit RawPeer(unsigned streams, Millis timeout = 20s) {
    Listener l("127.0.0.1", 0, 0, params(streams, timeout, 64 << 10));
    auto fut = std::async(std::launch::async, [&] { return l.accept(); });
    for (unsigned i = 0; i < streams; ++i) {
      raw.push_back(std::make_unique<RawStream>(l.port()));
      raw.back()->hello(kCookie, uint16_t(i), uint16_t(streams));
      BOOST_REQUIRE_EQUAL(raw.back()->ack(), 0);
    }
    server = fut.get();
  }
  RawStream& operator[](unsigned i) { return *raw[i]; }
};

// Source file of `n` bytes: a different random MiB at every MiB, so a misplaced block shows.
void make_source(const std::string& path, size_t n) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  BOOST_REQUIRE(fd >= 0);
  for (size_t off = 0; off < n; off += 1 << 20) {
    auto chunk = random_bytes(std::min<size_t>(1 << 20, n - off), uint32_t(off >> 20) + 1);
    BOOST_REQUIRE_EQUAL(::pwrite(fd, chunk.data(), chunk.size(), off_t(off)), ssize_t(chunk.size()));
  }
  ::close(fd);
}

// Whether `dst` is byte for byte the first size(dst) bytes of `src`; says where it is not.
bool is_prefix(const std::string& src, const std::string& dst, std::string* why) {
  std::vector<uint8_t> a = read_bytes(src), b = read_bytes(dst);
  if (b.size() > a.size()) {
    *why = "destination has " + std::to_string(b.size()) + " bytes, source " +
           std::to_string(a.size());
    return false;
  }
  auto [pa, pb] = std::mismatch(b.begin(), b.end(), a.begin());
  if (pa != b.end()) {
    size_t at = size_t(pa - b.begin());
    size_t zeros = 0;
    while (at + zeros < b.size() && b[at + zeros] == 0) ++zeros;
    *why = "destination of " + std::to_string(b.size()) + " bytes differs from the source at " +
           std::to_string(at) + " (" + std::to_string(zeros) + " zero bytes there: a hole)";
    return false;
  }
  return true;
}

// The receiver (a forked child) writes a PTCP transfer into a file and is SIGKILLed once part of
// it is on disk; the file must be exactly a prefix of the source.
void killed_receiver_leaves_prefix(unsigned streams, bool zero_copy) {
  TempDir dir;
  const size_t total = size_t(160) << 20;
  const uint64_t kill_at = uint64_t(24) << 20;
  std::string src = dir / "src", dst = dir / "dst";
  make_source(src, total);
  write_bytes(dst, {});
  SessionParams p = params(streams, 20s, 1 << 20, zero_copy);
  Listener l("127.0.0.1", 0, 0, p);
  pid_t child = ::fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {
    try {
      auto server = l.accept();
      int fd = ::open(dst.c_str(), O_WRONLY | O_CLOEXEC);
      Sink s;
      s.fd = fd;
      server->receive(s);
    } catch (...) {
    }
    ::_exit(0);
  }
  auto client = connect("127.0.0.1", l.port(), p);
  FileFd in(src, O_RDONLY);
  Outcome so;
  std::thread sender([&] { so = capture([&] { return client->send(Source{in.fd, 0, total, {}}); }); });
  bool killed = false, exited = false;
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (file_size(dst) >= kill_at) {
      ::kill(child, SIGKILL);
      killed = true;
      break;
    }
    int st = 0;
    if (::waitpid(child, &st, WNOHANG) == child) {
      exited = true;
      break;
    }
    std::this_thread::sleep_for(100us);
  }
  if (!killed && !exited) ::kill(child, SIGKILL);
  if (!exited) ::waitpid(child, nullptr, 0);
  sender.join();
  client->close();
  BOOST_CHECK_MESSAGE(killed, "the receiver was killed mid-transfer");
  uint64_t size = file_size(dst);
  BOOST_TEST_MESSAGE("streams " << streams << (zero_copy ? " zero-copy" : " pipelined")
                                << ": killed with " << size << " of " << total
                                << " bytes in the file");
  BOOST_CHECK_GE(size, kill_at);
  BOOST_CHECK_LT(size, total);
  if (killed) BOOST_CHECK_MESSAGE(so.error, "the sender saw the receiver die");
  std::string why;
  BOOST_CHECK_MESSAGE(is_prefix(src, dst, &why), why);
}

}  // namespace

BOOST_AUTO_TEST_CASE(ptcp_receiver_killed_leaves_exact_prefix) {
  for (unsigned streams : {4u, 8u})
    BOOST_TEST_CONTEXT("streams " << streams << " zero copy") {
      killed_receiver_leaves_prefix(streams, true);
    }
  BOOST_TEST_CONTEXT("streams 4 pipelined") { killed_receiver_leaves_prefix(4, false); }
}

BOOST_AUTO_TEST_CASE(lower_offset_after_higher_is_protocol_not_hang) {
  TempDir dir;
  constexpr size_t B = 16 << 10;
  struct Case {
    const char* name;
    unsigned streams;
    std::function<void(RawPeer&)> script;
  };
  std::vector<Case> cases = {
      // one stream: offset B, then 0
      {"one stream", 1,
       [](RawPeer& r) {
         r[0].header(wire::BlockType::Begin, 1, 0, 3 * B);
         r[0].data(1, B, B, 'b');
         r[0].data(1, 0, B, 'a');
       }},
      // stream 0 sends B then 0; stream 1 sends 2B and ends
      {"other stream ended", 2,
       [](RawPeer& r) {
         r[0].header(wire::BlockType::Begin, 1, 0, 3 * B);
         r[0].data(1, B, B, 'b');
         r[0].data(1, 0, B, 'a');
         r[1].data(1, 2 * B, B, 'c');
         r[1].header(wire::BlockType::End, 1, 0, 0);
       }},
      // stream 0 sends B then 0; stream 1 sends 2B, 3B: both wait, neither holds offset 0
      {"both streams waiting", 2,
       [](RawPeer& r) {
         r[0].header(wire::BlockType::Begin, 1, 0, 4 * B);
         r[0].data(1, B, B, 'b');
         r[0].data(1, 0, B, 'a');
         r[1].data(1, 2 * B, B, 'c');
         r[1].data(1, 3 * B, B, 'd');
       }},
      // four streams, the first block goes first, then stream 3 sends 3B before 1B
      {"four streams", 4,
       [](RawPeer& r) {
         r[0].header(wire::BlockType::Begin, 1, 0, 6 * B);
         r[0].data(1, 0, B, 'a');
         r[0].header(wire::BlockType::End, 1, 0, 0);
         r[3].data(1, 3 * B, B, 'd');
         r[3].data(1, B, B, 'b');
         r[2].data(1, 4 * B, B, 'e');
         r[1].data(1, 5 * B, B, 'f');
       }},
  };
  for (auto& c : cases)
    for (bool to_file : {true, false})
      BOOST_TEST_CONTEXT(c.name << (to_file ? ", file sink" : ", memory sink")) {
        RawPeer peer(c.streams, 20s);
        c.script(peer);
        std::string path = dir / "out";
        write_bytes(path, {});
        FileFd out(path, O_WRONLY);
        std::vector<uint8_t> mem;
        auto t0 = std::chrono::steady_clock::now();
        Outcome o = capture([&] {
          Sink s;
          if (to_file) s.fd = out.fd;
          else s.memory = &mem;
          return peer.server->receive(s);
        });
        auto took = std::chrono::steady_clock::now() - t0;
        BOOST_REQUIRE(o.error);
        BOOST_CHECK_MESSAGE(*o.error == Code::Protocol, o.what);
        BOOST_CHECK_MESSAGE(o.what.find("out of order") != std::string::npos, o.what);
        BOOST_CHECK_MESSAGE(took < 5s, "took " << std::chrono::duration_cast<Millis>(took).count()
                                               << " ms (a wait for the 20 s timeout?)");
        BOOST_CHECK(peer.server->broken());
        if (to_file) {
          // what is there is a prefix: nothing, or the first block
          std::vector<uint8_t> got = read_bytes(path);
          BOOST_CHECK_MESSAGE(got.size() == 0 || got == std::vector<uint8_t>(B, 'a'),
                              "file of " << got.size() << " bytes");
        }
      }
}

BOOST_AUTO_TEST_CASE(in_order_blocks_across_streams_in_any_arrival_order) {
  // Each stream increasing, the streams' blocks arriving in a scrambled global order: the
  // receiver waits for its turn and writes everything in order.
  TempDir dir;
  constexpr size_t B = 16 << 10;
  RawPeer r(3);
  r[0].header(wire::BlockType::Begin, 1, 0, 6 * B);
  r[2].data(1, 2 * B, B, 'c');
  r[2].data(1, 5 * B, B, 'f');
  r[2].header(wire::BlockType::End, 1, 0, 0);
  r[1].data(1, B, B, 'b');
  r[1].data(1, 4 * B, B, 'e');
  r[1].header(wire::BlockType::End, 1, 0, 0);
  r[0].data(1, 0, B, 'a');
  r[0].data(1, 3 * B, B, 'd');
  r[0].header(wire::BlockType::End, 1, 0, 0);
  std::string path = dir / "out";
  write_bytes(path, {});
  FileFd out(path, O_WRONLY);
  Outcome o = capture([&] {
    Sink s;
    s.fd = out.fd;
    return r.server->receive(s);
  });
  BOOST_REQUIRE_MESSAGE(!o.error, o.what);
  std::vector<uint8_t> want;
  for (char c : std::string("abcdef")) want.insert(want.end(), B, uint8_t(c));
  BOOST_CHECK(read_bytes(path) == want);
}

BOOST_AUTO_TEST_CASE(abort_keeps_the_prefix_written) {
  TempDir dir;
  for (unsigned streams : {1u, 2u})
    BOOST_TEST_CONTEXT("streams " << streams) {
      RawPeer r(streams);
      r[0].header(wire::BlockType::Begin, 1, 0, 100);
      r[0].data(1, 0, 50, 'I');
      for (unsigned i = 0; i < streams; ++i) r[i].header(wire::BlockType::Abort, 1, 0, 0);
      std::string path = dir / "out";
      write_bytes(path, {});
      FileFd out(path, O_WRONLY);
      Outcome o = capture([&] {
        Sink s;
        s.fd = out.fd;
        return r.server->receive(s);
      });
      BOOST_REQUIRE(o.error);
      BOOST_CHECK_MESSAGE(*o.error == Code::Aborted, o.what);
      BOOST_CHECK(!r.server->broken());
      BOOST_CHECK(read_bytes(path) == std::vector<uint8_t>(50, 'I'));
      // the session goes on with transfer 2
      r[0].header(wire::BlockType::Begin, 2, 0, 10);
      r[0].data(2, 0, 10, 'J');
      for (unsigned i = 0; i < streams; ++i) r[i].header(wire::BlockType::End, 2, 0, 0);
      std::vector<uint8_t> mem;
      Outcome o2 = capture([&] {
        Sink s;
        s.memory = &mem;
        return r.server->receive(s);
      });
      BOOST_CHECK_MESSAGE(!o2.error, o2.what);
      BOOST_CHECK(mem == std::vector<uint8_t>(10, 'J'));
    }
}

BOOST_AUTO_TEST_CASE(begin_with_a_wrong_id_is_protocol) {
  struct Case {
    const char* name;
    unsigned good;  // transfers 1..good go through first
    uint64_t id;    // then a BEGIN with this id
  };
  for (Case c : {Case{"7 first", 0, 7}, Case{"0 first", 0, 0}, Case{"2 first", 0, 2},
                 Case{"1 again", 1, 1}, Case{"skips 3", 2, 4}})
    BOOST_TEST_CONTEXT(c.name) {
      RawPeer r(1);
      for (unsigned t = 1; t <= c.good; ++t) {
        r[0].header(wire::BlockType::Begin, t, 0, 10);
        r[0].data(t, 0, 10, 'x');
        r[0].header(wire::BlockType::End, t, 0, 0);
        std::vector<uint8_t> mem;
        Outcome ok = capture([&] {
          Sink s;
          s.memory = &mem;
          return r.server->receive(s);
        });
        BOOST_REQUIRE_MESSAGE(!ok.error, ok.what);
      }
      r[0].header(wire::BlockType::Begin, c.id, 0, 10);
      std::vector<uint8_t> mem;
      Outcome o = capture([&] {
        Sink s;
        s.memory = &mem;
        return r.server->receive(s);
      });
      BOOST_REQUIRE(o.error);
      BOOST_CHECK_MESSAGE(*o.error == Code::Protocol, o.what);
      std::string want = "BEGIN of transfer " + std::to_string(c.id) + ", expected transfer " +
                         std::to_string(c.good + 1);
      BOOST_CHECK_MESSAGE(o.what.find(want) != std::string::npos, o.what);
      BOOST_CHECK(r.server->broken());
    }
}

BOOST_AUTO_TEST_CASE(sender_numbers_transfers_from_one) {
  // A raw server stream in front of a real connect(): the BEGINs it sees carry 1, 2, 3.
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_REQUIRE_EQUAL(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  BOOST_REQUIRE_EQUAL(::listen(lfd, 4), 0);
  socklen_t len = sizeof a;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  auto fut = std::async(std::launch::async,
                        [&] { return connect("127.0.0.1", ntohs(a.sin_port), params(1)); });
  RawStream srv(::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC));
  ::close(lfd);
  uint8_t hello[wire::kHelloSize];
  srv.read(hello, sizeof hello);
  uint8_t ack[wire::kAckSize];
  wire::put_u32(ack, wire::kAckMagic);
  wire::put_u32(ack + 4, 0);
  srv.write(ack, sizeof ack);
  auto client = fut.get();
  std::vector<uint8_t> bytes(10, 'q');
  for (uint64_t want = 1; want <= 3; ++want) {
    client->send(Source{-1, 0, 0, bytes});  // small: fits the socket buffers
    uint8_t h[wire::kHeaderSize];
    srv.read(h, sizeof h);
    wire::Header begin = wire::decode_header(h);
    BOOST_CHECK(begin.type == wire::BlockType::Begin);
    BOOST_CHECK_EQUAL(begin.transfer_id, want);
    srv.read(h, sizeof h);
    BOOST_CHECK_EQUAL(wire::decode_header(h).transfer_id, want);  // DATA
    uint8_t payload[10];
    srv.read(payload, sizeof payload);
    srv.read(h, sizeof h);
    BOOST_CHECK(wire::decode_header(h).type == wire::BlockType::End);
    BOOST_CHECK_EQUAL(wire::decode_header(h).transfer_id, want);
  }
}
