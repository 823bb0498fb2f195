// ftp_adts/ftp/tls.h — FTPS (RFC 4217: AUTH TLS, PBSZ, PROT) on OpenSSL: a context per server or
// client, and a TLS connection over an already connected socket for the control or data channel.
#pragma once

#include <openssl/ssl.h>

#include <array>
#include <chrono>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

namespace tierce::ftp {

class TlsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class TlsContext {
 public:
  // Server: certificate chain and key in PEM. Throws TlsError naming the file and OpenSSL's reason.
  static std::shared_ptr<TlsContext> server(const std::string& cert_pem,
                                            const std::string& key_pem);
  // Client: verify=false accepts any certificate (self-signed test servers); otherwise the system
  // store and the host name are checked.
  static std::shared_ptr<TlsContext> client(bool verify);
  ~TlsContext();
  SSL_CTX* native() const { return ctx_; }
  // Server: new random session ticket keys for this context (a forked worker calls it, so that no
  // other worker can decrypt its tickets, nor it theirs).
  void new_ticket_keys();
  // Server: drops this context's private key (a logged-in session whose data connections must
  // resume the control connection's session, which needs no key: the key is then not in the
  // session's memory). A handshake that does not resume fails from then on. True when the key is
  // gone; false when it cannot be (a key type without a placeholder: RSA, RSA-PSS, EC, Ed25519
  // and Ed448 have one), and then nothing changed.
  bool forget_private_key();
  // The placeholder certificate and its throwaway key that replace the real pair (same key type:
  // installing the certificate releases the real key; the pair keeps the context usable for the
  // resumptions, which sign nothing); nullptr when there is none.
  X509* placeholder() const { return placeholder_; }
  EVP_PKEY* placeholder_key() const { return placeholder_key_; }

 private:
  explicit TlsContext(SSL_CTX* c) : ctx_(c) {}
  SSL_CTX* ctx_;
  X509* placeholder_ = nullptr;
  EVP_PKEY* placeholder_key_ = nullptr;
};

// A TLS session on a connected socket (the fd stays owned by the caller and keeps its blocking
// mode: the connection uses recv/send with MSG_DONTWAIT | MSG_NOSIGNAL and waits in poll).
// Blocking with a deadline: every call throws TlsError on a timeout or a TLS failure; each call
// gets the whole timeout (a timeout of 0 means no deadline).
// A server control connection's mark on the session tickets it issues (ticket app data): a data
// connection that resumes a ticket carrying it resumed this control connection's session, not
// another client's. Random per control connection.
using SessionBinding = std::array<unsigned char, 16>;
SessionBinding new_session_binding();

class TlsConnection {
 public:
  // Server side handshake. On a data channel a client may resume the control channel's session
  // (curl and lftp do; we accept but do not require reuse): any context made by
  // TlsContext::server() allows it, and a resumed handshake sends no new TLS 1.3 tickets.
  // `bind` (a control connection): every ticket issued on it carries that mark.
  static std::unique_ptr<TlsConnection> accept(std::shared_ptr<TlsContext> ctx, int fd,
                                               std::chrono::milliseconds timeout,
                                               const SessionBinding* bind = nullptr);
  // Client side; `reuse` offers the control channel's session on a data channel.
  static std::unique_ptr<TlsConnection> connect(std::shared_ptr<TlsContext> ctx, int fd,
                                                const std::string& sni_host,
                                                std::chrono::milliseconds timeout,
                                                const TlsConnection* reuse = nullptr);
  ~TlsConnection();
  void write_all(std::span<const uint8_t> bytes);
  size_t read_some(std::span<uint8_t> buf);  // 0 = clean close_notify or EOF
  void shutdown();                           // sends close_notify (best effort)
  // True when the handshake resumed a session (client: the one offered with `reuse`).
  bool session_reused() const;
  // Server: true when the handshake resumed a ticket marked `b` (issued on the control connection
  // with that binding). A fresh handshake or another connection's ticket: false.
  bool resumed_binding(const SessionBinding& b) const;
  // Server: drops this connection's reference to the private key (TlsContext::forget_private_key;
  // the session goes on: its keys are derived already). True when it is gone.
  bool forget_private_key();
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  // Whether decrypted bytes wait inside OpenSSL (a record bigger than the last read): a poll on
  // the socket would not see them. (No read-ahead: no whole record waits undecrypted.)
  bool pending() const;
  int fd() const { return fd_; }

 private:
  TlsConnection(std::shared_ptr<TlsContext> ctx, SSL* ssl, int fd, std::chrono::milliseconds t);
  std::shared_ptr<TlsContext> ctx_;
  SSL* ssl_;
  int fd_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<SessionBinding> bind_;  // a server control connection's mark (ex_data points here)
  bool failed_ = false;  // a fatal error happened: OpenSSL forbids SSL_shutdown afterwards
};

}  // namespace tierce::ftp
