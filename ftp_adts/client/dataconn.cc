// ftp_adts/client/dataconn.cc — plain data connections (dataconn.h). Without TLS the bytes move
// with adts::send_file/receive_file (zero copy, progress per chunk); under TLS through a buffer.
#include "ftp_adts/client/dataconn.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "ftp_adts/adts/adts.h"
#include "ftp_adts/client/errors.h"

namespace tierce::ftpc {
namespace {

constexpr size_t kChunk = 1 << 20;  // the buffer of the TLS paths

[[noreturn]] void timeout_error(Millis t) {
  throw ClientError(Exit::Network,
                    "data connection: no progress for " + std::to_string(t.count() / 1000) + " s");
}

[[noreturn]] void net_error(const char* what) {
  throw ClientError(Exit::Transfer, std::string("data connection: ") + what + ": " +
                                        std::strerror(errno));
}

[[noreturn]] void local_error(const char* what) {
  throw ClientError(Exit::Local, std::string(what) + ": " + std::strerror(errno));
}

// An adts plain move with progress reported to p (total: the expected size, 0 = unknown); its
// AdtsError becomes the ClientError with the exit code of docs/ftp.md.
template <typename MoveFn>
uint64_t plain_move(Millis timeout, const ProgressFn& p, uint64_t total, MoveFn&& move) {
  adts::PlainOptions o;
  o.short_file_ok = true;  // send: the caller reports a short file in its own words
  if (p) o.on_chunk = [&](uint64_t done) {
    p(done, total);
    return true;
  };
  try {
    return move(o);
  } catch (const adts::AdtsError& e) {
    switch (e.code()) {
      case adts::AdtsError::Code::Timeout:
        timeout_error(timeout);
      case adts::AdtsError::Code::PeerClosed:
        throw ClientError(Exit::Transfer, std::string("data connection: ") + e.what());
      default:
        throw ClientError(Exit::Local, e.what());
    }
  }
}

}  // namespace

PlainData::PlainData(Fd sock, Millis timeout) : sock_(std::move(sock)), timeout_(timeout) {
  int fl = ::fcntl(sock_.get(), F_GETFL);
  ::fcntl(sock_.get(), F_SETFL, fl | O_NONBLOCK);
}

PlainData::~PlainData() = default;

void PlainData::start_tls(std::shared_ptr<ftp::TlsContext> ctx, const std::string& host,
                          const ftp::TlsConnection* reuse) {
  // TlsConnection waits with its own deadline; it expects a blocking-or-not fd either way, but
  // we hand it a blocking one to keep OpenSSL's retry logic simple.
  int fl = ::fcntl(sock_.get(), F_GETFL);
  ::fcntl(sock_.get(), F_SETFL, fl & ~O_NONBLOCK);
  try {
    tls_ = ftp::TlsConnection::connect(std::move(ctx), sock_.get(), host, timeout_, reuse);
  } catch (const ftp::TlsError& e) {
    throw ClientError(Exit::Transfer, std::string("data connection TLS handshake: ") + e.what());
  }
}

size_t PlainData::read_some(uint8_t* buf, size_t n) {
  if (tls_) {
    try {
      return tls_->read_some(std::span<uint8_t>(buf, n));
    } catch (const ftp::TlsError& e) {
      throw ClientError(Exit::Transfer, std::string("data connection (TLS): ") + e.what());
    }
  }
  for (;;) {
    ssize_t r = ::recv(sock_.get(), buf, n, 0);
    if (r >= 0) return size_t(r);
    if (errno == EINTR) continue;
    if (errno != EAGAIN) net_error("receive");
    if (!wait_fd(sock_.get(), false, timeout_)) timeout_error(timeout_);
  }
}

void PlainData::write_all(const uint8_t* buf, size_t n) {
  if (tls_) {
    try {
      tls_->write_all(std::span<const uint8_t>(buf, n));
      return;
    } catch (const ftp::TlsError& e) {
      throw ClientError(Exit::Transfer, std::string("data connection (TLS): ") + e.what());
    }
  }
  while (n > 0) {
    ssize_t w = ::send(sock_.get(), buf, n, MSG_NOSIGNAL);
    if (w > 0) {
      buf += w;
      n -= size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN) net_error("send");
    if (!wait_fd(sock_.get(), true, timeout_)) timeout_error(timeout_);
  }
}

uint64_t PlainData::receive_to_file(int fd, uint64_t offset, uint64_t total_hint,
                                    const ProgressFn& p) {
  if (!tls_) {
    return plain_move(timeout_, p, total_hint, [&](const adts::PlainOptions& o) {
      return adts::receive_file(sock_.get(), fd, offset, timeout_, o);
    });
  }
  uint64_t done = 0;
  std::vector<uint8_t> buf(kChunk);
  bool seekable = ::lseek(fd, 0, SEEK_CUR) >= 0;
  for (;;) {
    size_t n = read_some(buf.data(), buf.size());
    if (n == 0) break;
    size_t off = 0;
    while (off < n) {
      ssize_t w = seekable ? ::pwrite(fd, buf.data() + off, n - off, off_t(offset + done))
                           : ::write(fd, buf.data() + off, n - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) local_error("write");
      off += size_t(w);
      done += uint64_t(w);
    }
    if (p) p(done, total_hint);
  }
  return done;
}

std::string PlainData::receive_to_memory(uint64_t max) {
  std::string out;
  uint8_t buf[65536];
  for (;;) {
    size_t n = read_some(buf, sizeof buf);
    if (n == 0) return out;
    if (out.size() + n > max)
      throw ClientError(Exit::Transfer,
                        "listing larger than " + std::to_string(max >> 20) + " MiB: refused");
    out.append(reinterpret_cast<const char*>(buf), n);
  }
}

uint64_t PlainData::send_from_file(int fd, uint64_t offset, uint64_t length,
                                   const ProgressFn& p) {
  uint64_t done = 0;
  if (!tls_) {
    done = plain_move(timeout_, p, length, [&](const adts::PlainOptions& o) {
      return adts::send_file(sock_.get(), fd, offset, length, timeout_, o);
    });
    if (done < length) throw ClientError(Exit::Local, "local file shrank while sending it");
    return done;
  }
  std::vector<uint8_t> buf(kChunk);
  while (done < length) {
    size_t want = size_t(std::min<uint64_t>(buf.size(), length - done));
    ssize_t r = ::pread(fd, buf.data(), want, off_t(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) local_error("read");
    if (r == 0) throw ClientError(Exit::Local, "local file shrank while sending it");
    write_all(buf.data(), size_t(r));
    done += uint64_t(r);
    if (p) p(done, length);
  }
  return done;
}

void PlainData::finish_send() {
  if (tls_) {
    try {
      tls_->shutdown();
    } catch (...) {
    }
    tls_.reset();
  }
  if (sock_) {
    ::shutdown(sock_.get(), SHUT_WR);
    char buf[4096];
    for (;;) {
      ssize_t r = ::recv(sock_.get(), buf, sizeof buf, 0);
      if (r > 0) continue;
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && errno == EAGAIN && wait_fd(sock_.get(), false, timeout_)) continue;
      break;  // EOF, error or timeout: the socket is done either way
    }
  }
  sock_.reset();
}

void PlainData::close() {
  if (tls_) {
    try {
      tls_->shutdown();
    } catch (...) {
    }
    tls_.reset();
  }
  sock_.reset();
}

}  // namespace tierce::ftpc
