// ftp_adts/server/control.cc
#include "ftp_adts/server/control.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ftp_adts/ftp/protocol.h"

namespace tierce::ftpd {

namespace {
constexpr size_t kFlushAt = 64 * 1024;  // flush early when this many reply bytes are pending
}

Control::Control(int fd, size_t max_line, size_t max_buffer)
    : fd_(fd), max_line_(max_line), max_buffer_(max_buffer) {}

Control::~Control() {
  flush();
  if (tls_) {
    try {
      tls_->shutdown();
    } catch (...) {
    }
    tls_.reset();
  }
  ::close(fd_);
}

long Control::read_some(Millis timeout) {
  char buf[8192];
  if (tls_) {
    auto start = std::chrono::steady_clock::now();
    try {
      tls_->set_timeout(timeout);
      size_t n = tls_->read_some({reinterpret_cast<uint8_t*>(buf), sizeof buf});
      in_.append(buf, n);
      return long(n);
    } catch (const ftp::TlsError&) {
      // The wrapper does not tell a timeout from a failure; the clock does.
      return std::chrono::steady_clock::now() - start >= timeout ? -1 : 0;
    }
  }
  pollfd p{fd_, POLLIN, 0};
  for (;;) {
    int r = ::poll(&p, 1, int(std::min<long long>(timeout.count(), INT32_MAX)));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return -1;
    break;
  }
  for (;;) {
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    in_.append(buf, size_t(n));
    return long(n);
  }
}

bool Control::extract(std::string* line, bool* too_long) {
  *too_long = false;
  for (;;) {
    size_t lf = in_.find('\n');
    if (discarding_) {
      if (lf == std::string::npos) {
        in_.clear();
        return false;
      }
      in_.erase(0, lf + 1);
      discarding_ = false;
      continue;
    }
    if (lf == std::string::npos) {
      if (in_.size() > max_line_) {
        // Over-long: report it once now and drop the rest of it as it arrives.
        in_.clear();
        discarding_ = true;
        *too_long = true;
        return true;
      }
      return false;
    }
    if (lf > max_line_) {
      in_.erase(0, lf + 1);
      *too_long = true;
      return true;
    }
    line->assign(in_, 0, lf);
    if (!line->empty() && line->back() == '\r') line->pop_back();
    in_.erase(0, lf + 1);
    return true;
  }
}

bool Control::line_buffered() const {
  return !discarding_ && in_.find('\n') != std::string::npos;
}

Control::Read Control::read_line(std::string* line, Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    bool too_long = false;
    if (extract(line, &too_long)) return too_long ? Read::TooLong : Read::Line;
    if (closed_) return Read::Closed;
    if (!flush()) return Read::Closed;
    auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Read::Timeout;
    long n = read_some(left);
    if (n < 0) return Read::Timeout;
    if (n == 0) {
      closed_ = true;
      // A last line without LF is dropped, not executed (issue 17): a connection cut in the
      // middle of "DELE important-file-2" must not delete "important-file-".
      in_.clear();
      return Read::Closed;
    }
  }
}

bool Control::poll_input() {
  if (closed_ || overflowed_) return false;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return true;
  long n = read_some(Millis(tls_ ? 1000 : 0));
  if (n == 0) {
    closed_ = true;
    return false;
  }
  // During a transfer only ABOR is taken from the input; everything else waits here for the
  // transfer to end. A client flooding command lines would grow this without bound: past
  // max_buffer_ it is cut off (one read may pass the mark by at most its 8 KiB).
  if (in_.size() > max_buffer_) {
    overflowed_ = true;
    return false;
  }
  return true;
}

bool Control::take_abort() {
  size_t lf = in_.find('\n');
  if (lf == std::string::npos || discarding_) return false;
  ftp::Command cmd;
  std::string_view l(in_.data(), lf);
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  if (ftp::parse_command(l, &cmd) != ftp::ParseError::None || cmd.verb != "ABOR") return false;
  in_.erase(0, lf + 1);
  return true;
}

void Control::reply(int code, std::string_view text) {
  out_ += ftp::format_reply(code, text);
  if (out_.size() >= kFlushAt) flush();
}

void Control::reply_multi(int code, const std::vector<std::string>& lines) {
  out_ += ftp::format_multiline(code, lines);
  if (out_.size() >= kFlushAt) flush();
}

bool Control::flush() {
  if (out_.empty()) return !closed_;
  if (closed_) {
    out_.clear();
    return false;
  }
  if (tls_) {
    try {
      tls_->write_all({reinterpret_cast<const uint8_t*>(out_.data()), out_.size()});
    } catch (const ftp::TlsError&) {
      closed_ = true;
    }
    out_.clear();
    return !closed_;
  }
  size_t off = 0;
  while (off < out_.size()) {
    // SO_SNDTIMEO on the socket bounds a peer that stops reading.
    ssize_t n = ::send(fd_, out_.data() + off, out_.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      closed_ = true;
      break;
    }
    off += size_t(n);
  }
  out_.clear();
  return !closed_;
}

void Control::relay(int pair, Millis write_timeout) {
  flush();
  const int flags = ::fcntl(pair, F_GETFL);
  if (flags >= 0) ::fcntl(pair, F_SETFL, flags | O_NONBLOCK);
  if (tls_) {
    tls_->set_timeout(write_timeout);
    tls_->forget_private_key();  // no handshake happens on this connection any more
  }
  constexpr size_t kCap = 256 << 10;  // client bytes held while the session does not read
  std::string up = std::move(in_);    // client -> session
  in_.clear();
  char buf[16384];
  bool client_open = !closed_, up_shut = false;
  for (;;) {
    while (!up.empty()) {
      ssize_t n = ::send(pair, up.data(), up.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        up.erase(0, size_t(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else {
        ::close(pair);
        return;  // the session is gone
      }
    }
    if (!client_open && up.empty() && !up_shut) {
      ::shutdown(pair, SHUT_WR);  // the session sees the client's end; its last replies follow
      up_shut = true;
    }
    const bool want_client = client_open && up.size() < kCap;
    const bool tls_ready = want_client && tls_ && tls_->pending();
    pollfd p[2] = {{fd_, short(want_client ? POLLIN : 0), 0},
                   {pair, short(POLLIN | (up.empty() ? 0 : POLLOUT)), 0}};
    if (::poll(p, 2, tls_ready ? 0 : -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::recv(pair, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;  // the session ended
      if (n > 0) {
        out_.assign(buf, size_t(n));
        if (!flush()) break;  // the client is gone or stopped reading
      }
    }
    if (tls_ready || (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      if (tls_) {
        try {
          size_t n = tls_->read_some({reinterpret_cast<uint8_t*>(buf), sizeof buf});
          if (n == 0) client_open = false;
          up.append(buf, n);
        } catch (const ftp::TlsError&) {
          client_open = false;
        }
      } else {
        ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) client_open = false;
        if (n > 0) up.append(buf, size_t(n));
      }
    }
  }
  ::close(pair);
}

void Control::start_tls(std::shared_ptr<ftp::TlsContext> ctx, Millis timeout) {
  flush();
  // Anything the client sent before the handshake finished would be plaintext injected into the
  // protected session (CVE-2011-0411 style): drop it.
  in_.clear();
  binding_ = ftp::new_session_binding();
  tls_ = ftp::TlsConnection::accept(std::move(ctx), fd_, timeout, &binding_);
}

}  // namespace tierce::ftpd
