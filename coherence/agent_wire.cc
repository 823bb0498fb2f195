// coherence/agent_wire.cc — see agent_wire.h.
#include "coherence/agent_wire.h"

#include <bit>
#include <cstring>

#include "coherence/bytes.h"

namespace tierce::coherence::agentwire {

static_assert(std::endian::native == std::endian::little,
              "the agent socket's format is little-endian; this host is not");

namespace {

using bytes::load;

class Writer {
 public:
  explicit Writer(size_t reserve) { b_.reserve(reserve); }
  template <class T>
  void put(T v) {
    size_t at = b_.size();
    b_.resize(at + sizeof v);
    std::memcpy(b_.data() + at, &v, sizeof v);
  }
  void raw(std::string_view s) { b_.insert(b_.end(), s.begin(), s.end()); }
  void name(const std::string& s) {
    size_t n = std::min<size_t>(s.size(), 0xffff);
    put<uint16_t>(uint16_t(n));
    raw(std::string_view(s).substr(0, n));
  }
  std::vector<uint8_t> take() { return std::move(b_); }

 private:
  std::vector<uint8_t> b_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  template <class T>
  T get(const char* what) {
    if (b_.size() - at_ < sizeof(T))
      throw AgentWireError(std::string("agent message ends inside its ") + what);
    T v = load<T>(b_.data() + at_);
    at_ += sizeof(T);
    return v;
  }
  void zero(size_t n, const char* what) {
    if (b_.size() - at_ < n)
      throw AgentWireError(std::string("agent message ends inside its ") + what);
    for (size_t i = 0; i < n; ++i)
      if (b_[at_ + i] != 0) throw AgentWireError(std::string("agent message: ") + what + " is not zero");
    at_ += n;
  }
  std::string rest() {
    std::string s(reinterpret_cast<const char*>(b_.data() + at_), b_.size() - at_);
    at_ = b_.size();
    return s;
  }
  std::string name(const char* what) {
    uint16_t n = get<uint16_t>(what);
    if (b_.size() - at_ < n)
      throw AgentWireError(std::string("agent message: a name of ") + what + " runs past its end");
    std::string s(reinterpret_cast<const char*>(b_.data() + at_), n);
    at_ += n;
    return s;
  }
  size_t left() const { return b_.size() - at_; }
  void end(const char* what) {
    if (at_ != b_.size())
      throw AgentWireError(std::string("agent ") + what + ": " + std::to_string(b_.size() - at_) +
                           " bytes after its end");
  }

 private:
  std::span<const uint8_t> b_;
  size_t at_ = 0;
};

bool known_op(uint8_t op) { return op >= 1 && op <= 3; }

void check_size(std::span<const uint8_t> b, const char* what) {
  if (b.size() > kMaxMessage)
    throw AgentWireError(std::string("agent ") + what + " of " + std::to_string(b.size()) +
                         " bytes (at most " + std::to_string(kMaxMessage) + ")");
}

std::vector<uint64_t> read_deps(Reader& in, uint32_t n) {
  if (n > kMaxDeps)
    throw AgentWireError("agent request names " + std::to_string(n) +
                         " dependencies (at most " + std::to_string(kMaxDeps) + ")");
  if (in.left() != size_t(n) * 8)
    throw AgentWireError("agent request: " + std::to_string(n) + " dependencies need " +
                         std::to_string(size_t(n) * 8) + " bytes, " + std::to_string(in.left()) +
                         " follow");
  std::vector<uint64_t> d(n);
  for (auto& x : d) x = in.get<uint64_t>("dependencies");
  return d;
}

void write_deps(Writer& w, const std::vector<uint64_t>& deps) {
  if (deps.size() > kMaxDeps)
    throw AgentWireError("agent request: " + std::to_string(deps.size()) +
                         " dependencies (at most " + std::to_string(kMaxDeps) + ")");
  w.put<uint32_t>(uint32_t(deps.size()));
  w.put<uint32_t>(0);
  for (uint64_t d : deps) w.put<uint64_t>(d);
}

using NameList = std::vector<std::string> InvalidateOutcome::*;
constexpr NameList kLists[] = {&InvalidateOutcome::acked,   &InvalidateOutcome::fenced,
                               &InvalidateOutcome::unconfirmed, &InvalidateOutcome::skipped,
                               &InvalidateOutcome::marked,  &InvalidateOutcome::gave_up_on};

}  // namespace

std::string_view to_string(Op op) {
  switch (op) {
    case Op::ReadSeq: return "read-seq";
    case Op::Register: return "register";
    case Op::Invalidate: return "invalidate";
  }
  return "?";
}

std::string_view to_string(Status s) {
  switch (s) {
    case Status::Ok: return "ok";
    case Status::BadRequest: return "bad request";
    case Status::Unavailable: return "unavailable";
    case Status::Busy: return "busy";
  }
  return "?";
}

std::vector<uint8_t> encode(const Request& r) {
  Writer w(kHeaderBytes + 32 + r.deps.size() * 8);
  w.put<uint32_t>(kRequestMagic);
  w.put<uint8_t>(uint8_t(r.op));
  w.put<uint8_t>(0);
  w.put<uint16_t>(0);
  w.put<uint64_t>(r.id);
  switch (r.op) {
    case Op::ReadSeq: w.put<uint64_t>(r.key); break;
    case Op::Register:
      w.put<uint64_t>(r.key);
      w.put<uint64_t>(r.seq_start);
      write_deps(w, r.deps);
      break;
    case Op::Invalidate:
      w.put<uint8_t>(uint8_t(r.scheme));
      w.put<uint8_t>(uint8_t(r.mark.op));
      w.put<uint16_t>(0);
      w.put<uint32_t>(r.mark.ttl_ms);
      w.put<uint64_t>(r.mark.token);
      w.put<uint32_t>(r.give_up_after_ms);
      w.put<uint32_t>(uint32_t(r.deps.size()));
      if (r.deps.size() > kMaxDeps)
        throw AgentWireError("agent request: " + std::to_string(r.deps.size()) +
                             " dependencies (at most " + std::to_string(kMaxDeps) + ")");
      for (uint64_t d : r.deps) w.put<uint64_t>(d);
      break;
  }
  return w.take();
}

Request decode_request(std::span<const uint8_t> b) {
  check_size(b, "request");
  Reader in(b);
  if (in.get<uint32_t>("magic") != kRequestMagic)
    throw AgentWireError("not an agent request (wrong magic): is this the writer agent's socket, "
                         "and the same Tierce version on both sides?");
  uint8_t op = in.get<uint8_t>("op");
  if (!known_op(op)) throw AgentWireError("agent request: unknown op " + std::to_string(op));
  in.zero(3, "header's reserved bytes");
  Request r;
  r.op = Op(op);
  r.id = in.get<uint64_t>("id");
  switch (r.op) {
    case Op::ReadSeq:
      r.key = in.get<uint64_t>("key");
      in.end("read-seq request");
      break;
    case Op::Register: {
      r.key = in.get<uint64_t>("key");
      r.seq_start = in.get<uint64_t>("seq_start");
      uint32_t n = in.get<uint32_t>("dependency count");
      in.zero(4, "register request's reserved bytes");
      r.deps = read_deps(in, n);
      break;
    }
    case Op::Invalidate: {
      uint8_t scheme = in.get<uint8_t>("scheme");
      if (scheme > uint8_t(Scheme::InvalidateAll))
        throw AgentWireError("agent request: unknown scheme " + std::to_string(scheme));
      r.scheme = Scheme(scheme);
      uint8_t mark = in.get<uint8_t>("mark");
      if (mark > kMaxMarkOp) throw AgentWireError("agent request: unknown mark " + std::to_string(mark));
      r.mark.op = MarkOp(mark);
      in.zero(2, "invalidate request's reserved bytes");
      r.mark.ttl_ms = in.get<uint32_t>("ttl");
      r.mark.token = in.get<uint64_t>("token");
      r.give_up_after_ms = in.get<uint32_t>("give_up_after");
      uint32_t n = in.get<uint32_t>("dependency count");
      r.deps = read_deps(in, n);
      if (r.scheme == Scheme::InvalidateAll && !r.deps.empty())
        throw AgentWireError("agent request: an invalidate-all names no dependencies");
      if (r.give_up_after_ms && r.mark.op == MarkOp::None)
        throw AgentWireError("agent request: give_up_after is only for a pending mark");
      break;
    }
  }
  return r;
}

std::vector<uint8_t> encode(const Reply& r) {
  Writer w(256);
  w.put<uint32_t>(kReplyMagic);
  w.put<uint8_t>(uint8_t(r.op));
  w.put<uint8_t>(uint8_t(r.status));
  w.put<uint16_t>(0);
  w.put<uint64_t>(r.id);
  if (r.status != Status::Ok) {
    w.raw(std::string_view(r.message).substr(0, 4096));
    return w.take();
  }
  switch (r.op) {
    case Op::ReadSeq: w.put<uint64_t>(r.seq); break;
    case Op::Register:
      w.put<uint8_t>(uint8_t(r.registered.refusal));
      for (int i = 0; i < 7; ++i) w.put<uint8_t>(0);
      w.put<uint64_t>(r.registered.slot);
      w.put<uint64_t>(r.registered.version);
      w.raw(std::string_view(r.registered.reason).substr(0, 4096));
      break;
    case Op::Invalidate: {
      const InvalidateOutcome& o = r.outcome;
      w.put<uint64_t>(o.number.incarnation);
      w.put<uint64_t>(o.number.number);
      w.put<uint32_t>(uint32_t(o.homes));
      w.put<uint32_t>(uint32_t(o.rounds));
      w.put<uint64_t>(uint64_t(o.elapsed.count() < 0 ? 0 : o.elapsed.count()));
      for (NameList l : kLists) {
        const auto& names = o.*l;
        size_t n = std::min<size_t>(names.size(), kMaxListNames);
        w.put<uint16_t>(uint16_t(n));
        for (size_t i = 0; i < n; ++i) w.name(names[i].substr(0, kMaxListName));
      }
      break;
    }
  }
  return w.take();
}

Reply decode_reply(std::span<const uint8_t> b) {
  check_size(b, "reply");
  Reader in(b);
  if (in.get<uint32_t>("magic") != kReplyMagic)
    throw AgentWireError("not an agent reply (wrong magic): is this the writer agent's socket?");
  uint8_t op = in.get<uint8_t>("op");
  if (!known_op(op)) throw AgentWireError("agent reply: unknown op " + std::to_string(op));
  uint8_t status = in.get<uint8_t>("status");
  if (status > uint8_t(Status::Busy))
    throw AgentWireError("agent reply: unknown status " + std::to_string(status));
  in.zero(2, "header's reserved bytes");
  Reply r;
  r.op = Op(op);
  r.status = Status(status);
  r.id = in.get<uint64_t>("id");
  if (r.status != Status::Ok) {
    r.message = in.rest();
    return r;
  }
  switch (r.op) {
    case Op::ReadSeq:
      r.seq = in.get<uint64_t>("seq");
      in.end("read-seq reply");
      break;
    case Op::Register: {
      uint8_t ref = in.get<uint8_t>("refusal");
      if (ref > kMaxRefusal) throw AgentWireError("agent reply: unknown refusal " + std::to_string(ref));
      r.registered.refusal = Refusal(ref);
      in.zero(7, "register reply's reserved bytes");
      r.registered.slot = in.get<uint64_t>("slot");
      r.registered.version = in.get<uint64_t>("version");
      r.registered.reason = in.rest();
      break;
    }
    case Op::Invalidate: {
      InvalidateOutcome& o = r.outcome;
      o.number.incarnation = in.get<uint64_t>("incarnation");
      o.number.number = in.get<uint64_t>("number");
      o.homes = in.get<uint32_t>("homes");
      o.rounds = in.get<uint32_t>("rounds");
      o.elapsed = std::chrono::nanoseconds(int64_t(in.get<uint64_t>("elapsed") & (~0ull >> 1)));
      for (NameList l : kLists) {
        uint16_t n = in.get<uint16_t>("list count");
        if (n > kMaxListNames)
          throw AgentWireError("agent reply: a list of " + std::to_string(n) + " homes (at most " +
                               std::to_string(kMaxListNames) + ")");
        auto& names = o.*l;
        for (uint16_t i = 0; i < n; ++i) {
          names.push_back(in.name("a home list"));
          if (names.back().size() > kMaxListName)
            throw AgentWireError("agent reply: a home list entry of " +
                                 std::to_string(names.back().size()) + " bytes (at most " +
                                 std::to_string(kMaxListName) + ")");
        }
      }
      in.end("invalidate reply");
      break;
    }
  }
  return r;
}

uint64_t peek_id(std::span<const uint8_t> b) {
  return b.size() >= kHeaderBytes ? load<uint64_t>(b.data() + 8) : 0;
}

Op peek_op(std::span<const uint8_t> b) {
  return b.size() >= 5 && known_op(b[4]) ? Op(b[4]) : Op::ReadSeq;
}

}  // namespace tierce::coherence::agentwire
