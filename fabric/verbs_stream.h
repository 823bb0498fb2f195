// fabric/verbs_stream.h — a bulk byte stream (fabric.h's Stream) over one verbs connection of its
// own, opened with STREAM_OPEN like the tcp backend's. Internal.
//
// After the STREAM_OPEN reply neither side sends wire.h frames on that queue pair again; each
// message is a SEND_WITH_IMM whose 32-bit immediate (host order here, network order on the wire) is
//
//   bits 31..24  kind: 1 DATA  (payload: 1 .. min(both buffer sizes) bytes of the stream)
//                      2 CREDIT (no payload)
//                      3 EOF   (no payload; the writer called shutdown_write or closed the stream)
//   bits 23..0   credits the sender returns (messages of the receiver it has consumed)
//
// Flow control by credits, so a receive buffer is always posted for every message (no RNR):
// - A side may have at most `window` DATA/EOF messages unconsumed at its peer, where window =
//   peer's receive depth (from the rdma_cm private data) - Tunables::kStreamCtrlReserve.
// - A message is consumed when the reader has taken all of its bytes (or the EOF); its buffer is
//   reposted and one credit is owed to the sender.
// - Owed credits ride on the next DATA/EOF; once they reach half of the peer's window with no data
//   going back, a CREDIT message carries them. CREDIT messages are not counted in the window: they
//   land in the reserve, and at most two can be outstanding (each returns at least half a window).
//   The reserve also covers the STREAM_OPEN reply's buffer, which the client reposts only after the
//   server may already have started writing.
// Closing without shutdown_write sends EOF (if a credit is available within the linger time), so a
// reader sees a clean end as with a socket's FIN; a stream that breaks without EOF makes the reader
// throw PeerClosed.
#pragma once

#include <deque>
#include <memory>
#include <span>

#include "fabric/fabric.h"
#include "fabric/verbs_endpoint.h"

namespace tierce::fabric::verbs {

class VerbsStream final : public Stream {
 public:
  // `owner` keeps the endpoint (and the QP, rdma_cm_id and PD under it) alive as long as the
  // stream. `peer` is what the other side announced when connecting.
  VerbsStream(std::shared_ptr<void> owner, Endpoint* ep, PeerParams peer, Millis timeout);
  ~VerbsStream() override;
  VerbsStream(const VerbsStream&) = delete;
  VerbsStream& operator=(const VerbsStream&) = delete;

  void write_all(std::span<const uint8_t> bytes) override;
  size_t read_some(std::span<uint8_t> buf) override;
  void shutdown_write() override;
  void set_timeout(Millis t) override { timeout_ = t; }

 private:
  // Reaps completions and sorts what arrived: CREDIT applied at once, DATA/EOF queued for reading.
  void pump();
  void absorb(const Inbound& m);
  // Gives a consumed message's buffer back and owes its sender a credit.
  void consume(const Inbound& m);
  // Sends owed credits as a CREDIT message once they reach the threshold. Best effort: a failure
  // shows on the next read or write.
  void settle_credits();
  uint32_t take_owed();
  // Waits until a credit is available (Timeout past d).
  void wait_for_credit(Deadline d);

  std::shared_ptr<void> owner_;
  Endpoint* ep_;
  Millis timeout_;
  uint32_t window_ = 0;        // our DATA/EOF messages the peer can hold
  uint32_t credits_ = 0;       // of which we may still send
  uint32_t threshold_ = 1;     // owed credits that justify a CREDIT message
  uint32_t owed_ = 0;          // credits we owe the peer
  size_t chunk_ = 0;           // largest DATA payload: min(our, the peer's buffer size)
  std::deque<Inbound> inbox_;  // DATA/EOF not yet read; the front may be partly read
  size_t head_ = 0;            // bytes of inbox_.front() already read
  bool eof_in_ = false;        // the peer's EOF was read
  bool eof_queued_ = false;    // the peer's EOF arrived (more DATA after it is a protocol error)
  bool eof_out_ = false;       // we sent EOF
};

}  // namespace tierce::fabric::verbs
