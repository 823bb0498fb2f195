// ftp_adts/server/adts_channel.h — a session's ADTS data session (docs/ftp.md "TPRT"): what TPRT
// negotiated, the listener opened by the following EPSV/PASV, and the persistent adts::Session
// accepted from it on the first transfer. Every later RETR/STOR/APPE/LIST/NLST/MLSD moves its
// bytes over that session until TPRT STREAM, a new EPSV/PASV, QUIT, a broken stream or the data
// timeout.
//
// The seam: without the tierce::adts library (TIERCE_FTPD_HAVE_ADTS undefined) available() is
// false, FEAT does not list TPRT and TPRT gets 502.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ftp_adts/server/data.h"

namespace tierce::ftpd {

class AdtsChannel {
 public:
  enum class Kind { Tcp, ParallelTcp, Verbs };
  AdtsChannel();
  ~AdtsChannel();
  AdtsChannel(const AdtsChannel&) = delete;
  AdtsChannel& operator=(const AdtsChannel&) = delete;

  static bool available();
  static bool verbs_available();

  // TPRT accepted: the parameters of the next data session. Ends the current one.
  void configure(Kind kind, unsigned streams, size_t block, bool zero_copy, Millis timeout,
                 uint64_t cookie);
  bool configured() const { return configured_; }
  // EPSV/PASV after TPRT: listens for the data session's streams. Port, or -1 with *err.
  int listen(const std::string& host, uint16_t lo, uint16_t hi, std::string* err);
  // Waits (data timeout) for the client's streams on the listener opened by listen(). Called right
  // after the 229/227 reply is flushed: a client may wait for its HELLO-ACKs before it sends the
  // next command, so the server must not wait for that command first. false with *err on failure
  // (the next transfer then gets 425).
  bool accept(std::string* err);
  bool ready() const;  // a listener or a session is there
  // TPRT STREAM / QUIT: closes everything and forgets the parameters.
  void reset();

  // One transfer each. The session is accepted on first use; a broken session is closed (the next
  // transfer needs a new EPSV). Status Aborted = the peer aborted (session still usable).
  TransferResult send_file(int fd, uint64_t offset, uint64_t length);
  TransferResult send_bytes(std::string_view bytes);
  TransferResult receive_file(int fd, uint64_t offset);
  TransferResult receive_bytes(std::string* out, uint64_t max);

  void set_log(std::function<void(const std::string&)> log) { log_ = std::move(log); }

  struct Impl;

 private:
  bool configured_ = false;
  std::unique_ptr<Impl> impl_;
  std::function<void(const std::string&)> log_;
};

}  // namespace tierce::ftpd
