// ftp_adts/adts/tcp_session.cc — the tcp and ptcp channels: the HELLO handshake (listener and
// connector) and TcpSession, which moves transfers as BEGIN / DATA... / END over 1..n streams.
//
// Sender: BEGIN on stream 0, then one worker per stream takes blocks dynamically (an atomic block
// counter, or a queue filled by the disk thread when pipelining — either way each stream's blocks
// go in increasing offset order, which the receiver relies on) and sends each as a DATA header
// plus payload (sendfile from the file when zero copy; from memory or a pool buffer otherwise),
// then END — or ABORT when the local source failed — on its stream.
// Receiver: BEGIN from stream 0 (its id must be the session's last id + 1), then one worker per
// stream reads headers; every DATA is checked (transfer id, increasing on its stream, in range, no
// overlap) before a byte of it is written; the payload goes socket -> pipe -> file with splice(2)
// (zero copy), or into the memory sink, or into pool buffers that the disk thread pwrites
// (pipeline). File sinks are written in offset order (OrderGate): a worker waits until every byte
// below its block is written (or queued to the disk thread, which writes in queue order), so the
// file always holds exactly a prefix of the transfer, even after a kill. The transfer ends when
// every stream has sent END or ABORT, so every stream is at a transfer boundary again.
// A stream failure (EOF, reset, timeout, malformed block) shuts every stream down — waking the
// other workers at once — and leaves the session broken().
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"
#include "ftp_adts/adts/buffer_pool.h"
#include "ftp_adts/adts/pipeline.h"
#include "ftp_adts/adts/session_common.h"
#include "ftp_adts/adts/wire.h"

namespace tierce::adts {
namespace {

using wire::BlockType;
using wire::Fd;
using Code = AdtsError::Code;

// Pipe capacity for the splice path: one pipe per stream, as large as the kernel allows us
// (a 1 MiB block then needs few socket->pipe->file rounds).
constexpr int kPipeSize = 1 << 20;
// Scratch buffer of the read+pwrite fallback (files that do not support splice).
constexpr size_t kScratch = 256 << 10;
constexpr size_t kMemoryStep = 1 << 20;  // a memory sink grows by at most this per recv

// Looks a pool buffer up in the tcp registration cache, counting the hit or miss.
void count_registration(BufferPool& pool, const BufferPool::Lease& buf,
                        std::atomic<uint64_t>& hits, std::atomic<uint64_t>& misses) {
  if (!buf.pooled()) return;
  uint64_t h0 = pool.tcp_registrations().hits();
  pool.tcp_registrations().get(buf.data(), buf.size());
  (pool.tcp_registrations().hits() > h0 ? hits : misses)++;
}

// Reads `len` bytes of the source file at `pos` (pipelined send); LocalIo on an error or EOF.
void pread_full(int fd, uint8_t* dst, uint64_t len, uint64_t pos) {
  uint64_t got = 0;
  while (got < len) {
    ssize_t r = ::pread(fd, dst + got, size_t(len - got), off_t(pos + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      throw AdtsError(Code::LocalIo, "reading the source file: " + wire::errno_text(errno));
    if (r == 0)
      throw AdtsError(Code::LocalIo, "source file ended at offset " + std::to_string(pos + got));
    got += uint64_t(r);
  }
}

// A failed write of the received file (Code::Internal, errno's text).
base::Status write_failed(int e) {
  return base::Status(base::Code::Internal, "writing the file: " + wire::errno_text(e));
}

// Writes `len` bytes to the file at `pos` (pipelined receive).
base::Status pwrite_full(int fd, const uint8_t* src, uint64_t len, uint64_t pos) {
  for (uint64_t w = 0; w < len;) {
    ssize_t r = ::pwrite(fd, src + w, size_t(len - w), off_t(pos + w));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return write_failed(r < 0 ? errno : EIO);
    w += uint64_t(r);
  }
  return {};
}

// Pads a DATA block whose file shrank under sendfile with zeros: the header promised the bytes.
void send_zeros(int sock, uint64_t n, Millis timeout) {
  static const uint8_t zeros[4096] = {};
  for (uint64_t left = n; left > 0;) {
    size_t k = size_t(std::min<uint64_t>(left, sizeof zeros));
    wire::send_all(sock, zeros, k, timeout);
    left -= k;
  }
}

// A block after BEGIN belongs to transfer `id` and is not another BEGIN; Protocol otherwise.
void check_in_transfer(const wire::Header& h, uint64_t id) {
  if (h.transfer_id != id)
    throw AdtsError(Code::Protocol, "block of transfer " + std::to_string(h.transfer_id) +
                                        " inside transfer " + std::to_string(id));
  if (h.type == BlockType::Begin)
    throw AdtsError(Code::Protocol, "second BEGIN inside transfer " + std::to_string(id));
}

// Each stream carries its blocks in increasing offset order; Protocol otherwise.
void check_stream_order(unsigned i, const wire::Header& h, bool first, uint64_t stream_end) {
  if (!first && h.offset < stream_end)
    throw AdtsError(Code::Protocol,
                    "blocks out of order on stream " + std::to_string(i) + ": offset " +
                        std::to_string(h.offset) + " after a block ending at " +
                        std::to_string(stream_end) +
                        " (each stream carries its blocks in increasing offset order)");
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  return std::string(host) + ":" + serv;
}

// The numeric host of fd's peer, an IPv4-mapped IPv6 address as IPv4; "" when unknown.
std::string peer_host(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
  return wire::numeric_host(reinterpret_cast<const sockaddr*>(&ss));
}

// What the threads of one sent transfer share: the network workers and the disk thread. Member
// order is the order of creation (destroyed in reverse: the queue and pool first).
struct SendTransfer {
  SendTransfer(const Source& s, uint64_t i, uint64_t tot, uint64_t blk, uint64_t nb, bool mem,
               bool pipe)
      : src(s), id(i), total(tot), block(blk), nblocks(nb), from_memory(mem), pipelined(pipe) {}

  const Source& src;
  const uint64_t id, total, block, nblocks;
  const bool from_memory;
  const bool pipelined;  // file source without zero copy: the disk thread reads into pool buffers
  std::atomic<uint64_t> next_block{0}, done{0}, zc{0}, copied{0}, hits{0}, misses{0};
  std::atomic<bool> local_fail{false}, net_fail{false};
  ErrorSlot local_err, net_err;
  std::shared_ptr<BufferPool> pool;
  std::unique_ptr<BoundedQueue<Chunk>> queue;
};

// What the threads of one received transfer share: the network workers and the disk thread.
// Member order is the order of creation (destroyed in reverse: the queue and pool first).
struct RecvTransfer {
  RecvTransfer(const Sink& s, uint64_t i, uint64_t total, size_t base, bool pipe)
      : sink(s), id(i), mem_base(base), pipelined(pipe), cov(total) {}

  const Sink& sink;
  const uint64_t id;
  const size_t mem_base;  // a memory sink's size before the transfer
  const bool pipelined;   // file sink without zero copy: pool buffers, written by the disk thread
  Coverage cov;
  std::unique_ptr<OrderGate> gate;
  std::atomic<uint64_t> done{0}, zc{0}, copied{0}, hits{0}, misses{0};
  std::atomic<bool> local_fail{false}, net_fail{false}, aborted{false};
  ErrorSlot local_err, net_err;
  std::shared_ptr<BufferPool> pool;
  std::unique_ptr<BoundedQueue<Chunk>> queue;
};

class TcpSession final : public Session {
 public:
  TcpSession(std::vector<Fd> socks, const SessionParams& p) : socks_(std::move(socks)), p_(p) {
    pipes_.resize(socks_.size());
  }
  ~TcpSession() override { close(); }

  ChannelKind kind() const override { return p_.kind; }
  unsigned streams() const override { return unsigned(socks_.size()); }
  bool broken() const override { return broken_.load(); }
  SessionStats stats() const override {
    std::lock_guard g(stats_mu_);
    return stats_;
  }
  void close() override {
    for (auto& s : socks_) s.reset();
    for (auto& pp : pipes_) {
      pp.r.reset();
      pp.w.reset();
    }
    closed_ = true;
  }

  uint64_t send(const Source& src, const Progress& progress) override;
  uint64_t receive(const Sink& sink, const Progress& progress) override;

 private:
  struct Pipe {
    Fd r, w;
    bool unsupported = false;  // splice refused (EINVAL): this stream uses read+pwrite
  };

  void usable() const {
    if (closed_) throw AdtsError(Code::PeerClosed, "session is closed");
    if (broken_) throw AdtsError(Code::PeerClosed, "session is broken by an earlier error");
  }
  // Ends the session after a stream failure: every worker blocked on a stream wakes with an error.
  void break_session() {
    broken_ = true;
    for (auto& s : socks_)
      if (s) ::shutdown(s.get(), SHUT_RDWR);
  }
  void send_header(unsigned i, BlockType t, uint64_t id, uint64_t off, uint64_t len) {
    uint8_t h[wire::kHeaderSize];
    wire::encode(wire::Header{wire::kBlockMagic, t, id, off, len}, h);
    wire::send_all(socks_[i].get(), h, sizeof h, p_.timeout);
  }
  wire::Header read_header(unsigned i) {
    uint8_t h[wire::kHeaderSize];
    wire::recv_all(socks_[i].get(), h, sizeof h, p_.timeout);
    return wire::decode_header(h);
  }
  // Payload of one DATA into the file at `foff` by splice; a failure if a local write failed
  // (the rest of the payload was read and dropped so the stream stays in step).
  base::Status splice_to_file(unsigned i, int file, uint64_t foff, uint64_t len, uint64_t* zc,
                              uint64_t* copied);
  base::Status read_pwrite(int sock, int file, uint64_t foff, uint64_t len,
                           std::vector<uint8_t>& scratch);
  void read_ahead(SendTransfer& t);
  void send_stream(SendTransfer& t, unsigned i, const std::function<void()>& tick);
  // BEGIN on stream 0 (or an early ABORT on every stream) of transfer `id`; a network failure
  // breaks the session.
  void send_begin(uint64_t id, uint64_t total, const std::optional<AdtsError>& early);
  // Reads and checks BEGIN on stream 0; a bad one breaks the session.
  wire::Header read_begin(const Sink& sink);
  // A DATA payload appended to a memory sink that holds exactly [0, off) past `base`.
  void recv_into_memory(int sock, std::vector<uint8_t>& mem, size_t base, uint64_t off,
                        uint64_t len);
  void write_behind(RecvTransfer& t);
  // A stream failed: the transfer ends, every worker wakes with an error.
  void fail_transfer(RecvTransfer& t, const AdtsError& e);
  void receive_stream(RecvTransfer& t, unsigned i, const std::function<void()>& tick);
  // A DATA payload read into pool buffers queued for the disk thread (pipelined receive).
  void queue_block(int sock, const wire::Header& h, BufferPool& pool,
                   BoundedQueue<Chunk>& queue, std::atomic<uint64_t>& copied,
                   std::atomic<uint64_t>& hits, std::atomic<uint64_t>& misses);
  void add_stats(bool sent, uint64_t bytes, uint64_t zc, uint64_t copied, uint64_t hits,
                 uint64_t misses) {
    std::lock_guard g(stats_mu_);
    stats_.transfers++;
    (sent ? stats_.bytes_sent : stats_.bytes_received) += bytes;
    stats_.zero_copy_bytes += zc;
    stats_.copied_bytes += copied;
    stats_.registration_hits += hits;
    stats_.registration_misses += misses;
  }

  std::vector<Fd> socks_;
  std::vector<Pipe> pipes_;
  SessionParams p_;
  uint64_t last_id_ = 0;  // the last transfer id sent or received (transfers alternate freely)
  // Set by whichever stream worker fails first (several may at once, from their own threads) and
  // read by the others and the caller: atomic (found by the TSan build, adts_order).
  std::atomic<bool> broken_{false};
  bool closed_ = false;
  mutable std::mutex stats_mu_;
  SessionStats stats_;
};

// ---- send -------------------------------------------------------------------------------------

void TcpSession::send_begin(uint64_t id, uint64_t total, const std::optional<AdtsError>& early) {
  const unsigned n = unsigned(socks_.size());
  try {
    send_header(0, BlockType::Begin, id, 0, total);
    if (early) {
      for (unsigned i = 0; i < n; ++i) send_header(i, BlockType::Abort, id, 0, 0);
      throw *early;
    }
  } catch (const AdtsError& e) {
    if (e.code() != Code::LocalIo) break_session();
    throw;
  }
}

// Disk thread: reads the blocks in order into pool buffers while the network sends earlier
// ones. It closes the queue when done (or failed) so the network side sees the end.
void TcpSession::read_ahead(SendTransfer& t) {
  try {
    for (uint64_t b = 0; b < t.nblocks && !t.net_fail; ++b) {
      Chunk c;
      c.offset = b * t.block;
      c.length = std::min<uint64_t>(t.block, t.total - c.offset);
      c.buf = t.pool->acquire(p_.timeout);
      count_registration(*t.pool, c.buf, t.hits, t.misses);
      pread_full(t.src.fd, c.buf.data(), c.length, t.src.offset + c.offset);
      if (!t.queue->push(std::move(c), p_.timeout)) break;
    }
  } catch (const AdtsError& e) {
    (e.code() == Code::LocalIo ? t.local_err : t.net_err).set(e);
    (e.code() == Code::LocalIo ? t.local_fail : t.net_fail) = true;
  } catch (const std::exception& e) {
    t.local_err.set(AdtsError(Code::LocalIo, e.what()));
    t.local_fail = true;
  }
  t.queue->close();
}

// One stream's worker: DATA blocks while there are any, then END (or ABORT) on its stream.
void TcpSession::send_stream(SendTransfer& t, unsigned i, const std::function<void()>& tick) {
  try {
    for (;;) {
      if (t.net_fail || t.local_fail) break;
      if (t.pipelined) {
        std::optional<Chunk> c = t.queue->pop(p_.timeout);
        if (!c) break;
        send_header(i, BlockType::Data, t.id, c->offset, c->length);
        wire::send_all(socks_[i].get(), c->buf.data(), size_t(c->length), p_.timeout);
        t.copied += c->length;
        t.done += c->length;
      } else {
        uint64_t b = t.next_block.fetch_add(1);
        if (b >= t.nblocks) break;
        uint64_t off = b * t.block, len = std::min<uint64_t>(t.block, t.total - off);
        send_header(i, BlockType::Data, t.id, off, len);
        if (t.from_memory) {
          wire::send_all(socks_[i].get(), t.src.memory.data() + off, size_t(len), p_.timeout);
          t.copied += len;
        } else {
          uint64_t sent =
              wire::sendfile_some(socks_[i].get(), t.src.fd, t.src.offset + off, len, p_.timeout);
          t.zc += sent;
          if (sent < len) {
            // The file shrank under us: the header promised `len` bytes, so pad with zeros to
            // keep the stream framed, then ABORT the transfer.
            t.local_err.set(AdtsError(Code::LocalIo, "source file ended at offset " +
                                                       std::to_string(t.src.offset + off + sent)));
            t.local_fail = true;
            send_zeros(socks_[i].get(), len - sent, p_.timeout);
          }
        }
        t.done += len;
      }
      tick();
    }
    if (t.net_fail) return;
    // Pipelined: the disk thread sets local_fail before it closes the queue, so a worker that
    // saw the end of the queue also sees the failure here.
    send_header(i, t.local_fail ? BlockType::Abort : BlockType::End, t.id, 0, 0);
  } catch (const AdtsError& e) {
    t.net_err.set(e);
    t.net_fail = true;
    break_session();
    if (t.queue) t.queue->cancel();
  } catch (const std::exception& e) {
    t.net_err.set(AdtsError(Code::LocalIo, e.what()));
    t.net_fail = true;
    break_session();
    if (t.queue) t.queue->cancel();
  }
}

uint64_t TcpSession::send(const Source& src, const Progress& progress) {
  usable();
  const bool from_memory = !src.memory.empty() || src.fd < 0;
  if (from_memory && src.memory.empty() && src.length != 0)
    throw AdtsError(Code::Config, "Source has neither a file nor memory but length " +
                                      std::to_string(src.length));
  const uint64_t total = from_memory ? src.memory.size() : src.length;
  const unsigned n = unsigned(socks_.size());
  const uint64_t block = p_.block;
  const uint64_t nblocks = (total + block - 1) / block;

  // A file region past the end is a local error known before any DATA: BEGIN + ABORT keeps the
  // receiver and the session in step.
  std::optional<AdtsError> early;
  if (!from_memory) early = source_region_error(src, total);

  const uint64_t id = ++last_id_;
  send_begin(id, total, early);

  SendTransfer t(src, id, total, block, nblocks, from_memory, !from_memory && !p_.zero_copy);
  std::thread disk;
  if (t.pipelined) {
    t.pool = BufferPool::shared(block);
    t.queue = std::make_unique<BoundedQueue<Chunk>>(2 * n + 2);
    disk = std::thread([&] { read_ahead(t); });
  }
  run_workers(
      n, [&](unsigned i, const std::function<void()>& tick) { send_stream(t, i, tick); },
      progress, t.done, total);
  if (disk.joinable()) disk.join();

  if (t.net_fail) {
    break_session();
    throw *t.net_err.get();
  }
  add_stats(true, t.local_fail ? 0 : total, t.zc, t.copied, t.hits, t.misses);
  if (t.local_fail) throw *t.local_err.get();
  return total;
}

// ---- receive ----------------------------------------------------------------------------------

base::Status TcpSession::read_pwrite(int sock, int file, uint64_t foff, uint64_t len,
                                     std::vector<uint8_t>& scratch) {
  base::Status st;
  if (scratch.empty()) scratch.resize(kScratch);
  while (len > 0) {
    size_t k = size_t(std::min<uint64_t>(len, scratch.size()));
    wire::recv_all(sock, scratch.data(), k, p_.timeout);
    for (size_t w = 0; st.ok() && w < k;) {
      ssize_t r = ::pwrite(file, scratch.data() + w, k - w, off_t(foff + w));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        st = write_failed(r < 0 ? errno : EIO);
        break;
      }
      w += size_t(r);
    }
    foff += k;
    len -= k;
  }
  return st;
}

base::Status TcpSession::splice_to_file(unsigned i, int file, uint64_t foff, uint64_t len,
                                        uint64_t* zc, uint64_t* copied) {
  int sock = socks_[i].get();
  Pipe& pp = pipes_[i];
  std::vector<uint8_t> scratch;
  if (!pp.unsupported && !pp.r) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      pp.unsupported = true;
    } else {
      pp.r.reset(fds[0]);
      pp.w.reset(fds[1]);
      (void)::fcntl(pp.w.get(), F_SETPIPE_SZ, kPipeSize);  // best effort: the default is 64 KiB
    }
  }
  if (pp.unsupported) {
    *copied += len;
    return read_pwrite(sock, file, foff, len, scratch);
  }
  base::Status st;  // the first failed write; the block is read to its end all the same
  while (len > 0) {
    ssize_t in = ::splice(sock, nullptr, pp.w.get(), nullptr, size_t(std::min<uint64_t>(len, kPipeSize)),
                          SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (in == 0) throw AdtsError(Code::PeerClosed, "stream closed by the peer in a DATA block");
    if (in < 0) {
      int e = errno;
      if (e == EINTR) continue;
      if (e == EAGAIN) {
        wire::wait_fd(sock, POLLIN, p_.timeout, "receiving from the peer");
        continue;
      }
      if (e == EINVAL) {  // this socket/kernel cannot splice: read+pwrite for the rest
        pp.unsupported = true;
        *copied += len;
        base::Status rest = read_pwrite(sock, file, foff, len, scratch);
        return rest.ok() ? st : rest;
      }
      wire::throw_errno(Code::PeerClosed, "splice from the stream", e);
    }
    len -= uint64_t(in);
    // Drain the pipe into the file. The pipe is private to this stream, so whatever is in it
    // belongs to this block.
    size_t left = size_t(in);
    while (left > 0) {
      ssize_t out = -1;
      if (st.ok()) {
        loff_t o = loff_t(foff);
        out = ::splice(pp.r.get(), nullptr, file, &o, left, SPLICE_F_MOVE);
        if (out > 0) {
          foff += uint64_t(out);
          left -= size_t(out);
          *zc += uint64_t(out);
          continue;
        }
        if (out < 0 && errno == EINTR) continue;
        if (out < 0 && errno != EINVAL) st = write_failed(errno);
      }
      // Splice to this file refused (EINVAL), or a failed write: move the pipe's bytes by hand
      // (pwrite, or drop them once the write failed) so the stream stays framed.
      if (scratch.empty()) scratch.resize(kScratch);
      ssize_t r = ::read(pp.r.get(), scratch.data(), std::min(left, scratch.size()));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw AdtsError(Code::LocalIo, "reading the splice pipe: " + wire::errno_text(errno));
      if (st.ok()) {
        for (ssize_t w = 0; w < r;) {
          ssize_t x = ::pwrite(file, scratch.data() + w, size_t(r - w), off_t(foff + uint64_t(w)));
          if (x < 0 && errno == EINTR) continue;
          if (x <= 0) {
            st = write_failed(x < 0 ? errno : EIO);
            break;
          }
          w += x;
        }
        *copied += uint64_t(r);
      }
      foff += uint64_t(r);
      left -= size_t(r);
    }
  }
  return st;
}

wire::Header TcpSession::read_begin(const Sink& sink) {
  wire::Header begin;
  try {
    begin = read_header(0);
    if (begin.type != BlockType::Begin)
      throw AdtsError(Code::Protocol, std::string("expected BEGIN on stream 0, got ") +
                                          (begin.type == BlockType::Data ? "DATA" :
                                           begin.type == BlockType::End  ? "END" : "ABORT"));
    if (begin.transfer_id != last_id_ + 1)
      throw AdtsError(Code::Protocol, "BEGIN of transfer " + std::to_string(begin.transfer_id) +
                                          ", expected transfer " + std::to_string(last_id_ + 1) +
                                          " (ids increase by one per session, from 1)");
    if (begin.offset != 0)
      throw AdtsError(Code::Protocol, "BEGIN with offset " + std::to_string(begin.offset));
    if (begin.length > sink.max_length)
      throw AdtsError(Code::TooLarge, "transfer of " + std::to_string(begin.length) +
                                          " bytes exceeds the limit of " +
                                          std::to_string(sink.max_length));
    if (sink.fd < 0 && begin.length > kMaxMemoryTransfer)
      throw AdtsError(Code::Protocol, "transfer of " + std::to_string(begin.length) +
                                          " bytes is too large for a memory sink");
  } catch (const AdtsError&) {
    break_session();
    throw;
  }
  return begin;
}

void TcpSession::recv_into_memory(int sock, std::vector<uint8_t>& mem, size_t base, uint64_t off,
                                  uint64_t len) {
  // Grown a bounded step at a time, so a DATA header claiming a huge length costs only what
  // really arrives.
  for (uint64_t got = 0; got < len;) {
    size_t k = size_t(std::min<uint64_t>(len - got, kMemoryStep));
    size_t at = base + size_t(off + got);
    mem.resize(at + k);
    wire::recv_all(sock, mem.data() + at, k, p_.timeout);
    got += k;
  }
}

void TcpSession::queue_block(int sock, const wire::Header& h, BufferPool& pool,
                             BoundedQueue<Chunk>& queue, std::atomic<uint64_t>& copied,
                             std::atomic<uint64_t>& hits, std::atomic<uint64_t>& misses) {
  for (uint64_t got = 0; got < h.length;) {
    Chunk c;
    c.buf = pool.acquire(p_.timeout);
    count_registration(pool, c.buf, hits, misses);
    c.offset = h.offset + got;
    c.length = std::min<uint64_t>(h.length - got, c.buf.size());
    wire::recv_all(sock, c.buf.data(), size_t(c.length), p_.timeout);
    got += c.length;
    copied += c.length;
    if (!queue.push(std::move(c), p_.timeout)) {
      // cancelled: the disk thread failed fatally; the error is in net_err
      throw AdtsError(Code::LocalIo, "pipeline cancelled");
    }
  }
}

// Disk thread: pwrites the buffers the network workers filled. After a write error it keeps
// draining (dropping) so the network side never stalls on a full queue.
void TcpSession::write_behind(RecvTransfer& t) {
  try {
    while (std::optional<Chunk> c = t.queue->pop(p_.timeout)) {
      if (t.local_fail) continue;
      base::Status w = pwrite_full(t.sink.fd, c->buf.data(), c->length, t.sink.offset + c->offset);
      if (!w.ok()) {
        t.local_err.set(AdtsError(Code::LocalIo, w.message()));
        t.local_fail = true;
      }
    }
  } catch (const AdtsError& e) {
    t.net_err.set(e);
    t.net_fail = true;
    break_session();
    t.queue->cancel();
    t.gate->cancel();
  }
}

void TcpSession::fail_transfer(RecvTransfer& t, const AdtsError& e) {
  t.net_err.set(e);
  t.net_fail = true;
  break_session();
  if (t.queue) t.queue->cancel();
  if (t.gate) t.gate->cancel();
}

// One stream's worker: DATA blocks until its END or ABORT.
void TcpSession::receive_stream(RecvTransfer& t, unsigned i, const std::function<void()>& tick) {
  try {
    uint64_t stream_end = 0;  // end of this stream's previous DATA block
    bool first = true;
    for (;;) {
      wire::Header h = read_header(i);
      check_in_transfer(h, t.id);
      if (h.type == BlockType::End || h.type == BlockType::Abort) {
        if (h.type == BlockType::Abort) t.aborted = true;
        if (t.gate) t.gate->leave(i);
        break;
      }
      t.cov.claim(h.offset, h.length);  // before any byte of the block is written
      check_stream_order(i, h, first, stream_end);
      first = false;
      stream_end = h.offset + h.length;
      int sock = socks_[i].get();
      if (t.sink.fd < 0) {
        if (t.sink.memory && t.gate->wait_turn(i, h.offset)) {
          // Our turn: the vector holds exactly [0, h.offset).
          recv_into_memory(sock, *t.sink.memory, t.mem_base, h.offset, h.length);
          t.gate->advance(h.offset + h.length);
        } else {
          wire::discard(sock, h.length, p_.timeout);
        }
        t.copied += h.length;
      } else if (t.pipelined) {
        // Our turn: every earlier block is queued, and the disk thread writes in queue order.
        if (!t.gate->wait_turn(i, h.offset)) {
          wire::discard(sock, h.length, p_.timeout);
          t.done += h.length;
          tick();
          continue;
        }
        queue_block(sock, h, *t.pool, *t.queue, t.copied, t.hits, t.misses);
        t.gate->advance(h.offset + h.length);
      } else if (!t.local_fail && t.gate->wait_turn(i, h.offset)) {
        // Our turn: every byte below h.offset is in the file; splice this block after them.
        uint64_t z = 0, c = 0;
        base::Status w = splice_to_file(i, t.sink.fd, t.sink.offset + h.offset, h.length, &z, &c);
        t.zc += z;
        t.copied += c;
        if (!w.ok()) {
          t.local_err.set(AdtsError(Code::LocalIo, w.message()));
          t.local_fail = true;
          t.gate->release();  // the file ends at the failure; the others drop their blocks
        } else {
          t.gate->advance(h.offset + h.length);
        }
      } else {
        wire::discard(sock, h.length, p_.timeout);
      }
      t.done += h.length;
      tick();
    }
  } catch (const AdtsError& e) {
    fail_transfer(t, e);
  } catch (const std::exception& e) {
    fail_transfer(t, AdtsError(Code::LocalIo, e.what()));
  }
}

uint64_t TcpSession::receive(const Sink& sink, const Progress& progress) {
  usable();
  const unsigned n = unsigned(socks_.size());
  wire::Header begin = read_begin(sink);
  last_id_ = begin.transfer_id;
  const uint64_t id = begin.transfer_id, total = begin.length;

  // A memory sink grows as the bytes arrive (blocks are taken in offset order, as for files),
  // never to the announced total up front: BEGIN costs the receiver nothing (issue 17).
  const size_t mem_base = sink.fd < 0 && sink.memory ? sink.memory->size() : 0;

  RecvTransfer t(sink, id, total, mem_base, sink.fd >= 0 && !p_.zero_copy);
  // File and memory sinks are written in offset order (a memory sink then only ever grows at
  // its end).
  if (sink.fd >= 0 || sink.memory) t.gate = std::make_unique<OrderGate>(n, p_.timeout);

  std::thread disk;
  if (t.pipelined) {
    t.pool = BufferPool::shared(p_.block);
    t.queue = std::make_unique<BoundedQueue<Chunk>>(2 * n + 2);
    disk = std::thread([&] { write_behind(t); });
  }
  run_workers(
      n, [&](unsigned i, const std::function<void()>& tick) { receive_stream(t, i, tick); },
      progress, t.done, total);
  if (t.queue) t.queue->close();
  if (disk.joinable()) disk.join();

  if (t.net_fail) {
    break_session();
    if (sink.fd < 0 && sink.memory) sink.memory->resize(mem_base);
    throw *t.net_err.get();
  }
  if (t.aborted) {
    if (sink.fd < 0 && sink.memory) sink.memory->resize(mem_base);
    throw AdtsError(Code::Aborted, "the sender aborted transfer " + std::to_string(id));
  }
  if (t.cov.covered() != total) {
    break_session();
    if (sink.fd < 0 && sink.memory) sink.memory->resize(mem_base);
    throw AdtsError(Code::Protocol, "transfer " + std::to_string(id) + " ended with " +
                                        std::to_string(t.cov.covered()) + " of " +
                                        std::to_string(total) + " bytes");
  }
  add_stats(false, total, t.zc, t.copied, t.hits, t.misses);
  if (t.local_fail) throw *t.local_err.get();
  return total;
}

// ---- handshake --------------------------------------------------------------------------------

class TcpListener final : public ListenerImplBase {
 public:
  TcpListener(const std::string& host, uint16_t lo, uint16_t hi, const SessionParams& p)
      : p_(p), cancel_([this] { fd_.reset(); }) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    std::string last = "no address";
    if (lo == 0) hi = 0;
    for (uint32_t port = lo; port <= hi; ++port) {
      addrinfo* res = nullptr;
      std::string ps = std::to_string(port);
      int g = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), ps.c_str(), &hints, &res);
      if (g != 0)
        throw AdtsError(Code::Config, "cannot resolve listen address " + host + ": " +
                                          gai_strerror(g));
      std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(res, freeaddrinfo);
      for (addrinfo* a = res; a; a = a->ai_next) {
        Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                       a->ai_protocol));
        if (!fd) continue;
        int one = 1;
        ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), 64) != 0) {
          last = wire::errno_text(errno);
          continue;
        }
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
        port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
        fd_ = std::move(fd);
        return;
      }
    }
    throw AdtsError(Code::Config, "no free data port on " + host + " in " + std::to_string(lo) +
                                      "-" + std::to_string(hi) + " (" + last + ")");
  }

  uint16_t port() const override { return port_; }

  void cancel() override { cancel_.cancel(); }

  // One poll loop over the listening socket, the cancel eventfd and every connection still sending
  // its HELLO, so a silent or garbage connection never delays the right client. On cancel() the
  // streams accepted so far, the pending connections and the listening socket are closed (in that
  // order: `run` is destroyed last).
  std::unique_ptr<Session> accept(const std::function<void(const std::string&)>& log) override {
    AcceptCanceller::Running run(cancel_);
    auto say = [&](const std::string& s) {
      if (log) log(s);
    };
    struct Pending {
      Fd fd;
      std::string peer;
      uint8_t buf[wire::kHelloSize];
      size_t got = 0;
    };
    const unsigned want = p_.streams;
    std::vector<Fd> streams(want);
    unsigned have = 0;
    std::vector<Pending> pending;
    constexpr size_t kMaxPending = 64;
    auto deadline = std::chrono::steady_clock::now() + p_.timeout;
    while (have < want) {
      run.check();
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline)
        throw AdtsError(Code::Timeout, "data session: " + std::to_string(have) + " of " +
                                           std::to_string(want) + " streams connected within " +
                                           std::to_string(p_.timeout.count()) + " ms");
      std::vector<pollfd> pfds;
      pfds.push_back({fd_.get(), POLLIN, 0});
      pfds.push_back({cancel_.fd(), POLLIN, 0});
      for (auto& pd : pending) pfds.push_back({pd.fd.get(), POLLIN, 0});
      int ms = int(std::min<int64_t>(
          std::chrono::duration_cast<Millis>(deadline - now).count() + 1, INT32_MAX));
      int r = ::poll(pfds.data(), pfds.size(), ms);
      if (r < 0 && errno != EINTR) wire::throw_errno(Code::LocalIo, "poll", errno);
      if (r <= 0) continue;
      run.check();
      // Existing connections first (their indices match pfds[2..]).
      std::vector<size_t> drop;
      for (size_t k = 0; k < pending.size(); ++k) {
        if (!pfds[k + 2].revents) continue;
        Pending& pd = pending[k];
        ssize_t got = ::recv(pd.fd.get(), pd.buf + pd.got, wire::kHelloSize - pd.got, 0);
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (got <= 0) {
          say("ADT0102 data stream from " + pd.peer + " closed before its HELLO");
          drop.push_back(k);
          continue;
        }
        pd.got += size_t(got);
        if (pd.got < wire::kHelloSize) continue;
        wire::Hello h = wire::decode_hello(pd.buf);
        wire::HelloStatus st = wire::HelloStatus::Ok;
        if (h.magic != wire::kHelloMagic) st = wire::HelloStatus::BadMagic;
        else if (h.version != wire::kVersion) st = wire::HelloStatus::BadVersion;
        else if (h.cookie != p_.cookie) st = wire::HelloStatus::BadCookie;
        else if (h.streams != want) st = wire::HelloStatus::BadStreamCount;
        else if (h.index >= want || streams[h.index]) st = wire::HelloStatus::BadIndex;
        uint8_t ack[wire::kAckSize];
        wire::put_u32(ack, wire::kAckMagic);
        wire::put_u32(ack + 4, uint32_t(st));
        // The ACK is 8 bytes into an idle socket's empty buffer: it goes out at once.
        ssize_t w = ::send(pd.fd.get(), ack, sizeof ack, MSG_NOSIGNAL);
        if (st != wire::HelloStatus::Ok) {
          say("ADT0101 refused data stream from " + pd.peer + ": " + wire::to_string(st));
        } else if (w != ssize_t(sizeof ack)) {
          say("ADT0103 data stream from " + pd.peer + " broke during the handshake");
        } else {
          streams[h.index] = std::move(pd.fd);
          ++have;
        }
        drop.push_back(k);
      }
      for (auto it = drop.rbegin(); it != drop.rend(); ++it)
        pending.erase(pending.begin() + long(*it));
      if (pfds[0].revents & POLLIN) {
        for (;;) {
          int c = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
          if (c < 0) break;
          Pending pd;
          pd.fd.reset(c);
          pd.peer = peer_name(c);
          if (!p_.allowed_peer.empty() && peer_host(c) != p_.allowed_peer) {
            // Not the control connection's peer (a stranger racing for the port): dropped
            // before it may even try a cookie.
            say("ADT0105 data stream from " + pd.peer + " dropped: not the control peer " +
                p_.allowed_peer);
            continue;
          }
          wire::tune_socket(c);
          if (pending.size() >= kMaxPending) {
            say("ADT0104 too many data connections without HELLO; dropping the oldest");
            pending.erase(pending.begin());
          }
          pending.push_back(std::move(pd));
        }
      }
    }
    run.finish();
    return std::make_unique<TcpSession>(std::move(streams), p_);
  }

 private:
  SessionParams p_;
  Fd fd_;
  uint16_t port_ = 0;
  AcceptCanceller cancel_;  // closes fd_ (declared after it: destroyed first)
};

}  // namespace

std::unique_ptr<ListenerImplBase> make_tcp_listener(const std::string& host, uint16_t lo,
                                                    uint16_t hi, const SessionParams& p) {
  return std::make_unique<TcpListener>(host, lo, hi, p);
}

std::unique_ptr<Session> connect_tcp_session(const std::string& host, uint16_t port,
                                             const SessionParams& p) {
  std::vector<Fd> socks;
  for (unsigned i = 0; i < p.streams; ++i) {
    socks.emplace_back(wire::connect_tcp(host, port, p.timeout));
    wire::Hello h;
    h.index = uint16_t(i);
    h.streams = uint16_t(p.streams);
    h.cookie = p.cookie;
    uint8_t buf[wire::kHelloSize];
    wire::encode(h, buf);
    wire::send_all(socks.back().get(), buf, sizeof buf, p.timeout);
  }
  for (unsigned i = 0; i < p.streams; ++i) {
    uint8_t ack[wire::kAckSize];
    try {
      wire::recv_all(socks[i].get(), ack, sizeof ack, p.timeout);
    } catch (const AdtsError& e) {
      throw AdtsError(e.code(), "data stream " + std::to_string(i) + " handshake: " + e.what());
    }
    if (wire::get_u32(ack) != wire::kAckMagic)
      throw AdtsError(Code::Protocol, "data stream " + std::to_string(i) + ": bad HELLO-ACK magic");
    auto st = static_cast<wire::HelloStatus>(wire::get_u32(ack + 4));
    if (st != wire::HelloStatus::Ok)
      throw AdtsError(Code::Protocol, "server refused data stream " + std::to_string(i) + ": " +
                                          wire::to_string(st));
  }
  return std::make_unique<TcpSession>(std::move(socks), p);
}

}  // namespace tierce::adts
