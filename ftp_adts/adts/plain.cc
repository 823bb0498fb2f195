// ftp_adts/adts/plain.cc — zero-copy moves for plain RFC 959 data connections (no ADTS framing):
// sendfile(2) from a file region to the socket; splice(2) from the socket into a file until EOF,
// or recv into a buffer + pwrite (PlainOptions::receive_by_splice: adts.h says when each is used).
// The one implementation tierce-ftpd and tierce-ftp use for TYPE I without TLS; their callers
// hook in per chunk (PlainOptions: progress, ABOR). The socket may be blocking or not; every wait
// is a poll bounded by the no-progress timeout. Files or sockets that refuse sendfile/splice, and
// files that are not seekable, are moved through a buffer instead.
#include <fcntl.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "ftp_adts/adts/adts.h"
#include "ftp_adts/adts/wire.h"

namespace tierce::adts {

using Code = AdtsError::Code;

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kChunk = 1 << 20;         // per sendfile/splice call: the on_chunk granularity
constexpr size_t kCopyBuffer = 256 << 10;  // the buffered fallbacks
constexpr int kBatch = 512 << 10;          // receive: bytes queued before poll wakes us
constexpr int kBatchWindow = 4 * kBatch;   // ... out of a receive window of at least this
constexpr Millis kTrickleSlice{200};       // ... or this long, for a sender slower than that

// One move in progress: its socket, options and the bytes moved so far.
class Move {
 public:
  Move(int sock, Millis timeout, const PlainOptions& o)
      : sock_(sock), timeout_(timeout), o_(o), watch_fd_(o.on_chunk ? o.watch_fd : -1) {}

  int sock() const { return sock_; }
  uint64_t done() const { return done_; }

  // Waits until the data socket is ready for `events`, for at most `slice`: false when the slice
  // ran out first. Throws Timeout once nothing moved for the timeout. With a watch fd, its turning
  // readable asks on_chunk (Aborted when it says stop); the deadline is not moved by it.
  bool wait(short events, const char* what, Millis slice = Millis::max()) {
    pollfd p[2] = {{sock_, events, 0}, {watch_fd_, POLLIN, 0}};
    nfds_t n = watch_fd_ >= 0 ? 2 : 1;
    auto start = Clock::now();
    for (;;) {
      auto now = Clock::now();
      auto left = std::chrono::duration_cast<Millis>(last_progress_ + timeout_ - now);
      if (left.count() <= 0) wire::throw_no_progress(what, timeout_);
      auto in_slice = slice == Millis::max()
                          ? left
                          : std::chrono::duration_cast<Millis>(start + slice - now);
      if (in_slice.count() <= 0) return false;
      int r = ::poll(p, n, int(std::min<int64_t>(std::min(left, in_slice).count(), INT32_MAX)));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) wire::throw_errno(Code::LocalIo, "poll", errno);
      if (r == 0) continue;  // the deadline or the slice: decided above
      if (n == 2 && p[1].revents) {
        ask();
        // Still going (e.g. a pipelined command, consumed by the caller). A fd that keeps
        // signalling without being consumed (HUP) would spin: stop watching it.
        if (p[1].revents & (POLLHUP | POLLERR)) {
          n = 1;
          watch_fd_ = -1;
        }
        p[1].revents = 0;
      }
      if (p[0].revents) return true;
    }
  }

  // Counts n bytes moved (copied: through a user buffer); asks on_chunk once kChunk more bytes
  // moved since it last asked (and wait() asks when the watch fd turns readable).
  void moved(uint64_t n, bool copied) {
    done_ += n;
    if (n > 0) last_progress_ = Clock::now();
    if (copied && o_.copied) *o_.copied += n;
    if (done_ - asked_at_ >= kChunk) {
      asked_at_ = done_;
      ask();
    }
  }

  // send_file: the file ended before `length`.
  uint64_t file_ended(uint64_t offset, uint64_t length) const {
    if (o_.short_file_ok) return done_;
    throw AdtsError(Code::LocalIo, "file ended at offset " + std::to_string(offset + done_) +
                                       " before the " + std::to_string(length) + " bytes to send");
  }

 private:
  void ask() {
    if (o_.on_chunk && !o_.on_chunk(done_)) throw AdtsError(Code::Aborted, "transfer stopped");
  }

  int sock_;
  Millis timeout_;
  const PlainOptions& o_;
  int watch_fd_;
  uint64_t done_ = 0;
  uint64_t asked_at_ = 0;
  Clock::time_point last_progress_ = Clock::now();
};

// Batched receive wake-ups: while one of these lives, poll reports the socket readable only once
// kBatch bytes are queued (SO_RCVLOWAT; or at EOF, or on an error), so a fast sender wakes the
// receiver once per batch instead of once per ~64 KiB segment. A sender that trickles less than a
// batch is still read every slice().
// Linux grows the receive buffer for a low-water mark it cannot hold, and then clamps the window to
// that mark: a window the size of the batch would let the sender fill it and stop until we read
// (stop-and-go). So the mark is first set to kBatchWindow (buffer and window grow to hold that;
// autotuning grows them further as usual) and then lowered to kBatch, which leaves the window
// alone: the sender keeps three quarters of it to send into while we read a batch.
class BatchedWakeups {
 public:
  explicit BatchedWakeups(int sock) : sock_(sock) {
    (void)::setsockopt(sock, SOL_SOCKET, SO_RCVLOWAT, &kBatchWindow, sizeof kBatchWindow);
    on_ = ::setsockopt(sock, SOL_SOCKET, SO_RCVLOWAT, &kBatch, sizeof kBatch) == 0;
  }
  ~BatchedWakeups() {
    int one = 1;
    if (on_) (void)::setsockopt(sock_, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
  }
  BatchedWakeups(const BatchedWakeups&) = delete;
  BatchedWakeups& operator=(const BatchedWakeups&) = delete;
  Millis slice() const { return on_ ? kTrickleSlice : Millis::max(); }

 private:
  int sock_;
  bool on_ = false;
};

// Writes all of [p, p+n) at off; appends with write(2) when fd is not seekable.
void write_at(int fd, const uint8_t* p, size_t n, uint64_t off) {
  while (n > 0) {
    ssize_t k = ::pwrite(fd, p, n, off_t(off));
    if (k < 0 && errno == ESPIPE) k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) wire::throw_errno(Code::LocalIo, "writing the file", k < 0 ? errno : EIO);
    p += k;
    n -= size_t(k);
    off += uint64_t(k);
  }
}

// pread + send, for files sendfile cannot read (e.g. some FUSE or /proc files).
uint64_t copy_out(Move& m, int fd, uint64_t offset, uint64_t length) {
  std::vector<uint8_t> buf(kCopyBuffer);
  while (m.done() < length) {
    ssize_t r = ::pread(fd, buf.data(), size_t(std::min<uint64_t>(length - m.done(), buf.size())),
                        off_t(offset + m.done()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) wire::throw_errno(Code::LocalIo, "reading the file", errno);
    if (r == 0) return m.file_ended(offset, length);
    for (ssize_t s = 0; s < r;) {
      m.wait(POLLOUT, "sending to the peer");
      ssize_t k = ::send(m.sock(), buf.data() + s, size_t(r - s), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (k <= 0) wire::throw_errno(Code::PeerClosed, "send", k < 0 ? errno : EPIPE);
      s += k;
    }
    m.moved(uint64_t(r), true);
  }
  return m.done();
}

// recv + write until EOF: by choice (receive_by_splice off), or for sockets or files that refuse
// splice. Reads again at once after a full buffer, and waits (for a batch) only after a recv that
// emptied the socket: a poll per recv would double the system calls of a busy transfer.
[[noreturn]] void too_large(uint64_t max) {
  throw AdtsError(Code::TooLarge, "more than the limit of " + std::to_string(max) + " bytes");
}

uint64_t copy_in(Move& m, int fd, uint64_t offset, uint64_t max) {
  std::vector<uint8_t> buf(kChunk);
  BatchedWakeups batched(m.sock());
  bool drained = false;  // the last recv emptied the socket: wait before the next
  for (;;) {
    if (drained) (void)m.wait(POLLIN, "receiving from the peer", batched.slice());
    ssize_t r = ::recv(m.sock(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (r < 0 && errno == EAGAIN) {
      drained = true;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) wire::throw_errno(Code::PeerClosed, "recv", errno);
    if (r == 0) return m.done();
    drained = size_t(r) < buf.size();
    if (uint64_t(r) > max - m.done()) {
      size_t keep = size_t(max - m.done());
      write_at(fd, buf.data(), keep, offset + m.done());
      m.moved(keep, true);
      too_large(max);
    }
    write_at(fd, buf.data(), size_t(r), offset + m.done());
    m.moved(uint64_t(r), true);
  }
}

// Moves the n bytes waiting in the pipe into the file. False when the file refuses splice (e.g. a
// terminal or a pipe): those bytes were then moved by hand, and the rest should be copied.
bool splice_to_file(Move& m, int pipe_r, size_t n, int fd, uint64_t offset) {
  while (n > 0) {
    loff_t at = loff_t(offset + m.done());
    ssize_t out = ::splice(pipe_r, nullptr, fd, &at, n, SPLICE_F_MOVE);
    if (out > 0) {
      n -= size_t(out);
      m.moved(uint64_t(out), false);
      continue;
    }
    if (out < 0 && errno == EINTR) continue;
    if (out == 0 || (errno != EINVAL && errno != ESPIPE))
      wire::throw_errno(Code::LocalIo, "writing the file", out < 0 ? errno : EIO);
    std::vector<uint8_t> buf(std::min(n, kCopyBuffer));
    while (n > 0) {
      ssize_t r = ::read(pipe_r, buf.data(), std::min(n, buf.size()));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) wire::throw_errno(Code::LocalIo, "reading the splice pipe", r < 0 ? errno : EIO);
      write_at(fd, buf.data(), size_t(r), offset + m.done());
      n -= size_t(r);
      m.moved(uint64_t(r), true);
    }
    return false;
  }
  return true;
}

}  // namespace

uint64_t send_file(int sock, int fd, uint64_t offset, uint64_t length, Millis timeout,
                   const PlainOptions& o) {
  wire::SigpipeGuard no_sigpipe;
  Move m(sock, timeout, o);
  // A blocking socket is polled before every sendfile, so that it never blocks past the timeout
  // inside it; a non-blocking one only when it said EAGAIN.
  int fl = ::fcntl(sock, F_GETFL);
  bool blocking = fl >= 0 && !(fl & O_NONBLOCK);
  bool full = blocking;
  while (m.done() < length) {
    if (full) m.wait(POLLOUT, "sending to the peer");
    full = blocking;
    off_t at = off_t(offset + m.done());
    size_t want = size_t(std::min<uint64_t>(length - m.done(), kChunk));
    ssize_t w = ::sendfile(sock, fd, &at, want);
    if (w > 0) {
      m.moved(uint64_t(w), false);
      if (size_t(w) < want) full = true;  // the socket buffer filled: wait before the next
      continue;
    }
    if (w == 0) return m.file_ended(offset, length);
    int e = errno;
    if (e == EAGAIN) full = true;
    if (e == EINTR || e == EAGAIN) continue;
    if (wire::is_peer_gone(e)) wire::throw_errno(Code::PeerClosed, "sendfile", e);
    if (e == EINVAL || e == ENOSYS) return copy_out(m, fd, offset, length);
    wire::throw_errno(Code::LocalIo, "sendfile (reading the file)", e);
  }
  return m.done();
}

uint64_t receive_file(int sock, int fd, uint64_t offset, Millis timeout, const PlainOptions& o) {
  Move m(sock, timeout, o);
  int p[2];
  const uint64_t max = o.max_bytes;
  if (!o.receive_by_splice || ::pipe2(p, O_CLOEXEC) != 0) return copy_in(m, fd, offset, max);
  wire::Fd pr(p[0]), pw(p[1]);
  (void)::fcntl(pw.get(), F_SETPIPE_SZ, int(kChunk));  // best effort (pipe-max-size)
  BatchedWakeups batched(sock);
  for (;;) {
    (void)m.wait(POLLIN, "receiving from the peer", batched.slice());
    // The pipe is empty here (each chunk is moved on whole), so the splice in never blocks on it.
    // At most one byte past the limit comes in: enough to tell the sender went over it.
    size_t want = size_t(std::min<uint64_t>(kChunk, max - m.done() + (max - m.done() < kChunk)));
    ssize_t in = ::splice(sock, nullptr, pw.get(), nullptr, want,
                          SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (in == 0) return m.done();
    if (in < 0) {
      int e = errno;
      if (e == EINTR || e == EAGAIN) continue;
      if (e == EINVAL) return copy_in(m, fd, offset, max);  // this socket cannot splice
      wire::throw_errno(Code::PeerClosed, "splice from the data connection", e);
    }
    if (uint64_t(in) > max - m.done()) {
      // Over the limit: the bytes up to it go to the file, the rest stays in the pipe.
      splice_to_file(m, pr.get(), size_t(max - m.done()), fd, offset);
      too_large(max);
    }
    if (!splice_to_file(m, pr.get(), size_t(in), fd, offset)) return copy_in(m, fd, offset, max);
  }
}

}  // namespace tierce::adts
