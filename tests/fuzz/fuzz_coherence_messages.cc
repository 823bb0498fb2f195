// tests/fuzz/fuzz_coherence_messages.cc — fuzzes the app nodes' message decoders
// (coherence/protocol.h): decode_register, decode_register_reply and decode_invalidate, with
// its optional pending-mark trailer; and the writer agent's socket (coherence/agent_wire.h):
// decode_request (what any local process in the socket's group may send) and decode_reply. Whatever a peer sends, each one returns or throws
// ProtocolError — never crashes, reads out of bounds or accepts a mark op it does not know — and
// what it accepts encodes back to a body that decodes to the same message.
// Built twice (tests/fuzz/CMakeLists.txt): with -DTIERCE_LIBFUZZER under libFuzzer, and without
// it as a deterministic mutation driver in ctest:
//   fuzz_coherence_messages_replay [--iterations N] [--write-seeds DIR] [FILE...]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "coherence/agent_wire.h"
#include "coherence/protocol.h"

using namespace tierce::coherence;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_coherence_messages: %s\n", what);
  std::abort();
}

void invalidate(std::span<const uint8_t> in) {
  InvalidateRequest m;
  try {
    m = decode_invalidate(in);
  } catch (const ProtocolError&) {
    return;
  }
  if (uint8_t(m.mark.op) > kMaxMarkOp) fail("an unknown mark op was accepted");
  if (m.deps.size() > kMaxDependencies) fail("too many dependencies accepted");
  auto again = decode_invalidate(encode(m));  // throws (uncaught: a failure) if not canonical
  if (again.deps != m.deps || again.origin != m.origin || again.number != m.number ||
      again.mark.op != m.mark.op ||
      (m.mark.op != MarkOp::None &&
       (again.mark.token != m.mark.token || again.mark.ttl_ms != m.mark.ttl_ms)))
    fail("an invalidation does not survive encode/decode");
}

void reg(std::span<const uint8_t> in) {
  try {
    auto m = decode_register(in);
    auto again = decode_register(encode(m));
    if (again.deps != m.deps || again.key != m.key) fail("a registration does not round-trip");
  } catch (const ProtocolError&) {
  }
}

void reply(std::span<const uint8_t> in) {
  try {
    auto m = decode_register_reply(in);
    if (uint8_t(m.refusal) > kMaxRefusal) fail("an unknown refusal was accepted");
  } catch (const ProtocolError&) {
  }
}

void agent_request(std::span<const uint8_t> in) {
  agentwire::Request m;
  try {
    m = agentwire::decode_request(in);
  } catch (const agentwire::AgentWireError&) {
    return;
  }
  if (m.deps.size() > agentwire::kMaxDeps) fail("agent: too many dependencies accepted");
  if (uint8_t(m.mark.op) > kMaxMarkOp) fail("agent: an unknown mark op was accepted");
  if (m.give_up_after_ms && m.mark.op == MarkOp::None) fail("agent: give_up_after without a mark");
  auto again = agentwire::decode_request(agentwire::encode(m));
  if (again.op != m.op || again.id != m.id || again.key != m.key || again.deps != m.deps ||
      again.seq_start != m.seq_start || again.scheme != m.scheme || again.mark.op != m.mark.op ||
      again.mark.token != m.mark.token || again.give_up_after_ms != m.give_up_after_ms)
    fail("an agent request does not survive encode/decode");
}

void agent_reply(std::span<const uint8_t> in) {
  try {
    auto m = agentwire::decode_reply(in);
    if (uint8_t(m.registered.refusal) > kMaxRefusal) fail("agent: an unknown refusal was accepted");
    auto again = agentwire::decode_reply(agentwire::encode(m));
    if (again.id != m.id || again.status != m.status || again.outcome.acked != m.outcome.acked)
      fail("an agent reply does not survive encode/decode");
  } catch (const agentwire::AgentWireError&) {
  }
}

}  // namespace

// The first byte picks the decoder; the rest is the body (a private copy: exact bounds).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<uint8_t> body(data + 1, data + size);
  switch (data[0] % 5) {
    case 0: invalidate(body); break;
    case 1: reg(body); break;
    case 2: reply(body); break;
    case 3: agent_request(body); break;
    default: agent_reply(body); break;
  }
  return 0;
}

#ifndef TIERCE_LIBFUZZER
// ---- deterministic replay driver (any compiler; in ctest) ---------------------------------------
#include <random>

#include "replay_args.h"

static std::vector<std::vector<uint8_t>> seeds() {
  std::vector<std::vector<uint8_t>> out;
  auto with = [&](uint8_t which, std::vector<uint8_t> b) {
    b.insert(b.begin(), which);
    out.push_back(std::move(b));
  };
  InvalidateRequest inv;
  inv.digest = 0x1234;
  inv.origin = "app1";
  inv.writer_incarnation = 5;
  inv.number = 6;
  inv.ack_cell = 7;
  inv.ack_tag = 8;
  inv.deps = {9, 10, 11};
  with(0, encode(inv));
  inv.mark = {MarkOp::Pend, 0xfeedface, 300};
  with(0, encode(inv));
  inv.mark = {MarkOp::Release, 0xfeedface, 0};
  with(0, encode(inv));
  inv.scheme = Scheme::InvalidateAll;
  inv.deps.clear();
  with(0, encode(inv));
  with(1, encode(RegisterRequest{0x1234, 1, 2, {3, 4}}));
  with(2, encode(RegisterResult{Refusal::Pending, 3, 0, "pending"}));
  with(2, encode(RegisterResult{Refusal::None, 3, 99, ""}));
  agentwire::Request q;
  q.op = agentwire::Op::Invalidate;
  q.id = 3;
  q.deps = {1, 2};
  q.mark = {MarkOp::Pend, 5, 100};
  q.give_up_after_ms = 200;
  with(3, agentwire::encode(q));
  q.op = agentwire::Op::Register;
  with(3, agentwire::encode(q));
  agentwire::Reply r;
  r.op = agentwire::Op::Invalidate;
  r.outcome.acked = {"app1", "app2"};
  r.outcome.fenced = {"app3: no answer"};
  with(4, agentwire::encode(r));
  r.status = agentwire::Status::BadRequest;
  r.message = "why";
  with(4, agentwire::encode(r));
  return out;
}

int main(int argc, char** argv) {
  tierce_fuzz::Driver<decltype(seeds())::value_type> d;
  d.name = "fuzz_coherence_messages";
  d.iterations = 300000;
  d.seeds = seeds();
  d.rng_seed = 20261126;
  // This format's own mutations (what is worth changing in it).
  {
    tierce_fuzz::BinaryMutations m;
    m.max_edits = 4;
    m.own = {
        [](std::vector<uint8_t>& v, std::mt19937_64& rng) {  // a random trailer (a mark, part of one, or more)
          size_t n = rng() % 20;
          for (size_t i = 0; i < n; ++i) v.push_back(uint8_t(rng()));
        },
        [](std::vector<uint8_t>& v, std::mt19937_64& rng) {  // a trailer that is a mark with a small op
          v.push_back(uint8_t(rng() % 4));
          for (int i = 0; i < 12; ++i) v.push_back(uint8_t(rng()));
        }};
    d.mutate = m;
  }
  return tierce_fuzz::replay_main(argc, argv, d);
}
#endif  // TIERCE_LIBFUZZER
