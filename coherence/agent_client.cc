// coherence/agent_client.cc — see agent_client.h.
#include "coherence/agent_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

namespace tierce::coherence {

namespace aw = agentwire;
using Clock = std::chrono::steady_clock;

std::string_view to_string(AgentInvalidation::Kind k) {
  switch (k) {
    case AgentInvalidation::Kind::Answered: return "answered";
    case AgentInvalidation::Kind::Lost: return "lost";
    case AgentInvalidation::Kind::Stuck: return "stuck";
    case AgentInvalidation::Kind::Refused: return "refused";
    case AgentInvalidation::Kind::GaveUp: return "gave up";
  }
  return "?";
}

namespace {

int ms_until(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1000 ? 1000 : int(left) + 1;  // wake at least once a second
}

}  // namespace

AgentClient::AgentClient(std::string socket_path, AgentTimeouts t)
    : path_(std::move(socket_path)), t_(t) {}

AgentClient::~AgentClient() {
  if (pid_ != getpid()) (void)fd_.release();  // inherited: the other process's to close
}

void AgentClient::drop() {
  if (pid_ != getpid()) (void)fd_.release();
  fd_.reset();
}

base::Status AgentClient::connect() {
  drop();
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path_.empty() || path_.size() >= sizeof sa.sun_path)
    return {base::Code::InvalidArgument, "agent socket path '" + path_ + "' is empty or too long"};
  std::memcpy(sa.sun_path, path_.c_str(), path_.size() + 1);
  base::Fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return {base::Code::Internal, std::string("socket: ") + std::strerror(errno)};
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    int e = errno;
    if (e != EAGAIN && e != EINPROGRESS)
      return {base::Code::Unavailable,
              "cannot connect to the writer agent's socket " + path_ + ": " + std::strerror(e) +
                  (e == ENOENT || e == ECONNREFUSED ? " (is the node's writer agent running, with "
                                                      "[writer] socket = this path?)"
                   : e == EACCES ? " (this user may not use it: [writer] socket_group)"
                                 : "")};
    pollfd p{fd.get(), POLLOUT, 0};
    if (::poll(&p, 1, int(t_.connect.count())) != 1 || (p.revents & (POLLERR | POLLHUP)))
      return {base::Code::Unavailable,
              "the writer agent's socket " + path_ + " did not accept within " +
                  std::to_string(t_.connect.count()) + " ms (its backlog is full)"};
  }
  fd_ = std::move(fd);
  pid_ = getpid();
  return {};
}

AgentClient::Exchange AgentClient::exchange(aw::Request req, Clock::time_point deadline) {
  Exchange ex;
  if (!fd_ || pid_ != getpid()) {
    base::Status s = connect();
    if (!s.ok()) {
      ex.wait = Wait::Failed;
      ex.why = s.message();
      return ex;
    }
  }
  req.id = next_id_++;
  std::vector<uint8_t> out;
  try {
    out = aw::encode(req);
  } catch (const aw::AgentWireError& e) {
    ex.wait = Wait::Failed;
    ex.why = e.what();
    return ex;
  }
  for (;;) {
    ssize_t n = ::send(fd_.get(), out.data(), out.size(), MSG_NOSIGNAL);
    if (n == ssize_t(out.size())) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {  // the agent is not reading (frozen or busy): wait for room
      pollfd p{fd_.get(), POLLOUT, 0};
      if (Clock::now() >= deadline) {
        ex.wait = Wait::Timeout;
        ex.why = "the writer agent took no request within the deadline (its socket is full)";
        return ex;
      }
      ::poll(&p, 1, ms_until(deadline));
      continue;
    }
    ex.wait = Wait::Closed;
    ex.why = std::string("the writer agent's socket broke: ") + (n < 0 ? std::strerror(errno) : "short send");
    drop();
    return ex;
  }
  if (in_.size() != aw::kMaxMessage + 1) in_.resize(aw::kMaxMessage + 1);  // once per client
  std::vector<uint8_t>& in = in_;
  for (;;) {
    pollfd p{fd_.get(), POLLIN, 0};
    int pr = ::poll(&p, 1, ms_until(deadline));
    if (pr < 0 && errno != EINTR) {
      ex.wait = Wait::Failed;
      ex.why = std::string("poll: ") + std::strerror(errno);
      drop();
      return ex;
    }
    if (pr <= 0) {
      if (Clock::now() >= deadline) {
        ex.wait = Wait::Timeout;
        ex.why = "no answer from the writer agent in time";
        return ex;  // the connection stays: a late answer is skipped by its id
      }
      continue;
    }
    ssize_t n = ::recv(fd_.get(), in.data(), in.size(), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      ex.wait = Wait::Closed;
      ex.why = n == 0 ? "the writer agent closed the connection before answering (it stopped or died)"
                      : std::string("the writer agent's socket broke: ") + std::strerror(errno);
      drop();
      return ex;
    }
    try {
      aw::Reply r = aw::decode_reply(std::span<const uint8_t>(in.data(), size_t(n)));
      if (r.id != req.id) continue;  // the late answer of an earlier request that timed out
      ex.wait = Wait::Answer;
      ex.reply = std::move(r);
      return ex;
    } catch (const aw::AgentWireError& e) {
      ex.wait = Wait::Failed;
      ex.why = std::string("a malformed answer from the writer agent: ") + e.what();
      drop();
      return ex;
    }
  }
}

base::Result<uint64_t> AgentClient::read_seq(uint64_t key) {
  aw::Request q;
  q.op = aw::Op::ReadSeq;
  q.key = key;
  Exchange ex = exchange(std::move(q), Clock::now() + t_.op);
  if (ex.wait != Wait::Answer) return base::Status(base::Code::Unavailable, ex.why);
  if (ex.reply.status != aw::Status::Ok)
    return base::Status(base::Code::Unavailable,
                        "the writer agent could not read the sequence (" +
                            std::string(aw::to_string(ex.reply.status)) + "): " + ex.reply.message);
  return ex.reply.seq;
}

RegisterResult AgentClient::register_page(uint64_t key, uint64_t seq_start,
                                          std::span<const uint64_t> deps) {
  aw::Request q;
  q.op = aw::Op::Register;
  q.key = key;
  q.seq_start = seq_start;
  q.deps.assign(deps.begin(), deps.end());
  RegisterResult r;
  Exchange ex = exchange(std::move(q), Clock::now() + t_.op);
  if (ex.wait != Wait::Answer) {
    r.reason = ex.why;
    return r;
  }
  if (ex.reply.status != aw::Status::Ok) {
    r.reason = "the writer agent could not register it (" +
               std::string(aw::to_string(ex.reply.status)) + "): " + ex.reply.message;
    return r;
  }
  return ex.reply.registered;
}

AgentInvalidation AgentClient::invalidate(std::span<const uint64_t> deps, Scheme scheme,
                                          const PendingMark& mark,
                                          std::chrono::milliseconds give_up_after) {
  const auto t0 = Clock::now();
  AgentInvalidation out;
  auto finish = [&](AgentInvalidation::Kind k, std::string why) {
    out.kind = k;
    out.why = std::move(why);
    out.elapsed = Clock::now() - t0;
    return out;
  };
  const bool may_give_up = give_up_after.count() > 0 && mark.op != MarkOp::None;
  aw::Request q;
  q.op = aw::Op::Invalidate;
  q.scheme = scheme;
  q.mark = mark;
  q.give_up_after_ms = may_give_up ? uint32_t(give_up_after.count()) : 0;
  if (scheme == Scheme::DependencyLists) q.deps.assign(deps.begin(), deps.end());
  // A Pend given up on needs no cover (its COMMIT is not sent): it waits only until then, plus
  // the time the agent takes to answer that it gave up.
  const auto deadline = may_give_up ? t0 + give_up_after + t_.op : t0 + t_.cap;
  Exchange ex = exchange(std::move(q), deadline);
  if (ex.wait == Wait::Answer) {
    switch (ex.reply.status) {
      case aw::Status::Ok:
        out.outcome = std::move(ex.reply.outcome);
        return finish(AgentInvalidation::Kind::Answered, "");
      case aw::Status::BadRequest:
        return finish(AgentInvalidation::Kind::Refused,
                      "the writer agent refused the invalidation: " + ex.reply.message);
      case aw::Status::Unavailable:
      case aw::Status::Busy:
        break;  // not sent by the agent: as lost (the agent numbered once bare if it could)
    }
    ex.why = "the writer agent could not send it (" + std::string(aw::to_string(ex.reply.status)) +
             "): " + ex.reply.message;
  }
  if (may_give_up)
    return finish(AgentInvalidation::Kind::GaveUp, ex.why);
  if (ex.wait == Wait::Timeout)
    return finish(AgentInvalidation::Kind::Stuck,
                  ex.why + " after " + std::to_string(t_.cap.count()) +
                      " ms: the agent lives but has not answered; it numbers the invalidation when "
                      "it runs again");
  // Lost: from now on (at the latest) no home renews its fence on this node's counter without a
  // catch-up; after the bound none vouches for a table that misses this update.
  std::this_thread::sleep_until(Clock::now() + t_.fence_bound);
  return finish(AgentInvalidation::Kind::Lost,
                ex.why + "; returned after the fence bound (" + std::to_string(t_.fence_bound.count()) +
                    " ms): the homes stopped vouching for this node's counter, and the restarted "
                    "agent makes them catch up");
}

}  // namespace tierce::coherence
