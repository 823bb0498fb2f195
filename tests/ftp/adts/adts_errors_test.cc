// tests/ftp/adts/adts_errors_test.cc — ADTS under bad peers, with real sockets and a real killed
// process: ABORT keeps the session usable; wrong cookies and garbage HELLOs are refused while the
// right client still gets in; malformed blocks are Protocol errors; a killed peer is PeerClosed
// and a silent one Timeout — never a hang.
#define BOOST_TEST_MODULE adts_errors
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cstring>

#include "ftp_adts/adts/wire.h"
#include "tests/ftp/adts/adts_test_util.h"

using namespace adts_test;
using namespace std::chrono_literals;
using tierce_test::TempDir;
using Code = AdtsError::Code;
namespace wire = tierce::adts::wire;

namespace {

constexpr uint64_t kCookie = 0x1122334455667788ULL;

SessionParams params(unsigned streams = 1, Millis timeout = 10s) {
  SessionParams p;
  p.kind = streams == 1 ? ChannelKind::Tcp : ChannelKind::ParallelTcp;
  p.streams = streams;
  p.block = 64 << 10;
  p.timeout = timeout;
  p.cookie = kCookie;
  return p;
}

// A listener whose accept() runs on a thread; the log lines it produced are kept.
struct AsyncAccept {
  Listener listener;
  std::vector<std::string> log;
  std::mutex mu;
  std::future<std::unique_ptr<Session>> fut;
  explicit AsyncAccept(const SessionParams& p) : listener("127.0.0.1", 0, 0, p) {
    fut = std::async(std::launch::async, [this] {
      return listener.accept([this](const std::string& s) {
        std::lock_guard g(mu);
        log.push_back(s);
      });
    });
  }
  size_t logged(const std::string& needle) {
    std::lock_guard g(mu);
    size_t n = 0;
    for (auto& l : log) n += l.find(needle) != std::string::npos;
    return n;
  }
};

// A server session whose client is a RawStream that already did its HELLO.
struct RawPeer {
  std::unique_ptr<Session> server;
  std::unique_ptr<RawStream> raw;
  explicit RawPeer(Millis timeout = 10s) {
    AsyncAccept acc(params(1, timeout));
    raw = std::make_unique<RawStream>(acc.listener.port());
    raw->hello(kCookie);
    BOOST_REQUIRE_EQUAL(raw->ack(), 0);
    server = acc.fut.get();
  }
  Outcome receive() {
    std::vector<uint8_t> mem;
    return capture([&] {
      Sink s;
      s.memory = &mem;
      return server->receive(s);
    });
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(abort_then_next_transfer_works) {
  TempDir dir;
  for (unsigned streams : {1u, 4u}) {
    SessionPair sp = make_pair(params(streams));
    auto data = random_bytes(200000, 7);
    write_bytes(dir / "src", data);
    FileFd in(dir / "src", O_RDONLY);
    std::vector<uint8_t> got;
    // Source length past the end of the file: the sender aborts.
    auto [so, ro] = transfer([&] { return sp.client->send(Source{in.fd, 0, data.size() + 100, {}}); },
                             [&] {
                               Sink s;
                               s.memory = &got;
                               return sp.server->receive(s);
                             });
    BOOST_REQUIRE(so.error);
    BOOST_CHECK(*so.error == Code::LocalIo);
    BOOST_CHECK_MESSAGE(so.what.find("200000") != std::string::npos, so.what);
    BOOST_REQUIRE(ro.error);
    BOOST_CHECK(*ro.error == Code::Aborted);
    BOOST_CHECK(got.empty());
    BOOST_CHECK(!sp.client->broken());
    BOOST_CHECK(!sp.server->broken());
    // the session is still in step: the next transfer goes through in either direction
    for (int dir_i = 0; dir_i < 2; ++dir_i) {
      Session& from = dir_i ? *sp.server : *sp.client;
      Session& to = dir_i ? *sp.client : *sp.server;
      got.clear();
      auto [so2, ro2] = transfer([&] { return from.send(Source{in.fd, 0, data.size(), {}}); },
                                 [&] {
                                   Sink s;
                                   s.memory = &got;
                                   return to.receive(s);
                                 });
      BOOST_REQUIRE_MESSAGE(!so2.error && !ro2.error, so2.what << " / " << ro2.what);
      BOOST_CHECK(got == data);
    }
  }
}

BOOST_AUTO_TEST_CASE(wrong_cookie_refused_right_client_gets_in) {
  SessionParams p = params(4);
  AsyncAccept acc(p);
  // a whole wrong client first
  SessionParams bad = p;
  bad.cookie = kCookie ^ 1;
  try {
    connect("127.0.0.1", acc.listener.port(), bad);
    BOOST_FAIL("wrong cookie accepted");
  } catch (const AdtsError& e) {
    BOOST_CHECK(e.code() == Code::Protocol);
    BOOST_CHECK_MESSAGE(std::string(e.what()).find("cookie") != std::string::npos, e.what());
  }
  // a stream with a wrong count, and a duplicate index
  {
    RawStream r(acc.listener.port());
    r.hello(kCookie, 0, 3);
    BOOST_CHECK_EQUAL(r.ack(), int(wire::HelloStatus::BadStreamCount));
  }
  auto client = connect("127.0.0.1", acc.listener.port(), p);
  auto server = acc.fut.get();
  BOOST_CHECK_EQUAL(server->streams(), 4u);
  BOOST_CHECK_GE(acc.logged("ADT0101"), 2u);
  BOOST_CHECK_GE(acc.logged("wrong cookie"), 1u);
  // and it works
  std::vector<uint8_t> data = random_bytes(100000, 3), got;
  auto [so, ro] = transfer([&] { return client->send(Source{-1, 0, 0, data}); },
                           [&] {
                             Sink s;
                             s.memory = &got;
                             return server->receive(s);
                           });
  BOOST_REQUIRE(!so.error && !ro.error);
  BOOST_CHECK(got == data);
}

BOOST_AUTO_TEST_CASE(garbage_hello_refused_and_silent_connections_do_not_block) {
  SessionParams p = params(1);
  AsyncAccept acc(p);
  RawStream silent(acc.listener.port());  // connects and never says a word
  RawStream half(acc.listener.port());
  half.write("TADS", 4);  // a partial HELLO, then silence
  {
    RawStream g(acc.listener.port());
    g.write("GET / HTTP/1.0\r\n\r\nxxxxxx", 24);
    BOOST_CHECK_EQUAL(g.ack(), int(wire::HelloStatus::BadMagic));
  }
  {
    RawStream g(acc.listener.port());
    wire::Hello h;
    h.version = 9;
    h.cookie = kCookie;
    uint8_t b[wire::kHelloSize];
    wire::encode(h, b);
    g.write(b, sizeof b);
    BOOST_CHECK_EQUAL(g.ack(), int(wire::HelloStatus::BadVersion));
  }
  auto client = connect("127.0.0.1", acc.listener.port(), p);
  auto server = acc.fut.get();
  BOOST_CHECK(server);
  BOOST_CHECK_GE(acc.logged("bad HELLO magic"), 1u);
}

BOOST_AUTO_TEST_CASE(listener_times_out_without_clients) {
  Listener l("127.0.0.1", 0, 0, params(2, 300ms));
  RawStream one(l.port());
  one.hello(kCookie, 0, 2);  // only one of two streams comes
  try {
    l.accept();
    BOOST_FAIL("accept returned without all streams");
  } catch (const AdtsError& e) {
    BOOST_CHECK(e.code() == Code::Timeout);
    BOOST_CHECK_MESSAGE(std::string(e.what()).find("1 of 2") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(bad_block_magic_is_protocol) {
  RawPeer p;
  p.raw->header(wire::BlockType::Begin, 1, 0, 10, 0xdeadbeef);
  Outcome o = p.receive();
  BOOST_REQUIRE(o.error);
  BOOST_CHECK(*o.error == Code::Protocol);
  BOOST_CHECK_MESSAGE(o.what.find("magic") != std::string::npos, o.what);
  BOOST_CHECK(p.server->broken());
  // a broken session refuses further transfers at once
  Outcome again = p.receive();
  BOOST_CHECK(again.error && *again.error == Code::PeerClosed);
}

BOOST_AUTO_TEST_CASE(unknown_type_and_data_before_begin) {
  {
    RawPeer p;
    uint8_t b[wire::kHeaderSize];
    wire::encode(wire::Header{wire::kBlockMagic, wire::BlockType::Begin, 1, 0, 10}, b);
    b[4] = 9;
    p.raw->write(b, sizeof b);
    Outcome o = p.receive();
    BOOST_REQUIRE(o.error);
    BOOST_CHECK(*o.error == Code::Protocol);
    BOOST_CHECK_MESSAGE(o.what.find("type") != std::string::npos, o.what);
  }
  {
    RawPeer p;
    p.raw->header(wire::BlockType::Data, 1, 0, 10);
    Outcome o = p.receive();
    BOOST_REQUIRE(o.error);
    BOOST_CHECK(*o.error == Code::Protocol);
    BOOST_CHECK_MESSAGE(o.what.find("BEGIN") != std::string::npos, o.what);
  }
}

BOOST_AUTO_TEST_CASE(out_of_range_overlap_and_short_cover) {
  struct Case {
    const char* name;
    std::function<void(RawStream&)> script;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"past the end",
       [](RawStream& r) {
         r.header(wire::BlockType::Begin, 1, 0, 100);
         r.header(wire::BlockType::Data, 1, 90, 20);
       },
       "outside"},
      {"offset overflow",
       [](RawStream& r) {
         r.header(wire::BlockType::Begin, 1, 0, 100);
         r.header(wire::BlockType::Data, 1, UINT64_MAX - 5, 10);
       },
       "outside"},
      {"overlap",
       [](RawStream& r) {
         r.header(wire::BlockType::Begin, 1, 0, 100);
         r.header(wire::BlockType::Data, 1, 0, 60);
         r.payload(60);
         r.header(wire::BlockType::Data, 1, 50, 50);
       },
       "overlaps"},
      {"short cover",
       [](RawStream& r) {
         r.header(wire::BlockType::Begin, 1, 0, 100);
         r.header(wire::BlockType::Data, 1, 0, 60);
         r.payload(60);
         r.header(wire::BlockType::End, 1, 0, 0);
       },
       "60 of 100"},
      {"wrong transfer id",
       [](RawStream& r) {
         r.header(wire::BlockType::Begin, 1, 0, 100);
         r.header(wire::BlockType::Data, 2, 0, 100);
       },
       "transfer 2"},
      {"huge BEGIN for memory",
       [](RawStream& r) { r.header(wire::BlockType::Begin, 1, 0, uint64_t(1) << 62); },
       "too large"},
  };
  for (auto& c : cases) {
    BOOST_TEST_CONTEXT(c.name) {
      RawPeer p;
      c.script(*p.raw);
      Outcome o = p.receive();
      BOOST_REQUIRE(o.error);
      BOOST_CHECK(*o.error == Code::Protocol);
      BOOST_CHECK_MESSAGE(o.what.find(c.expect) != std::string::npos, o.what);
    }
  }
}

BOOST_AUTO_TEST_CASE(sink_max_length_refuses_begin) {
  RawPeer p;
  p.raw->header(wire::BlockType::Begin, 1, 0, 1000);
  std::vector<uint8_t> mem;
  Sink s;
  s.memory = &mem;
  s.max_length = 999;
  Outcome o = capture([&] { return p.server->receive(s); });
  BOOST_REQUIRE(o.error);
  BOOST_CHECK(*o.error == Code::TooLarge);
  BOOST_CHECK(mem.empty());
}

BOOST_AUTO_TEST_CASE(silent_peer_times_out) {
  // receiver side: HELLO done, then nothing
  {
    RawPeer p(300ms);
    Outcome o = p.receive();
    BOOST_REQUIRE(o.error);
    BOOST_CHECK(*o.error == Code::Timeout);
  }
  // ... or silence in the middle of a block
  {
    RawPeer p(300ms);
    p.raw->header(wire::BlockType::Begin, 1, 0, 100);
    p.raw->header(wire::BlockType::Data, 1, 0, 100);
    p.raw->payload(10);
    Outcome o = p.receive();
    BOOST_REQUIRE(o.error);
    BOOST_CHECK(*o.error == Code::Timeout);
  }
  // sender side: the receiver never reads
  {
    SessionPair sp = make_pair(params(1, 300ms));
    std::vector<uint8_t> big(64 << 20, 1);
    Outcome o = capture([&] { return sp.client->send(Source{-1, 0, 0, big}); });
    BOOST_REQUIRE(o.error);
    BOOST_CHECK(*o.error == Code::Timeout);
    BOOST_CHECK(sp.client->broken());
  }
}

BOOST_AUTO_TEST_CASE(peer_killed_mid_transfer) {
  for (unsigned streams : {1u, 4u}) {
    BOOST_TEST_CONTEXT("streams " << streams) {
      SessionParams p = params(streams, 20s);
      Listener l("127.0.0.1", 0, 0, p);
      // The child sends transfers of 256 MiB forever; it is killed once bytes arrive.
      pid_t child = ::fork();
      BOOST_REQUIRE(child >= 0);
      if (child == 0) {
        try {
          auto c = connect("127.0.0.1", l.port(), p);
          std::vector<uint8_t> big(256 << 20, 7);
          for (;;) c->send(Source{-1, 0, 0, big});
        } catch (...) {
        }
        ::_exit(0);
      }
      auto server = l.accept();
      std::vector<uint8_t> mem;
      bool killed = false;
      Outcome o = capture([&] {
        Sink s;
        s.memory = &mem;
        return server->receive(s, [&](uint64_t done, uint64_t) {
          if (done > 0 && !killed) {
            ::kill(child, SIGKILL);
            killed = true;
          }
        });
      });
      int st = 0;
      ::waitpid(child, &st, 0);
      BOOST_CHECK(killed);
      BOOST_REQUIRE(o.error);
      BOOST_CHECK_MESSAGE(*o.error == Code::PeerClosed, o.what);
      BOOST_CHECK(server->broken());
      BOOST_CHECK(mem.empty());  // a failed memory transfer leaves the sink as it was
    }
  }
}

BOOST_AUTO_TEST_CASE(sender_sees_receiver_close) {
  SessionPair sp = make_pair(params(4, 20s));
  std::vector<uint8_t> big(64 << 20, 1);
  std::thread closer([&] {
    // The receiving side drops the session while the sender is pushing 64 MiB.
    sp.server->close();
  });
  Outcome o = capture([&] { return sp.client->send(Source{-1, 0, 0, big}); });
  closer.join();
  BOOST_REQUIRE(o.error);
  BOOST_CHECK_MESSAGE(*o.error == Code::PeerClosed, o.what);
}
