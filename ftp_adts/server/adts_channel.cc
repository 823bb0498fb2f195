// ftp_adts/server/adts_channel.cc
#include "ftp_adts/server/adts_channel.h"

#ifdef TIERCE_FTPD_HAVE_ADTS
#include "ftp_adts/adts/adts.h"
#endif

namespace tierce::ftpd {

#ifdef TIERCE_FTPD_HAVE_ADTS

struct AdtsChannel::Impl {
  adts::SessionParams params;
  std::unique_ptr<adts::Listener> listener;
  std::unique_ptr<adts::Session> session;
};

namespace {

TransferResult from_error(const adts::AdtsError& e, uint64_t bytes) {
  TransferResult r;
  r.bytes = bytes;
  r.error = e.what();
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
    default:
      r.status = TransferResult::Status::PeerError;
  }
  return r;
}

}  // namespace

namespace {

// Accepts the session on first use. nullptr with *r set on failure.
adts::Session* session_of(AdtsChannel::Impl& impl, TransferResult* r,
                          const std::function<void(const std::string&)>& log) {
  if (impl.session && !impl.session->broken()) return impl.session.get();
  impl.session.reset();
  if (!impl.listener) {
    r->status = TransferResult::Status::PeerError;
    r->error = "no ADTS data session: send EPSV or PASV after TPRT";
    return nullptr;
  }
  try {
    impl.session = impl.listener->accept(log);
  } catch (const adts::AdtsError& e) {
    *r = from_error(e, 0);
    impl.listener.reset();
    return nullptr;
  } catch (const std::exception& e) {
    r->status = TransferResult::Status::PeerError;
    r->error = e.what();
    impl.listener.reset();
    return nullptr;
  }
  // The streams are up: stop listening, nobody else may join this session.
  impl.listener.reset();
  return impl.session.get();
}

// A session that broke is closed; the next transfer needs a new EPSV/PASV.
void drop_if_broken(AdtsChannel::Impl& impl) {
  if (impl.session && impl.session->broken()) {
    impl.session->close();
    impl.session.reset();
  }
}

}  // namespace

AdtsChannel::AdtsChannel() : impl_(std::make_unique<Impl>()) {}
AdtsChannel::~AdtsChannel() = default;

bool AdtsChannel::available() {
  return true;
}

bool AdtsChannel::verbs_available() {
  return adts::verbs_available();
}

void AdtsChannel::configure(Kind kind, unsigned streams, size_t block, bool zero_copy,
                            Millis timeout, uint64_t cookie) {
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
  configured_ = true;
}

int AdtsChannel::listen(const std::string& host, uint16_t lo, uint16_t hi, std::string* err) {
  impl_->session.reset();
  impl_->listener.reset();
  try {
    impl_->listener = std::make_unique<adts::Listener>(host, lo, hi, impl_->params);
    return impl_->listener->port();
  } catch (const std::exception& e) {
    *err = e.what();
    return -1;
  }
}

bool AdtsChannel::ready() const {
  return impl_->session || impl_->listener;
}

bool AdtsChannel::accept(std::string* err) {
  TransferResult r;
  if (session_of(*impl_, &r, log_)) return true;
  *err = r.error;
  return false;
}

void AdtsChannel::reset() {
  if (impl_->session) impl_->session->close();
  impl_->session.reset();
  impl_->listener.reset();
  configured_ = false;
}


namespace {

// Runs one transfer on the session (accepted on first use): `move` sets the result; an AdtsError
// becomes its status; a session that broke is dropped.
template <typename MoveFn>
TransferResult run_transfer(AdtsChannel::Impl& impl,
                            const std::function<void(const std::string&)>& log, MoveFn&& move) {
  TransferResult r;
  adts::Session* s = session_of(impl, &r, log);
  if (!s) return r;
  try {
    move(*s, r);
  } catch (const adts::AdtsError& e) {
    r = from_error(e, 0);
  }
  drop_if_broken(impl);
  return r;
}

}  // namespace

TransferResult AdtsChannel::send_file(int fd, uint64_t offset, uint64_t length) {
  return run_transfer(*impl_, log_, [&](adts::Session& s, TransferResult& r) {
    adts::Source src;
    src.fd = fd;
    src.offset = offset;
    src.length = length;
    r.bytes = s.send(src);
    r.zero_copy = impl_->params.zero_copy;
  });
}

TransferResult AdtsChannel::send_bytes(std::string_view bytes) {
  return run_transfer(*impl_, log_, [&](adts::Session& s, TransferResult& r) {
    adts::Source src;
    src.memory = {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
    r.bytes = s.send(src);
  });
}

TransferResult AdtsChannel::receive_file(int fd, uint64_t offset) {
  return run_transfer(*impl_, log_, [&](adts::Session& s, TransferResult& r) {
    adts::Sink sink;
    sink.fd = fd;
    sink.offset = offset;
    r.bytes = s.receive(sink);
    r.zero_copy = impl_->params.zero_copy;
  });
}

TransferResult AdtsChannel::receive_bytes(std::string* out, uint64_t max) {
  return run_transfer(*impl_, log_, [&](adts::Session& s, TransferResult& r) {
    std::vector<uint8_t> mem;
    adts::Sink sink;
    sink.memory = &mem;
    sink.max_length = max;
    r.bytes = s.receive(sink);
    out->assign(mem.begin(), mem.end());
  });
}

#else  // no tierce::adts: TPRT is not offered

struct AdtsChannel::Impl {};
AdtsChannel::AdtsChannel() = default;
AdtsChannel::~AdtsChannel() = default;
bool AdtsChannel::available() { return false; }
bool AdtsChannel::verbs_available() { return false; }
void AdtsChannel::configure(Kind, unsigned, size_t, bool, Millis, uint64_t) {}
int AdtsChannel::listen(const std::string&, uint16_t, uint16_t, std::string* err) {
  *err = "ADTS is not built in";
  return -1;
}
bool AdtsChannel::accept(std::string* err) {
  *err = "ADTS is not built in";
  return false;
}
bool AdtsChannel::ready() const { return false; }
void AdtsChannel::reset() { configured_ = false; }
namespace {
TransferResult unavailable() {
  TransferResult r;
  r.status = TransferResult::Status::PeerError;
  r.error = "ADTS is not built in";
  return r;
}
}  // namespace
TransferResult AdtsChannel::send_file(int, uint64_t, uint64_t) { return unavailable(); }
TransferResult AdtsChannel::send_bytes(std::string_view) { return unavailable(); }
TransferResult AdtsChannel::receive_file(int, uint64_t) { return unavailable(); }
TransferResult AdtsChannel::receive_bytes(std::string*, uint64_t) { return unavailable(); }

#endif

}  // namespace tierce::ftpd
