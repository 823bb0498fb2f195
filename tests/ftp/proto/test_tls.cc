// tests/ftp/proto/test_tls.cc — the FTPS wrapper (ftp_adts/ftp/tls.h) over socketpairs with a
// self-signed certificate made here with the EVP API: handshake, data both ways, close_notify and
// bare EOF, session reuse on a "data channel", and the failure paths — silent peers time out,
// garbage instead of a ClientHello is a TlsError, bad PEM files are named.
#define BOOST_TEST_MODULE ftp_proto_tls
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <string>
#include <vector>

#include "ftp_adts/ftp/tls.h"
#include "tests/test_util.h"

using namespace tierce::ftp;
using namespace std::chrono_literals;

namespace {

// A self-signed P-256 certificate for CN=localhost (SAN DNS:localhost, IP:127.0.0.1).
void make_cert(const std::string& cert_path, const std::string& key_path) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  BOOST_REQUIRE(key);
  X509* x = X509_new();
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, x, x, nullptr, nullptr, 0);
  X509_EXTENSION* san =
      X509V3_EXT_conf_nid(nullptr, &v3, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1");
  BOOST_REQUIRE(san);
  X509_add_ext(x, san, -1);
  X509_EXTENSION_free(san);
  BOOST_REQUIRE(X509_sign(x, key, EVP_sha256()) > 0);
  FILE* f = std::fopen(cert_path.c_str(), "w");
  PEM_write_X509(f, x);
  std::fclose(f);
  f = std::fopen(key_path.c_str(), "w");
  PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  X509_free(x);
  EVP_PKEY_free(key);
}

struct Certs {
  tierce_test::TempDir dir;
  std::string cert = dir / "cert.pem";
  std::string key = dir / "key.pem";
  Certs() { make_cert(cert, key); }
};

struct Pair {
  int a = -1, b = -1;
  Pair() {
    int sv[2];
    BOOST_REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    a = sv[0];
    b = sv[1];
  }
  ~Pair() {
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
  }
  void close_b() {
    ::close(b);
    b = -1;
  }
};

std::string read_exactly(TlsConnection& c, size_t n) {
  std::string s;
  std::vector<uint8_t> buf(65536);
  while (s.size() < n) {
    size_t got = c.read_some(buf);
    if (got == 0) break;
    s.append(reinterpret_cast<char*>(buf.data()), got);
  }
  return s;
}

void write_str(TlsConnection& c, const std::string& s) {
  c.write_all({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

std::string thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const TlsError& e) {
    return e.what();
  }
  return "";
}

// A connected pair of TLS connections (server on p.a, client on p.b).
struct Connected {
  std::unique_ptr<TlsConnection> server, client;
};
Connected handshake(const std::shared_ptr<TlsContext>& sctx,
                    const std::shared_ptr<TlsContext>& cctx, Pair& p,
                    const TlsConnection* reuse = nullptr) {
  auto fut = std::async(std::launch::async, [&] { return TlsConnection::accept(sctx, p.a, 10s); });
  Connected c;
  c.client = TlsConnection::connect(cctx, p.b, "localhost", 10s, reuse);
  c.server = fut.get();
  return c;
}

}  // namespace

BOOST_AUTO_TEST_CASE(handshake_and_data_both_ways) {
  Certs certs;
  auto sctx = TlsContext::server(certs.cert, certs.key);
  auto cctx = TlsContext::client(false);
  Pair p;
  auto c = handshake(sctx, cctx, p);
  BOOST_TEST(c.server->fd() == p.a);
  // 3 MiB up, echoed back down: more than any socket buffer, so both sides wait in poll.
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = char(i * 131 + (i >> 12));
  auto echo = std::async(std::launch::async, [&] {
    std::string got = read_exactly(*c.server, big.size());
    write_str(*c.server, got);
    return got.size();
  });
  write_str(*c.client, big);
  std::string back = read_exactly(*c.client, big.size());
  BOOST_TEST(echo.get() == big.size());
  BOOST_TEST((back == big));
  // close_notify: the reader sees a clean 0.
  c.client->shutdown();
  std::vector<uint8_t> buf(16);
  BOOST_TEST(c.server->read_some(buf) == 0u);
  c.server->shutdown();
}

BOOST_AUTO_TEST_CASE(bare_eof_reads_as_end) {
  Certs certs;
  auto sctx = TlsContext::server(certs.cert, certs.key);
  Pair p;
  auto c = handshake(sctx, TlsContext::client(false), p);
  // The client takes in what the server sent (TLS 1.3 tickets): closing a socket with unread
  // bytes would reset the connection instead of ending it.
  write_str(*c.server, "220\r\n");
  BOOST_TEST(read_exactly(*c.client, 5) == "220\r\n");
  write_str(*c.client, "last words");
  c.client.reset();  // no close_notify
  p.close_b();
  BOOST_TEST(read_exactly(*c.server, 100) == "last words");
  std::vector<uint8_t> buf(16);
  BOOST_TEST(c.server->read_some(buf) == 0u);
}

BOOST_AUTO_TEST_CASE(data_channel_resumes_control_session) {
  Certs certs;
  auto sctx = TlsContext::server(certs.cert, certs.key);
  auto cctx = TlsContext::client(false);
  Pair control;
  auto ctl = handshake(sctx, cctx, control);
  // TLS 1.3 tickets arrive after the handshake: the client gets them while reading a reply.
  write_str(*ctl.server, "220 ok\r\n");
  BOOST_TEST(read_exactly(*ctl.client, 8) == "220 ok\r\n");
  BOOST_TEST(!ctl.client->session_reused());
  Pair data;
  auto dat = handshake(sctx, cctx, data, ctl.client.get());
  BOOST_TEST(dat.client->session_reused());
  BOOST_TEST(dat.server->session_reused());
  // An upload on the resumed data channel, closed without close_notify and without the client
  // reading anything: the server gets every byte and a clean end (no tickets were left unread).
  write_str(*dat.client, "file bytes");
  dat.client.reset();
  data.close_b();
  BOOST_TEST(read_exactly(*dat.server, 100) == "file bytes");
  // Without `reuse` a full handshake.
  Pair data2;
  auto fresh = handshake(sctx, cctx, data2);
  BOOST_TEST(!fresh.client->session_reused());
}

BOOST_AUTO_TEST_CASE(silent_peers_time_out) {
  Certs certs;
  auto sctx = TlsContext::server(certs.cert, certs.key);
  auto cctx = TlsContext::client(false);
  {
    Pair p;  // nobody sends a ClientHello
    std::string why = thrown([&] { TlsConnection::accept(sctx, p.a, 200ms); });
    BOOST_TEST(why.find("timed out") != std::string::npos, why);
  }
  {
    Pair p;  // nobody answers the ClientHello
    std::string why = thrown([&] { TlsConnection::connect(cctx, p.b, "localhost", 200ms); });
    BOOST_TEST(why.find("timed out") != std::string::npos, why);
  }
  {
    Pair p;  // connected, then the peer says nothing
    auto c = handshake(sctx, cctx, p);
    c.client->set_timeout(200ms);
    std::vector<uint8_t> buf(16);
    std::string why = thrown([&] { c.client->read_some(buf); });
    BOOST_TEST(why.find("timed out") != std::string::npos, why);
    c.client->shutdown();  // after a failure: no crash, no hang
  }
}

BOOST_AUTO_TEST_CASE(garbage_instead_of_client_hello) {
  Certs certs;
  auto sctx = TlsContext::server(certs.cert, certs.key);
  for (std::string garbage : {std::string("USER anonymous\r\n"), std::string(64, '\x16'),
                              std::string("\x16\x03\x01\xff\xff", 5) + std::string(300, 'x')}) {
    Pair p;
    BOOST_REQUIRE(::send(p.b, garbage.data(), garbage.size(), MSG_NOSIGNAL) ==
                  ssize_t(garbage.size()));
    ::shutdown(p.b, SHUT_WR);  // and then EOF: a truncated record must not wait forever
    std::string why = thrown([&] { TlsConnection::accept(sctx, p.a, 10s); });
    BOOST_TEST(!why.empty());
    BOOST_TEST(why.find("timed out") == std::string::npos, why);
  }
  {
    // Garbage, the connection left open: a malformed record header is rejected at once.
    Pair p;
    std::string g = "GET / HTTP/1.0\r\n\r\n";
    BOOST_REQUIRE(::send(p.b, g.data(), g.size(), MSG_NOSIGNAL) == ssize_t(g.size()));
    std::string why = thrown([&] { TlsConnection::accept(sctx, p.a, 10s); });
    BOOST_TEST(!why.empty());
    BOOST_TEST(why.find("timed out") == std::string::npos, why);
  }
  {
    // The client side given garbage instead of a ServerHello.
    Pair p;
    std::string g = "220 plain FTP server\r\n";
    BOOST_REQUIRE(::send(p.a, g.data(), g.size(), MSG_NOSIGNAL) == ssize_t(g.size()));
    std::string why =
        thrown([&] { TlsConnection::connect(TlsContext::client(false), p.b, "localhost", 10s); });
    BOOST_TEST(!why.empty());
    BOOST_TEST(why.find("timed out") == std::string::npos, why);
  }
}

BOOST_AUTO_TEST_CASE(peer_gone_while_writing_is_an_error_not_sigpipe) {
  Certs certs;
  auto sctx = TlsContext::server(certs.cert, certs.key);
  Pair p;
  auto c = handshake(sctx, TlsContext::client(false), p);
  c.client.reset();
  p.close_b();
  std::string chunk(1 << 20, 'x');
  std::string why = thrown([&] {
    for (int i = 0; i < 64; ++i) write_str(*c.server, chunk);
  });
  BOOST_TEST(!why.empty());  // and the process is still alive (SIGPIPE not raised)
}

BOOST_AUTO_TEST_CASE(verifying_client_rejects_self_signed) {
  Certs certs;
  auto sctx = TlsContext::server(certs.cert, certs.key);
  Pair p;
  auto fut = std::async(std::launch::async, [&] {
    try {
      TlsConnection::accept(sctx, p.a, 10s);
    } catch (const TlsError&) {
    }
  });
  std::string why =
      thrown([&] { TlsConnection::connect(TlsContext::client(true), p.b, "localhost", 10s); });
  p.close_b();
  fut.get();
  BOOST_TEST(why.find("certificate") != std::string::npos, why);
}

BOOST_AUTO_TEST_CASE(bad_pem_files_are_named) {
  Certs certs;
  std::string missing = certs.dir / "missing.pem";
  std::string why = thrown([&] { TlsContext::server(missing, certs.key); });
  BOOST_TEST(why.find(missing) != std::string::npos, why);
  why = thrown([&] { TlsContext::server(certs.cert, missing); });
  BOOST_TEST(why.find(missing) != std::string::npos, why);
  std::string junk = certs.dir / "junk.pem";
  tierce_test::write_file(junk, "not a certificate\n");
  why = thrown([&] { TlsContext::server(junk, certs.key); });
  BOOST_TEST(why.find(junk) != std::string::npos, why);
  why = thrown([&] { TlsContext::server(certs.cert, junk); });
  BOOST_TEST(why.find(junk) != std::string::npos, why);
  // A key that does not belong to the certificate.
  Certs other;
  why = thrown([&] { TlsContext::server(certs.cert, other.key); });
  BOOST_TEST(why.find(other.key) != std::string::npos, why);
}
