// tests/fuzz/fuzz_fabric_handshake.cc — fuzzes a fabric tcp connection end to end, around what
// fuzz_wire (the responder alone) cannot reach: the server's HELLO/AUTH handshake with its
// pre-auth frame limit, the frame reader, frame protection (MAC / encryption: tags checked before
// anything is applied) and the reply path; and the client's half of the handshake against a
// hostile server. Each input runs serve_stream_connection() — the function every accepted tcp
// connection runs — over a socket pair:
//   mode 0  the input is the first thing the server reads (an unauthenticated peer);
//   mode 1  a real client authenticates, then the input follows as raw bytes (injected frames:
//           under mac/encrypt every one must fail its tag);
//   mode 2  a real client authenticates, then the input is cut into frames (48-byte header +
//           the payload its length says) that the client seals with the session's keys (an
//           authenticated but hostile peer);
//   mode 3  the input plays the server: its first frame is the HELLO and its second the AUTH_OK
//           that ClientHandshake checks (a hostile or impostor server).
// The server must end the connection cleanly every time (it never throws), never crash or hang;
// the client must accept nothing but a FabricError.
// Built twice (tests/fuzz/CMakeLists.txt): under libFuzzer (-DTIERCE_LIBFUZZER) and as a
// deterministic mutation driver in ctest:
//   fuzz_fabric_handshake_replay [--iterations N] [--write-seeds DIR] [FILE...]
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "fabric/auth.h"
#include "fabric/protect.h"
#include "fabric/stream_transport.h"
#include "fabric/wire.h"
#include "fabric_world.h"

using namespace tierce::fabric;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_fabric_handshake: %s\n", what.c_str());
  std::abort();
}

struct World : tierce_fuzz::FabricWorld {
  Secret secret{std::string(32, 'k')};
  World() : FabricWorld("fuzzhs") {}
};

World& world() {
  static World w;
  return w;
}

// The server's last log line (for a failure message). Written by the server's thread, read by
// the client's: under a mutex.
std::mutex log_mu;
std::string& last_server_log() {
  static std::string line;
  return line;
}
void note_server_log(std::string_view line) {
  std::lock_guard g(log_mu);
  last_server_log() = std::string(line);
}
std::string server_log_line() {
  std::lock_guard g(log_mu);
  return last_server_log();
}

void write_all(int fd, const uint8_t* p, size_t n) {
  while (n) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;  // libFuzzer's -timeout alarm
    if (w <= 0) return;  // the server closed: what it did not read does not matter
    p += w;
    n -= size_t(w);
  }
}

void drain(int fd) {
  uint8_t buf[16384];
  for (;;) {
    ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;
  }
}

// The input cut into frames: header, then the payload its length names (as much as is there).
std::vector<std::pair<wire::Header, std::vector<uint8_t>>> frames_of(std::span<const uint8_t> in) {
  std::vector<std::pair<wire::Header, std::vector<uint8_t>>> out;
  while (in.size() >= wire::kHeaderSize && out.size() < 64) {
    auto h = wire::decode_header(in.first(wire::kHeaderSize));
    if (!h) break;
    in = in.subspan(wire::kHeaderSize);
    size_t n = std::min<size_t>(h->length, in.size());
    h->length = uint32_t(n);
    out.emplace_back(*h, std::vector<uint8_t>(in.begin(), in.begin() + long(n)));
    in = in.subspan(n);
  }
  return out;
}

void hostile_server(std::span<const uint8_t> in) {
  World& w = world();
  auto fr = frames_of(in);
  ClientHandshake hs(w.secret, fr.empty() ? Protection::None : Protection(fr[0].first.a1 % 3));
  try {
    if (fr.empty()) return;
    (void)hs.answer_hello(fr[0].first, fr[0].second);
    if (fr.size() < 2) return;
    hs.check_answer(fr[1].first, fr[1].second);
  } catch (const FabricError&) {
    return;
  }
  // Accepted: only possible with the secret's proof, which the input cannot forge.
  fail("the client accepted a server that did not prove the secret");
}

}  // namespace

// Byte 0: bits 0-1 the mode, bits 2-3 the server's protection (none, mac, encrypt).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 65536) return 0;
  World& w = world();
  const unsigned mode = data[0] & 3;
  const Protection prot = Protection(((data[0] >> 2) & 3) % 3);
  std::span<const uint8_t> in(data + 1, size - 1);
  if (mode == 3) {
    hostile_server(in);
    return 0;
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) fail("socketpair failed");
  ServerOptions o;
  o.name = "fuzz-server";
  o.secret = w.secret;
  o.protection = prot;
  // Longer than libFuzzer's -timeout (30 s), so that only a real hang ends a run: a campaign at
  // nice 19 on a loaded 2-core machine was once starved past a 5 s auth deadline, the server
  // rightly closed, and the real client's failed handshake was reported as a crash.
  o.auth_timeout = Millis(60000);
  o.idle_timeout = Millis(60000);
  o.spin = std::chrono::microseconds(0);
  o.log = [](LogLevel, std::string_view line) { note_server_log(line); };
  ServeContext ctx{&o, &w.regions, &w.services, &w.counters, {Transport::Tcp, false}};

  std::thread client([&, fd = sv[1]] {
    if (mode == 0) {
      std::thread reader([fd] { drain(fd); });
      write_all(fd, in.data(), in.size());
      ::shutdown(fd, SHUT_WR);
      reader.join();
      return;
    }
    FrameProtector cp;
    try {
      (void)client_handshake(fd, w.secret, deadline_in(Millis(60000)), Protection::None, &cp);
    } catch (const FabricError& e) {
      fail(std::string("a real client could not authenticate: ") + e.what() +
           " (the server's last log line: " + server_log_line() + ")");
    }
    std::vector<uint8_t> out;
    if (mode == 1) {
      out.assign(in.begin(), in.end());
    } else {
      for (auto& [h, payload] : frames_of(in)) {
        if ((h.a0 >> wire::kRegionShift) == w.id && h.a1 == 0) h.a1 = w.key;
        append_sealed_frame(out, h, payload, &cp);
      }
    }
    std::thread reader([fd] { drain(fd); });
    write_all(fd, out.data(), out.size());
    ::shutdown(fd, SHUT_WR);
    reader.join();
  });
  PeerInfo peer{"fuzz-peer", Transport::Tcp, {}};
  serve_stream_connection(Fd(sv[0]), peer, ctx);  // never throws; closes its end
  client.join();
  ::close(sv[1]);
  return 0;
}

#ifndef TIERCE_LIBFUZZER
// ---- deterministic replay driver (any compiler; in ctest) ---------------------------------------
#include "replay_args.h"

static std::vector<std::vector<uint8_t>> seeds() {
  std::vector<std::vector<uint8_t>> out;
  auto frame = [](std::vector<uint8_t>& v, wire::Op op, uint64_t a0, uint64_t a1, uint64_t a2,
                  std::vector<uint8_t> payload, bool reply = false) {
    wire::Header h;
    h.op = op;
    h.id = 1;
    h.a0 = a0;
    h.a1 = a1;
    h.a2 = a2;
    h.reply = reply;
    wire::append_frame(v, h, payload);
  };
  const uint64_t base = uint64_t(1) << wire::kRegionShift;
  for (uint8_t p : {0, 1, 2}) {
    // mode 0: an AUTH with a wrong proof; an oversize claim; a request before AUTH
    std::vector<uint8_t> v{uint8_t(0 | p << 2)};
    frame(v, wire::Op::Auth, wire::kProtocolVersion, p, 0,
          std::vector<uint8_t>(wire::kNonceSize + wire::kMacSize, 1));
    out.push_back(v);
    v = {uint8_t(0 | p << 2)};
    frame(v, wire::Op::Read, base, 0, 8, {});
    out.push_back(v);
    // modes 1 and 2: requests after authenticating
    for (uint8_t mode : {1, 2}) {
      v = {uint8_t(mode | p << 2)};
      frame(v, wire::Op::Read, base + 8, 0, 8, {});
      frame(v, wire::Op::Write, base + 16, 0, 0, std::vector<uint8_t>(16, 7));
      frame(v, wire::Op::Call, 0, 0, 0, {4, 0, 'e', 'c', 'h', 'o', 1, 2, 3});
      frame(v, wire::Op::Ping, 0, 0, 0, {});
      out.push_back(v);
    }
    // mode 3: a HELLO, then an AUTH_OK with a made-up proof
    v = {3};
    std::vector<uint8_t> hello(wire::kNonceSize, 9);
    for (char c : std::string("impostor")) hello.push_back(uint8_t(c));
    frame(v, wire::Op::Hello, wire::kProtocolVersion, p, 0, hello);
    frame(v, wire::Op::AuthOk, 0, p, 0, std::vector<uint8_t>(wire::kMacSize, 3), true);
    out.push_back(v);
  }
  return out;
}

int main(int argc, char** argv) {
  int rc = tierce_fuzz::replay_main(argc, argv, "fuzz_fabric_handshake", 20000, seeds(), 20261126);
  // How deep the inputs got (a driver that never gets past the handshake would be useless).
  auto st = world().counters.snapshot();
  std::printf("fuzz_fabric_handshake_replay: the server handled %llu one-sided ops and %llu "
              "messages; %llu auth failures, %llu bad frame MACs, %llu oversize pre-auth frames\n",
              (unsigned long long)st.one_sided_ops, (unsigned long long)st.messages,
              (unsigned long long)st.auth_failures, (unsigned long long)st.bad_frame_macs,
              (unsigned long long)st.preauth_oversize);
  const bool ran = st.auth_failures + st.one_sided_ops + st.messages > 0;  // not --write-seeds
  if (rc == 0 && ran && (st.one_sided_ops == 0 || st.bad_frame_macs == 0 || st.auth_failures == 0)) {
    std::fprintf(stderr, "fuzz_fabric_handshake_replay: a mode was never reached\n");
    return 1;
  }
  return rc;
}
#endif  // TIERCE_LIBFUZZER
