// tests/ftp/adts/adts_verbs_test.cc — the verbs channel: a file round trip over rdma_cm + RC +
// SRQ with credits. Needs an RDMA device (or a soft-RoCE rxe link); without one it checks that
// Listener/connect say NoDevice with the reason, then exits 77 (skipped) printing why.
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <iostream>

#include "tests/ftp/adts/adts_test_util.h"

using namespace adts_test;
using namespace std::chrono_literals;
using tierce_test::TempDir;

namespace {
SessionParams params() {
  SessionParams p;
  p.kind = ChannelKind::Verbs;
  p.block = 256 << 10;
  p.timeout = 20s;
  p.cookie = 0xabcdef;
  return p;
}
}  // namespace

BOOST_AUTO_TEST_CASE(file_round_trip_over_verbs) {
  TempDir dir;
  SessionPair sp = make_pair(params());
  BOOST_CHECK(sp.client->kind() == ChannelKind::Verbs);
  for (size_t n : {size_t(0), size_t(1), size_t(256 << 10), size_t(10 << 20) + 3}) {
    auto data = random_bytes(n, uint32_t(n));
    write_bytes(dir / "src", data);
    write_bytes(dir / "dst", {});
    FileFd in(dir / "src", O_RDONLY), out(dir / "dst", O_WRONLY);
    auto [so, ro] = transfer([&] { return sp.client->send(Source{in.fd, 0, n, {}}); },
                             [&] {
                               Sink s;
                               s.fd = out.fd;
                               return sp.server->receive(s);
                             });
    BOOST_REQUIRE_MESSAGE(!so.error && !ro.error, so.what << " / " << ro.what);
    BOOST_CHECK(read_bytes(dir / "dst") == data);
  }
  SessionStats a = sp.client->stats(), b = sp.server->stats();
  BOOST_CHECK_GT(a.registration_hits + b.registration_hits, 0u);
}

int main(int argc, char* argv[]) {
  const auto probe = verbs_probe();
  if (!probe.ok()) {
    const std::string& why = probe.message();
    // Without a device the channel must refuse clearly, not crash or hang.
    try {
      Listener l("127.0.0.1", 0, 0, params());
      std::cerr << "adts_verbs: Listener did not refuse without a device\n";
      return 1;
    } catch (const AdtsError& e) {
      if (e.code() != AdtsError::Code::NoDevice ||
          std::string(e.what()).find("no RDMA device") == std::string::npos) {
        std::cerr << "adts_verbs: wrong error without a device: " << e.what() << "\n";
        return 1;
      }
    }
    try {
      connect("127.0.0.1", 1, params());
      std::cerr << "adts_verbs: connect did not refuse without a device\n";
      return 1;
    } catch (const AdtsError& e) {
      if (e.code() != AdtsError::Code::NoDevice) {
        std::cerr << "adts_verbs: wrong error without a device: " << e.what() << "\n";
        return 1;
      }
    }
    std::printf("adts_verbs: skipped: %s\n", why.c_str());
    return 77;
  }
  return boost::unit_test::unit_test_main([] { return true; }, argc, argv);
}
