// ftp_adts/ftp/tls.cc — FTPS on OpenSSL 3. The connection talks to the socket through its own
// small BIO (recv/send with MSG_DONTWAIT | MSG_NOSIGNAL) instead of OpenSSL's socket BIO: so the
// caller's fd keeps its blocking mode, a peer that vanishes gives EPIPE and not SIGPIPE, and every
// operation can wait in poll(2) against its deadline — a silent peer or one that sends garbage
// instead of a ClientHello ends in a TlsError, never a hang.
#include "ftp_adts/ftp/tls.h"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace tierce::ftp {

namespace {

using Clock = std::chrono::steady_clock;

// OpenSSL's error queue as one line ("error:0A00010B:SSL routines::wrong version number").
std::string ssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

// ---- the socket BIO -----------------------------------------------------------------------------

bool inet_pton_any(const std::string& host, unsigned char* out16) {
  return inet_pton(AF_INET, host.c_str(), out16) == 1 ||
         inet_pton(AF_INET6, host.c_str(), out16) == 1;
}

int bio_fd(BIO* b) {
  return int(reinterpret_cast<intptr_t>(BIO_get_data(b)));
}

int bio_write(BIO* b, const char* data, int len) {
  BIO_clear_retry_flags(b);
  ssize_t n = ::send(bio_fd(b), data, size_t(len), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_write(b);
    return -1;
  }
  return int(n);
}

int bio_read(BIO* b, char* data, int len) {
  BIO_clear_retry_flags(b);
  ssize_t n = ::recv(bio_fd(b), data, size_t(len), MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) BIO_set_retry_read(b);
    return -1;
  }
  return int(n);
}

long bio_ctrl(BIO*, int cmd, long, void*) {
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;  // send() does not buffer
    default:
      return 0;
  }
}

int bio_create(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

BIO_METHOD* socket_method() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "tierce-ftp-socket");
    BIO_meth_set_write(m, bio_write);
    BIO_meth_set_read(m, bio_read);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_create(m, bio_create);
    return m;
  }();
  return method;
}

// Waits until fd is ready for `events` or the deadline passes (then throws naming `what`).
// A zero timeout means no deadline.
void wait_ready(int fd, short events, Clock::time_point deadline, bool bounded, const char* what,
                std::chrono::milliseconds timeout) {
  for (;;) {
    int ms = -1;
    if (bounded) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0)
        throw TlsError(std::string("TLS ") + what + " timed out after " +
                       std::to_string(timeout.count()) + " ms");
      ms = int(std::min<long long>(left.count() + 1, 1 << 30));
    }
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw TlsError(std::string("TLS ") + what + ": poll: " + std::strerror(errno));
    }
    if (r == 0) continue;  // the deadline check above throws
    if (p.revents & POLLNVAL) throw TlsError(std::string("TLS ") + what + ": bad socket");
    return;  // readable/writable, or an error/hangup the next recv/send reports
  }
}

// Runs one SSL operation until it completes, waiting in poll on WANT_READ/WANT_WRITE. Returns
// the op's result (> 0) or, for reads, 0 on a clean close; throws TlsError otherwise.
template <typename Op>
int drive(SSL* ssl, int fd, std::chrono::milliseconds timeout, const char* what, Op op,
          bool eof_ok) {
  auto deadline = Clock::now() + timeout;
  bool bounded = timeout.count() > 0;
  for (;;) {
    ERR_clear_error();
    errno = 0;
    int r = op();
    if (r > 0) return r;
    int e = SSL_get_error(ssl, r);
    int saved_errno = errno;
    switch (e) {
      case SSL_ERROR_WANT_READ:
        wait_ready(fd, POLLIN, deadline, bounded, what, timeout);
        continue;
      case SSL_ERROR_WANT_WRITE:
        wait_ready(fd, POLLOUT, deadline, bounded, what, timeout);
        continue;
      case SSL_ERROR_ZERO_RETURN:
        if (eof_ok) return 0;
        throw TlsError(std::string("TLS ") + what + ": the peer closed the connection");
      case SSL_ERROR_SYSCALL: {
        std::string q = ERR_peek_error() ? ssl_errors() : "";
        if (!q.empty()) throw TlsError(std::string("TLS ") + what + ": " + q);
        if (saved_errno == 0) {
          if (eof_ok) return 0;
          throw TlsError(std::string("TLS ") + what + ": the peer closed the connection");
        }
        throw TlsError(std::string("TLS ") + what + ": " + std::strerror(saved_errno));
      }
      default: {
        std::string why = ssl_errors();
        long v = SSL_get_verify_result(ssl);
        if (v != X509_V_OK)
          why += std::string(" (certificate: ") + X509_verify_cert_error_string(v) + ")";
        throw TlsError(std::string("TLS ") + what + " failed: " + why);
      }
    }
  }
}

// Fails early with the OS's words when a PEM file cannot be read (OpenSSL says "system lib").
void check_readable(const std::string& path, const char* role) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) throw TlsError(std::string("TLS ") + role + " \"" + path + "\": " + std::strerror(errno));
  std::fclose(f);
}

SSL_CTX* new_ctx(const SSL_METHOD* method) {
  SSL_CTX* ctx = SSL_CTX_new(method);
  if (!ctx) throw TlsError("TLS: SSL_CTX_new: " + ssl_errors());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // FTP peers often close a data connection without close_notify; the transfer's size is known
  // from the control channel, so an EOF is an end, not an attack.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return ctx;
}

// Server: a client that resumes a session is opening a data channel (it resumes the control
// channel's); it needs no fresh TLS 1.3 tickets. Sending them anyway does harm: a client that
// uploads and closes without reading them leaves unread bytes, its kernel answers with a reset,
// and the server's last read fails with ECONNRESET instead of a clean end of the file.
SSL_TICKET_RETURN on_ticket_decrypt(SSL* s, SSL_SESSION*, const unsigned char*, size_t,
                                    SSL_TICKET_STATUS status, void*) {
  switch (status) {
    case SSL_TICKET_EMPTY:
    case SSL_TICKET_NO_DECRYPT:
      return SSL_TICKET_RETURN_IGNORE_RENEW;  // what OpenSSL does without a callback
    case SSL_TICKET_SUCCESS:
    case SSL_TICKET_SUCCESS_RENEW:
      SSL_set_num_tickets(s, 0);
      return SSL_TICKET_RETURN_USE;
    default:
      return SSL_TICKET_RETURN_ABORT;
  }
}

// The SSL ex_data slot that points at a control connection's SessionBinding.
int binding_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// Server: a ticket issued on a control connection carries its binding (ticket app data), which a
// data connection's resumption brings back (resumed_binding).
int on_ticket_generate(SSL* s, void*) {
  auto* b = static_cast<const SessionBinding*>(SSL_get_ex_data(s, binding_index()));
  if (!b) return 1;
  SSL_SESSION* sess = SSL_get0_session(s);
  return sess && SSL_SESSION_set1_ticket_appdata(sess, b->data(), b->size()) == 1 ? 1 : 0;
}

}  // namespace

namespace {

// A self-signed certificate for a throwaway key of `real`'s type: installing it in a context or a
// connection whose key does not match it makes OpenSSL release that key (SSL_use_certificate
// frees a private key of the same slot that does not fit the new certificate). nullptr for a
// type without one. The throwaway key is as small as its type allows: only its slot
// matters, it never signs a handshake (RSA 2048: the security level refuses a smaller one).
X509* make_placeholder(const EVP_PKEY* real, EVP_PKEY** key_out) {
  *key_out = nullptr;
  if (!real) return nullptr;
  EVP_PKEY* k = nullptr;
  switch (EVP_PKEY_get_base_id(real)) {
    case EVP_PKEY_RSA: k = EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", size_t(2048)); break;
    case EVP_PKEY_RSA_PSS: k = EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA-PSS", size_t(2048)); break;
    case EVP_PKEY_EC: k = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"); break;
    case EVP_PKEY_ED25519: k = EVP_PKEY_Q_keygen(nullptr, nullptr, "Ed25519"); break;
    case EVP_PKEY_ED448: k = EVP_PKEY_Q_keygen(nullptr, nullptr, "Ed448"); break;
    default: return nullptr;
  }
  if (!k) return nullptr;
  X509* x = X509_new();
  bool ok = x && X509_set_version(x, 2) == 1 &&
            ASN1_INTEGER_set(X509_get_serialNumber(x), 1) == 1 &&
            X509_gmtime_adj(X509_getm_notBefore(x), 0) && X509_gmtime_adj(X509_getm_notAfter(x), 60) &&
            X509_set_pubkey(x, k) == 1;
  if (ok) {
    X509_NAME* n = X509_get_subject_name(x);
    ok = X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC,
                                    reinterpret_cast<const unsigned char*>("tierce-ftpd: no key"),
                                    -1, -1, 0) == 1 &&
         X509_set_issuer_name(x, n) == 1;
    const int id = EVP_PKEY_get_base_id(k);
    ok = ok && X509_sign(x, k, id == EVP_PKEY_ED25519 || id == EVP_PKEY_ED448 ? nullptr
                                                                                : EVP_sha256()) > 0;
  }
  if (!ok) {
    EVP_PKEY_free(k);
    X509_free(x);
    return nullptr;
  }
  *key_out = k;
  return x;
}

}  // namespace

// ---- contexts -----------------------------------------------------------------------------------

std::shared_ptr<TlsContext> TlsContext::server(const std::string& cert_pem,
                                               const std::string& key_pem) {
  check_readable(cert_pem, "certificate");
  check_readable(key_pem, "key");
  SSL_CTX* ctx = new_ctx(TLS_server_method());
  std::shared_ptr<TlsContext> owner(new TlsContext(ctx));
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_pem.c_str()) != 1)
    throw TlsError("TLS certificate \"" + cert_pem + "\": " + ssl_errors());
  if (SSL_CTX_use_PrivateKey_file(ctx, key_pem.c_str(), SSL_FILETYPE_PEM) != 1)
    throw TlsError("TLS key \"" + key_pem + "\": " + ssl_errors());
  if (SSL_CTX_check_private_key(ctx) != 1)
    throw TlsError("TLS key \"" + key_pem + "\" does not match the certificate \"" + cert_pem +
                   "\": " + ssl_errors());
  // Session resumption between the control and data channels needs an id context.
  static const unsigned char kSid[] = "tierce-ftpd";
  SSL_CTX_set_session_id_context(ctx, kSid, sizeof kSid - 1);
  // Resumption by tickets only (they carry the control connection's binding); no server-side
  // session cache, which would resume by session id without it.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_session_ticket_cb(ctx, on_ticket_generate, on_ticket_decrypt, nullptr);
  owner->placeholder_ = make_placeholder(SSL_CTX_get0_privatekey(ctx), &owner->placeholder_key_);
  return owner;
}

bool TlsContext::forget_private_key() {
  if (!placeholder_ || !placeholder_key_) return false;
  if (SSL_CTX_get0_privatekey(ctx_) == placeholder_key_) return true;
  // The placeholder certificate releases the real key (it does not fit it); its own key then
  // makes a usable pair again (a handshake must still find a certificate to resume with).
  const bool ok = SSL_CTX_use_certificate(ctx_, placeholder_) == 1 &&
                  SSL_CTX_use_PrivateKey(ctx_, placeholder_key_) == 1;
  ERR_clear_error();
  return ok && SSL_CTX_get0_privatekey(ctx_) == placeholder_key_;
}

bool TlsConnection::forget_private_key() {
  X509* p = ctx_ ? ctx_->placeholder() : nullptr;
  EVP_PKEY* k = ctx_ ? ctx_->placeholder_key() : nullptr;
  if (!p || !k) return false;
  if (SSL_get_privatekey(ssl_) == k) return true;
  const bool ok = SSL_use_certificate(ssl_, p) == 1 && SSL_use_PrivateKey(ssl_, k) == 1;
  ERR_clear_error();
  return ok && SSL_get_privatekey(ssl_) == k;
}

void TlsContext::new_ticket_keys() {
  unsigned char keys[80];  // name 16, HMAC 32, AES 32 (SSL_CTX_set_tlsext_ticket_keys)
  if (RAND_bytes(keys, sizeof keys) != 1 ||
      SSL_CTX_set_tlsext_ticket_keys(ctx_, keys, sizeof keys) != 1) {
    OPENSSL_cleanse(keys, sizeof keys);
    throw TlsError("TLS: cannot set new session ticket keys: " + ssl_errors());
  }
  OPENSSL_cleanse(keys, sizeof keys);
}

SessionBinding new_session_binding() {
  SessionBinding b{};
  if (RAND_bytes(b.data(), int(b.size())) != 1)
    throw TlsError("TLS: RAND_bytes failed: " + ssl_errors());
  return b;
}

std::shared_ptr<TlsContext> TlsContext::client(bool verify) {
  SSL_CTX* ctx = new_ctx(TLS_client_method());
  std::shared_ptr<TlsContext> owner(new TlsContext(ctx));
  if (verify) {
    if (SSL_CTX_set_default_verify_paths(ctx) != 1)
      throw TlsError("TLS: cannot load the system certificate store: " + ssl_errors());
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  // Sessions are carried by hand (SSL_get1_session on the control connection), no cache needed.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL);
  return owner;
}

TlsContext::~TlsContext() {
  SSL_CTX_free(ctx_);
  X509_free(placeholder_);
  EVP_PKEY_free(placeholder_key_);
}

// ---- connections --------------------------------------------------------------------------------

TlsConnection::TlsConnection(std::shared_ptr<TlsContext> ctx, SSL* ssl, int fd,
                             std::chrono::milliseconds t)
    : ctx_(std::move(ctx)), ssl_(ssl), fd_(fd), timeout_(t) {}

TlsConnection::~TlsConnection() {
  SSL_free(ssl_);
}

namespace {

SSL* new_ssl(SSL_CTX* ctx, int fd) {
  SSL* ssl = SSL_new(ctx);
  if (!ssl) throw TlsError("TLS: SSL_new: " + ssl_errors());
  BIO* bio = BIO_new(socket_method());
  if (!bio) {
    SSL_free(ssl);
    throw TlsError("TLS: BIO_new: " + ssl_errors());
  }
  BIO_set_data(bio, reinterpret_cast<void*>(intptr_t(fd)));
  SSL_set_bio(ssl, bio, bio);  // one reference, owned by ssl now
  return ssl;
}

}  // namespace

std::unique_ptr<TlsConnection> TlsConnection::accept(std::shared_ptr<TlsContext> ctx, int fd,
                                                     std::chrono::milliseconds timeout,
                                                     const SessionBinding* bind) {
  if (!ctx) throw TlsError("TLS accept: no context");
  SSL* ssl = new_ssl(ctx->native(), fd);
  std::unique_ptr<TlsConnection> c(new TlsConnection(std::move(ctx), ssl, fd, timeout));
  if (bind) {
    c->bind_ = std::make_unique<SessionBinding>(*bind);
    if (SSL_set_ex_data(ssl, binding_index(), c->bind_.get()) != 1)
      throw TlsError("TLS accept: SSL_set_ex_data: " + ssl_errors());
  }
  SSL_set_accept_state(ssl);
  drive(
      ssl, fd, timeout, "handshake (accept)", [ssl] { return SSL_accept(ssl); }, false);
  return c;
}

std::unique_ptr<TlsConnection> TlsConnection::connect(std::shared_ptr<TlsContext> ctx, int fd,
                                                      const std::string& sni_host,
                                                      std::chrono::milliseconds timeout,
                                                      const TlsConnection* reuse) {
  if (!ctx) throw TlsError("TLS connect: no context");
  SSL* ssl = new_ssl(ctx->native(), fd);
  std::unique_ptr<TlsConnection> c(new TlsConnection(std::move(ctx), ssl, fd, timeout));
  SSL_set_connect_state(ssl);
  if (!sni_host.empty()) {
    // SNI carries host names only (RFC 6066 §3), never an address literal.
    unsigned char addr[16];
    bool literal = inet_pton_any(sni_host, addr);
    if (!literal) SSL_set_tlsext_host_name(ssl, sni_host.c_str());
    if (SSL_get_verify_mode(ssl) & SSL_VERIFY_PEER) {
      if (SSL_set1_host(ssl, sni_host.c_str()) != 1)
        throw TlsError("TLS connect: bad host name \"" + sni_host + "\"");
    }
  }
  if (reuse) {
    // RFC 4217 §10.2: servers such as vsftpd (require_ssl_reuse) insist that the data channel
    // resumes the control channel's session.
    // A copy of it: OpenSSL marks the session of a connection freed without close_notify (a
    // data connection that broke or was cut short) not resumable, and with the control's own
    // object that would poison every later data connection of the session.
    if (SSL_SESSION* s = SSL_get1_session(reuse->ssl_)) {
      if (SSL_SESSION_is_resumable(s)) {
        if (SSL_SESSION* copy = SSL_SESSION_dup(s)) {
          SSL_set_session(ssl, copy);
          SSL_SESSION_free(copy);
        }
      }
      SSL_SESSION_free(s);
    }
  }
  drive(
      ssl, fd, timeout, "handshake (connect)", [ssl] { return SSL_connect(ssl); }, false);
  return c;
}

void TlsConnection::write_all(std::span<const uint8_t> bytes) {
  try {
    while (!bytes.empty()) {
      size_t done = 0;
      SSL* ssl = ssl_;
      drive(
          ssl, fd_, timeout_, "write",
          [ssl, bytes, &done] { return SSL_write_ex(ssl, bytes.data(), bytes.size(), &done); },
          false);
      bytes = bytes.subspan(done);
    }
  } catch (...) {
    failed_ = true;
    throw;
  }
}

size_t TlsConnection::read_some(std::span<uint8_t> buf) {
  if (buf.empty()) return 0;
  size_t got = 0;
  SSL* ssl = ssl_;
  try {
    int r = drive(
        ssl, fd_, timeout_, "read",
        [ssl, buf, &got] { return SSL_read_ex(ssl, buf.data(), buf.size(), &got); }, true);
    return r > 0 ? got : 0;
  } catch (...) {
    failed_ = true;
    throw;
  }
}

void TlsConnection::shutdown() {
  // Best effort: send our close_notify, do not wait for the peer's (RFC 8446 §6.1 allows it).
  // After a fatal error OpenSSL forbids SSL_shutdown; the peer then just sees the socket close.
  if (failed_ || SSL_in_init(ssl_) || (SSL_get_shutdown(ssl_) & SSL_SENT_SHUTDOWN)) return;
  auto deadline = Clock::now() + std::min(timeout_, std::chrono::milliseconds(2000));
  for (;;) {
    ERR_clear_error();
    int r = SSL_shutdown(ssl_);
    if (r >= 0) return;  // 0: sent, the peer's is not awaited; 1: both done
    int e = SSL_get_error(ssl_, r);
    if (e != SSL_ERROR_WANT_WRITE || Clock::now() >= deadline) {
      ERR_clear_error();
      return;
    }
    pollfd p{fd_, POLLOUT, 0};
    ::poll(&p, 1, 50);
  }
}

bool TlsConnection::pending() const {
  return SSL_pending(ssl_) > 0;
}

bool TlsConnection::session_reused() const {
  return SSL_session_reused(ssl_) == 1;
}

bool TlsConnection::resumed_binding(const SessionBinding& b) const {
  if (SSL_session_reused(ssl_) != 1) return false;
  SSL_SESSION* sess = SSL_get0_session(ssl_);
  void* data = nullptr;
  size_t len = 0;
  if (!sess || SSL_SESSION_get0_ticket_appdata(sess, &data, &len) != 1) return false;
  return len == b.size() && CRYPTO_memcmp(data, b.data(), len) == 0;
}

}  // namespace tierce::ftp
