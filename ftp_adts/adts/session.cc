// ftp_adts/adts/session.cc — the public entry points (Listener, connect) choosing a channel, and
// the helpers both channels share (session_common.h).
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <thread>
#include <vector>

#include "ftp_adts/adts/adts.h"
#include "ftp_adts/adts/session_common.h"
#include "ftp_adts/adts/wire.h"

namespace tierce::adts {

std::string_view to_string(ChannelKind k) {
  switch (k) {
    case ChannelKind::Tcp: return "TCP";
    case ChannelKind::ParallelTcp: return "PTCP";
    case ChannelKind::Verbs: return "VERBS";
  }
  return "?";
}

void check_params(const SessionParams& p) {
  auto bad = [](const std::string& s) { throw AdtsError(AdtsError::Code::Config, s); };
  if (p.kind == ChannelKind::ParallelTcp) {
    if (p.streams < 1 || p.streams > kMaxStreams)
      bad("PTCP stream count must be 1.." + std::to_string(kMaxStreams) + ", not " +
          std::to_string(p.streams));
  } else if (p.streams != 1) {
    bad(std::string(to_string(p.kind)) + " uses exactly one stream, not " +
        std::to_string(p.streams));
  }
  if (p.block < 4096 || p.block > (size_t(64) << 20))
    bad("block size must be 4 KiB .. 64 MiB, not " + std::to_string(p.block));
  if (p.timeout.count() <= 0) bad("data timeout must be > 0");
}

void Coverage::claim(uint64_t off, uint64_t len) {
  auto bad = [&](const std::string& why) {
    throw AdtsError(AdtsError::Code::Protocol,
                    "DATA block [" + std::to_string(off) + ", +" + std::to_string(len) + ") " +
                        why + " (transfer total " + std::to_string(total_) + ")");
  };
  if (len == 0) bad("is empty");
  if (off > total_ || len > total_ - off) bad("is outside the transfer");
  std::lock_guard g(mu_);
  uint64_t end = off + len;
  auto next = spans_.lower_bound(off);  // first span starting at or after off
  if (next != spans_.end() && next->first < end) bad("overlaps bytes already received");
  auto prev = next == spans_.begin() ? spans_.end() : std::prev(next);
  if (prev != spans_.end() && prev->second > off) bad("overlaps bytes already received");
  // Merge with neighbours so the map stays small for long sequential transfers.
  uint64_t start = off;
  if (prev != spans_.end() && prev->second == off) {
    start = prev->first;
    spans_.erase(prev);
  }
  if (next != spans_.end() && next->first == end) {
    end = next->second;
    spans_.erase(next);
  }
  spans_[start] = end;
  covered_ += len;
}

bool OrderGate::wait_turn(unsigned stream, uint64_t off) {
  std::unique_lock g(mu_);
  waiting_[stream] = off;
  for (;;) {
    if (cancelled_) {
      waiting_[stream].reset();
      throw AdtsError(AdtsError::Code::PeerClosed, "transfer cancelled: another stream failed");
    }
    if (released_) {
      waiting_[stream].reset();
      return false;
    }
    if (!violation_.empty()) {
      waiting_[stream].reset();
      throw AdtsError(AdtsError::Code::Protocol, violation_);
    }
    if (off < next_) {  // Coverage refuses overlaps first; kept as a guard
      waiting_[stream].reset();
      throw AdtsError(AdtsError::Code::Protocol,
                      "blocks out of order on stream " + std::to_string(stream) + ": offset " +
                          std::to_string(off) + " is below the " + std::to_string(next_) +
                          " bytes already written");
    }
    if (!holder_ && off == next_) {
      waiting_[stream].reset();
      holder_ = true;
      activity_ = std::chrono::steady_clock::now();
      return true;
    }
    std::string v = stuck_locked();
    if (!v.empty()) {
      violation_ = v;
      waiting_[stream].reset();
      cv_.notify_all();
      throw AdtsError(AdtsError::Code::Protocol, violation_);
    }
    auto now = std::chrono::steady_clock::now();
    // A stream holding the turn is bounded by its own socket timeout (its failure cancels us);
    // without a holder, no write progress for the data timeout is ours to report.
    if (!holder_ && now >= activity_ + timeout_) {
      waiting_[stream].reset();
      throw AdtsError(AdtsError::Code::Timeout,
                      "no progress: stream " + std::to_string(stream) + " waited " +
                          std::to_string(timeout_.count()) + " ms to write offset " +
                          std::to_string(off) + " after the " + std::to_string(next_) +
                          " bytes written");
    }
    cv_.wait_until(g, holder_ ? now + timeout_ : activity_ + timeout_);
  }
}

void OrderGate::advance(uint64_t end) {
  std::lock_guard g(mu_);
  next_ = end;
  holder_ = false;
  activity_ = std::chrono::steady_clock::now();
  cv_.notify_all();
}

void OrderGate::leave(unsigned stream) {
  std::lock_guard g(mu_);
  if (live_ > 0) --live_;
  waiting_[stream].reset();
  if (violation_.empty()) violation_ = stuck_locked();
  cv_.notify_all();
}

void OrderGate::release() {
  std::lock_guard g(mu_);
  released_ = true;
  cv_.notify_all();
}

void OrderGate::cancel() {
  std::lock_guard g(mu_);
  cancelled_ = true;
  cv_.notify_all();
}

std::string OrderGate::stuck_locked() const {
  if (holder_) return {};
  unsigned waiting = 0;
  std::optional<unsigned> lowest;
  for (unsigned i = 0; i < waiting_.size(); ++i) {
    if (!waiting_[i]) continue;
    ++waiting;
    if (*waiting_[i] == next_) return {};
    if (!lowest || *waiting_[i] < *waiting_[*lowest]) lowest = i;
  }
  if (waiting == 0 || waiting < live_) return {};  // someone is still reading a header
  std::string others;
  for (unsigned i = 0; i < waiting_.size(); ++i)
    if (waiting_[i] && i != *lowest)
      others += (others.empty() ? "" : ", ") + std::string("stream ") + std::to_string(i) +
                " at " + std::to_string(*waiting_[i]);
  return "blocks out of order on stream " + std::to_string(*lowest) + ": it sent offset " +
         std::to_string(*waiting_[*lowest]) + " but bytes from " + std::to_string(next_) +
         " have not arrived and no stream can deliver them (each stream must carry its blocks "
         "in increasing offset order" +
         (others.empty() ? std::string() : "; other streams wait: " + others) +
         (waiting_.size() > waiting ? "; the rest have ended" : "") + ")";
}

void run_workers(unsigned n, const std::function<void(unsigned, const std::function<void()>&)>& fn,
                 const Progress& progress, const std::atomic<uint64_t>& done, uint64_t total) {
  if (n == 1) {
    std::function<void()> tick = [&] {
      if (progress) progress(done.load(std::memory_order_relaxed), total);
    };
    fn(0, tick);
    return;
  }
  std::mutex mu;
  std::condition_variable cv;
  unsigned finished = 0;
  std::function<void()> noop = [] {};
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (unsigned i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      fn(i, noop);
      std::lock_guard g(mu);
      ++finished;
      cv.notify_all();
    });
  uint64_t last = UINT64_MAX;
  {
    std::unique_lock g(mu);
    while (finished < n) {
      cv.wait_for(g, std::chrono::milliseconds(50));
      uint64_t d = done.load(std::memory_order_relaxed);
      if (progress && d != last && finished < n) {
        last = d;
        g.unlock();
        progress(d, total);  // the callback runs on the calling thread, never under our lock
        g.lock();
      }
    }
  }
  for (auto& t : threads) t.join();
  if (progress) progress(done.load(std::memory_order_relaxed), total);
}

// ---- accept cancellation -----------------------------------------------------------------------

AcceptCanceller::AcceptCanceller(std::function<void()> close_port)
    : close_port_(std::move(close_port)) {
  efd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd_ < 0) wire::throw_errno(AdtsError::Code::LocalIo, "eventfd", errno);
}

AcceptCanceller::~AcceptCanceller() {
  if (efd_ >= 0) ::close(efd_);
}

void AcceptCanceller::throw_cancelled() {
  throw AdtsError(AdtsError::Code::Aborted, "data session cancelled");
}

void AcceptCanceller::cancel() {
  std::lock_guard g(mu_);
  if (cancelled_.exchange(true)) return;
  uint64_t one = 1;
  // Cannot fail short of a full counter (impossible: written once); the flag is checked anyway.
  (void)!::write(efd_, &one, sizeof one);
  if (!running_ && !closed_) {
    closed_ = true;
    close_port_();
  }
}

bool AcceptCanceller::leave_locked() {
  running_ = false;
  bool c = cancelled_.load();
  if (c && !closed_) {
    closed_ = true;
    close_port_();
  }
  return c;
}

AcceptCanceller::Running::Running(AcceptCanceller& c) : c_(c) {
  std::lock_guard g(c_.mu_);
  if (c_.cancelled_.load()) throw_cancelled();
  c_.running_ = true;
}

AcceptCanceller::Running::~Running() {
  if (left_) return;
  std::lock_guard g(c_.mu_);
  c_.leave_locked();
}

void AcceptCanceller::Running::check() const {
  if (c_.cancelled_.load()) throw_cancelled();
}

void AcceptCanceller::Running::finish() {
  std::lock_guard g(c_.mu_);
  left_ = true;
  if (c_.leave_locked()) throw_cancelled();
}

// ---- Listener / connect -----------------------------------------------------------------------

struct Listener::Impl {
  std::unique_ptr<ListenerImplBase> chan;
};

Listener::Listener(const std::string& host, uint16_t port_min, uint16_t port_max,
                   const SessionParams& p)
    : impl_(std::make_unique<Impl>()) {
  check_params(p);
  if (port_max < port_min)
    throw AdtsError(AdtsError::Code::Config, "port range " + std::to_string(port_min) + "-" +
                                                 std::to_string(port_max) + " is empty");
  impl_->chan = p.kind == ChannelKind::Verbs ? make_verbs_listener(host, port_min, port_max, p)
                                             : make_tcp_listener(host, port_min, port_max, p);
}

Listener::~Listener() = default;

uint16_t Listener::port() const { return impl_->chan->port(); }

std::unique_ptr<Session> Listener::accept(const std::function<void(const std::string&)>& log) {
  return impl_->chan->accept(log);
}

void Listener::cancel() { impl_->chan->cancel(); }

std::unique_ptr<Session> connect(const std::string& host, uint16_t port, const SessionParams& p) {
  check_params(p);
  if (p.kind == ChannelKind::Verbs) return connect_verbs_session(host, port, p);
  return connect_tcp_session(host, port, p);
}

std::optional<AdtsError> source_region_error(const Source& src, uint64_t total) {
  struct stat st {};
  if (::fstat(src.fd, &st) != 0)
    return AdtsError(AdtsError::Code::LocalIo, "fstat of the source file: " + wire::errno_text(errno));
  if (S_ISREG(st.st_mode) &&
      (src.offset > uint64_t(st.st_size) || total > uint64_t(st.st_size) - src.offset))
    return AdtsError(AdtsError::Code::LocalIo,
                     "source file has " + std::to_string(st.st_size) + " bytes; cannot send " +
                         std::to_string(total) + " bytes from offset " +
                         std::to_string(src.offset));
  return std::nullopt;
}

}  // namespace tierce::adts
