// ftp_adts/server/control.h — the control connection of one session: command lines in (plain or
// inside TLS after AUTH TLS), replies out. Replies are buffered and flushed when the session is
// about to wait (no complete command left in the input), before a data transfer, or when the
// buffer grows: a client that pipelines commands gets its replies in a few segments instead of one
// per command.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ftp_adts/ftp/tls.h"

namespace tierce::ftpd {

using Millis = std::chrono::milliseconds;

class Control {
 public:
  // Takes ownership of fd. max_line: longer command lines are discarded (TooLong); max_buffer:
  // the control input held while a transfer runs (poll_input) — a client that sends more than
  // that during one transfer is cut off (overflowed(), the session answers 421 and closes).
  explicit Control(int fd, size_t max_line = 4096, size_t max_buffer = 64 << 10);
  ~Control();
  Control(const Control&) = delete;
  Control& operator=(const Control&) = delete;

  int fd() const { return fd_; }
  bool closed() const { return closed_; }

  enum class Read { Line, TooLong, Closed, Timeout };
  // The next command line without CR LF. Flushes pending replies before it blocks. TooLong: a line
  // longer than max_line was discarded (up to its LF). A last line that the peer did not end
  // with LF before closing is discarded too (never executed): Closed.
  Read read_line(std::string* line, Millis timeout);
  // Whether a whole line is already buffered (pipelined commands).
  bool line_buffered() const;
  // Reads what is available without blocking (a transfer checks for ABOR between chunks).
  // Returns false when the peer closed, or when the input held would pass max_buffer (then
  // overflowed() is true and nothing more is read: the transfer stops, the session ends with 421).
  bool poll_input();
  bool overflowed() const { return overflowed_; }
  size_t buffered() const { return in_.size(); }
  // Takes the buffered line if it is ABOR (a client's abort during a transfer). Other lines stay.
  bool take_abort();

  void reply(int code, std::string_view text);
  void reply_multi(int code, const std::vector<std::string>& lines);
  // Writes the pending replies; false if the peer is gone (the session then ends).
  bool flush();

  // AUTH TLS: the handshake on the control connection (after the 234 was flushed). The tickets
  // it issues carry a fresh binding, which a data connection must bring back (require_reuse).
  void start_tls(std::shared_ptr<ftp::TlsContext> ctx, Millis timeout);
  bool tls() const { return tls_ != nullptr || relayed_tls_; }
  // Privilege separation's session process: its connection is a relay from the pre-login process,
  // which holds the TLS of the control connection marked `binding` (monitor.h).
  void set_relayed_tls(const ftp::SessionBinding& binding) {
    relayed_tls_ = true;
    binding_ = binding;
  }
  // Privilege separation's pre-login process after the login: relays the client's connection (its
  // TLS included) to and from `pair` (a stream socket to the session process; owned, closed at
  // the end), the input already read going first. Returns when either side closes or fails; a
  // client that stops reading is given up after `write_timeout`.
  void relay(int pair, Millis write_timeout);
  const ftp::SessionBinding& tls_binding() const { return binding_; }
  ftp::TlsConnection* tls_connection() { return tls_.get(); }

 private:
  // Reads once (blocking up to timeout); 0 = EOF, -1 = timeout; throws nothing.
  long read_some(Millis timeout);
  // Finds the first LF in in_ (beyond the part already scanned).
  bool extract(std::string* line, bool* too_long);

  int fd_;
  size_t max_line_, max_buffer_;
  bool closed_ = false;
  bool overflowed_ = false;
  std::string in_;
  bool discarding_ = false;  // inside an over-long line: drop up to the next LF
  std::string out_;
  std::unique_ptr<ftp::TlsConnection> tls_;
  ftp::SessionBinding binding_{};
  bool relayed_tls_ = false;
};

}  // namespace tierce::ftpd
