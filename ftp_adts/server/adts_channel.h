// ftp_adts/server/adts_channel.h — a session's ADTS data session (docs/ftp.md "TPRT"): what TPRT
// negotiated, the listener opened by the following EPSV/PASV (accepting in a thread of its own
// while the control connection is served), and the persistent adts::Session accepted from it.
// Every later RETR/STOR/APPE/LIST/NLST/MLSD moves its bytes over that session until TPRT STREAM,
// a new EPSV/PASV, QUIT, a broken stream or the data timeout.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "ftp_adts/server/data.h"

namespace tierce::ftpd {

class AdtsChannel {
 public:
  enum class Kind { Tcp, ParallelTcp, Verbs };
  AdtsChannel();
  ~AdtsChannel();
  AdtsChannel(const AdtsChannel&) = delete;
  AdtsChannel& operator=(const AdtsChannel&) = delete;

  static bool verbs_available();

  // TPRT accepted: the parameters of the next data session. Ends the current one. false (nothing
  // changed) when the stream count is not 1 for TCP/VERBS or not 1..adts::kMaxStreams for PTCP:
  // the caller checks it against its own limit first and replies 501.
  // allowed_peer: the only host the streams may come from ("" = any; [limits] adts_peer_only).
  bool configure(Kind kind, unsigned streams, size_t block, bool zero_copy, Millis timeout,
                 uint64_t cookie, const std::string& allowed_peer = {});
  bool configured() const { return configured_; }
  // EPSV/PASV after TPRT: listens for the data session's streams and starts accepting them at
  // once, in the background (a client may wait for its HELLO-ACKs before it sends the next
  // command), while the control connection goes on serving commands. The listener stays open
  // until the session is complete or the data timeout. Ends the previous data session. The port,
  // or why there is no listener (Unavailable).
  base::Result<int> listen(const std::string& host, uint16_t lo, uint16_t hi);
  // For a transfer command: waits (at most the rest of the data timeout) for the session the
  // listener is accepting. A failure (Unavailable) when none came: the transfer then gets 425.
  base::Status wait_session();
  // A session is up, or a listener is still accepting one.
  bool ready() const;
  // TPRT STREAM / QUIT: closes everything (a listener still accepting included) and forgets the
  // parameters.
  void reset();

  // One transfer each, on the session (waited for as wait_session does); a broken session is
  // closed (the next transfer needs a new EPSV). Status Aborted = the sender sent ABORT (session
  // still usable). The result's bytes are those moved so far also when the transfer failed.
  TransferResult send_file(int fd, uint64_t offset, uint64_t length);
  TransferResult send_bytes(std::string_view bytes);
  // max: a BEGIN announcing more is refused at once (Quota; the session is broken).
  TransferResult receive_file(int fd, uint64_t offset, uint64_t max = UINT64_MAX);
  TransferResult receive_bytes(std::string* out, uint64_t max);

  // Also called from the thread accepting the streams: must be thread-safe and must not depend on
  // the caller's lifetime.
  void set_log(std::function<void(const std::string&)> log) { log_ = std::move(log); }

  struct Impl;

 private:
  bool configured_ = false;
  std::unique_ptr<Impl> impl_;
  std::function<void(const std::string&)> log_;
};

}  // namespace tierce::ftpd
