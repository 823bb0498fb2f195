// tests/fuzz/fuzz_adts_wire.cc — fuzzes the receiving side of an ADTS data session (seed 000
// ch.9, docs/ftp.md "ADTS wire"): what a hostile or broken sender can put on the data streams
// after a good HELLO — BEGIN with any total, DATA blocks at any offset and length (overlapping,
// out of range, beyond the limit, split across two streams), END, ABORT, garbage, truncation.
// Each input runs a real tcp (or 2-stream ptcp) session on 127.0.0.1: a Listener, the streams
// connected and fed the input, closed for writing; then receive() into a memory or a file sink
// (splice or read+pwrite), transfer after transfer, until the session breaks. The receiver must
// end every transfer with its result or an AdtsError — never crash, hang, write outside the
// announced region or past Sink::max_length, or grow a memory sink beyond what arrived.
// Built twice (tests/fuzz/CMakeLists.txt): under libFuzzer (-DTIERCE_LIBFUZZER) and as a
// deterministic mutation driver in ctest:
//   fuzz_adts_wire_replay [--iterations N] [--write-seeds DIR] [FILE...]
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ftp_adts/adts/adts.h"
#include "ftp_adts/adts/wire.h"

using namespace tierce::adts;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_adts_wire: %s\n", what.c_str());
  std::abort();
}

constexpr uint64_t kCookie = 0x7469657263650001ull;
constexpr uint64_t kSmallLimit = 4096;
uint64_t g_completed = 0, g_refused = 0;  // transfers received whole / ended by an AdtsError

int scratch_file() {
  static int fd = [] {
    int f = ::memfd_create("fuzz_adts_sink", MFD_CLOEXEC);
    if (f < 0) fail("memfd_create failed");
    return f;
  }();
  if (::ftruncate(fd, 0) != 0) fail("ftruncate failed");
  return fd;
}

// A blocking TCP connection to 127.0.0.1:port that closes with a reset (no TIME_WAIT: a campaign
// makes millions of them). The connect has a deadline: a handshake that does not complete is a
// harness failure with its likely cause, not a hang in send() on a still-connecting socket (seen:
// the host's nf_conntrack table full — "table full, dropping packet" in dmesg — after ~100 s of
// ~2 000 connections a second; tools/fuzz-campaign.sh runs the fuzzers in a namespace of their own).
int connect_stream(uint16_t port) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) fail("socket failed");
  linger l{1, 0};
  ::setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (errno != EINPROGRESS && errno != EINTR)
      fail(std::string("connect failed: ") + std::strerror(errno));
    // libFuzzer's alarm may interrupt the poll: go on until the deadline.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    int n = 0;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      until - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0) break;
      pollfd pfd{s, POLLOUT, 0};
      n = ::poll(&pfd, 1, int(left));
      if (n >= 0 || errno != EINTR) break;
    }
    if (n <= 0)
      fail("no TCP handshake with the listener on 127.0.0.1 within 10 s: is the host's "
           "nf_conntrack table full (dmesg)? Run the fuzzer in a network namespace of its own");
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) fail(std::string("connect failed: ") + std::strerror(err));
  }
  int flags = ::fcntl(s, F_GETFL);
  if (flags < 0 || ::fcntl(s, F_SETFL, flags & ~O_NONBLOCK) != 0) fail("fcntl failed");
  return s;
}

void send_everything(int s, const uint8_t* p, size_t n) {
  while (n) {
    ssize_t w = ::send(s, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail(std::string("send failed: ") + std::strerror(errno));
    p += w;
    n -= size_t(w);
  }
}

}  // namespace

// Byte 0: bit 0 = two streams (ptcp), bit 1 = file sink, bit 2 = a 4 KiB limit, bit 3 = no
// splice. Two streams: byte 1 says where the rest splits between them. The rest: what follows
// each stream's (valid) HELLO.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 65536) return 0;
  const uint8_t ctl = data[0];
  const unsigned streams = (ctl & 1) ? 2 : 1;
  const bool to_file = ctl & 2, limited = ctl & 4;
  const uint8_t* rest = data + 1;
  size_t rest_n = size - 1;
  // The decoders alone, on the raw bytes (they must refuse, not crash, whatever the magic).
  if (rest_n >= wire::kHeaderSize) {
    try {
      (void)wire::decode_header(rest);
    } catch (const AdtsError&) {
    }
  }
  if (rest_n >= wire::kHelloSize) (void)wire::decode_hello(rest);

  size_t split = rest_n;
  if (streams == 2 && rest_n) {
    split = size_t(rest[0]) * (rest_n - 1) / 255;
    ++rest;
    --rest_n;
    if (split > rest_n) split = rest_n;
  }

  SessionParams p;
  p.kind = streams == 2 ? ChannelKind::ParallelTcp : ChannelKind::Tcp;
  p.streams = streams;
  p.block = 64 * 1024;
  p.zero_copy = !(ctl & 8);
  p.timeout = Millis(5000);  // everything was sent before receive(): EOF ends any wait
  p.cookie = kCookie;
  p.allowed_peer = "127.0.0.1";
  Listener listener("127.0.0.1", 0, 0, p);

  std::vector<int> socks;
  for (unsigned i = 0; i < streams; ++i) {
    int s = connect_stream(listener.port());
    wire::Hello h;
    h.index = uint16_t(i);
    h.streams = uint16_t(streams);
    h.cookie = kCookie;
    uint8_t hb[wire::kHelloSize];
    wire::encode(h, hb);
    send_everything(s, hb, sizeof hb);
    if (i == 0)
      send_everything(s, rest, split);
    else
      send_everything(s, rest + split, rest_n - split);
    ::shutdown(s, SHUT_WR);
    socks.push_back(s);
  }
  auto session = listener.accept();
  if (!session) fail("accept returned no session");

  const uint64_t limit = limited ? kSmallLimit : UINT64_MAX;
  for (int transfer = 0; transfer < 8 && !session->broken(); ++transfer) {
    std::vector<uint8_t> memory;
    Sink sink;
    sink.max_length = limit;
    int file = -1;
    if (to_file) {
      file = scratch_file();
      sink.fd = file;
    } else {
      sink.memory = &memory;
    }
    uint64_t total = 0;
    bool done = false;
    try {
      total = session->receive(sink);
      done = true;
      ++g_completed;
    } catch (const AdtsError& e) {
      ++g_refused;
      if (e.code() == AdtsError::Code::Timeout) fail(std::string("receive timed out: ") + e.what());
      if (e.code() == AdtsError::Code::LocalIo || e.code() == AdtsError::Code::Config)
        fail(std::string("a local error from peer bytes: ") + e.what());
    }
    uint64_t stored = 0;
    if (to_file) {
      struct stat st{};
      if (::fstat(file, &st) != 0) fail("fstat failed");
      stored = uint64_t(st.st_size);
    } else {
      stored = memory.size();
    }
    if (stored > limit) fail("more than Sink::max_length was written");
    if (done && stored != total) fail("a completed transfer's size differs from what was stored");
    if (!done && stored > rest_n) fail("the sink holds more than the peer sent");
    if (!done && !session->broken() && transfer > 6) break;
  }
  for (int s : socks) ::close(s);  // reset, before our side closes
  session->close();
  return 0;
}

#ifndef TIERCE_LIBFUZZER
// ---- deterministic replay driver (any compiler; in ctest) ---------------------------------------
#include "replay_args.h"

static std::vector<std::vector<uint8_t>> seeds() {
  std::vector<std::vector<uint8_t>> out;
  auto block = [](std::vector<uint8_t>& v, wire::BlockType t, uint64_t id, uint64_t off,
                  uint64_t len) {
    uint8_t h[wire::kHeaderSize];
    wire::encode(wire::Header{wire::kBlockMagic, t, id, off, len}, h);
    v.insert(v.end(), h, h + sizeof h);
  };
  auto data = [](std::vector<uint8_t>& v, size_t n) {
    for (size_t i = 0; i < n; ++i) v.push_back(uint8_t('a' + i % 26));
  };
  for (uint8_t ctl : {0, 2, 4, 6, 8}) {
    std::vector<uint8_t> v{ctl};
    block(v, wire::BlockType::Begin, 1, 0, 100);
    block(v, wire::BlockType::Data, 1, 0, 60);
    data(v, 60);
    block(v, wire::BlockType::Data, 1, 60, 40);
    data(v, 40);
    block(v, wire::BlockType::End, 1, 0, 100);
    block(v, wire::BlockType::Begin, 2, 0, 0);
    block(v, wire::BlockType::End, 2, 0, 0);
    block(v, wire::BlockType::Begin, 3, 0, 5000);
    block(v, wire::BlockType::Abort, 3, 0, 0);
    out.push_back(v);
  }
  {  // two streams: stream 0 carries BEGIN + the first block, stream 1 the second + END
    std::vector<uint8_t> s0, s1;
    block(s0, wire::BlockType::Begin, 1, 0, 64);
    block(s0, wire::BlockType::Data, 1, 0, 32);
    data(s0, 32);
    block(s1, wire::BlockType::Data, 1, 32, 32);
    data(s1, 32);
    block(s1, wire::BlockType::End, 1, 0, 64);
    for (uint8_t ctl : {1, 3}) {
      std::vector<uint8_t> v{ctl, 0};
      v.insert(v.end(), s0.begin(), s0.end());
      v.insert(v.end(), s1.begin(), s1.end());
      // byte 1 = split point as a fraction of the bytes after it
      const size_t total = s0.size() + s1.size();
      v[1] = uint8_t((s0.size() * 255 + total - 1) / total);
      out.push_back(v);
    }
  }
  {  // announces a huge total and sends little
    std::vector<uint8_t> v{0};
    block(v, wire::BlockType::Begin, 9, 0, uint64_t(1) << 40);
    block(v, wire::BlockType::Data, 9, (uint64_t(1) << 40) - 8, 8);
    data(v, 8);
    out.push_back(v);
  }
  return out;
}

int main(int argc, char** argv) {
  int rc = tierce_fuzz::replay_main(argc, argv, "fuzz_adts_wire", 20000, seeds(), 20261126);
  std::printf("fuzz_adts_wire_replay: %llu transfers received whole, %llu ended by an error\n",
              (unsigned long long)g_completed, (unsigned long long)g_refused);
  if (rc == 0 && (g_completed > 0) != (g_refused > 0)) {  // (neither: --write-seeds)
    std::fprintf(stderr, "fuzz_adts_wire_replay: the inputs never completed or never failed\n");
    return 1;
  }
  return rc;
}
#endif  // TIERCE_LIBFUZZER
