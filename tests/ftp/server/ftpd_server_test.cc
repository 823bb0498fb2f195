// tests/ftp/server/ftpd_server_test.cc — the real tierce-ftpd binary on an ephemeral port with a
// temp root, spoken to over raw FTP sockets: login, the file commands, PASV/EPSV transfers
// byte-identical, REST, SIZE/MDTM, MLSD, bounce protection, the prefork master (max_sessions,
// killed workers replaced) and a TPRT PTCP session carrying two RETRs.
#define BOOST_TEST_MODULE ftpd_server
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <boost/test/unit_test.hpp>
#include <random>
#include <thread>

#include "tests/ftp/server/ftpd_harness.h"
#ifdef TIERCE_TEST_HAVE_ADTS
#include "ftp_adts/adts/adts.h"
#endif

using namespace ftpd_test;
using tierce_test::TempDir;
using namespace std::chrono_literals;

namespace {

std::string random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = char(rng());
  return s;
}

// A server with user alice (write) and bob (read-only), an anonymous area, and small timeouts.
struct Fixture {
  TempDir dir;
  std::string alice_root = dir / "alice";
  std::string anon_root = dir / "anon";
  std::string extra;
  std::unique_ptr<Server> server;

  explicit Fixture(const std::string& more = "") : extra(more) {
    ::mkdir(alice_root.c_str(), 0755);
    ::mkdir(anon_root.c_str(), 0755);
    tierce_test::write_file(anon_root + "/readme.txt", "hello anonymous\n");
    // As root, alice's and bob's sessions run as nobody (unprivileged_user's default): alice
    // writes there. Anonymous runs as daemon: never as a writable user's account (privsep.h).
    give_to(alice_root);
    static const std::string alice_hash = hash_of("wonderland");
    server = std::make_unique<Server>(
        dir, "workers = 2\nmax_sessions = 4\nlogin_fail_delay_ms = 10\nxferlog = \"" +
                 dir / "xferlog" + "\"\n" + extra + "\n[anonymous]\nroot = \"" + anon_root +
                 "\"\nrun_as = \"daemon\"\n[[user]]\nname = \"alice\"\npassword = \"" + alice_hash +
                 "\"\nroot = \"" + alice_root + "\"\nwrite = true\n[[user]]\nname = \"bob\"\n" +
                 "password = \"" + alice_hash + "\"\nroot = \"" + alice_root + "\"\n");
  }
  std::unique_ptr<Client> alice() { return logged_in(server->port(), "alice", "wonderland"); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(login_ok_and_failures) {
  Fixture f;
  Client c(f.server->port());
  BOOST_TEST(c.reply().code == 220);
  BOOST_TEST(c.cmd("PWD").code == 530);  // before login
  BOOST_TEST(c.cmd("USER alice").code == 331);
  BOOST_TEST(c.cmd("PASS wrong").code == 530);
  BOOST_TEST(c.cmd("USER nobody").code == 331);  // no user enumeration
  BOOST_TEST(c.cmd("PASS wonderland").code == 530);
  BOOST_TEST(c.cmd("USER alice").code == 331);
  BOOST_TEST(c.cmd("PASS wonderland").code == 230);
  BOOST_TEST(c.cmd("SYST").text() == "UNIX Type: L8");
  BOOST_TEST(c.cmd("NOOP").code == 200);
  BOOST_TEST(c.cmd("ACCT x").code == 202);
  BOOST_TEST(c.cmd("FROBNICATE").code == 500);
  BOOST_TEST(c.cmd("QUIT").code == 221);
  std::string log = f.server->log();
  BOOST_TEST(log.find("FTPD0202 login failed: alice") != std::string::npos, log);
  BOOST_TEST(log.find("FTPD0201 login ok: alice") != std::string::npos);
  BOOST_TEST(log.find("wonderland") == std::string::npos, "the password is never logged");
  // Too many failures close the connection.
  Client d(f.server->port());
  d.reply();
  for (int i = 0; i < 2; ++i) {
    d.cmd("USER alice");
    BOOST_TEST(d.cmd("PASS bad").code == 530);
  }
  d.cmd("USER alice");
  BOOST_TEST(d.cmd("PASS bad").code == 421);
  BOOST_TEST(d.reply().code == 0);  // closed
}

BOOST_AUTO_TEST_CASE(anonymous_is_read_only) {
  Fixture f;
  Client c(f.server->port());
  c.reply();
  BOOST_REQUIRE(c.login("anonymous", "me@example.org"));
  int code = 0;
  BOOST_TEST(c.retrieve("RETR readme.txt", &code) == "hello anonymous\n");
  BOOST_TEST(code == 226);
  BOOST_TEST(c.cmd("MKD x").code == 550);
  BOOST_TEST(c.cmd("DELE readme.txt").code == 550);
  BOOST_TEST(c.cmd("RNFR readme.txt").code == 550);
  BOOST_TEST(c.cmd("STOR up").code == 550);
  BOOST_TEST(c.cmd("STOR up").text().find("Permission denied") != std::string::npos);
  // Read-only named users too.
  Client b(f.server->port());
  b.reply();
  BOOST_REQUIRE(b.login("bob", "wonderland"));
  BOOST_TEST(b.cmd("MKD y").code == 550);
}

BOOST_AUTO_TEST_CASE(directories_and_renames) {
  Fixture f;
  auto c = f.alice();
  BOOST_TEST(c->cmd("PWD").text() == "\"/\" is the current directory");
  BOOST_TEST(c->cmd("MKD sub").code == 257);
  BOOST_TEST(c->cmd("MKD a\"b").text() == "\"/a\"\"b\" created");  // quotes doubled
  BOOST_TEST(c->cmd("CWD sub").code == 250);
  BOOST_TEST(c->cmd("PWD").text() == "\"/sub\" is the current directory");
  BOOST_TEST(c->cmd("CDUP").code == 250);
  BOOST_TEST(c->cmd("CWD ../../..").code == 250);
  BOOST_TEST(c->cmd("PWD").text() == "\"/\" is the current directory");  // never above the root
  BOOST_TEST(c->cmd("CWD nonexistent").code == 550);
  tierce_test::write_file(f.alice_root + "/f.txt", "x");
  BOOST_TEST(c->cmd("CWD f.txt").code == 550);
  BOOST_TEST(c->cmd("RNFR f.txt").code == 350);
  BOOST_TEST(c->cmd("RNTO sub/g.txt").code == 250);
  BOOST_TEST(tierce_test::read_file(f.alice_root + "/sub/g.txt") == "x");
  BOOST_TEST(c->cmd("RNTO h.txt").code == 503);  // no RNFR
  BOOST_TEST(c->cmd("RMD sub").code == 550);     // not empty
  BOOST_TEST(c->cmd("DELE sub/g.txt").code == 250);
  BOOST_TEST(c->cmd("DELE sub/g.txt").code == 550);
  BOOST_TEST(c->cmd("RMD sub").code == 250);
  BOOST_TEST(c->cmd("XMKD /sub2").code == 257);
  BOOST_TEST(c->cmd("XRMD sub2").code == 250);
  // Nothing escapes the root: a symlink to / is the user's root.
  ::symlink("/", (f.alice_root + "/escape").c_str());
  BOOST_TEST(c->cmd("SIZE escape/etc/passwd").code == 550);
}

BOOST_AUTO_TEST_CASE(pasv_retr_stor_byte_identical_and_rest) {
  Fixture f;
  auto c = f.alice();
  BOOST_TEST(c->cmd("TYPE I").code == 200);
  std::string data = random_bytes(3 * 1024 * 1024 + 17, 1);
  BOOST_TEST(c->store("STOR blob.bin", data) == 226);
  BOOST_TEST(tierce_test::read_file(f.alice_root + "/blob.bin") == data);
  int code = 0;
  BOOST_TEST(c->retrieve("RETR blob.bin", &code) == data);
  BOOST_TEST(code == 226);
  // REST + RETR: the tail from the offset.
  BOOST_TEST(c->cmd("REST 1000000").code == 350);
  BOOST_TEST(c->retrieve("RETR blob.bin", &code) == data.substr(1000000));
  BOOST_TEST(code == 226);
  // REST + STOR: written at the offset.
  BOOST_TEST(c->store("STOR part.bin", data.substr(0, 5000)) == 226);
  BOOST_TEST(c->cmd("REST 5000").code == 350);
  BOOST_TEST(c->store("STOR part.bin", data.substr(5000, 7000)) == 226);
  BOOST_TEST(tierce_test::read_file(f.alice_root + "/part.bin") == data.substr(0, 12000));
  // APPE.
  BOOST_TEST(c->store("APPE part.bin", "tail") == 226);
  BOOST_TEST(tierce_test::read_file(f.alice_root + "/part.bin") == data.substr(0, 12000) + "tail");
  // SIZE and MDTM.
  BOOST_TEST(c->cmd("SIZE blob.bin").text() == std::to_string(data.size()));
  BOOST_TEST(c->cmd("MKD d").code == 257);
  BOOST_TEST(c->cmd("SIZE d").code == 550);
  BOOST_TEST(c->cmd("SIZE nope").code == 550);
  BOOST_TEST(c->cmd("MFMT 20200102030405 blob.bin").code == 213);
  BOOST_TEST(c->cmd("MDTM blob.bin").text() == "20200102030405");
  // TYPE A converts LF to CRLF on the way out and back on the way in.
  tierce_test::write_file(f.alice_root + "/t.txt", "a\nb\n");
  BOOST_TEST(c->cmd("TYPE A").code == 200);
  BOOST_TEST(c->retrieve("RETR t.txt", &code) == "a\r\nb\r\n");
  BOOST_TEST(c->store("STOR u.txt", "x\r\ny\r\n") == 226);
  BOOST_TEST(tierce_test::read_file(f.alice_root + "/u.txt") == "x\ny\n");
  // Missing file: 550, no data connection needed.
  BOOST_TEST(c->cmd("RETR missing").code == 550);
  std::string xfer = tierce_test::read_file(f.dir / "xferlog");
  BOOST_TEST(xfer.find("/blob.bin b _ o r alice ftp 0 * c") != std::string::npos, xfer);
  BOOST_TEST(xfer.find("/blob.bin b _ i r alice ftp 0 * c") != std::string::npos, xfer);
}

BOOST_AUTO_TEST_CASE(epsv_listings_and_mlsd_facts) {
  Fixture f;
  auto c = f.alice();
  tierce_test::write_file(f.alice_root + "/one.txt", "12345");
  ::mkdir((f.alice_root + "/dir").c_str(), 0755);
  uint16_t port = c->epsv();
  BOOST_REQUIRE(port != 0);
  int d = Client::data_connect(port);
  BOOST_TEST(c->cmd("MLSD").code == 150);
  std::string listing = Client::read_all(d);
  BOOST_TEST(c->reply().code == 226);
  BOOST_TEST(listing.find("type=cdir;") != std::string::npos, listing);
  bool saw_file = false, saw_dir = false;
  size_t pos = 0;
  while (pos < listing.size()) {
    size_t e = listing.find("\r\n", pos);
    BOOST_REQUIRE(e != std::string::npos);
    auto facts = tierce::ftp::parse_facts(listing.substr(pos, e - pos));
    BOOST_REQUIRE(facts);
    if (facts->name == "one.txt") {
      saw_file = true;
      BOOST_TEST(facts->type == "file");
      BOOST_TEST(facts->size.value_or(0) == 5u);
      BOOST_TEST(facts->modify.has_value());
      BOOST_TEST(facts->perm.find('r') != std::string::npos);
    }
    if (facts->name == "dir") {
      saw_dir = true;
      BOOST_TEST(facts->type == "dir");
    }
    pos = e + 2;
  }
  BOOST_TEST(saw_file);
  BOOST_TEST(saw_dir);
  int code = 0;
  std::string list = c->retrieve("LIST -la", &code);
  BOOST_TEST(code == 226);
  BOOST_TEST(list.find("one.txt\r\n") != std::string::npos, list);
  BOOST_TEST((list.rfind("-rw", 0) == 0 || list.rfind("d", 0) == 0), list);
  std::string names = c->retrieve("NLST", &code);
  BOOST_TEST(names == "dir\r\none.txt\r\n");
  auto mlst = c->cmd("MLST one.txt");
  BOOST_TEST(mlst.code == 250);
  BOOST_TEST(mlst.text().find("size=5;") != std::string::npos);
  auto feat = c->cmd("FEAT");
  BOOST_TEST(feat.code == 211);
  BOOST_TEST(feat.text().find("MLST type*") != std::string::npos);
  BOOST_TEST(feat.text().find("REST STREAM") != std::string::npos);
  auto stat = c->cmd("STAT one.txt");
  BOOST_TEST(stat.code == 213);
  BOOST_TEST(stat.text().find("one.txt") != std::string::npos);
  BOOST_TEST(c->cmd("EPSV ALL").code == 200);
  BOOST_TEST(c->cmd("PASV").code == 501);
}

BOOST_AUTO_TEST_CASE(port_bounce_refused) {
  Fixture f;
  auto c = f.alice();
  auto r = c->cmd("PORT 10,1,2,3,200,1");
  BOOST_TEST(r.code == 500);
  BOOST_TEST(r.text().find("bounce") != std::string::npos);
  BOOST_TEST(c->cmd("EPRT |1|192.0.2.1|5000|").code == 500);
  BOOST_TEST(c->cmd("PORT 127,0,0,1,0,21").code == 500);  // privileged port
  BOOST_TEST(c->cmd("EPRT |3|x|1|").code == 522);
  BOOST_TEST(c->cmd("PORT garbage").code == 501);
  // The control peer's own address is fine (active mode).
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(lfd, 1);
  socklen_t len = sizeof a;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  uint16_t p = ntohs(a.sin_port);
  tierce_test::write_file(f.alice_root + "/act.txt", "active");
  BOOST_TEST(c->cmd("EPRT |1|127.0.0.1|" + std::to_string(p) + "|").code == 200);
  c->send_raw("RETR act.txt\r\n");
  int d = ::accept(lfd, nullptr, nullptr);
  BOOST_TEST(c->reply().code == 150);
  BOOST_TEST(Client::read_all(d) == "active");
  BOOST_TEST(c->reply().code == 226);
  ::close(lfd);
}

BOOST_AUTO_TEST_CASE(max_sessions_turns_away_with_421) {
  Fixture f;  // max_sessions = 4
  std::vector<std::unique_ptr<Client>> busy;
  for (int i = 0; i < 4; ++i) {
    busy.push_back(std::make_unique<Client>(f.server->port()));
    BOOST_REQUIRE_EQUAL(busy.back()->reply().code, 220);
  }
  Client extra(f.server->port());
  auto r = extra.reply();
  BOOST_TEST(r.code == 421, r.text());
  BOOST_TEST(r.text().find("Too many sessions") != std::string::npos);
  // One leaves: a new session is served again.
  busy[0]->cmd("QUIT");
  busy[0].reset();
  BOOST_TEST(tierce_test::eventually(
      [&] {
        Client again(f.server->port());
        return again.reply().code == 220;
      },
      10s, 50ms));
}

BOOST_AUTO_TEST_CASE(killed_worker_is_replaced) {
  Fixture f;
  auto c = f.alice();
  // The worker: the session's process itself, or under privilege separation (as root) its
  // monitor (monitor.h), whose death ends the session's processes too.
  pid_t worker = f.server->worker_of(session_pid(*c));
  BOOST_REQUIRE(worker > 0);
  BOOST_TEST(::kill(worker, SIGKILL) == 0);
  BOOST_TEST(c->reply().code == 0);  // its session is gone
  BOOST_TEST(tierce_test::eventually(
      [&] { return f.server->log().find("FTPD0004 worker " + std::to_string(worker)) !=
                   std::string::npos; },
      10s));
  // Kill the idle ones too; the master keeps serving.
  for (pid_t p : f.server->workers()) ::kill(p, SIGKILL);
  BOOST_TEST(tierce_test::eventually([&] { return f.server->workers().size() >= 2; }, 10s));
  auto d = f.alice();
  BOOST_TEST(d->cmd("NOOP").code == 200);
  BOOST_TEST(f.server->stop() == 0);
}

BOOST_AUTO_TEST_CASE(idle_timeout_and_bad_input) {
  Fixture f("idle_timeout_s = 1");
  auto c = f.alice();
  std::string long_line(10000, 'A');  // (not a temporary + "\r\n": GCC 12's -Warray-bounds)
  long_line += "\r\n";
  c->send_raw(long_line);
  BOOST_TEST(c->reply().code == 500);
  c->send_raw(std::string("\x01\x02\xff\xfe\r\n", 6));
  BOOST_TEST(c->reply().code == 500);
  BOOST_TEST(c->cmd("NOOP").code == 200);
  auto r = c->reply();  // nothing sent: the server closes after idle_timeout_s
  BOOST_TEST(r.code == 421);
  BOOST_TEST(r.text().find("timeout") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(clean_stop_exits_0) {
  Fixture f;
  auto c = f.alice();
  BOOST_TEST(f.server->stop() == 0);
}

#ifdef TIERCE_TEST_HAVE_ADTS
BOOST_AUTO_TEST_CASE(tprt_ptcp_session_carries_two_retrs) {
  Fixture f;
  auto c = f.alice();
  auto feat = c->cmd("FEAT");
  BOOST_TEST(feat.text().find("TPRT TCP;PTCP") != std::string::npos, feat.text());
  std::string a = random_bytes(3 * 1024 * 1024 + 5, 2), b = random_bytes(1234, 3);
  tierce_test::write_file(f.alice_root + "/a.bin", a);
  tierce_test::write_file(f.alice_root + "/b.bin", b);
  BOOST_TEST(c->cmd("TYPE I").code == 200);
  BOOST_TEST(c->cmd("TPRT PTCP 0").code == 501);
  auto t = c->cmd("TPRT PTCP 2");
  BOOST_REQUIRE_EQUAL(t.code, 200);
  auto cookie = tierce::ftp::parse_tprt_cookie(t.text());
  BOOST_REQUIRE(cookie);
  BOOST_TEST(c->cmd("PORT 127,0,0,1,200,1").code == 501);  // no active mode for ADTS
  uint16_t port = c->epsv();
  BOOST_REQUIRE(port != 0);
  tierce::adts::SessionParams p;
  p.kind = tierce::adts::ChannelKind::ParallelTcp;
  p.streams = 2;
  p.cookie = *cookie;
  p.timeout = std::chrono::milliseconds(30000);
  auto session = tierce::adts::connect("127.0.0.1", port, p);
  // Pipelined: both RETRs before any reply.
  c->send_raw("RETR a.bin\r\nRETR b.bin\r\n");
  std::vector<uint8_t> got_a, got_b;
  tierce::adts::Sink sa, sb;
  sa.memory = &got_a;
  sb.memory = &got_b;
  BOOST_TEST(session->receive(sa) == a.size());
  BOOST_TEST(session->receive(sb) == b.size());
  BOOST_TEST(std::string(got_a.begin(), got_a.end()) == a);
  BOOST_TEST(std::string(got_b.begin(), got_b.end()) == b);
  BOOST_TEST(c->reply().code == 150);
  BOOST_TEST(c->reply().code == 226);
  BOOST_TEST(c->reply().code == 150);
  BOOST_TEST(c->reply().code == 226);
  // STOR and LIST over the same session.
  c->send_raw("STOR c.bin\r\n");
  BOOST_TEST(c->reply().code == 150);
  tierce::adts::Source src;
  src.memory = {reinterpret_cast<const uint8_t*>(b.data()), b.size()};
  session->send(src);
  BOOST_TEST(c->reply().code == 226);
  BOOST_TEST(tierce_test::read_file(f.alice_root + "/c.bin") == b);
  c->send_raw("NLST\r\n");
  std::vector<uint8_t> names;
  tierce::adts::Sink sn;
  sn.memory = &names;
  session->receive(sn);
  BOOST_TEST(std::string(names.begin(), names.end()) == "a.bin\r\nb.bin\r\nc.bin\r\n");
  BOOST_TEST(c->reply().code == 150);
  BOOST_TEST(c->reply().code == 226);
  BOOST_TEST(c->cmd("TPRT STREAM").code == 200);
  session->close();
  int code = 0;
  BOOST_TEST(c->retrieve("RETR b.bin", &code) == b);  // plain data connections again
  BOOST_TEST(code == 226);
}
#endif

#ifdef TIERCE_TEST_HAVE_ADTS
namespace {

// Connects one raw stream with a HELLO; its HELLO-ACK status (-1: none).
int raw_stream(uint16_t port, const std::string& h, int* fd_out) {
  int fd = Client::data_connect(port);
  if (fd < 0) return -1;
  if (::send(fd, h.data(), h.size(), MSG_NOSIGNAL) != ssize_t(h.size())) return -1;
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  int status = read_hello_ack(fd);
  if (fd_out)
    *fd_out = fd;
  else
    ::close(fd);
  return status;
}

}  // namespace

// docs/ftp.md: the listener of an ADTS session survives commands sent before the streams connect;
// an ABORT from the sender gets exactly one final reply; a new EPSV / QUIT ends a listener that is
// still accepting at once; the log counts the bytes a failed transfer moved.
BOOST_AUTO_TEST_CASE(tprt_listener_commands_and_sender_abort) {
  Fixture f;
  tierce_test::write_file(f.alice_root + "/x.txt", "12345");
  auto c = f.alice();
  BOOST_TEST(c->cmd("TYPE I").code == 200);
  auto t = c->cmd("TPRT TCP");
  BOOST_REQUIRE_EQUAL(t.code, 200);
  uint64_t cookie = *tierce::ftp::parse_tprt_cookie(t.text());
  // A new EPSV while the first listener still accepts: the first port is closed right away.
  uint16_t first = c->epsv();
  BOOST_REQUIRE(first != 0);
  auto t0 = std::chrono::steady_clock::now();
  uint16_t port = c->epsv();
  BOOST_REQUIRE(port != 0);
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < 10s));
  BOOST_TEST(raw_stream(first, adts_hello(cookie), nullptr) == -1);
  // Commands between the EPSV and the stream connects are answered; the listener stays.
  BOOST_TEST(c->cmd("NOOP").code == 200);
  BOOST_TEST(c->cmd("SIZE x.txt").code == 213);
  BOOST_TEST(c->cmd("PORT 127,0,0,1,200,1").code == 501);
  BOOST_TEST(raw_stream(port, adts_hello(cookie ^ 1), nullptr) == 3);  // wrong cookie refused
  int d = -1;
  BOOST_REQUIRE_EQUAL(raw_stream(port, adts_hello(cookie), &d), 0);
  // The sender aborts: one final reply, then NOOP gets its own.
  BOOST_TEST(c->cmd("STOR a.bin").code == 150);
  std::string blocks = adts_block(1, 1, 0, 100) + adts_block(2, 1, 0, 50) + std::string(50, 'I') +
                       adts_block(4, 1, 0, 0);
  BOOST_TEST(::send(d, blocks.data(), blocks.size(), MSG_NOSIGNAL) == ssize_t(blocks.size()));
  auto fin = c->reply();
  BOOST_TEST(fin.code == 426, fin.text());
  BOOST_TEST(c->cmd("NOOP").code == 200);
  // The session stays usable: a good transfer.
  BOOST_TEST(c->cmd("STOR b.bin").code == 150);
  blocks = adts_block(1, 2, 0, 10) + adts_block(2, 2, 0, 10) + std::string(10, 'B') + adts_block(3, 2, 0, 0);
  BOOST_TEST(::send(d, blocks.data(), blocks.size(), MSG_NOSIGNAL) == ssize_t(blocks.size()));
  BOOST_TEST(c->reply().code == 226);
  BOOST_TEST(tierce_test::read_file(f.alice_root + "/b.bin") == std::string(10, 'B'));
  ::close(d);
  // EPSV, then QUIT before any stream: answered at once (the listener is stopped).
  BOOST_TEST(c->cmd("TPRT PTCP 2").code == 200);
  BOOST_TEST(c->epsv() != 0);
  t0 = std::chrono::steady_clock::now();
  BOOST_TEST(c->cmd("QUIT").code == 221);
  BOOST_TEST(c->reply().code == 0);
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < 10s));
  std::string log;
  for (int i = 0; i < 50; ++i) {
    log = f.server->log();
    if (log.find("FTPD0102") != std::string::npos) break;
    std::this_thread::sleep_for(100ms);
  }
  BOOST_TEST(log.find("received /a.bin: 50 bytes") != std::string::npos, log);
}
#endif

BOOST_AUTO_TEST_CASE(eprt_malformed_is_501_unknown_protocol_522) {
  Fixture f;
  auto c = f.alice();
  for (const char* bad : {"EPRT garbage", "EPRT ||||", "EPRT |1|127.0.0.1|5000", "EPRT |x|"})
    BOOST_TEST(c->cmd(bad).code == 501, bad);
  BOOST_TEST(c->cmd("EPRT |9|127.0.0.1|5000|").code == 522);
  BOOST_TEST(c->cmd("TPRT PTCP 0").code == 501);
  BOOST_TEST(c->cmd("TPRT PTCP 65").code == 501);
  BOOST_TEST(c->cmd("NOOP").code == 200);
}

BOOST_AUTO_TEST_CASE(abor_during_a_transfer) {
  Fixture f;
  auto c = f.alice();
  // Far more than the loopback socket buffers hold: the server is mid-transfer when ABOR comes.
  std::string big = random_bytes(48 * 1024 * 1024, 4);
  tierce_test::write_file(f.alice_root + "/big.bin", big);
  BOOST_TEST(c->cmd("TYPE I").code == 200);
  uint16_t port = c->pasv();
  BOOST_REQUIRE(port != 0);
  int d = Client::data_connect(port);
  BOOST_TEST(c->cmd("RETR big.bin").code == 150);
  // The Telnet IP/DM prefix of RFC 959 §4.1.3 is stripped by the server.
  c->send_raw("\xff\xf4\xff\xf2" "ABOR\r\n");
  BOOST_TEST(c->reply().code == 426);
  BOOST_TEST(c->reply().code == 226);
  ::close(d);
  BOOST_TEST(c->cmd("NOOP").code == 200);
  BOOST_TEST(c->cmd("ABOR").code == 225);  // nothing to abort
  std::string xfer = tierce_test::read_file(f.dir / "xferlog");
  BOOST_TEST(xfer.find("/big.bin b _ o r alice ftp 0 * i") != std::string::npos, xfer);
}

BOOST_AUTO_TEST_CASE(daemon_mode_with_pid_file) {
  TempDir dir;
  std::string root = dir / "r";
  ::mkdir(root.c_str(), 0755);
  tierce_test::write_file(dir / "ftpd.toml",
                          "listen = \"127.0.0.1:0\"\nworkers = 1\nready_file = \"" + dir / "ready" +
                              "\"\n[anonymous]\nroot = \"" + root + "\"\n");
  auto r = run_ftpd({"-c", dir / "ftpd.toml", "--pid-file", dir / "ftpd.pid"});
  BOOST_REQUIRE_MESSAGE(r.code == 0, r.err);  // returns once the daemon is ready
  pid_t pid = pid_t(std::stol(tierce_test::read_file(dir / "ftpd.pid")));
  BOOST_REQUIRE(pid > 0);
  uint16_t port = uint16_t(std::stoul(tierce_test::read_file(dir / "ready")));
  {
    Client c(port);
    BOOST_TEST(c.reply().code == 220);
    BOOST_TEST(c.login("ftp", "x"));
  }
  // A second one on the same pid file is refused (exit 3).
  BOOST_TEST(run_ftpd({"-c", dir / "ftpd.toml", "--pid-file", dir / "ftpd.pid"}).code == 3);
  ::kill(pid, SIGTERM);
  BOOST_TEST(tierce_test::eventually([&] { return ::kill(pid, 0) != 0; }, 20s));
  BOOST_TEST(tierce_test::read_file(dir / "ftpd.pid").empty());  // removed
}

#ifdef TIERCE_TEST_HAVE_ADTS
// A mirror's pattern: many small files over one persistent TCP session, RETRs pipelined in
// windows. Checks every byte and every reply; the elapsed time is printed, not asserted.
BOOST_AUTO_TEST_CASE(tprt_many_small_files_pipelined) {
  Fixture f;
  constexpr int kFiles = 600, kWindow = 100;
  std::vector<std::string> contents;
  for (int i = 0; i < kFiles; ++i) {
    contents.push_back(random_bytes(size_t(100 + i * 7), unsigned(100 + i)));
    tierce_test::write_file(f.alice_root + "/f" + std::to_string(i), contents.back());
  }
  auto c = f.alice();
  BOOST_TEST(c->cmd("TYPE I").code == 200);
  auto t = c->cmd("TPRT TCP");
  BOOST_REQUIRE_EQUAL(t.code, 200);
  tierce::adts::SessionParams p;
  p.kind = tierce::adts::ChannelKind::Tcp;
  p.cookie = *tierce::ftp::parse_tprt_cookie(t.text());
  p.timeout = std::chrono::milliseconds(30000);
  uint16_t port = c->epsv();
  BOOST_REQUIRE(port != 0);
  auto session = tierce::adts::connect("127.0.0.1", port, p);
  auto start = std::chrono::steady_clock::now();
  for (int base = 0; base < kFiles; base += kWindow) {
    std::string batch;
    for (int i = base; i < base + kWindow; ++i) batch += "RETR f" + std::to_string(i) + "\r\n";
    c->send_raw(batch);
    for (int i = base; i < base + kWindow; ++i) {
      std::vector<uint8_t> got;
      tierce::adts::Sink s;
      s.memory = &got;
      session->receive(s);
      BOOST_REQUIRE(std::string(got.begin(), got.end()) == contents[size_t(i)]);
    }
    for (int i = base; i < base + kWindow; ++i) {
      BOOST_REQUIRE_EQUAL(c->reply().code, 150);
      BOOST_REQUIRE_EQUAL(c->reply().code, 226);
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  BOOST_TEST_MESSAGE(kFiles << " pipelined RETRs over one ADTS session: " << secs << " s");
  BOOST_TEST(c->cmd("QUIT").code == 221);
}
#endif

BOOST_AUTO_TEST_CASE(passive_port_takes_only_the_control_peer) {
  Fixture f;
  auto c = f.alice();
  tierce_test::write_file(f.alice_root + "/p.txt", "mine");
  uint16_t port = c->pasv();
  BOOST_REQUIRE(port != 0);
  // A connection from another address (127.0.0.2 is loopback too) is dropped, not served.
  int thief = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  src.sin_addr.s_addr = htonl(0x7f000002);
  BOOST_REQUIRE(::bind(thief, reinterpret_cast<sockaddr*>(&src), sizeof src) == 0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(port);
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_REQUIRE(::connect(thief, reinterpret_cast<sockaddr*>(&dst), sizeof dst) == 0);
  c->send_raw("RETR p.txt\r\n");
  timeval tv{30, 0};
  ::setsockopt(thief, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  BOOST_TEST(Client::read_all(thief).empty());  // closed by the server without data
  int d = Client::data_connect(port);
  BOOST_TEST(c->reply().code == 150);
  BOOST_TEST(Client::read_all(d) == "mine");
  BOOST_TEST(c->reply().code == 226);
  BOOST_TEST(f.server->log().find("dropped: not the control peer") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(tls_required_refuses_plain_login) {
  TempDir certs;
  std::string cert = certs / "cert.pem", key = certs / "key.pem";
  std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key + " -out " + cert +
                    " -days 2 -subj /CN=localhost >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    BOOST_TEST_MESSAGE("openssl not available: skipped");
    return;
  }
  Fixture f("[tls]\ncert = \"" + cert + "\"\nkey = \"" + key + "\"\nrequire = true\n");
  Client c(f.server->port());
  c.reply();
  BOOST_TEST(c.cmd("USER alice").code == 530);
  auto feat = c.cmd("FEAT");
  BOOST_TEST(feat.text().find("AUTH TLS") != std::string::npos);
  BOOST_TEST(c.cmd("PBSZ 0").code == 503);  // needs AUTH TLS first
  BOOST_TEST(c.cmd("CCC").code == 534);
}
