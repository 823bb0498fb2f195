// tests/fabric/test_security.cc — the fabric's defences against unauthenticated and on-path
// peers, with the target in a child process (ServerProcess) and raw sockets as the attacker:
//   - pre-auth resources: many connections each claiming a 16 MiB frame cost the server little
//     memory, and an authenticated client is served meanwhile;
//   - the per-IP connection limit refuses the next connection with Busy, saying why;
//   - protected tcp frames: a forged, tampered, replayed or reordered frame closes the
//     connection and is never applied; a tampered reply is an error at the client, never data;
//   - encrypt mode works end to end and its payloads are not on the wire in clear;
//   - a peer of the previous protocol version gets a clear error, not a hang.
// Environment: TIERCE_DOS_CONNECTIONS (default 1024) sets the size of the pre-auth probe.
#define BOOST_TEST_MODULE fabric_security
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "fabric/fabric.h"
#include "fabric/identity.h"
#include "fabric/protect.h"
#include "fabric/socket.h"
#include "fabric/stream_transport.h"
#include "fabric/wire.h"
#include "tests/fabric/server_process.h"
#include "tests/test_util.h"

using namespace tierce;
using namespace tierce::fabric;
using testing::ServerProcess;

namespace {

constexpr size_t kSegBytes = 2 << 20;

// The bound the pre-auth probe asserts: the server's peak resident memory may grow by at most
// this much plus kRssPerConnKiB per held connection (its thread's stack pages and bookkeeping).
// Without the bound on pre-auth frames each 16 MiB claim would cost 16 MiB (the payload buffer
// is allocated and zeroed before the body arrives): 512 claims, 8 GiB. Checked once with the
// bound disabled and TIERCE_DOS_CONNECTIONS=64: peak +512 MiB for 32 claims, the test failed.
constexpr long kRssSlackKiB = 32 * 1024;
constexpr long kRssPerConnKiB = 64;

ClientOptions client_opts(Protection p = Protection::Mac) {
  ClientOptions o;
  o.secret = testing::test_secret();
  o.op_timeout = Millis(5000);
  o.connect_timeout = Millis(5000);
  o.protection = p;
  return o;
}

Deadline soon() { return deadline_in(Millis(10000)); }

// A log file the target appends its lines to (the sink runs in the child).
struct LogFile {
  std::string path = "/tmp/tierce-sec-log-" + std::to_string(getpid()) + "-" +
                     std::to_string(counter++) + ".log";
  static inline int counter = 0;
  LogFile() { ::unlink(path.c_str()); }
  ~LogFile() { ::unlink(path.c_str()); }
  LogSink sink() const {
    return [p = path](LogLevel, std::string_view s) {
      if (FILE* f = std::fopen(p.c_str(), "a")) {
        std::fprintf(f, "%.*s\n", int(s.size()), s.data());
        std::fclose(f);
      }
    };
  }
  std::string text() const {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  size_t count(const std::string& id) const {
    std::string t = text();
    size_t n = 0;
    for (size_t at = t.find(id); at != std::string::npos; at = t.find(id, at + 1)) ++n;
    return n;
  }
};

// A target with one region "data" (owned here: the test reads what was applied) and "echo".
struct Target {
  std::shared_ptr<SharedSegment> seg =
      std::make_shared<SharedSegment>(SharedSegment::create_anonymous("security", kSegBytes));
  LogFile log;
  std::unique_ptr<ServerProcess> proc;

  explicit Target(ServerProcess::Tweak tweak = {}, const std::string& listen = "tcp://127.0.0.1:0") {
    auto sink = log.sink();
    proc = std::make_unique<ServerProcess>(
        listen, std::vector<testing::ExportSpec>{{"data", seg}},
        [](Server& s) {
          s.on_call("echo", [](const PeerInfo&, std::span<const uint8_t> b) {
            return std::vector<uint8_t>(b.begin(), b.end());
          });
          s.on_call("whoami", [](const PeerInfo& p, std::span<const uint8_t>) {
            return std::vector<uint8_t>(p.node.begin(), p.node.end());
          });
        },
        Millis(20), Millis(200), [tweak, sink](ServerOptions& o) {
          o.log = sink;
          if (tweak) tweak(o);
        });
  }
  Address addr() const { return parse_address(proc->uri()); }
  uint64_t word(size_t off) const {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(seg->data() + off)).load();
  }
  void set_word(size_t off, uint64_t v) {
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(seg->data() + off)).store(v);
  }
};

long status_kib(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  size_t n = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':')
      return std::atol(line.c_str() + n + 1);
  return -1;
}

// True when the peer closed (EOF or reset) before `d`; false if it sent something instead.
bool closed_by_peer(int fd, Deadline d) {
  uint8_t b[256];
  if (std::chrono::steady_clock::now() >= d) d = deadline_in(Millis(1));  // spent: just look
  try {
    for (;;) {
      size_t k = recv_some(fd, b, sizeof b, d);
      if (k == 0) return true;
    }
  } catch (const FabricError& e) {
    return e.code() == Errc::PeerClosed;
  }
}

// Reads a whole frame (no tag): header and payload.
wire::Header read_plain_frame(int fd, std::vector<uint8_t>* payload) {
  uint8_t hb[wire::kHeaderSize];
  recv_exact(fd, hb, sizeof hb, soon());
  auto h = wire::decode_header(hb);
  BOOST_REQUIRE_MESSAGE(h.ok(), h.message());
  payload->resize(h->length);
  if (h->length) recv_exact(fd, payload->data(), h->length, soon());
  return *h;
}

// A raw tcp peer that knows the secret: it authenticates, then writes frames by hand.
struct RawPeer {
  Fd fd;
  FrameProtector prot;
  explicit RawPeer(const Address& a, Protection p = Protection::Mac) {
    fd = tcp_connect(a.host, a.port, soon());
    client_handshake(fd.get(), testing::test_secret(), soon(), p, &prot);
  }
  // A sealed WRITE of one word (the next sequence number is used up).
  std::vector<uint8_t> write_frame(const RemoteRegion& r, uint64_t off, uint64_t value,
                                   uint64_t id) {
    wire::Header h;
    h.op = wire::Op::Write;
    h.id = id;
    h.a0 = r.addr + off;
    h.a1 = r.key;
    uint8_t v[8];
    wire::store_le64(v, value);
    std::vector<uint8_t> out;
    append_sealed_frame(out, h, v, &prot);
    return out;
  }
  void send(const std::vector<uint8_t>& bytes) {
    send_all(fd.get(), bytes.data(), bytes.size(), soon());
  }
  // Reads and checks one reply; its status.
  Errc reply() {
    FrameReader reader(fd.get());
    reader.protect(&prot);
    wire::Header h;
    BOOST_REQUIRE(reader.header(&h, soon()));
    std::vector<uint8_t> p(h.length);
    if (h.length) reader.body(p.data(), h.length, soon());
    BOOST_REQUIRE(reader.finish(h, p.data(), soon()));
    BOOST_REQUIRE(reader.buffered() == 0u);  // one reply at a time here
    return h.status;
  }
};

// A tcp relay between one client and the target: records both directions, and on request flips
// a bit in the next chunk going to the client (an on-path attacker).
class Relay {
 public:
  explicit Relay(const Address& target) : target_(target) {
    uint16_t port = 0;
    listen_ = tcp_listen("127.0.0.1", 0, &port);
    uri_ = "tcp://127.0.0.1:" + std::to_string(port);
    thread_ = std::thread([this] { run(); });
  }
  ~Relay() {
    stop_ = true;
    ::shutdown(listen_.get(), SHUT_RDWR);
    thread_.join();
  }
  const std::string& uri() const { return uri_; }
  void corrupt_next_reply() { corrupt_ = true; }
  std::vector<uint8_t> to_server() {
    std::lock_guard g(mu_);
    return c2s_;
  }
  std::vector<uint8_t> to_client() {
    std::lock_guard g(mu_);
    return s2c_;
  }

 private:
  void run() {
    std::string peer;
    Fd c = accept_conn(listen_.get(), &peer);
    if (!c) return;
    Fd s = tcp_connect(target_.host, target_.port, soon());
    pollfd p[2] = {{c.get(), POLLIN, 0}, {s.get(), POLLIN, 0}};
    std::vector<uint8_t> buf(1 << 16);
    while (!stop_) {
      if (::poll(p, 2, 50) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = ::recv(p[i].fd, buf.data(), buf.size(), 0);
        if (n <= 0) return;  // either side gone: close both
        {
          std::lock_guard g(mu_);
          auto& rec = i == 0 ? c2s_ : s2c_;
          rec.insert(rec.end(), buf.begin(), buf.begin() + n);
        }
        if (i == 1 && corrupt_.exchange(false)) buf[size_t(n) - 1] ^= 0x01;
        try {
          send_all(p[1 - i].fd, buf.data(), size_t(n), soon());
        } catch (const FabricError&) {
          return;
        }
      }
    }
  }

  Address target_;
  Fd listen_;
  std::string uri_;
  std::thread thread_;
  std::atomic<bool> stop_{false}, corrupt_{false};
  std::mutex mu_;
  std::vector<uint8_t> c2s_, s2c_;
};

bool contains(const std::vector<uint8_t>& hay, const std::vector<uint8_t>& needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(security)

// (a) Pre-auth DoS probe. Half the connections claim a 16 MiB AUTH frame; the other half send
// 40 bytes of such a header and stop, so the server holds them (a thread each) until
// auth_timeout. The server's peak RSS (VmHWM) over the whole probe stays within the bound, every
// claim is refused (FAB0209, connection closed), and an authenticated client is served
// throughout.
BOOST_AUTO_TEST_CASE(pre_auth_claims_cost_the_server_little_memory) {
  size_t n = 1024;
  if (const char* e = std::getenv("TIERCE_DOS_CONNECTIONS")) n = std::max(2L, std::atol(e));
  rlimit rl{};
  BOOST_REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0);
  rl.rlim_cur = rl.rlim_max;  // the target (forked below) inherits it
  BOOST_REQUIRE(setrlimit(RLIMIT_NOFILE, &rl) == 0);
  if (rl.rlim_cur < 2 * n + 256) {
    n = (rl.rlim_cur - 256) / 2;
    BOOST_TEST_MESSAGE("RLIMIT_NOFILE " << rl.rlim_cur << ": probing with " << n);
  }
  Target t([n](ServerOptions& o) {
    o.max_connections_per_ip = 0;  // all from 127.0.0.1: the per-IP limit is tested below
    o.max_connections = 2 * n + 64;
    o.auth_timeout = Millis(300000);  // holders stay until we close them
  });
  auto conn = connect(t.proc->uri(), client_opts());
  RemoteRegion r = conn->lookup("data");
  conn->faa64(r, 0, 1);
  const long idle_kib = status_kib(t.proc->pid(), "VmRSS");
  BOOST_REQUIRE(idle_kib > 0);

  wire::Header claim;
  claim.op = wire::Op::Auth;
  claim.a0 = wire::kProtocolVersion;
  claim.length = uint32_t(wire::kMaxPayload);  // 16 MiB
  uint8_t hb[wire::kHeaderSize];
  wire::encode_header(claim, hb);
  Address a = t.addr();
  std::vector<Fd> claimers, holders;
  uint64_t served = 1;
  for (size_t i = 0; i < n; ++i) {
    Fd fd = tcp_connect(a.host, a.port, soon());
    std::vector<uint8_t> hello;
    read_plain_frame(fd.get(), &hello);  // the server's thread for it is running
    if (i % 2 == 0) {
      send_all(fd.get(), hb, sizeof hb, soon());
      claimers.push_back(std::move(fd));
    } else {
      send_all(fd.get(), hb, 40, soon());
      holders.push_back(std::move(fd));
    }
    if (i % 128 == 0) BOOST_REQUIRE(conn->faa64(r, 0, 1) == served++);  // still served
  }
  // Everyone is in: the holders still wait for their headers, the claimers were refused.
  BOOST_TEST(conn->faa64(r, 0, 1) == served++);
  uint64_t v = 0x1234;
  conn->write(r, 64, &v, 8);
  BOOST_TEST(t.word(64) == 0x1234u);
  const long peak_kib = status_kib(t.proc->pid(), "VmHWM");
  const long now_kib = status_kib(t.proc->pid(), "VmRSS");
  const long bound = kRssSlackKiB + kRssPerConnKiB * long(holders.size());
  BOOST_TEST_MESSAGE(n << " pre-auth connections: server RSS idle " << idle_kib << " KiB, with "
                       << holders.size() << " held " << now_kib << " KiB, peak " << peak_kib
                       << " KiB; bound idle + " << bound << " KiB");
#if !defined(TIERCE_TEST_ASAN) && !defined(TIERCE_TEST_TSAN)
  BOOST_TEST(peak_kib - idle_kib <= bound);
#else
  BOOST_TEST_MESSAGE("sanitizer build: RSS bound asserted by the plain build only");
#endif
  // Every claim was refused: its connection is closed (one hang guard for them all).
  size_t closed = 0;
  const Deadline all = soon();
  for (auto& fd : claimers) closed += closed_by_peer(fd.get(), all);
  BOOST_TEST(closed == claimers.size());
  BOOST_TEST(t.log.count("FAB0209") == claimers.size());
  holders.clear();
  BOOST_TEST(conn->faa64(r, 0, 1) == served++);
}

// (b) Connections from one IP address beyond max_connections_per_ip: refused with Busy and a
// message naming the limit (FAB0107 in the server's log); the others go on; a slot freed by a
// close is usable again.
BOOST_AUTO_TEST_CASE(per_ip_limit_refuses_the_next_connection) {
  constexpr size_t kLimit = 4;
  Target t([](ServerOptions& o) { o.max_connections_per_ip = kLimit; });
  std::vector<std::unique_ptr<Connection>> conns;
  for (size_t i = 0; i < kLimit; ++i) conns.push_back(connect(t.proc->uri(), client_opts()));
  RemoteRegion r = conns[0]->lookup("data");
  Errc code = Errc::Ok;
  std::string what;
  try {
    connect(t.proc->uri(), client_opts());
  } catch (const FabricError& e) {
    code = e.code();
    what = e.what();
  }
  BOOST_TEST(int(code) == int(Errc::Busy));
  BOOST_TEST(what.find("max_connections_per_ip (4)") != std::string::npos, what);
  BOOST_TEST(t.log.count("FAB0107") == 1u);
  // A raw peer sees the same: a HELLO carrying Busy and the reason, then the close.
  {
    Address a = t.addr();
    Fd fd = tcp_connect(a.host, a.port, soon());
    std::vector<uint8_t> why;
    wire::Header h = read_plain_frame(fd.get(), &why);
    BOOST_TEST(int(h.op) == int(wire::Op::Hello));
    BOOST_TEST(int(h.status) == int(Errc::Busy));
    BOOST_TEST(std::string(why.begin(), why.end()).find("max_connections_per_ip") !=
               std::string::npos);
    BOOST_TEST(closed_by_peer(fd.get(), soon()));
  }
  for (auto& c : conns) BOOST_TEST(c->faa64(r, 0, 1) < kLimit);  // the admitted ones go on
  // Closing one frees its slot once the server has seen the close (retried, not timed).
  conns.pop_back();
  std::unique_ptr<Connection> again;
  for (int i = 0; i < 1000 && !again; ++i) {
    try {
      again = connect(t.proc->uri(), client_opts());
    } catch (const FabricError& e) {
      BOOST_REQUIRE(e.code() == Errc::Busy);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  BOOST_REQUIRE(again);
  BOOST_TEST(again->faa64(r, 0, 1) == kLimit);
}

// (c) Injection, tampering, replay and reordering on an authenticated connection: the frame is
// refused before it is applied and the connection closed (FAB0211).
BOOST_AUTO_TEST_CASE(forged_replayed_and_reordered_frames_are_refused_and_not_applied) {
  Target t;
  auto conn = connect(t.proc->uri(), client_opts());
  RemoteRegion r = conn->lookup("data");
  const Address a = t.addr();
  size_t refused = 0;

  // A well-formed sealed WRITE is applied: the raw peer is a faithful client.
  {
    RawPeer p(a);
    p.send(p.write_frame(r, 0, 0xAAAA, 1));
    BOOST_TEST(int(p.reply()) == int(Errc::Ok));
    BOOST_TEST(t.word(0) == 0xAAAAu);
  }
  // Bad MAC (tag flipped), tampered payload, tampered header (address): closed, not applied.
  for (int what = 0; what < 3; ++what) {
    BOOST_TEST_CONTEXT("tamper " << what) {
      RawPeer p(a);
      auto f = p.write_frame(r, 0, 0xBBBB, 1);
      if (what == 0) f.back() ^= 0x01;                       // the tag
      if (what == 1) f[wire::kHeaderSize] ^= 0x01;           // the value
      if (what == 2) f[16] ^= 0x08;                          // a0: word 1 instead of word 0
      p.send(f);
      BOOST_TEST(closed_by_peer(p.fd.get(), soon()));
      BOOST_TEST(t.word(0) == 0xAAAAu);
      BOOST_TEST(t.word(8) == 0u);
      ++refused;
    }
  }
  // Replay: a frame the server accepted, sent again, is refused; the owner's later value stays.
  {
    RawPeer p(a);
    auto f = p.write_frame(r, 16, 0xCCCC, 1);
    p.send(f);
    BOOST_TEST(int(p.reply()) == int(Errc::Ok));
    BOOST_TEST(t.word(16) == 0xCCCCu);
    t.set_word(16, 7);  // the owner moves on
    p.send(f);
    BOOST_TEST(closed_by_peer(p.fd.get(), soon()));
    BOOST_TEST(t.word(16) == 7u);
    ++refused;
  }
  // Reordering: two frames sealed in order, sent in the other: the first to arrive is refused,
  // neither is applied.
  {
    RawPeer p(a);
    auto f1 = p.write_frame(r, 24, 0xD1, 1);
    auto f2 = p.write_frame(r, 32, 0xD2, 2);
    f2.insert(f2.end(), f1.begin(), f1.end());
    p.send(f2);
    BOOST_TEST(closed_by_peer(p.fd.get(), soon()));
    BOOST_TEST(t.word(24) == 0u);
    BOOST_TEST(t.word(32) == 0u);
    ++refused;
  }
  // A frame from another session (other keys), injected into this one: refused.
  {
    RawPeer p(a), other(a);
    p.send(other.write_frame(r, 40, 0xEE, 1));
    BOOST_TEST(closed_by_peer(p.fd.get(), soon()));
    BOOST_TEST(t.word(40) == 0u);
    ++refused;
  }
  // An unsealed frame on a protected connection (what a v1 peer or an injector without the keys
  // sends): it has no valid tag, so it is refused too.
  {
    RawPeer p(a);
    wire::Header h;
    h.op = wire::Op::Write;
    h.id = 1;
    h.a0 = r.addr + 48;
    h.a1 = r.key;
    uint8_t v[8] = {0xFF, 0, 0, 0, 0, 0, 0, 0};
    std::vector<uint8_t> f;
    wire::append_frame(f, h, v);
    f.resize(f.size() + FrameProtector::kTagSize);  // zero "tag"
    p.send(f);
    BOOST_TEST(closed_by_peer(p.fd.get(), soon()));
    BOOST_TEST(t.word(48) == 0u);
    ++refused;
  }
  BOOST_TEST(t.log.count("FAB0211") == refused);
  BOOST_TEST(conn->faa64(r, 56, 1) == 0u);  // the server serves its honest clients on
}

// (c') The client side: a reply altered on the path is an error, never data; the connection is
// then broken (later calls fail fast) and a new one works.
BOOST_AUTO_TEST_CASE(a_tampered_reply_is_an_error_at_the_client_never_data) {
  Target t;
  t.set_word(0, 0x5151);
  Relay relay(t.addr());
  auto conn = connect(relay.uri(), client_opts());
  RemoteRegion r = conn->lookup("data");
  uint64_t v = 0;
  conn->read(r, 0, &v, 8);
  BOOST_TEST(v == 0x5151u);
  relay.corrupt_next_reply();
  v = 0;
  std::string what;
  Errc code = Errc::Ok;
  try {
    conn->read(r, 0, &v, 8);
  } catch (const FabricError& e) {
    code = e.code();
    what = e.what();
  }
  BOOST_TEST(int(code) == int(Errc::Protocol));
  BOOST_TEST(what.find("failed authentication") != std::string::npos, what);
  uint64_t w = 0;
  BOOST_CHECK_THROW(conn->read(r, 0, &w, 8), FabricError);  // broken: no stale data later
  auto fresh = connect(t.proc->uri(), client_opts());
  fresh->read(fresh->lookup("data"), 0, &w, 8);
  BOOST_TEST(w == 0x5151u);
}

// A large one-sided read of a region its owner writes meanwhile may be torn (that is the read's
// contract: the layers above check versions), but it is never an authentication failure: the tag
// covers the bytes that were sent. (The server once computed the MAC over the live region and
// then sent the region again: a write in between made the client see a "bad MAC" and drop the
// connection, an outage made by an ordinary write.)
BOOST_AUTO_TEST_CASE(a_large_read_of_a_region_written_meanwhile_passes_authentication) {
  Target t;
  constexpr size_t kLen = 1 << 20;
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    uint8_t b = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      // Byte stores through volatile: the child serves from the same (shared) pages.
      volatile uint8_t* p = t.seg->data();
      for (size_t i = 0; i < kLen; i += 64) p[i] = b;
      ++b;
    }
  });
  auto conn = connect(t.proc->uri(), client_opts(Protection::Mac));
  RemoteRegion r = conn->lookup("data");
  std::vector<uint8_t> buf(kLen);
  int ok = 0;
  std::string failure;
  for (int i = 0; i < 200; ++i) {
    try {
      conn->read(r, 0, buf.data(), buf.size());
      ++ok;
    } catch (const FabricError& e) {
      failure = e.what();
      break;
    }
  }
  stop = true;
  writer.join();
  BOOST_TEST(ok == 200, "reads that passed: " << ok << "; then: " << failure);
  BOOST_TEST(t.log.count("FAB0211") == 0u);
}

// Node identity (issue 32, point 1): the secret proves membership, a node's key proves which
// node answered. Two members, app1 and app2, each with its own key; a client that dials app1
// expects app1's public key. Redirected to app2 (what an on-path attacker or a wrong address
// does) it is refused at the handshake, before any read: whether app2 gives its own name, claims
// app1's, or signs nothing. Over tcp and shm (the handshake is the same on every transport).
BOOST_AUTO_TEST_CASE(a_connection_redirected_to_another_node_is_refused_at_the_handshake) {
  const NodeKey k1 = NodeKey::generate(), k2 = NodeKey::generate();
  for (std::string transport : {"tcp", "shm"}) {
    BOOST_TEST_CONTEXT("transport " << transport) {
      auto node = [&](std::string name, NodeKey key) {
        return std::make_unique<Target>(
            [name, key](ServerOptions& o) {
              o.name = name;
              o.identity.key = key;
            },
            testing::listen_uri_for(transport));
      };
      auto app1 = node("app1", k1);
      auto app2 = node("app2", k2);            // another member, its own name and key
      auto liar = node("app1", k2);            // another member claiming app1's name
      auto keyless = node("app1", NodeKey());  // a member claiming app1's name, no key
      app1->set_word(0, 0x1111);
      ClientOptions o = client_opts();
      o.identity.expect_node = "app1";
      o.identity.expect_key = k1.public_key();
      auto conn = connect(app1->proc->uri(), o);  // the real app1: served
      uint64_t v = 0;
      conn->read(conn->lookup("data"), 0, &v, 8);
      BOOST_TEST(v == 0x1111u);
      BOOST_TEST(conn->peer_name() == "app1");
      struct Case {
        Target* t;
        const char* says;
      };
      for (Case c : {Case{app2.get(), "dialled node app1 but node app2 answered"},
                     Case{liar.get(), "failed to prove it is node app1"},
                     Case{keyless.get(), "did not prove its node identity"}}) {
        Errc code = Errc::Ok;
        std::string what;
        try {
          connect(c.t->proc->uri(), o);
        } catch (const FabricError& e) {
          code = e.code();
          what = e.what();
        }
        BOOST_TEST(int(code) == int(Errc::AuthFailed), what);
        BOOST_TEST(what.find(c.says) != std::string::npos, what);
      }
      // Without an expected key the secret alone is checked, as before (any member answers).
      auto any = connect(app2->proc->uri(), client_opts());
      BOOST_TEST(any->peer_name() == "app2");
    }
  }
}

// A client with a node key signs the handshake; a server that knows the cluster's keys sees
// which node calls (PeerInfo::node). A wrong key, an unknown name or (when required) no signature
// is refused at the handshake, with the reason in the server's log.
BOOST_AUTO_TEST_CASE(a_client_proves_its_node_to_a_server_that_knows_the_keys) {
  const NodeKey kp = NodeKey::generate(), other = NodeKey::generate();
  Target t([&](ServerOptions& o) {
    o.name = "app1";
    o.identity.peers = {{"proxy1", kp.public_key()}};
    o.identity.require_clients = true;
  });
  auto as = [&](std::string name, NodeKey key) {
    ClientOptions o = client_opts();
    o.identity.node = name;
    o.identity.key = key;
    return o;
  };
  auto conn = connect(t.proc->uri(), as("proxy1", kp));
  std::vector<uint8_t> who = conn->call("whoami", {});
  BOOST_TEST(std::string(who.begin(), who.end()) == "proxy1");
  {  // A server that knows no keys takes a signing client as unsigned: served, name not proven.
    Target keyless;
    auto k = connect(keyless.proc->uri(), as("proxy1", kp));
    std::vector<uint8_t> w = k->call("whoami", {});
    BOOST_TEST(w.empty());
  }
  struct Case {
    ClientOptions o;
    const char* id;
  };
  for (const Case& c : {Case{as("proxy1", other), "FAB0213"}, Case{as("proxy9", kp), "FAB0212"},
                        Case{client_opts(), "FAB0214"}}) {
    BOOST_TEST_CONTEXT(c.id) {
      Errc code = Errc::Ok;
      std::string what;
      try {
        connect(t.proc->uri(), c.o);
      } catch (const FabricError& e) {
        code = e.code();
        what = e.what();
      }
      BOOST_TEST(int(code) == int(Errc::AuthFailed), what);
      BOOST_TEST(what.find("node identity refused") != std::string::npos, what);
      BOOST_TEST(tierce_test::eventually([&] { return t.log.count(c.id) == 1; }), t.log.text());
    }
  }
}

// ROLES (issue 32 point 2): a server that knows the cluster's node keys counts a client that does
// not sign as a reader. It reads every region; it writes, CASes and FAAs only a region exported
// writable by readers; it calls only services open to readers. Over shm its MAP of a region it may
// not write is a read-only descriptor: its write is refused (not a fault on a read-only page). A
// member (signed with its node key) may do everything; a server without keys, as before, counts
// everyone a member.
BOOST_AUTO_TEST_CASE(a_client_that_does_not_sign_is_a_reader) {
  const NodeKey k1 = NodeKey::generate();
  for (const char* transport : {"tcp", "shm"}) {
    for (bool keyed : {true, false}) {
      BOOST_TEST_CONTEXT("transport " << transport << (keyed ? ", keyed" : ", no keys")) {
        auto ro = std::make_shared<SharedSegment>(SharedSegment::create_anonymous("ro", kSegBytes));
        auto rw = std::make_shared<SharedSegment>(SharedSegment::create_anonymous("rw", kSegBytes));
        LogFile log;
        auto sink = log.sink();
        auto echo = [](const PeerInfo&, std::span<const uint8_t> b) {
          return std::vector<uint8_t>(b.begin(), b.end());
        };
        testing::ServerProcess proc(
            testing::listen_uri_for(transport), {{"versions", ro}},
            [rw, echo](Server& s) {
              s.export_region("pool", rw, RegionAccess{true});
              s.on_call("members", echo);
              s.on_call("open", echo, Callers::Anyone);
              s.on_call("role", [](const PeerInfo& p, std::span<const uint8_t>) {
                std::string r = p.member ? "member" : "reader";
                return std::vector<uint8_t>(r.begin(), r.end());
              }, Callers::Anyone);
            },
            Millis(20), Millis(200), [sink, keyed, &k1](ServerOptions& o) {
              o.log = sink;
              o.name = "app1";
              if (keyed) o.identity.peers = {{"app1", k1.public_key()}};
            });
        auto code_of = [](auto&& f) {
          try {
            f();
          } catch (const FabricError& e) {
            return e.code();
          }
          return Errc::Ok;
        };
        auto text = [](std::vector<uint8_t> v) { return std::string(v.begin(), v.end()); };
        std::vector<uint8_t> hi{'h', 'i'};
        const uint64_t one = 1;
        // The reader (or, without keys, a member like any other).
        auto rd = connect(proc.uri(), client_opts());
        RemoteRegion v = rd->lookup("versions"), pool = rd->lookup("pool");
        const Errc refused = keyed ? Errc::NotPermitted : Errc::Ok;
        BOOST_TEST(text(rd->call("role", {})) == (keyed ? "reader" : "member"));
        uint64_t got = 7;
        BOOST_TEST(int(code_of([&] { rd->read(v, 0, &got, 8); })) == int(Errc::Ok));
        BOOST_TEST(got == 0u);
        BOOST_TEST(int(code_of([&] { rd->write(v, 8, &one, 8); })) == int(refused));
        BOOST_TEST(int(code_of([&] { rd->write(v, 64, hi.data(), hi.size()); })) == int(refused));
        BOOST_TEST(int(code_of([&] { rd->cas64(v, 16, 0, 5); })) == int(refused));
        BOOST_TEST(int(code_of([&] { rd->faa64(v, 24, 1); })) == int(refused));
        BOOST_TEST(int(code_of([&] { rd->call("members", hi); })) == int(refused));
        BOOST_TEST(int(code_of([&] { rd->write(pool, 8, &one, 8); })) == int(Errc::Ok));
        BOOST_TEST(int(code_of([&] { rd->cas64(pool, 16, 0, 5); })) == int(Errc::Ok));
        BOOST_TEST(text(rd->call("open", hi)) == "hi");
        // What the server's memory holds: the refused ops changed nothing.
        auto word = [](SharedSegment& sg, size_t off) {
          return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(sg.data() + off)).load();
        };
        BOOST_TEST(word(*ro, 8) == (keyed ? 0u : 1u));
        BOOST_TEST(word(*ro, 16) == (keyed ? 0u : 5u));
        BOOST_TEST(word(*ro, 24) == (keyed ? 0u : 1u));
        BOOST_TEST(word(*rw, 8) == 1u);
        BOOST_TEST(word(*rw, 16) == 5u);
        if (keyed) {
          // The member: signed with app1's key, it may do all of it.
          ClientOptions m = client_opts();
          m.identity.node = "app1";
          m.identity.key = k1;
          auto mb = connect(proc.uri(), m);
          RemoteRegion mv = mb->lookup("versions");
          BOOST_TEST(text(mb->call("role", {})) == "member");
          BOOST_TEST(int(code_of([&] { mb->write(mv, 8, &one, 8); })) == int(Errc::Ok));
          BOOST_TEST(mb->cas64(mv, 16, 0, 5) == 0u);
          BOOST_TEST(mb->faa64(mv, 24, 1) == 0u);
          BOOST_TEST(text(mb->call("members", hi)) == "hi");
          BOOST_TEST(word(*ro, 8) == 1u);
          BOOST_TEST(word(*ro, 16) == 5u);
          // The reader still reads what the member wrote (through its read-only mapping on shm).
          uint64_t w = 0;
          rd->read(v, 16, &w, 8);
          BOOST_TEST(w == 5u);
        }
      }
    }
  }
}

// (d) Confidentiality: with encrypt (asked by the server, or by the client) the data goes through
// and its bytes are not on the wire in either direction; with mac they are (the capture works),
// and so they are with none (which also logs its warning).
BOOST_AUTO_TEST_CASE(encrypt_mode_hides_payloads_on_the_wire) {
  struct Case {
    Protection server, client;
    bool hidden;
  };
  for (Case c : {Case{Protection::Encrypt, Protection::Mac, true},
                 Case{Protection::Mac, Protection::Encrypt, true},
                 Case{Protection::Mac, Protection::Mac, false},
                 Case{Protection::None, Protection::None, false}}) {
    BOOST_TEST_CONTEXT("server " << to_string(c.server) << ", client " << to_string(c.client)) {
      Target t([&](ServerOptions& o) { o.protection = c.server; });
      Relay relay(t.addr());
      auto conn = connect(relay.uri(), client_opts(c.client));
      RemoteRegion r = conn->lookup("data");
      std::string s = "TIERCE-CONFIDENTIAL-PAYLOAD-0123456789-abcdefghijklmnopqrstuvwxyz";
      std::vector<uint8_t> secret(s.begin(), s.end());
      conn->write(r, 128, secret.data(), secret.size());
      BOOST_TEST(std::memcmp(t.seg->data() + 128, secret.data(), secret.size()) == 0);
      std::vector<uint8_t> back(secret.size());
      conn->read(r, 128, back.data(), back.size());
      BOOST_TEST(back == secret);
      BOOST_TEST(conn->call("echo", secret) == secret);
      // 1 MiB write and read: the large-payload paths (no copy in mac, sliced in encrypt).
      std::vector<uint8_t> big(1 << 20);
      for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 7 + 1);
      std::vector<uint8_t> big_back(big.size());
      uint64_t off = 4096;
      size_t len = std::min(big.size(), size_t(kSegBytes - off));
      conn->write(r, off, big.data(), len);
      conn->read(r, off, big_back.data(), len);
      BOOST_TEST(std::memcmp(big.data(), big_back.data(), len) == 0);
      BOOST_TEST(contains(relay.to_server(), secret) == !c.hidden);
      BOOST_TEST(contains(relay.to_client(), secret) == !c.hidden);
      BOOST_TEST((t.log.count("FAB0108") == 1u) == (c.server == Protection::None));
    }
  }
}

// A peer of the previous protocol version gets a clear error, not a hang: an old client's AUTH
// is answered with AuthFailed saying so; an old server's HELLO makes connect() fail saying so.
BOOST_AUTO_TEST_CASE(a_previous_version_peer_gets_a_clear_error) {
  Target t;
  {
    Address a = t.addr();
    Fd fd = tcp_connect(a.host, a.port, soon());
    std::vector<uint8_t> p;
    read_plain_frame(fd.get(), &p);
    wire::Header auth;  // as version 1 sent it: no version, old proof
    auth.op = wire::Op::Auth;
    auth.id = 1;
    std::vector<uint8_t> body(wire::kNonceSize + wire::kMacSize, 0x42);
    send_frame(fd.get(), auth, body, soon());
    wire::Header h = read_plain_frame(fd.get(), &p);
    BOOST_TEST(int(h.status) == int(Errc::AuthFailed));
    BOOST_TEST(std::string(p.begin(), p.end()).find("protocol version 1") != std::string::npos);
    BOOST_TEST(closed_by_peer(fd.get(), soon()));
    BOOST_TEST(t.log.count("FAB0210") == 1u);
  }
  {
    uint16_t port = 0;
    Fd l = tcp_listen("127.0.0.1", 0, &port);
    std::thread old_server([&] {
      std::string peer;
      Fd c = accept_conn(l.get(), &peer);
      wire::Header hello;  // version 1: a0 = 0
      hello.op = wire::Op::Hello;
      const std::string name = "old-server";
      std::vector<uint8_t> p(wire::kNonceSize + name.size(), 0x11);
      std::memcpy(p.data() + wire::kNonceSize, name.data(), name.size());
      send_frame(c.get(), hello, p, soon());
      closed_by_peer(c.get(), soon());
    });
    Errc code = Errc::Ok;
    std::string what;
    try {
      connect("tcp://127.0.0.1:" + std::to_string(port), client_opts());
    } catch (const FabricError& e) {
      code = e.code();
      what = e.what();
    }
    old_server.join();
    BOOST_TEST(int(code) == int(Errc::Protocol));
    BOOST_TEST(what.find("protocol version 1") != std::string::npos, what);
  }
}

BOOST_AUTO_TEST_CASE(pre_auth_bound_is_checked_at_start) {
  ServerOptions o;
  o.secret = testing::test_secret();
  o.listen = {"tcp://127.0.0.1:0"};
  o.log = [](LogLevel, std::string_view) {};
  o.max_preauth_frame = 63;  // below the AUTH payload
  BOOST_CHECK_THROW(Server{o}, FabricError);
}

BOOST_AUTO_TEST_SUITE_END()
