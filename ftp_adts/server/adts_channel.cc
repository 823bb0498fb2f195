// ftp_adts/server/adts_channel.cc
#include "ftp_adts/server/adts_channel.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "ftp_adts/adts/adts.h"

namespace tierce::ftpd {

namespace {

// What the accepting thread hands back.
struct AcceptState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::unique_ptr<adts::Session> session;
  TransferResult error;  // when done without a session
};

}  // namespace

struct AdtsChannel::Impl {
  adts::SessionParams params;
  uint16_t port = 0;
  // Shared with the accepting thread, which owns it while accept() runs; cancel() (thread-safe)
  // stops it from here.
  std::shared_ptr<adts::Listener> listener;
  std::thread acceptor;
  std::shared_ptr<AcceptState> accepting;  // set while a listener is (or was) accepting
  std::unique_ptr<adts::Session> session;
};

namespace {

TransferResult from_error(const adts::AdtsError& e, uint64_t bytes) {
  TransferResult r;
  r.bytes = bytes;
  r.error = e.what();
  r.adts = true;
  switch (e.code()) {
    case adts::AdtsError::Code::Timeout:
      r.status = TransferResult::Status::Timeout;
      break;
    case adts::AdtsError::Code::Aborted:
      r.status = TransferResult::Status::Aborted;
      break;
    case adts::AdtsError::Code::LocalIo:
      r.status = TransferResult::Status::LocalError;
      break;
    case adts::AdtsError::Code::TooLarge:
      r.status = TransferResult::Status::Quota;
      break;
    default:
      r.status = TransferResult::Status::PeerError;
  }
  return r;
}

// Ends the accepting thread after listener->cancel() or its own end: joins it and forgets the
// listener (its port is closed by then).
void join_acceptor(AdtsChannel::Impl& impl) {
  if (impl.acceptor.joinable()) impl.acceptor.join();
  impl.accepting.reset();
  impl.listener.reset();
}

// Takes the outcome of a finished accept: the session, or the reason in *r. Joins the thread.
adts::Session* take_accepted(AdtsChannel::Impl& impl, TransferResult* r) {
  auto st = impl.accepting;
  bool hung = false;
  {
    std::unique_lock g(st->mu);
    // The accept ends by itself within the data timeout; the margin only guards against a hang.
    if (!st->cv.wait_for(g, impl.params.timeout + std::chrono::seconds(10),
                         [&] { return st->done; })) {
      hung = true;
      g.unlock();
      impl.listener->cancel();
      g.lock();
      st->cv.wait(g, [&] { return st->done; });
    }
    if (hung) {
      if (st->session) st->session->close();
      st->session.reset();
      r->status = TransferResult::Status::Timeout;
      r->error = "the data session's streams did not connect";
      r->adts = true;
    } else {
      impl.session = std::move(st->session);
      if (!impl.session) *r = st->error;
    }
  }
  join_acceptor(impl);
  return impl.session.get();
}

// The session of the next transfer: the one up, or the one the listener is accepting (waited
// for). nullptr with *r set when there is none.
adts::Session* session_of(AdtsChannel::Impl& impl, TransferResult* r) {
  if (impl.session && !impl.session->broken()) return impl.session.get();
  if (impl.session) {
    impl.session->close();
    impl.session.reset();
  }
  if (impl.accepting) return take_accepted(impl, r);
  r->status = TransferResult::Status::PeerError;
  r->error = "no ADTS data session: send EPSV or PASV after TPRT";
  r->adts = true;
  return nullptr;
}

// Stops a listener that is still accepting (adts::Listener::cancel: the accept returns at once,
// closing the streams it had and its port) and closes a session it completed but nobody took.
void stop_accepting(AdtsChannel::Impl& impl) {
  if (!impl.accepting) return;
  impl.listener->cancel();
  if (impl.acceptor.joinable()) impl.acceptor.join();
  {
    auto st = impl.accepting;
    std::lock_guard g(st->mu);
    if (st->session) st->session->close();
    st->session.reset();
  }
  join_acceptor(impl);
}

}  // namespace

AdtsChannel::AdtsChannel() : impl_(std::make_unique<Impl>()) {}
AdtsChannel::~AdtsChannel() { reset(); }

bool AdtsChannel::verbs_available() {
  return adts::verbs_available();
}

bool AdtsChannel::configure(Kind kind, unsigned streams, size_t block, bool zero_copy,
                            Millis timeout, uint64_t cookie, const std::string& allowed_peer) {
  if (streams < 1 || streams > adts::kMaxStreams || (kind != Kind::ParallelTcp && streams != 1))
    return false;
  reset();
  auto& p = impl_->params;
  p.kind = kind == Kind::Tcp           ? adts::ChannelKind::Tcp
           : kind == Kind::ParallelTcp ? adts::ChannelKind::ParallelTcp
                                       : adts::ChannelKind::Verbs;
  p.streams = streams;
  p.block = block;
  p.zero_copy = zero_copy;
  p.timeout = timeout;
  p.cookie = cookie;
  p.allowed_peer = allowed_peer;
  configured_ = true;
  return true;
}

base::Result<int> AdtsChannel::listen(const std::string& host, uint16_t lo, uint16_t hi) {
  stop_accepting(*impl_);
  if (impl_->session) impl_->session->close();
  impl_->session.reset();
  std::shared_ptr<adts::Listener> listener;
  try {
    listener = std::make_shared<adts::Listener>(host, lo, hi, impl_->params);
  } catch (const std::exception& e) {
    return base::Status(base::Code::Unavailable, e.what());
  }
  impl_->port = listener->port();
  impl_->listener = listener;
  auto st = std::make_shared<AcceptState>();
  impl_->accepting = st;
  impl_->acceptor = std::thread([st, listener = std::move(listener), log = log_]() mutable {
    std::unique_ptr<adts::Session> s;
    TransferResult r;
    r.adts = true;
    bool cancelled = false;
    try {
      s = listener->accept(log);
    } catch (const adts::AdtsError& e) {
      r = from_error(e, 0);
      cancelled = e.code() == adts::AdtsError::Code::Aborted;
    } catch (const std::exception& e) {
      r.status = TransferResult::Status::PeerError;
      r.error = e.what();
    }
    // The streams are up (or will not come): stop listening, nobody else may join this session.
    listener->cancel();
    listener.reset();
    if (!s && !cancelled && log) log("data session not established: " + r.error);
    std::lock_guard g(st->mu);
    if (!s && r.error.empty()) {
      r.status = TransferResult::Status::PeerError;
      r.error = "data session not established";
    }
    st->session = std::move(s);
    st->error = r;
    st->done = true;
    st->cv.notify_all();
  });
  return impl_->port;
}

bool AdtsChannel::ready() const {
  if (impl_->session && !impl_->session->broken()) return true;
  if (!impl_->accepting) return false;
  std::lock_guard g(impl_->accepting->mu);
  return !impl_->accepting->done || impl_->accepting->session;
}

base::Status AdtsChannel::wait_session() {
  TransferResult r;
  if (session_of(*impl_, &r)) return {};
  return base::Status(base::Code::Unavailable, r.error);
}

void AdtsChannel::reset() {
  stop_accepting(*impl_);
  if (impl_->session) impl_->session->close();
  impl_->session.reset();
  configured_ = false;
}


namespace {

// Runs one transfer on the session: `move` sets the result and counts the bytes moved in *done (the
// progress callback); an AdtsError becomes its status with those bytes; a session that broke is
// dropped.
template <typename MoveFn>
TransferResult run_transfer(AdtsChannel::Impl& impl, MoveFn&& move) {
  TransferResult r;
  r.adts = true;
  adts::Session* s = session_of(impl, &r);
  if (!s) return r;
  uint64_t done = 0;
  adts::Progress progress = [&done](uint64_t d, uint64_t) { done = std::max(done, d); };
  try {
    move(*s, r, progress);
  } catch (const adts::AdtsError& e) {
    r = from_error(e, done);
  } catch (const std::exception& e) {
    r.status = TransferResult::Status::LocalError;
    r.error = e.what();
    r.bytes = done;
  }
  if (impl.session && impl.session->broken()) {
    impl.session->close();
    impl.session.reset();
  }
  return r;
}

}  // namespace

TransferResult AdtsChannel::send_file(int fd, uint64_t offset, uint64_t length) {
  return run_transfer(*impl_, [&](adts::Session& s, TransferResult& r, const adts::Progress& p) {
    adts::Source src;
    src.fd = fd;
    src.offset = offset;
    src.length = length;
    r.bytes = s.send(src, p);
    r.zero_copy = impl_->params.zero_copy;
  });
}

TransferResult AdtsChannel::send_bytes(std::string_view bytes) {
  return run_transfer(*impl_, [&](adts::Session& s, TransferResult& r, const adts::Progress& p) {
    adts::Source src;
    src.memory = {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
    r.bytes = s.send(src, p);
  });
}

TransferResult AdtsChannel::receive_file(int fd, uint64_t offset, uint64_t max) {
  return run_transfer(*impl_, [&](adts::Session& s, TransferResult& r, const adts::Progress& p) {
    adts::Sink sink;
    sink.fd = fd;
    sink.offset = offset;
    sink.max_length = max;
    r.bytes = s.receive(sink, p);
    r.zero_copy = impl_->params.zero_copy;
  });
}

TransferResult AdtsChannel::receive_bytes(std::string* out, uint64_t max) {
  return run_transfer(*impl_, [&](adts::Session& s, TransferResult& r, const adts::Progress& p) {
    std::vector<uint8_t> mem;
    adts::Sink sink;
    sink.memory = &mem;
    sink.max_length = max;
    r.bytes = s.receive(sink, p);
    out->assign(mem.begin(), mem.end());
  });
}

}  // namespace tierce::ftpd
