// fabric/fabric.h — the one interface Tierce's services use to reach other nodes' memory and
// endpoints (seed 000 ch.3, "Interconnect Capability Mapping Interface").
//
//   Server      a node's exporter: serves named regions (SharedSegment) and message/stream
//               services on one or more listen addresses (memd embeds one; so do tests).
//   Connection  a client's link to one Server: directory lookup, one-sided read/write/cas64/faa64
//               (sync and batched), request/response and one-way messages, bulk streams.
//   Backends    tcp   — a responder thread in the server performs one-sided ops (target CPU busy);
//               shm   — same host: the peer maps the segment and touches it directly (truly
//               one-sided); verbs — rdma-core RC queue pairs: the NIC performs them (truly
//               one-sided, zero-copy).
//
// Addresses are URIs: tcp://HOST:PORT, shm:///abs/path/to/socket, verbs://HOST:PORT.
// Port 0 asks for an ephemeral port; Server::bound_uris() tells which one was taken.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "fabric/auth.h"
#include "fabric/errors.h"
#include "fabric/log.h"
#include "fabric/segment.h"

namespace tierce::fabric {

using Millis = std::chrono::milliseconds;

enum class Transport : uint8_t { Auto, Verbs, Tcp, Shm };
std::string_view to_string(Transport t);
Transport parse_transport(std::string_view s);  // "auto|verbs|tcp|shm", throws Errc::Config

// What a backend really provides, so callers need not guess from its name.
struct Capabilities {
  bool truly_one_sided = false;  // one-sided ops complete without the target's CPU
  bool zero_copy = false;        // bytes move without an intermediate CPU copy
  bool native_atomics = false;   // cas64/faa64 are hardware atomics, not a software responder's
  bool cross_host = false;       // can reach another machine
  size_t max_transfer = 0;       // largest single read/write
  size_t max_message = 0;        // largest message body
};
Capabilities capabilities_of(Transport t);

// What protects tcp frames after the handshake (fabric/protect.h). shm and verbs stay inside one
// trust domain (this host; the RDMA fabric) and are never protected, whatever is asked.
//   None     nothing: an on-path attacker can inject, replay or read frames. For measurement only;
//            a Server configured so logs a loud warning (FAB0108).
//   Mac      every frame carries a 16-byte tag over its header, payload and sequence number.
//   Encrypt  as Mac, and payloads are encrypted.
// A connection uses the stronger of the server's and the client's settings.
// (enum class Protection is in auth.h: the handshake proofs cover it.)
std::string_view to_string(Protection p);
Protection parse_protection(std::string_view s);  // "none|mac|encrypt", throws Errc::Config

struct Address {
  Transport transport = Transport::Tcp;
  std::string host;  // tcp, verbs
  uint16_t port = 0;
  std::string path;  // shm: the server's control socket
  std::string uri() const;
};
Address parse_address(std::string_view uri);  // throws Errc::Config with a hint

// Whether this host has an active RDMA device.
bool verbs_device_available();
// What was found, for logs and skips: the active port, or why there is none (Unavailable).
base::Result<std::string> verbs_device_probe();
// `auto` resolved: shm when the peer is on this host, verbs when a device is active, else tcp.
Transport resolve_auto(Transport preferred, bool peer_on_same_host);

// The descriptor a peer uses to address exported memory.
// tcp/shm: addr = region id << 40 | offset, key = random 64-bit; verbs: addr = virtual address,
// key = the memory region's rkey (assigned by the HCA).
struct RemoteRegion {
  std::string node;  // the server's URI
  uint64_t addr = 0;
  uint64_t len = 0;
  uint64_t key = 0;
};

// ---------------------------------------------------------------------------------------------
// One-sided operations, batched form. Invariant for atomics: offset % 8 == 0.
enum class OpKind : uint8_t { Read, Write, Cas, Faa };

struct OneSidedOp {
  OpKind kind = OpKind::Read;
  const RemoteRegion* region = nullptr;
  uint64_t offset = 0;
  void* dst = nullptr;        // Read: where the bytes land
  const void* src = nullptr;  // Write: the bytes to put
  size_t len = 0;             // Read/Write
  uint64_t arg0 = 0;          // Cas: expected; Faa: addend
  uint64_t arg1 = 0;          // Cas: desired
  uint64_t result = 0;        // Cas/Faa: the old value, valid after wait()
  Errc status = Errc::Ok;     // per-op outcome, valid after wait()
};

// A bulk byte stream (ADTS builds on it). Not thread-safe.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual void write_all(std::span<const uint8_t> bytes) = 0;
  // Returns 0 at end of stream; throws FabricError{Timeout} past the deadline.
  virtual size_t read_some(std::span<uint8_t> buf) = 0;
  void read_exact(std::span<uint8_t> buf);
  virtual void shutdown_write() = 0;
  virtual void set_timeout(Millis t) = 0;
  // The socket underneath, for sendfile/splice; -1 when the stream has none (verbs).
  virtual int native_fd() const { return -1; }
};

struct ClientOptions {
  Secret secret;
  Millis connect_timeout{2000};
  Millis op_timeout{
      1000};  // deadline of every operation: a dead or silent peer is an error by then
  // tcp / shm control channel: poll the socket this long for a reply before sleeping in poll(2).
  // An idle CPU woken by the reply costs tens of microseconds on VMs (a halted vCPU needs an
  // IPI); a short spin keeps the waiting core awake for the usual round trip. 0 = never spin.
  std::chrono::microseconds spin{50};
  // verbs: the largest difference between this host's wall clock and a server's (NTP keeps it
  // to a few ms). A segment's lease counts as lapsed this long before its wall-clock deadline.
  Millis clock_skew{50};
  // tcp: SO_LINGER {1, 0} from the moment the connection is opened, so that every close of its
  // socket is a reset that drops what the kernel still queues to send, also the close the kernel
  // does when the process dies (by default an orphaned socket keeps retransmitting its queued
  // bytes for minutes, and they are delivered if the peer becomes reachable again). For a client
  // whose requests must not be executed after it is gone. The server sees "peer reset" where it
  // would see an end of stream. shm, verbs: no effect (nothing outlives the process there).
  bool reset_on_close = false;
  // verbs: a registration cache of this many bytes of unused registrations (fabric/reg_cache.h,
  // Wu's FMRD) for one-sided READ/WRITE buffers too large for the bounce memory: a buffer used
  // again is not registered again, and unused registrations are deregistered lazily, in batches.
  // 0 (the default): each batch registers such buffers and deregisters them in wait().
  // Prereq when > 0: before freeing, unmapping or re-purposing memory passed to read()/write()/
  // post(), call fabric::invalidate_registrations(addr, len) (reg_cache.h says why). tcp, shm: no
  // effect.
  size_t registration_cache_bytes = 0;
  // tcp: the least protection this client accepts (the server may impose more). shm, verbs: none.
  Protection protection = Protection::Mac;
  // Node identity (fabric/identity.h): the node this connection is for and its public key (the
  // server must prove it), and this client's own name and key (it signs). All transports.
  ClientIdentity identity;
};

// A client's link to one Server. Not thread-safe: one per thread, or guard it.
class Connection {
 public:
  virtual ~Connection() = default;
  virtual Transport transport() const = 0;
  virtual Capabilities capabilities() const = 0;
  virtual const std::string& peer_uri() const = 0;
  virtual const std::string& peer_name() const = 0;  // the server's name, from its HELLO

  // Directory: "region name → descriptor". Throws FabricError{NoSuchRegion}.
  virtual RemoteRegion lookup(std::string_view region_name) = 0;

  // Synchronous one-sided operations; throw FabricError on any failure.
  void read(const RemoteRegion& r, uint64_t off, void* dst, size_t len);
  void write(const RemoteRegion& r, uint64_t off, const void* src, size_t len);
  uint64_t cas64(const RemoteRegion& r, uint64_t off, uint64_t expected, uint64_t desired);
  uint64_t faa64(const RemoteRegion& r, uint64_t off, uint64_t add);

  // Asynchronous form: post() starts every op (one network round trip for the lot on tcp), the
  // caller may do other work, wait() completes them and fills result/status.
  // Prereq: no other operation on this connection between post() and wait(); the ops outlive both.
  // tcp: requests go out in post() and replies are read in wait(), so a single batch that both
  // writes and reads megabytes can fill the socket buffers both ways and time out: keep bulk
  // transfers to one direction per batch (or use a Stream).
  virtual void post(std::span<OneSidedOp> ops) = 0;
  virtual void wait(std::span<OneSidedOp> ops) = 0;
  // post + wait; throws the first failed op's error.
  void execute(std::span<OneSidedOp> ops);

  // Messages to a named service on the server (bounded by capabilities().max_message).
  virtual std::vector<uint8_t> call(std::string_view service, std::span<const uint8_t> body) = 0;
  virtual void send(std::string_view service, std::span<const uint8_t> body) = 0;
  virtual std::unique_ptr<Stream> open_stream(std::string_view service) = 0;
  virtual void ping() = 0;

  virtual void set_op_timeout(Millis t) = 0;

 protected:
  // One synchronous op, throwing on failure; backends with a faster single-op path override it.
  virtual void run_one(OneSidedOp& op) { execute(std::span(&op, 1)); }
};

// Throws the FabricError that describes a failed op (op.status != Ok).
[[noreturn]] void throw_op_error(const OneSidedOp& op, const std::string& peer_uri);

// Connects and authenticates. Throws FabricError{Timeout, AuthFailed, PeerClosed, NoDevice, ...}.
std::unique_ptr<Connection> connect(std::string_view uri, const ClientOptions& opts);

// ---------------------------------------------------------------------------------------------
struct PeerInfo {
  std::string remote;  // the peer's address as the transport sees it
  Transport transport = Transport::Tcp;
  std::string node;  // the client's node name, proven by its signature ("" when it did not sign)
  // ROLES (issue 32 point 2; docs/SECURITY.md "Roles"): a server that knows the cluster's node
  // keys (ServerIdentity::peers) counts a client that did not sign as a READER, one that proved a
  // node as a MEMBER; a server without keys counts everyone a member. A reader reads every
  // region, writes (WRITE, CAS, FAA; over shm: maps writable) only regions exported writable by
  // readers, and calls only services open to readers (Callers::Anyone).
  bool member = true;
};

// Who may call a service (Server::on_call): members only (the default), or readers too.
enum class Callers : uint8_t { Members, Anyone };

// How a region is exported (Server::export_region): whether readers may write it (the
// cooperative cache's pool slots, which the proxies' httpd children write and every reader
// verifies). Members always may.
struct RegionAccess {
  bool readers_may_write = false;
};

// Message handlers run on the serving connection's thread; a thrown exception becomes a
// HandlerFailed reply with its message. The returned body is the reply (ignored for one-way).
using CallHandler = std::function<std::vector<uint8_t>(const PeerInfo&, std::span<const uint8_t>)>;
// Takes ownership of an accepted stream; runs on its own thread.
using StreamHandler = std::function<void(const PeerInfo&, std::unique_ptr<Stream>)>;

struct ServerOptions {
  std::string name = "tierce";
  Secret secret;
  std::vector<std::string> listen;  // URIs
  Millis heartbeat{50};             // shm lease renewal period
  Millis lease{500};                // shm peers fail an op once the lease is this old
  Millis auth_timeout{5000};        // a peer must authenticate within this
  Millis idle_timeout{0};           // 0 = connections may idle forever
  // tcp / shm control channel: after serving a request, a connection's responder polls for the
  // next one this long before sleeping (see ClientOptions::spin). Costs target CPU, at most this
  // much per request. 0 = never spin.
  std::chrono::microseconds spin{50};
  size_t max_connections = 4096;
  // tcp: connections from one IP address served at once; the next one is answered with a HELLO
  // carrying Busy and closed (FAB0107). Loopback peers count like any other (a local cluster
  // puts every client on 127.0.0.1). 0 = no per-address limit.
  size_t max_connections_per_ip = 1024;
  // Largest frame payload accepted before the handshake completes (the AUTH payload is 64
  // bytes). A bigger claim is refused (FAB0209) and the connection closed, so an unauthenticated
  // peer cannot make the server allocate more than this. 64..65536.
  size_t max_preauth_frame = 256;
  // tcp frames after the handshake (see Protection). shm and verbs: ignored.
  Protection protection = Protection::Mac;
  // Node identity (fabric/identity.h): the key that signs every handshake with `name` (clients
  // that expect this node check it), the cluster's public keys (a client that signs is checked)
  // and whether an unsigned client is refused.
  ServerIdentity identity;
  LogSink log;  // defaults to stderr
};

struct ExportInfo {
  std::string name;
  std::string segment;  // the segment's own name
  uint32_t id = 0;
  uint64_t len = 0;
  uint64_t incarnation = 0;
  uint64_t addr = 0;  // tcp/shm descriptor of the export (verbs peers get their own from LOOKUP)
  uint64_t key = 0;
};

struct ServerStats {
  uint64_t connections_accepted = 0;
  uint64_t auth_failures = 0;
  uint64_t malformed_frames = 0;
  uint64_t one_sided_ops = 0;
  uint64_t rejected_ops = 0;  // bad key, bounds, alignment, revoked
  uint64_t messages = 0;
  uint64_t streams = 0;
  uint64_t connections_refused = 0;  // max_connections or max_connections_per_ip reached
  uint64_t preauth_oversize = 0;     // a frame over max_preauth_frame before authentication
  uint64_t bad_frame_macs = 0;       // a protected frame failed its MAC (injected/replayed/...)
  uint64_t reader_refusals = 0;      // a reader's write/atomic/call refused (PeerInfo::member)
};

class Server {
 public:
  // Binds every listen address (throws FabricError with the address on failure) and starts
  // serving. Prereq: handlers and exports may be added before or after; both are thread-safe.
  explicit Server(ServerOptions opts);
  ~Server();  // stops: closes listeners and connections, joins threads
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Exports `seg` under `name`; re-exporting a name gives it a new id and key, so descriptors of
  // the old export fail with BadKey/NoSuchRegion and their holders look the name up again.
  ExportInfo export_region(const std::string& name, std::shared_ptr<SharedSegment> seg,
                           RegionAccess access = {});
  void unexport_region(const std::string& name);
  std::vector<ExportInfo> exports() const;

  void on_call(const std::string& service, CallHandler h, Callers who = Callers::Members);
  void on_stream(const std::string& service, StreamHandler h, Callers who = Callers::Members);

  std::vector<std::string> bound_uris() const;
  ServerStats stats() const;
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tierce::fabric
