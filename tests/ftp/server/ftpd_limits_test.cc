// tests/ftp/server/ftpd_limits_test.cc — issue 17 (security hardening): tierce-ftpd's bounded
// resources and the review's smaller items, against the real binary (ftpd_harness).
//
// DoS probes: a control-line flood during a stalled RETR, TYPE A RETR of a large file (plain and
// over ADTS), an ADTS STOR announcing 1 GiB and sending nothing. Each samples the VmRSS of the
// worker serving the session (/proc/PID/status; the pid from STAT) while it runs and asserts it
// stays under kRssBound. No assertion is about time.
//
// TIERCE_FTPD_ASCII_MIB sets the TYPE A file size (default 256 MiB; sparse, so cheap to make).
#define BOOST_TEST_MODULE ftpd_limits
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include "ftp_adts/ftp/tls.h"
#include "tests/ftp/server/ftpd_harness.h"
#ifdef TIERCE_TEST_HAVE_ADTS
#include "ftp_adts/adts/adts.h"
#endif

using namespace ftpd_test;
using tierce_test::TempDir;
using namespace std::chrono_literals;

namespace {

// What a worker may hold while it serves any of the probes below. A worker at rest is ~10 MiB;
// the paths under test hold at most a few MiB of buffers. Before issue 17 each probe went far
// past it (the flood: the bytes sent; TYPE A over ADTS: the file; ADTS STOR: the 1 GiB announced).
// (Unused under ASan, which measures no RSS: the checks are compiled out there.)
[[maybe_unused]] constexpr long kRssBoundKib = 64 * 1024;

struct Fixture {
  TempDir dir;
  std::string alice_root = dir / "alice";
  std::unique_ptr<Server> server;

  explicit Fixture(const std::string& top = "", const std::string& tables = "",
                   const std::string& alice_more = "") {
    ::mkdir(alice_root.c_str(), 0755);
    // As root, alice's sessions run as nobody (privilege separation): her tree must be nobody's.
    if (::geteuid() == 0) give_to(alice_root);
    static const std::string hash = hash_of("wonderland");
    server = std::make_unique<Server>(
        dir, "workers = 2\nmax_sessions = 4\nlogin_fail_delay_ms = 10\ndata_timeout_s = 20\n" +
                 top + "\n" + tables + "\n[[user]]\nname = \"alice\"\npassword = \"" + hash +
                 "\"\nroot = \"" + alice_root + "\"\nwrite = true\n" + alice_more + "\n");
  }
  std::unique_ptr<Client> alice() { return logged_in(server->port(), "alice", "wonderland"); }
};

// The pid of the worker serving `c` (STAT: "Session pid N"), required.
pid_t worker_of(Client& c) {
  pid_t pid = session_pid(c);
  BOOST_REQUIRE(pid > 0);
  return pid;
}

void make_sparse(const std::string& path, uint64_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  BOOST_REQUIRE(fd >= 0);
  BOOST_REQUIRE(::ftruncate(fd, off_t(size)) == 0);
  ::close(fd);
}

uint64_t file_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : uint64_t(-1);
}

uint64_t ascii_test_bytes() {
  const char* e = std::getenv("TIERCE_FTPD_ASCII_MIB");
  uint64_t mib = e && *e ? std::strtoull(e, nullptr, 10) : 256;
  return (mib ? mib : 256) << 20;
}

// Reads a data connection to EOF, counting the bytes (no copy kept).
uint64_t drain(int fd) {
  char buf[1 << 16];
  uint64_t n = 0;
  for (;;) {
    ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r <= 0) break;
    n += uint64_t(r);
  }
  ::close(fd);
  return n;
}

}  // namespace

// A client floods command lines while its RETR is stalled (it never reads the data connection).
// The server holds at most [limits] control_buffer_kib of that input, then stops the transfer and
// ends the session with 421 and FTPD0108; the worker's memory stays bounded throughout.
BOOST_AUTO_TEST_CASE(control_flood_during_stalled_retr_is_cut_off) {
  Fixture f("", "[limits]\ncontrol_buffer_kib = 64\n");
  make_sparse(f.alice_root + "/big.bin", 1ull << 30);
  auto c = f.alice();
  pid_t worker = worker_of(*c);
  BOOST_TEST(c->cmd("TYPE I").code == 200);
  uint16_t port = c->pasv();
  BOOST_REQUIRE(port != 0);
  int d = Client::data_connect(port);  // never read: the transfer stalls
  BOOST_REQUIRE(d >= 0);
  BOOST_TEST(c->cmd("RETR big.bin").code == 150);
  RssSampler rss(worker);
  // Up to 256 MiB of NOOPs; the server cuts us off long before (send fails or blocks: the
  // socket has a send timeout so a stalled send ends the loop too).
  timeval tv{5, 0};
  ::setsockopt(c->fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string chunk;
  for (int i = 0; i < 8192; ++i) chunk += "NOOP\r\n";
  uint64_t sent = 0;
  while (sent < (256ull << 20)) {
    ssize_t n = ::send(c->fd(), chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += uint64_t(n);
  }
  // The session ends: the worker logs FTPD0108 (the 421 itself may be lost to the RST of the
  // unread input we sent).
  std::string log;
  for (int i = 0; i < 3000; ++i) {
    log = f.server->log();
    if (log.find("FTPD0108") != std::string::npos) break;
    std::this_thread::sleep_for(10ms);
  }
  long peak = rss.stop();
  ::close(d);
  BOOST_TEST_MESSAGE("flood: sent " << sent << " bytes; worker VmRSS peak " << peak << " KiB");
  BOOST_TEST(log.find("FTPD0108") != std::string::npos, log);
  BOOST_TEST(peak > 0);
#ifndef TIERCE_TEST_ASAN
  BOOST_TEST(peak < kRssBoundKib);
#else
  BOOST_TEST_MESSAGE("ASan build: RSS bound asserted by the plain build only");
#endif
  // The server goes on serving others.
  auto c2 = f.alice();
  BOOST_TEST(c2->cmd("NOOP").code == 200);
}

// Over the limit within one line: 500, and the session goes on.
BOOST_AUTO_TEST_CASE(over_long_line_is_500) {
  Fixture f("", "[limits]\nmax_command_line = 600\n");
  auto c = f.alice();
  c->send_raw("NOOP " + std::string(700, 'x') + "\r\n");
  BOOST_TEST(c->reply().code == 500);
  BOOST_TEST(c->cmd("NOOP").code == 200);
}

// A last line the client did not end with CR LF (or LF) before closing is not executed.
BOOST_AUTO_TEST_CASE(unterminated_last_line_is_discarded) {
  Fixture f;
  tierce_test::write_file(f.alice_root + "/keep.txt", "x");
  auto c = f.alice();
  c->send_raw("DELE keep.txt");
  ::shutdown(c->fd(), SHUT_WR);
  BOOST_TEST(c->reply().code == 0);  // closed without a reply
  // The session has ended once the worker logged it.
  std::string log;
  for (int i = 0; i < 1000; ++i) {
    log = f.server->log();
    if (log.find("FTPD0102 session end") != std::string::npos) break;
    std::this_thread::sleep_for(10ms);
  }
  BOOST_TEST(log.find("FTPD0102 session end") != std::string::npos, log);
  BOOST_TEST(log.find("deleted") == std::string::npos, log);
  BOOST_TEST(file_size(f.alice_root + "/keep.txt") == 1u);
}

// TYPE A RETR of a large file on a plain data connection: streamed in chunks.
BOOST_AUTO_TEST_CASE(type_a_retr_large_file_plain_bounded_rss) {
  Fixture f;
  uint64_t size = ascii_test_bytes();
  make_sparse(f.alice_root + "/big.txt", size);  // zeros: no LF, the conversion keeps the size
  auto c = f.alice();
  pid_t worker = worker_of(*c);
  BOOST_TEST(c->cmd("TYPE A").code == 200);
  uint16_t port = c->pasv();
  BOOST_REQUIRE(port != 0);
  int d = Client::data_connect(port);
  BOOST_REQUIRE(d >= 0);
  BOOST_TEST(c->cmd("RETR big.txt").code == 150);
  RssSampler rss(worker);
  uint64_t got = drain(d);
  long peak = rss.stop();
  BOOST_TEST(c->reply().code == 226);
  BOOST_TEST(got == size);
  BOOST_TEST_MESSAGE("TYPE A plain RETR of " << size << " bytes: worker VmRSS peak " << peak
                                             << " KiB");
  BOOST_TEST(peak > 0);
#ifndef TIERCE_TEST_ASAN
  BOOST_TEST(peak < kRssBoundKib);
#else
  BOOST_TEST_MESSAGE("ASan build: RSS bound asserted by the plain build only");
#endif
}

// TYPE A conversion across chunk boundaries (the server converts 256 KiB at a time): CR LF pairs
// and bare LFs / CRs placed on and around the boundaries, down and up, plain and over ADTS.
BOOST_AUTO_TEST_CASE(type_a_conversion_across_chunks) {
  Fixture f;
  std::string lf;  // the file as stored (LF line ends, some lone CRs)
  std::mt19937 rng(7);
  while (lf.size() < 3 * (256u << 10) + 100) {
    size_t k = rng() % 300;
    lf.append(k, 'a');
    lf.push_back(rng() % 17 == 0 ? '\r' : '\n');
  }
  // Force the interesting cases onto the boundaries.
  lf[(256u << 10) - 1] = '\n';
  lf[2 * (256u << 10) - 1] = '\r';
  lf[2 * (256u << 10)] = 'b';
  std::string crlf;
  for (char ch : lf) {
    if (ch == '\n') crlf.push_back('\r');
    crlf.push_back(ch);
  }
  tierce_test::write_file(f.alice_root + "/t.txt", lf);
  auto c = f.alice();
  BOOST_TEST(c->cmd("TYPE A").code == 200);
  int code = 0;
  BOOST_TEST((c->retrieve("RETR t.txt", &code) == crlf));
  BOOST_TEST(code == 226);
  BOOST_TEST(c->store("STOR u.txt", crlf) == 226);
  BOOST_TEST((tierce_test::read_file(f.alice_root + "/u.txt") == lf));
#ifdef TIERCE_TEST_HAVE_ADTS
  auto t = c->cmd("TPRT TCP");
  BOOST_REQUIRE_EQUAL(t.code, 200);
  auto cookie = tierce::ftp::parse_tprt_cookie(t.text());
  BOOST_REQUIRE(cookie);
  uint16_t port = c->epsv();
  BOOST_REQUIRE(port != 0);
  tierce::adts::SessionParams p;
  p.cookie = *cookie;
  p.timeout = 20000ms;
  auto s = tierce::adts::connect("127.0.0.1", port, p);
  c->send_raw("RETR t.txt\r\n");
  std::vector<uint8_t> got;
  tierce::adts::Sink sink;
  sink.memory = &got;
  s->receive(sink);
  BOOST_TEST(c->reply().code == 150);
  BOOST_TEST(c->reply().code == 226);
  BOOST_TEST((std::string(got.begin(), got.end()) == crlf));
  c->send_raw("STOR v.txt\r\n");
  BOOST_TEST(c->reply().code == 150);
  tierce::adts::Source src;
  src.memory = {reinterpret_cast<const uint8_t*>(crlf.data()), crlf.size()};
  s->send(src);
  BOOST_TEST(c->reply().code == 226);
  BOOST_TEST((tierce_test::read_file(f.alice_root + "/v.txt") == lf));
#endif
}

// Upload limits: [limits] max_upload_bytes per file (the size an upload may leave), a user's
// session_upload_bytes per session; 552 and FTPD0305, the file holds exactly the allowed bytes.
BOOST_AUTO_TEST_CASE(upload_limits_552) {
  Fixture f("", "[limits]\nmax_upload_bytes = 1048576\n", "session_upload_bytes = 1572864\n");
  auto c = f.alice();
  BOOST_TEST(c->cmd("TYPE I").code == 200);
  std::string two(2 << 20, 'z');
  int code = c->store("STOR big.bin", two);
  BOOST_TEST(code == 552);
  BOOST_TEST(file_size(f.alice_root + "/big.bin") == uint64_t(1) << 20);
  // 1 MiB of the session's 1.5 MiB is used: 0.5 MiB more fits, then nothing.
  std::string half(512 << 10, 'h');
  BOOST_TEST(c->store("STOR half.bin", half) == 226);
  BOOST_TEST(c->cmd("STOR more.bin").code == 552);
  BOOST_TEST(c->cmd("NOOP").code == 200);
  std::string log = f.server->log();
  BOOST_TEST(log.find("FTPD0305") != std::string::npos, log);
}

// REST beyond the end of the file for STOR: 554 (no sparse files from a few bytes).
BOOST_AUTO_TEST_CASE(rest_past_eof_for_stor_is_554) {
  Fixture f;
  tierce_test::write_file(f.alice_root + "/s.bin", "12345");
  if (::geteuid() == 0) give_to(f.alice_root + "/s.bin");  // the session's account appends to it
  auto c = f.alice();
  BOOST_TEST(c->cmd("TYPE I").code == 200);
  BOOST_REQUIRE(c->pasv() != 0);
  BOOST_TEST(c->cmd("REST 1000000000000").code == 350);
  BOOST_TEST(c->cmd("STOR s.bin").code == 554);
  BOOST_TEST(file_size(f.alice_root + "/s.bin") == 5u);
  BOOST_TEST(c->cmd("REST 5").code == 350);  // at the end: a resume, fine
  BOOST_TEST(c->store("STOR s.bin", "678") == 226);
  BOOST_TEST(tierce_test::read_file(f.alice_root + "/s.bin") == "12345678");
}

#ifdef TIERCE_TEST_HAVE_ADTS
namespace {

// TPRT TCP + EPSV + one raw stream with its HELLO; the stream's fd (HELLO-ACK read).
int raw_adts_stream(Client& c) {
  auto t = c.cmd("TPRT TCP");
  BOOST_REQUIRE_EQUAL(t.code, 200);
  auto cookie = tierce::ftp::parse_tprt_cookie(t.text());
  BOOST_REQUIRE(cookie);
  uint16_t port = c.epsv();
  BOOST_REQUIRE(port != 0);
  int fd = Client::data_connect(port);
  BOOST_REQUIRE(fd >= 0);
  std::string h = adts_hello(*cookie);
  BOOST_REQUIRE(::send(fd, h.data(), h.size(), MSG_NOSIGNAL) == ssize_t(h.size()));
  BOOST_REQUIRE(read_hello_ack(fd) == 0);
  return fd;
}

}  // namespace

// TYPE A RETR of a large file over ADTS: converted through a scratch file, not in memory.
BOOST_AUTO_TEST_CASE(type_a_retr_large_file_adts_bounded_rss) {
  Fixture f;
  uint64_t size = ascii_test_bytes();
  make_sparse(f.alice_root + "/big.txt", size);
  auto c = f.alice();
  pid_t worker = worker_of(*c);
  BOOST_TEST(c->cmd("TYPE A").code == 200);
  auto t = c->cmd("TPRT TCP");
  BOOST_REQUIRE_EQUAL(t.code, 200);
  auto cookie = tierce::ftp::parse_tprt_cookie(t.text());
  uint16_t port = c->epsv();
  BOOST_REQUIRE(port != 0);
  tierce::adts::SessionParams p;
  p.cookie = *cookie;
  p.timeout = 60000ms;
  auto s = tierce::adts::connect("127.0.0.1", port, p);
  RssSampler rss(worker);
  c->send_raw("RETR big.txt\r\n");
  tierce::adts::Sink discard;  // no fd, no memory: the bytes are dropped
  uint64_t got = s->receive(discard);
  long peak = rss.stop();
  BOOST_TEST(c->reply().code == 150);
  BOOST_TEST(c->reply().code == 226);
  BOOST_TEST(got == size);
  BOOST_TEST_MESSAGE("TYPE A ADTS RETR of " << size << " bytes: worker VmRSS peak " << peak
                                            << " KiB");
  BOOST_TEST(peak > 0);
#ifndef TIERCE_TEST_ASAN
  BOOST_TEST(peak < kRssBoundKib);
#else
  BOOST_TEST_MESSAGE("ASan build: RSS bound asserted by the plain build only");
#endif
}

// An ADTS STOR whose BEGIN announces 1 GiB, then nothing: the worker allocates nothing for it
// (TYPE A, which went through a memory sink, and TYPE I), and the server serves another client
// meanwhile. Closing the stream then fails the transfer (426).
BOOST_AUTO_TEST_CASE(adts_stor_announcing_1gib_sending_nothing) {
  Fixture f;
  tierce_test::write_file(f.alice_root + "/small.txt", "small\n");
  for (const char* type : {"A", "I"}) {
    auto c = f.alice();
    pid_t worker = worker_of(*c);
    BOOST_TEST(c->cmd(std::string("TYPE ") + type).code == 200);
    int s = raw_adts_stream(*c);
    RssSampler rss(worker);
    BOOST_TEST(c->cmd("STOR huge.bin").code == 150);
    std::string b = adts_block(1, 1, 0, 1ull << 30);
    BOOST_REQUIRE(::send(s, b.data(), b.size(), MSG_NOSIGNAL) == ssize_t(b.size()));
    // Meanwhile another session is served, start to end.
    auto other = f.alice();
    int code = 0;
    BOOST_TEST(other->retrieve("RETR small.txt", &code) == "small\n");
    BOOST_TEST(code == 226);
    BOOST_TEST(other->cmd("QUIT").code == 221);
    std::this_thread::sleep_for(200ms);  // let the worker sit in the transfer a while
    long peak = rss.stop();
    ::close(s);
    BOOST_TEST(c->reply().code == 426);
    BOOST_TEST(c->cmd("NOOP").code == 200);
    BOOST_TEST_MESSAGE("ADTS STOR announcing 1 GiB (TYPE " << type << "): worker VmRSS peak "
                                                           << peak << " KiB");
    BOOST_TEST(peak > 0);
#ifndef TIERCE_TEST_ASAN
    BOOST_TEST(peak < kRssBoundKib);
#else
    BOOST_TEST_MESSAGE("ASan build: RSS bound asserted by the plain build only");
#endif
  }
}

namespace {

// Connects from 127.0.0.2 (loopback, but not the control peer 127.0.0.1) and sends the HELLO;
// the HELLO-ACK status, or -1 when the server closed without one.
int stranger_hello(uint16_t port, uint64_t cookie) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  src.sin_addr.s_addr = htonl(0x7f000002);
  BOOST_REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) == 0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(port);
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) == 0);
  timeval tv{20, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string h = adts_hello(cookie);
  (void)::send(fd, h.data(), h.size(), MSG_NOSIGNAL);
  int status = read_hello_ack(fd);
  ::close(fd);
  return status;
}

uint16_t tprt_epsv(Client& c, uint64_t* cookie) {
  auto t = c.cmd("TPRT TCP");
  BOOST_REQUIRE_EQUAL(t.code, 200);
  auto ck = tierce::ftp::parse_tprt_cookie(t.text());
  BOOST_REQUIRE(ck);
  *cookie = *ck;
  return c.epsv();
}

}  // namespace

// The ADTS listener takes streams only from the control connection's peer ([limits]
// adts_peer_only, default on): a stranger with the right cookie gets no HELLO-ACK; the client
// itself then connects. Off (NAT setups): the stranger's stream is accepted.
BOOST_AUTO_TEST_CASE(adts_listener_takes_only_the_control_peer) {
  {
    Fixture f;
    tierce_test::write_file(f.alice_root + "/p.txt", "mine");
    auto c = f.alice();
    uint64_t cookie = 0;
    uint16_t port = tprt_epsv(*c, &cookie);
    BOOST_REQUIRE(port != 0);
    BOOST_TEST(stranger_hello(port, cookie) == -1);
    tierce::adts::SessionParams p;
    p.cookie = cookie;
    p.timeout = 20000ms;
    auto s = tierce::adts::connect("127.0.0.1", port, p);
    c->send_raw("RETR p.txt\r\n");
    std::vector<uint8_t> got;
    tierce::adts::Sink sink;
    sink.memory = &got;
    s->receive(sink);
    BOOST_TEST(c->reply().code == 150);
    BOOST_TEST(c->reply().code == 226);
    BOOST_TEST(std::string(got.begin(), got.end()) == "mine");
    std::string log = f.server->log();
    BOOST_TEST(log.find("ADT0105") != std::string::npos, log);
  }
  {
    Fixture f("", "[limits]\nadts_peer_only = false\n");
    auto c = f.alice();
    uint64_t cookie = 0;
    uint16_t port = tprt_epsv(*c, &cookie);
    BOOST_REQUIRE(port != 0);
    BOOST_TEST(stranger_hello(port, cookie) == 0);
  }
}

// With an upload limit the BEGIN above it is refused at once: 552.
BOOST_AUTO_TEST_CASE(adts_begin_over_upload_limit_is_552) {
  Fixture f("", "[limits]\nmax_upload_bytes = 1048576\n");
  auto c = f.alice();
  BOOST_TEST(c->cmd("TYPE I").code == 200);
  int s = raw_adts_stream(*c);
  BOOST_TEST(c->cmd("STOR huge.bin").code == 150);
  std::string b = adts_block(1, 1, 0, 1ull << 30);
  BOOST_REQUIRE(::send(s, b.data(), b.size(), MSG_NOSIGNAL) == ssize_t(b.size()));
  auto r = c->reply();
  BOOST_TEST(r.code == 552);
  BOOST_TEST(r.text().find("Exceeded storage allocation") != std::string::npos, r.text());
  ::close(s);
  BOOST_TEST(c->cmd("NOOP").code == 200);
  BOOST_TEST(file_size(f.alice_root + "/huge.bin") == 0u);
}
#endif

// ---- TLS: AUTH resets the login; data connections must resume the control session ----

namespace {

// A self-signed certificate in `dir` (openssl CLI); false when openssl is missing.
bool make_cert(const TempDir& dir, std::string* cert, std::string* key) {
  *cert = dir / "cert.pem";
  *key = dir / "key.pem";
  std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + *key + " -out " +
                    *cert + " -days 2 -subj /CN=localhost >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// The control connection of `c` after AUTH TLS: commands and replies inside TLS.
class TlsControl {
 public:
  TlsControl(Client& c, std::shared_ptr<tierce::ftp::TlsContext> ctx) : ctx_(std::move(ctx)) {
    auto r = c.cmd("AUTH TLS");
    BOOST_REQUIRE_EQUAL(r.code, 234);
    tls_ = tierce::ftp::TlsConnection::connect(ctx_, c.fd(), "localhost", 10000ms);
  }
  tierce::ftp::Reply cmd(const std::string& line) {
    std::string l = line + "\r\n";
    tls_->write_all({reinterpret_cast<const uint8_t*>(l.data()), l.size()});
    return reply();
  }
  tierce::ftp::Reply reply() {
    for (;;) {
      if (auto r = parser_.take()) return *r;
      uint8_t buf[4096];
      size_t n = 0;
      try {
        n = tls_->read_some({buf, sizeof buf});
      } catch (const std::exception&) {
        return {};
      }
      if (n == 0) return {};
      parser_.feed({reinterpret_cast<const char*>(buf), n});
    }
  }
  tierce::ftp::TlsConnection* tls() { return tls_.get(); }
  const std::shared_ptr<tierce::ftp::TlsContext>& ctx() const { return ctx_; }

 private:
  std::shared_ptr<tierce::ftp::TlsContext> ctx_;
  std::unique_ptr<tierce::ftp::TlsConnection> tls_;
  tierce::ftp::ReplyParser parser_;
};

uint16_t pasv_port(const tierce::ftp::Reply& r) {
  auto t = r.text();
  auto open = t.find('('), close = t.find(')');
  BOOST_REQUIRE(open != std::string::npos && close != std::string::npos);
  auto hp = tierce::ftp::parse_port_arg(t.substr(open + 1, close - open - 1));
  BOOST_REQUIRE(hp);
  return hp->port;
}

// RETR over PROT P; the data connection's TLS resumes the control session when `reuse`.
// The final reply code (0 when none).
int tls_retr(TlsControl& t, const std::string& file, bool reuse, std::string* data) {
  uint16_t port = pasv_port(t.cmd("PASV"));
  int d = Client::data_connect(port);
  BOOST_REQUIRE(d >= 0);
  std::string line = "RETR " + file + "\r\n";
  t.tls()->write_all({reinterpret_cast<const uint8_t*>(line.data()), line.size()});
  std::unique_ptr<tierce::ftp::TlsConnection> dt;
  try {
    dt = tierce::ftp::TlsConnection::connect(t.ctx(), d, "localhost", 10000ms,
                                             reuse ? t.tls() : nullptr);
    uint8_t buf[4096];
    for (;;) {
      size_t n = dt->read_some({buf, sizeof buf});
      if (n == 0) break;
      data->append(reinterpret_cast<const char*>(buf), n);
    }
  } catch (const std::exception&) {
  }
  dt.reset();
  ::close(d);
  auto r = t.reply();
  if (r.code == 150) r = t.reply();
  return r.code;
}

}  // namespace

// RFC 4217 §4: AUTH TLS after a plain login resets the session: the user logs in again.
BOOST_AUTO_TEST_CASE(auth_tls_after_login_resets_the_login) {
  TempDir certs;
  std::string cert, key;
  if (!make_cert(certs, &cert, &key)) {
    BOOST_TEST_MESSAGE("openssl not available: skipped");
    return;
  }
  Fixture f("", "[tls]\ncert = \"" + cert + "\"\nkey = \"" + key + "\"\n");
  auto c = f.alice();
  BOOST_TEST(c->cmd("PWD").code == 257);
  if (::geteuid() == 0) {
    // Privilege separation: the session already runs as its account; no new login can happen in
    // it, so AUTH TLS is refused and the session goes on unchanged.
    BOOST_TEST(c->cmd("AUTH TLS").code == 503);
    BOOST_TEST(c->cmd("PWD").code == 257);
    BOOST_TEST(f.server->log().find("FTPD0207") != std::string::npos);
    return;
  }
  TlsControl t(*c, tierce::ftp::TlsContext::client(false));
  BOOST_TEST(t.cmd("PWD").code == 530);
  BOOST_TEST(t.cmd("USER alice").code == 331);
  BOOST_TEST(t.cmd("PASS wonderland").code == 230);
  BOOST_TEST(t.cmd("PWD").code == 257);
  BOOST_TEST(f.server->log().find("FTPD0206") != std::string::npos);
}

// [tls] require_reuse (default true): a PROT P data connection with a fresh TLS handshake gets
// 426 (FTPD0405); one resuming the control connection's session is served. Off: both served.
BOOST_AUTO_TEST_CASE(tls_data_connection_must_resume_the_session) {
  TempDir certs;
  std::string cert, key;
  if (!make_cert(certs, &cert, &key)) {
    BOOST_TEST_MESSAGE("openssl not available: skipped");
    return;
  }
  for (bool require : {true, false}) {
    Fixture f("", "[tls]\ncert = \"" + cert + "\"\nkey = \"" + key + "\"\nrequire_reuse = " +
                      (require ? "true" : "false") + "\n");
    tierce_test::write_file(f.alice_root + "/t.txt", "secret");
    Client c(f.server->port());
    BOOST_REQUIRE_EQUAL(c.reply().code, 220);
    TlsControl t(c, tierce::ftp::TlsContext::client(false));
    BOOST_TEST(t.cmd("USER alice").code == 331);
    BOOST_TEST(t.cmd("PASS wonderland").code == 230);
    BOOST_TEST(t.cmd("PBSZ 0").code == 200);
    BOOST_TEST(t.cmd("PROT P").code == 200);
    std::string data;
    BOOST_TEST(tls_retr(t, "t.txt", true, &data) == 226);
    BOOST_TEST(data == "secret");
    data.clear();
    int code = tls_retr(t, "t.txt", false, &data);
    if (require) {
      BOOST_TEST(code == 426);
      BOOST_TEST(data.empty());
      BOOST_TEST(f.server->log().find("FTPD0405") != std::string::npos);
    } else {
      BOOST_TEST(code == 226);
      BOOST_TEST(data == "secret");
    }
  }
}
