// tests/fuzz/fuzz_wire.cc — fuzz target for the tcp wire decoder and the responder behind it.
// The input is read as a sequence of frames (header + declared payload), each decoded and, when
// well-formed, handled by a Responder over a real exported segment — what a hostile peer that
// passed authentication can reach. Must never crash, hang or touch memory out of bounds.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

#include "fabric/responder.h"
#include "fabric_world.h"
#include "fabric/wire.h"

using namespace tierce::fabric;

namespace {

struct World : tierce_fuzz::FabricWorld {
  World() : FabricWorld("fuzz") {}
};

World& world() {
  static World w;
  return w;
}

}  // namespace

// For the replay driver's report: how deep the inputs got.
extern "C" void fuzz_wire_stats(uint64_t* one_sided, uint64_t* rejected, uint64_t* messages) {
  auto st = world().counters.snapshot();
  *one_sided = st.one_sided_ops;
  *rejected = st.rejected_ops;
  *messages = st.messages;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  Responder responder(w.regions, w.services, w.counters);
  PeerInfo peer;
  TransportView views[2] = {{Transport::Tcp, false}, {Transport::Shm, true}};
  Reply reply;
  std::span<const uint8_t> in(data, size);
  // The first byte picks the view; frames that name region 1 with key 0 get the real key, so the
  // fuzzer reaches the data path and not only the key check.
  const TransportView& view = views[size ? data[0] & 1 : 0];
  if (!in.empty()) in = in.subspan(1);
  while (in.size() >= wire::kHeaderSize) {
    auto h = wire::decode_header(in.first(wire::kHeaderSize));
    if (!h) return 0;  // the connection would be closed here
    in = in.subspan(wire::kHeaderSize);
    if (h->length > in.size()) return 0;  // stream ends mid-frame
    auto payload = in.first(h->length);
    in = in.subspan(h->length);
    if (h->reply) return 0;
    if ((h->a0 >> wire::kRegionShift) == w.id && h->a1 == 0) h->a1 = w.key;
    if (h->op == wire::Op::Call || h->op == wire::Op::Send) {
      (void)wire::decode_service_payload(payload);
    }
    responder.handle(*h, payload, peer, view, &reply);
    // A reply must always be well-formed itself.
    uint8_t hb[wire::kHeaderSize];
    reply.header.length =
        uint32_t(reply.direct.empty() ? reply.payload.size() : reply.direct.size());
    wire::encode_header(reply.header, hb);
    if (!wire::decode_header(hb)) __builtin_trap();
    if (!reply.direct.empty()) {
      volatile uint8_t sink = reply.direct.front() ^ reply.direct.back();  // bytes must be mapped
      (void)sink;
    }
  }
  return 0;
}
