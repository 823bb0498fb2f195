// tests/ftp/adts/adts_plain_test.cc — send_file/receive_file on plain data connections (RFC 959
// stream mode): byte-exact over loopback with offsets, blocking and non-blocking sockets, splice
// and copy receive (progress asked at most once per MiB), a silent peer times out, a short file
// is LocalIo.
#define BOOST_TEST_MODULE adts_plain
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <sys/socket.h>

#include "tests/ftp/adts/adts_test_util.h"

using namespace adts_test;
using namespace std::chrono_literals;
using tierce_test::TempDir;

namespace {
struct SockPair {
  int a = -1, b = -1;
  SockPair() {
    int sv[2];
    // a real TCP connection: socketpair(AF_UNIX) would not exercise the same splice paths
    int l = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(l, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(l, 1);
    socklen_t len = sizeof addr;
    ::getsockname(l, reinterpret_cast<sockaddr*>(&addr), &len);
    sv[0] = ::socket(AF_INET, SOCK_STREAM, 0);
    BOOST_REQUIRE_EQUAL(::connect(sv[0], reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    sv[1] = ::accept(l, nullptr, nullptr);
    ::close(l);
    a = sv[0];
    b = sv[1];
  }
  ~SockPair() {
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
  }
};
}  // namespace

BOOST_AUTO_TEST_CASE(round_trip_with_offsets) {
  TempDir dir;
  for (bool splice : {true, false})
  for (bool nonblocking : {false, true})
    for (size_t n : {size_t(0), size_t(1), size_t(65535), size_t(5 << 20) + 11}) {
      BOOST_TEST_CONTEXT("size " << n << " nonblocking " << nonblocking << " splice " << splice) {
        auto data = random_bytes(n + 100, uint32_t(n));
        write_bytes(dir / "src", data);
        write_bytes(dir / "dst", std::vector<uint8_t>(7, 'k'));
        SockPair sp;
        if (nonblocking) {
          ::fcntl(sp.a, F_SETFL, O_NONBLOCK);
          ::fcntl(sp.b, F_SETFL, O_NONBLOCK);
        }
        FileFd in(dir / "src", O_RDONLY), out(dir / "dst", O_WRONLY);
        Outcome so;
        std::thread t([&] {
          so = capture([&] { return send_file(sp.a, in.fd, 100, n, 10s); });
          ::shutdown(sp.a, SHUT_WR);  // EOF ends the receive, as closing a data connection does
        });
        PlainOptions po;
        po.receive_by_splice = splice;
        uint64_t copied = 0, asked = 0, last = 0;
        po.copied = &copied;
        po.on_chunk = [&](uint64_t done) {
          ++asked;
          last = done;
          return true;
        };
        Outcome ro = capture([&] { return receive_file(sp.b, out.fd, 7, 10s, po); });
        t.join();
        // copy: every byte through the buffer; splice: none. on_chunk at most once per MiB moved.
        BOOST_CHECK_EQUAL(copied, splice ? 0 : n);
        BOOST_CHECK_LE(asked, n >> 20);
        if (n >= (2u << 20)) BOOST_CHECK_GE(asked, 1u);
        if (asked) BOOST_CHECK_GE(last, asked << 20);
        BOOST_REQUIRE_MESSAGE(!so.error && !ro.error, so.what << " / " << ro.what);
        BOOST_CHECK_EQUAL(so.bytes, n);
        BOOST_CHECK_EQUAL(ro.bytes, n);
        auto got = read_bytes(dir / "dst");
        BOOST_REQUIRE_EQUAL(got.size(), n + 7);
        BOOST_CHECK(std::equal(data.begin() + 100, data.end(), got.begin() + 7));
      }
    }
}

BOOST_AUTO_TEST_CASE(silent_peer_and_short_file) {
  TempDir dir;
  write_bytes(dir / "f", random_bytes(1000, 1));
  {
    SockPair sp;
    FileFd out(dir / "f", O_WRONLY);
    Outcome o = capture([&] { return receive_file(sp.b, out.fd, 0, 200ms); });
    BOOST_REQUIRE(o.error);
    BOOST_CHECK(*o.error == AdtsError::Code::Timeout);
  }
  {
    SockPair sp;
    FileFd in(dir / "f", O_RDONLY);
    std::thread drain([&] {
      char b[4096];
      while (::recv(sp.b, b, sizeof b, 0) > 0) {
      }
    });
    Outcome o = capture([&] { return send_file(sp.a, in.fd, 0, 5000, 5s); });
    ::shutdown(sp.a, SHUT_RDWR);
    drain.join();
    BOOST_REQUIRE(o.error);
    BOOST_CHECK(*o.error == AdtsError::Code::LocalIo);
  }
  {
    // nobody reads: the sender times out once the socket buffers are full
    SockPair sp;
    std::vector<uint8_t> big(64 << 20, 3);
    write_bytes(dir / "big", big);
    FileFd in(dir / "big", O_RDONLY);
    Outcome o = capture([&] { return send_file(sp.a, in.fd, 0, big.size(), 200ms); });
    BOOST_REQUIRE(o.error);
    BOOST_CHECK(*o.error == AdtsError::Code::Timeout);
  }
  {
    // the receiver closes: PeerClosed
    SockPair sp;
    FileFd in(dir / "big", O_RDONLY);
    ::close(sp.b);
    sp.b = -1;
    Outcome o = capture([&] { return send_file(sp.a, in.fd, 0, 64 << 20, 5s); });
    BOOST_REQUIRE(o.error);
    BOOST_CHECK(*o.error == AdtsError::Code::PeerClosed);
  }
}

// The receiver asks to be woken per 512 KiB queued (SO_RCVLOWAT). A sender that trickles a few bytes
// at a time, with gaps longer than the receive timeout's share of a batch, is still progress: what
// arrived is read every slice, so the move ends at EOF with every byte and no Timeout. And the
// socket's low-water mark is back to 1 afterwards.
BOOST_AUTO_TEST_CASE(trickling_sender_is_progress) {
  TempDir dir;
  for (bool splice : {true, false}) {
    BOOST_TEST_CONTEXT("splice " << splice) {
      write_bytes(dir / "dst", {});
      SockPair sp;
      std::vector<uint8_t> sent;
      std::thread t([&] {
        for (int i = 0; i < 8; ++i) {
          auto piece = random_bytes(100, uint32_t(i + 1));
          BOOST_CHECK_EQUAL(::send(sp.a, piece.data(), piece.size(), MSG_NOSIGNAL), 100);
          sent.insert(sent.end(), piece.begin(), piece.end());
          std::this_thread::sleep_for(150ms);  // 8 x 150 ms: twice the 600 ms no-progress timeout
        }
        ::shutdown(sp.a, SHUT_WR);
      });
      FileFd out(dir / "dst", O_WRONLY);
      PlainOptions po;
      po.receive_by_splice = splice;
      Outcome ro = capture([&] { return receive_file(sp.b, out.fd, 0, 600ms, po); });
      t.join();
      BOOST_REQUIRE_MESSAGE(!ro.error, ro.what);
      BOOST_CHECK_EQUAL(ro.bytes, 800u);
      BOOST_CHECK(read_bytes(dir / "dst") == sent);
      int lowat = 0;
      socklen_t len = sizeof lowat;
      BOOST_REQUIRE_EQUAL(::getsockopt(sp.b, SOL_SOCKET, SO_RCVLOWAT, &lowat, &len), 0);
      BOOST_CHECK_EQUAL(lowat, 1);
    }
  }
}
