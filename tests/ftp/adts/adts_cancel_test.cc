// tests/ftp/adts/adts_cancel_test.cc — adts::Listener::cancel(): an accept() blocked in another
// thread returns promptly with AdtsError{Aborted} (long before its data timeout), closing the
// streams it had accepted and its listening port; cancel() before accept() makes accept() throw at
// once; cancel() after a completed accept() only closes the port.
#define BOOST_TEST_MODULE adts_cancel
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "ftp_adts/adts/wire.h"
#include "tests/ftp/adts/adts_test_util.h"

using namespace adts_test;
using namespace std::chrono_literals;
using Code = AdtsError::Code;
namespace wire = tierce::adts::wire;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kCookie = 0x0badc0ffee15600dULL;

SessionParams params(unsigned streams, Millis timeout = 30s) {
  SessionParams p;
  p.kind = streams == 1 ? ChannelKind::Tcp : ChannelKind::ParallelTcp;
  p.streams = streams;
  p.block = 64 << 10;
  p.timeout = timeout;
  p.cookie = kCookie;
  return p;
}

bool refuses(uint16_t port) {
  return connect_errno(port) == ECONNREFUSED;
}

struct AcceptResult {
  std::optional<Code> code;
  std::string what;
  bool got_session = false;
  Clock::duration took{};
};

AcceptResult run_accept(Listener& l) {
  AcceptResult ar;
  auto t0 = Clock::now();
  try {
    ar.got_session = l.accept() != nullptr;
  } catch (const AdtsError& e) {
    ar.code = e.code();
    ar.what = e.what();
  }
  ar.took = Clock::now() - t0;
  return ar;
}

}  // namespace

BOOST_AUTO_TEST_CASE(cancel_wakes_a_blocked_accept) {
  Listener l("127.0.0.1", 0, 0, params(3));
  const uint16_t port = l.port();
  // One stream is in (HELLO-ACK OK), one connected without its HELLO; the third never comes.
  RawStream in(port);
  BOOST_REQUIRE(in.fd >= 0);
  RawStream silent(port);
  BOOST_REQUIRE(silent.fd >= 0);
  AcceptResult ar;
  auto t0 = Clock::now();
  std::thread acceptor([&] { ar = run_accept(l); });
  in.hello(kCookie, 0, 3);
  BOOST_REQUIRE_EQUAL(in.ack(), 0);
  std::this_thread::sleep_for(200ms);  // accept() is blocked in its poll by now
  l.cancel();
  acceptor.join();
  auto waited = Clock::now() - t0;
  BOOST_REQUIRE(ar.code);
  BOOST_CHECK(*ar.code == Code::Aborted);
  BOOST_CHECK_EQUAL(ar.what, "data session cancelled");
  BOOST_CHECK(!ar.got_session);
  // Correctness, not speed: it returned because of cancel(), not the 30 s data timeout.
  BOOST_CHECK_MESSAGE(waited < 10s, "accept took "
                                        << std::chrono::duration_cast<Millis>(waited).count()
                                        << " ms after the start");
  // The accepted stream and the pending one were closed, and the port no longer listens.
  BOOST_CHECK(in.closed_by_peer());
  BOOST_CHECK(silent.closed_by_peer());
  BOOST_CHECK(refuses(port));
  // cancel() is idempotent; later accepts throw at once.
  l.cancel();
  AcceptResult again = run_accept(l);
  BOOST_REQUIRE(again.code);
  BOOST_CHECK(*again.code == Code::Aborted);
  BOOST_CHECK(again.took < 5s);
}

BOOST_AUTO_TEST_CASE(cancel_before_accept) {
  Listener l("127.0.0.1", 0, 0, params(1));
  const uint16_t port = l.port();
  l.cancel();
  // The port closes at once, even with no accept() ever called.
  BOOST_CHECK(refuses(port));
  AcceptResult ar = run_accept(l);
  BOOST_REQUIRE(ar.code);
  BOOST_CHECK(*ar.code == Code::Aborted);
  BOOST_CHECK_EQUAL(ar.what, "data session cancelled");
  BOOST_CHECK(ar.took < 5s);
}

BOOST_AUTO_TEST_CASE(cancel_from_many_threads_while_accepting) {
  Listener l("127.0.0.1", 0, 0, params(2));
  const uint16_t port = l.port();
  AcceptResult ar;
  std::thread acceptor([&] { ar = run_accept(l); });
  std::this_thread::sleep_for(100ms);
  std::vector<std::thread> cancellers;
  for (int i = 0; i < 4; ++i) cancellers.emplace_back([&] { l.cancel(); });
  for (auto& t : cancellers) t.join();
  acceptor.join();
  BOOST_REQUIRE(ar.code);
  BOOST_CHECK(*ar.code == Code::Aborted);
  BOOST_CHECK(ar.took < 10s);
  BOOST_CHECK(refuses(port));
}

BOOST_AUTO_TEST_CASE(cancel_after_accept_keeps_the_session) {
  SessionParams p = params(2);
  Listener l("127.0.0.1", 0, 0, p);
  const uint16_t port = l.port();
  auto fut = std::async(std::launch::async, [&] { return connect("127.0.0.1", port, p); });
  auto server = l.accept();
  auto client = fut.get();
  BOOST_REQUIRE(server);
  l.cancel();
  BOOST_CHECK(refuses(port));
  // The session is untouched: one transfer still goes through.
  std::vector<uint8_t> data = random_bytes(300000, 7);
  std::vector<uint8_t> got;
  auto sent = std::async(std::launch::async, [&] { return client->send(Source{-1, 0, 0, data}); });
  Sink sink;
  sink.memory = &got;
  BOOST_CHECK_EQUAL(server->receive(sink), data.size());
  BOOST_CHECK_EQUAL(sent.get(), data.size());
  BOOST_CHECK(got == data);
}
