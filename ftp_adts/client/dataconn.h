// ftp_adts/client/dataconn.h — one plain RFC 959 data connection (passive mode: we connected to
// the port of the 229/227 reply), optionally under TLS (PROT P). Moves bytes between it and a
// local file without user-space copies when it can: splice(2) socket -> pipe -> file on receive,
// sendfile(2) on send; under TLS, or for files splice cannot reach, through a buffer.
// Every wait is bounded by the data timeout ("no progress for S seconds").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ftp_adts/client/net.h"
#include "ftp_adts/ftp/tls.h"

namespace tierce::ftpc {

// Bytes so far and the expected total (0 = unknown).
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

class PlainData {
 public:
  PlainData(Fd sock, Millis timeout);
  ~PlainData();
  // Client side of the TLS handshake (after the 150, as vsftpd and tierce-ftpd expect).
  void start_tls(std::shared_ptr<ftp::TlsContext> ctx, const std::string& host,
                 const ftp::TlsConnection* reuse);
  // Until EOF, written to fd at offset.. (or appended when fd is not seekable). Returns bytes.
  uint64_t receive_to_file(int fd, uint64_t offset, uint64_t total_hint, const ProgressFn& p);
  // Until EOF, at most `max` bytes (more is an error: a listing that does not end).
  std::string receive_to_memory(uint64_t max);
  // [offset, offset+length) of fd; then the connection is closed (EOF ends the upload).
  uint64_t send_from_file(int fd, uint64_t offset, uint64_t length, const ProgressFn& p);
  // After a send: close_notify (TLS), then our FIN, then wait (bounded by the timeout) for the
  // server's close. Closing with unread bytes (TLS 1.3 session tickets) would send a RST that
  // can destroy the tail of the upload before the server has read it.
  void finish_send();
  // Sends TLS close_notify (best effort) and closes.
  void close();

 private:
  size_t read_some(uint8_t* buf, size_t n);  // 0 = EOF; throws on error/timeout
  void write_all(const uint8_t* buf, size_t n);
  Fd sock_;
  Millis timeout_;
  std::unique_ptr<ftp::TlsConnection> tls_;
};

}  // namespace tierce::ftpc
