// ftp_adts/adts/plain.cc — zero-copy moves for plain RFC 959 data connections (no ADTS framing):
// sendfile(2) from a file region to the socket, splice(2) from the socket into a file until EOF.
// The socket may be blocking or not; every wait is a poll bounded by the no-progress timeout.
#include <fcntl.h>
#include <poll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "ftp_adts/adts/adts.h"
#include "ftp_adts/adts/wire.h"

namespace tierce::adts {

using Code = AdtsError::Code;

uint64_t send_file(int sock, int fd, uint64_t offset, uint64_t length, Millis timeout) {
  wire::SigpipeGuard no_sigpipe;
  uint64_t done = 0;
  while (done < length) {
    // Poll first so a blocking socket never blocks past the timeout inside sendfile.
    wire::wait_fd(sock, POLLOUT, timeout, "sending to the peer");
    off_t o = off_t(offset + done);
    size_t want = size_t(std::min<uint64_t>(length - done, 1u << 20));
    ssize_t w = ::sendfile(sock, fd, &o, want);
    if (w > 0) {
      done += uint64_t(w);
      continue;
    }
    if (w == 0)
      throw AdtsError(Code::LocalIo, "file ended at offset " + std::to_string(offset + done) +
                                         " before the " + std::to_string(length) + " bytes to send");
    int e = errno;
    if (e == EINTR || e == EAGAIN) continue;
    if (e == EPIPE || e == ECONNRESET || e == ENOTCONN || e == ETIMEDOUT)
      wire::throw_errno(Code::PeerClosed, "sendfile", e);
    if (e == EINVAL || e == ENOSYS) {
      // The file cannot be mmapped/spliced (e.g. some FUSE or /proc files): copy by hand.
      std::vector<uint8_t> buf(256 << 10);
      while (done < length) {
        ssize_t r = ::pread(fd, buf.data(), size_t(std::min<uint64_t>(length - done, buf.size())),
                            off_t(offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) wire::throw_errno(Code::LocalIo, "reading the file", errno);
        if (r == 0)
          throw AdtsError(Code::LocalIo, "file ended at offset " + std::to_string(offset + done));
        for (ssize_t s = 0; s < r;) {
          wire::wait_fd(sock, POLLOUT, timeout, "sending to the peer");
          ssize_t k = ::send(sock, buf.data() + s, size_t(r - s), MSG_NOSIGNAL | MSG_DONTWAIT);
          if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
          if (k <= 0) wire::throw_errno(Code::PeerClosed, "send", k < 0 ? errno : EPIPE);
          s += k;
        }
        done += uint64_t(r);
      }
      return done;
    }
    wire::throw_errno(Code::LocalIo, "sendfile (reading the file)", e);
  }
  return done;
}

namespace {
// read+pwrite for files that refuse splice.
uint64_t copy_in(int sock, int fd, uint64_t offset, Millis timeout) {
  std::vector<uint8_t> buf(256 << 10);
  uint64_t done = 0;
  for (;;) {
    wire::wait_fd(sock, POLLIN, timeout, "receiving from the peer");
    ssize_t r = ::recv(sock, buf.data(), buf.size(), MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) wire::throw_errno(Code::PeerClosed, "recv", errno);
    if (r == 0) return done;
    for (ssize_t w = 0; w < r;) {
      ssize_t k = ::pwrite(fd, buf.data() + w, size_t(r - w), off_t(offset + done + uint64_t(w)));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) wire::throw_errno(Code::LocalIo, "writing the file", k < 0 ? errno : EIO);
      w += k;
    }
    done += uint64_t(r);
  }
}
}  // namespace

uint64_t receive_file(int sock, int fd, uint64_t offset, Millis timeout) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return copy_in(sock, fd, offset, timeout);
  wire::Fd pr(p[0]), pw(p[1]);
  (void)::fcntl(pw.get(), F_SETPIPE_SZ, 1 << 20);
  uint64_t done = 0;
  std::vector<uint8_t> scratch;
  for (;;) {
    wire::wait_fd(sock, POLLIN, timeout, "receiving from the peer");
    ssize_t in = ::splice(sock, nullptr, pw.get(), nullptr, 1 << 20,
                          SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (in == 0) return done;
    if (in < 0) {
      int e = errno;
      if (e == EINTR || e == EAGAIN) continue;
      if (e == EINVAL) return done + copy_in(sock, fd, offset + done, timeout);
      wire::throw_errno(Code::PeerClosed, "splice from the data connection", e);
    }
    size_t left = size_t(in);
    bool use_pwrite = false;
    while (left > 0) {
      if (!use_pwrite) {
        loff_t o = loff_t(offset + done);
        ssize_t out = ::splice(pr.get(), nullptr, fd, &o, left, SPLICE_F_MOVE);
        if (out > 0) {
          done += uint64_t(out);
          left -= size_t(out);
          continue;
        }
        if (out < 0 && errno == EINTR) continue;
        if (out == 0 || errno != EINVAL)
          wire::throw_errno(Code::LocalIo, "writing the file", out < 0 ? errno : EIO);
        use_pwrite = true;  // the file refuses splice: move the pipe's bytes by hand
      }
      if (scratch.empty()) scratch.resize(256 << 10);
      ssize_t r = ::read(pr.get(), scratch.data(), std::min(left, scratch.size()));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) wire::throw_errno(Code::LocalIo, "reading the splice pipe", r < 0 ? errno : EIO);
      for (ssize_t w = 0; w < r;) {
        ssize_t k = ::pwrite(fd, scratch.data() + w, size_t(r - w), off_t(offset + done + uint64_t(w)));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) wire::throw_errno(Code::LocalIo, "writing the file", k < 0 ? errno : EIO);
        w += k;
      }
      done += uint64_t(r);
      left -= size_t(r);
    }
  }
}

}  // namespace tierce::adts
