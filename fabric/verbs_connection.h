// fabric/verbs_connection.h — the client side of the verbs backend. Internal.
//
//   ClientLink       one authenticated RC connection to a server: rdma_cm resolve/route/connect,
//                    every step bounded by connect_timeout; then HELLO/AUTH/AUTH_OK over SEND/RECV.
//   VerbsConnection  fabric.h's Connection on a ClientLink: LOOKUP/CALL/SEND/PING as messages;
//                    read/write/cas64/faa64 as RDMA READ/WRITE/ATOMIC work requests.
//
// One-sided batches: post() checks each op locally (bounds against RemoteRegion.len → OutOfBounds,
// 8-byte alignment of atomics → Misaligned), stages small transfers in the registered bounce memory
// (or registers the caller's buffer for larger ones, through the link's registration cache when
// ClientOptions::registration_cache_bytes asks for one) and posts the WRs with one ibv_post_send
// per run; every WR is signaled, so each op gets its own status. A batch larger than the send queue
// is posted in pieces as completions free room (in wait()). wait() reaps completions until all ops
// ended or op_timeout passed (→ Timeout; the connection is marked broken and its QP destroyed, so
// the HCA stops touching our memory).
//
// Atomics: RDMA atomics only when the server's HCA declares them atomic against its CPU's atomics
// (Tunables::kNicAtomicsWithoutGlob says why); otherwise CAS/FAA messages that the server's
// connection thread performs with CPU atomics. Batch order is kept as on tcp: a message goes after
// the RDMA ops before it on the QP (so it is delivered after they executed), and an RDMA op after a
// message waits for that message's reply. With rdma-core/kernel mlx5 a device reports
// IBV_ATOMIC_NONE unless its atomics work in host byte order, so values are host-order integers.
//
// Revocation and leases, as on shm: after the data ops of a batch, one more RDMA READ per region
// fetches the state, lease and export-key words of the segment's header (registered
// remote-read-only by the server; its rkey is the upper half of RemoteRegion::key). A revoked
// segment, or an export key other than the one LOOKUP gave (unexported, re-exported), makes the
// region's ops report Revoked; a wall-clock lease deadline that is 0 (the server stopped) or not
// ahead of our wall clock by more than ClientOptions::clock_skew makes them report PeerDead — a
// paused, hung or fenced exporter, whose HCA would otherwise keep serving memory nobody vouches
// for (fabric::judge_remote_lease). A descriptor this connection did not look up itself is held
// to the export key seen at its first use.
//
// An op the peer's HCA refuses (stale rkey → BadKey, refused request → BadRequest) moves both QPs
// to the error state: the ops after it in the same batch are not executed and report PeerClosed.
// The server is alive, so the connection reconnects transparently on its next use (a new QP;
// RemoteRegion descriptors stay valid, since rkeys belong to the server's MRs, not to QPs). A dead
// or silent peer (no ACKs within ≈ 2 s, DISCONNECTED, op_timeout) breaks the connection for good,
// as on tcp.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fabric/fabric.h"
#include "fabric/reg_cache.h"
#include "fabric/verbs_endpoint.h"
#include "fabric/verbs_resources.h"

namespace tierce::fabric::verbs {

class ClientLink {
 public:
  enum class Kind { Control, Stream };  // Stream: more receives, no bounce memory

  // Connects to a (verbs://HOST:PORT) and authenticates with o.secret, all within d.
  // Throws FabricError{NoDevice, Timeout, PeerClosed, AuthFailed, Protocol, System}.
  ClientLink(const Address& a, const ClientOptions& o, Kind kind, Deadline d);
  ~ClientLink();
  ClientLink(const ClientLink&) = delete;
  ClientLink& operator=(const ClientLink&) = delete;

  Endpoint& ep() { return *ep_; }
  ibv_pd* pd() const { return pd_.get(); }
  const DeviceLimits& device() const { return dev_; }
  const PeerParams& server() const { return server_; }
  const std::string& server_name() const { return server_name_; }
  // cas64/faa64 as RDMA atomics (else as CAS/FAA messages to the server's CPU).
  bool nic_atomics() const { return nic_atomics_; }

  // Registered staging memory of one-sided batches: the first kLeaseArea bytes hold the batch's
  // lease checks (24 bytes each: up to 170 regions per batch), the rest stages READ/WRITE/atomic
  // bytes.
  static constexpr size_t kLeaseArea = 4096;
  uint8_t* bounce() const { return bounce_.data(); }
  size_t bounce_size() const { return bounce_.size(); }
  uint32_t bounce_lkey() const { return bounce_mr_ ? bounce_mr_->lkey : 0; }
  // MRs of caller buffers registered for the current batch. Owned here so that they are released
  // after the QP and before the PD whatever way the link ends.
  std::vector<Mr>& batch_mrs() { return batch_mrs_; }
  // With ClientOptions::registration_cache_bytes > 0: the cache large READ/WRITE buffers are
  // registered through (on this link's PD; a reconnect starts a new one), and the current batch's
  // leases on it. nullptr: per-batch registration (batch_mrs()).
  RegCache* reg_cache() const { return reg_cache_.get(); }
  std::vector<RegCache::Lease>& batch_leases() { return batch_leases_; }

  // rdma_disconnect: the QP goes to the error state at once, so the HCA stops touching our memory
  // and every posted WR completes (flushed). Idempotent.
  void shutdown() noexcept;

 private:
  CmEvent expect(rdma_cm_event_type want, Deadline d, const std::string& step,
                 const std::string& host);
  void on_cm_events();  // the endpoint's watch: DISCONNECTED / DEVICE_REMOVAL after setup
  std::string handshake(const Secret& secret, const ClientIdentity& id, Deadline d);

  std::string uri_;
  // Creation order; destroyed in reverse: QP (in ep_) first, event channel last.
  EventChannel ch_;
  CmId id_;
  DeviceLimits dev_;
  Pd pd_;
  AlignedBuffer bounce_;
  Mr bounce_mr_;
  std::vector<Mr> batch_mrs_;
  std::unique_ptr<RegCache> reg_cache_;        // deregisters its MRs after the QP, before the PD
  std::vector<RegCache::Lease> batch_leases_;  // released before the cache goes
  std::unique_ptr<Endpoint> ep_;
  PeerParams server_;
  std::string server_name_;
  bool nic_atomics_ = false;
  bool connected_ = false;     // rdma_connect was issued
  bool disconnected_ = false;  // rdma_disconnect was issued
};

class VerbsConnection final : public Connection {
 public:
  VerbsConnection(Address a, const ClientOptions& opts);
  ~VerbsConnection() override;

  Transport transport() const override { return Transport::Verbs; }
  Capabilities capabilities() const override;
  const std::string& peer_uri() const override { return uri_; }
  const std::string& peer_name() const override { return peer_name_; }
  RemoteRegion lookup(std::string_view region_name) override;
  void post(std::span<OneSidedOp> ops) override;
  void wait(std::span<OneSidedOp> ops) override;
  std::vector<uint8_t> call(std::string_view service, std::span<const uint8_t> body) override;
  void send(std::string_view service, std::span<const uint8_t> body) override;
  std::unique_ptr<Stream> open_stream(std::string_view service) override;
  void ping() override;
  void set_op_timeout(Millis t) override { opts_.op_timeout = t; }

 private:
  struct OpState {
    bool posted = false;        // handed to the HCA, or sent as a message
    bool done = false;          // status final
    bool via_message = false;   // CAS/FAA performed by the server's CPU
    uint8_t* staged = nullptr;  // bounce bytes: READ destination, WRITE source, atomic result
    size_t check = SIZE_MAX;    // the lease check vouching for this RDMA op
  };
  // One region's state+lease READ at the end of a batch (index ops.size() + k in states_/wrs_).
  struct LeaseCheck {
    uint64_t addr = 0;  // the region's RemoteRegion::addr and ::key
    uint64_t key = 0;
    uint8_t* staged = nullptr;
    Errc status = Errc::Ok;
  };
  using DescriptorId = std::pair<uint64_t, uint64_t>;  // RemoteRegion::addr, ::key

  // The link for the next operation: reconnects after a recoverable failure, throws when broken.
  ClientLink& usable_link();
  // One request, its reply. Throws on transport errors (and marks the connection broken).
  wire::Header round_trip(wire::Header req, std::span<const uint8_t> payload,
                          std::vector<uint8_t>* reply);
  [[noreturn]] void fail(const FabricError& e);
  // Throws TooLarge when a CALL/SEND frame of `payload` bytes cannot be carried.
  void check_message_size(const char* what, std::string_view service, size_t body,
                          size_t payload) const;

  // Datapath (verbs_datapath.cc).
  Errc prepare(ClientLink& l, OneSidedOp& op, size_t i);
  uint8_t* stage(ClientLink& l, size_t len);
  void add_lease_checks(ClientLink& l, std::span<OneSidedOp> ops);
  void post_some(ClientLink& l, std::span<OneSidedOp> ops);
  void complete(std::span<OneSidedOp> ops, const OpCompletion& c);
  // Final status of entry i: an op's, or (i >= ops.size()) a lease check's.
  void set_status(std::span<OneSidedOp> ops, size_t i, Errc e);
  void take_replies(ClientLink& l, std::span<OneSidedOp> ops);
  void judge_leases(ClientLink& l, std::span<OneSidedOp> ops);

  Address addr_;
  std::string uri_;
  ClientOptions opts_;
  std::shared_ptr<ClientLink> link_;
  std::string peer_name_;
  uint64_t next_id_ = 2;  // id 1 is the handshake's
  // One-way SENDs since the last reply: the server may hold at most its receive depth of our
  // messages, so a SEND that would exceed it first does a PING (whose reply means all earlier
  // messages were consumed and their buffers reposted).
  uint32_t unacked_sends_ = 0;
  bool broken_ = false;
  std::string broken_why_;
  std::map<DescriptorId, uint64_t> export_keys_;  // export key each descriptor was issued under

  // The posted batch. Entries [0, n) of states_/wrs_/sges_ are the ops, [n, n + checks_.size()) the
  // lease checks.
  bool pending_ = false;
  uint32_t batch_gen_ = 0;  // in every op's wr_id: completions of another batch are ignored
  size_t next_post_ = 0;    // first entry not yet posted (or skipped)
  size_t in_flight_ = 0;    // posted or sent, not yet completed
  size_t bounce_used_ = 0;
  std::vector<OpState> states_;
  std::vector<ibv_send_wr> wrs_;
  std::vector<ibv_sge> sges_;
  std::vector<LeaseCheck> checks_;
  std::vector<wire::Header> requests_;  // message ops' frames, by op index
  std::deque<std::pair<uint64_t, size_t>>
      sent_;                   // message ops awaiting replies: (request id, op index)
  std::vector<size_t> chain_;  // scratch: indexes of the WRs in one ibv_post_send
};

}  // namespace tierce::fabric::verbs
