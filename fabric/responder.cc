// fabric/responder.cc — one request in, one reply out. This is the code a hostile peer reaches,
// so every field is checked before it is used.
#include "fabric/responder.h"

#include <fcntl.h>

#include <cstring>
#include <mutex>

#include "base/tsan.h"
#include "fabric/random.h"

namespace tierce::fabric {

ExportInfo RegionTable::add(const std::string& name, std::shared_ptr<SharedSegment> seg,
                            RegionAccess access) {
  if (name.empty() || name.size() > wire::kMaxRegionName)
    throw FabricError(Errc::Config,
                      "region name must be 1.." + std::to_string(wire::kMaxRegionName) + " bytes");
  if (!seg || !*seg) throw FabricError(Errc::Config, "region " + name + ": no segment");
  auto r = std::make_shared<ExportedRegion>();
  r->name = name;
  r->key = random_u64();
  r->seg = std::move(seg);
  r->access = access;
  // What a reader's shm MAP gets: the same object, opened read-only (it cannot map it writable).
  r->read_only_fd.reset(::open(("/proc/self/fd/" + std::to_string(r->seg->fd())).c_str(),
                               O_RDONLY | O_CLOEXEC));
  std::unique_lock g(mu_);
  if (next_id_ >= (1u << (64 - wire::kRegionShift)))
    throw FabricError(Errc::Config, "region ids exhausted; restart the server");
  r->id = next_id_++;
  if (auto it = by_name_.find(name); it != by_name_.end()) by_id_.erase(it->second);
  // Published before the export is findable: a peer that maps it must see its own key here.
  r->seg->header()->export_key.store(r->key, std::memory_order_release);
  by_name_[name] = r->id;
  by_id_[r->id] = r;
  return ExportInfo{r->name,        r->seg->name(),        r->id,
                    r->seg->size(), r->seg->incarnation(), Responder::address_of(r->id, 0),
                    r->key};
}

bool RegionTable::remove(const std::string& name) {
  std::unique_lock g(mu_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return false;
  auto r = by_id_.at(it->second);
  // shm peers holding this export's mapping fail from their next op (Revoked).
  uint64_t key = r->key;
  r->seg->header()->export_key.compare_exchange_strong(key, 0, std::memory_order_acq_rel);
  by_id_.erase(it->second);
  by_name_.erase(it);
  return true;
}

std::shared_ptr<const ExportedRegion> RegionTable::by_id(uint32_t id) const {
  std::shared_lock g(mu_);
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

std::shared_ptr<const ExportedRegion> RegionTable::by_name(std::string_view name) const {
  std::shared_lock g(mu_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return nullptr;
  return by_id_.at(it->second);
}

std::vector<std::shared_ptr<const ExportedRegion>> RegionTable::all() const {
  std::shared_lock g(mu_);
  std::vector<std::shared_ptr<const ExportedRegion>> v;
  for (auto& [id, r] : by_id_) v.push_back(r);
  return v;
}

void ServiceTable::add_call(const std::string& name, CallHandler h, Callers who) {
  if (name.empty() || name.size() > wire::kMaxServiceName)
    throw FabricError(Errc::Config, "service name must be 1.." +
                                        std::to_string(wire::kMaxServiceName) + " bytes");
  std::unique_lock g(mu_);
  calls_[name] = {std::move(h), who};
}

void ServiceTable::add_stream(const std::string& name, StreamHandler h, Callers who) {
  if (name.empty() || name.size() > wire::kMaxServiceName)
    throw FabricError(Errc::Config, "service name must be 1.." +
                                        std::to_string(wire::kMaxServiceName) + " bytes");
  std::unique_lock g(mu_);
  streams_[name] = {std::move(h), who};
}

CallHandler ServiceTable::call(std::string_view name, const PeerInfo& peer, bool* refused) const {
  std::shared_lock g(mu_);
  *refused = false;
  auto it = calls_.find(name);
  if (it == calls_.end()) return CallHandler();
  if (!peer.member && it->second.second != Callers::Anyone) {
    *refused = true;
    return CallHandler();
  }
  return it->second.first;
}

StreamHandler ServiceTable::stream(std::string_view name, const PeerInfo& peer,
                                   bool* refused) const {
  std::shared_lock g(mu_);
  *refused = false;
  auto it = streams_.find(name);
  if (it == streams_.end()) return StreamHandler();
  if (!peer.member && it->second.second != Callers::Anyone) {
    *refused = true;
    return StreamHandler();
  }
  return it->second.first;
}

ServerStats Counters::snapshot() const {
  ServerStats s;
  s.connections_accepted = connections_accepted.load(std::memory_order_relaxed);
  s.auth_failures = auth_failures.load(std::memory_order_relaxed);
  s.malformed_frames = malformed_frames.load(std::memory_order_relaxed);
  s.one_sided_ops = one_sided_ops.load(std::memory_order_relaxed);
  s.rejected_ops = rejected_ops.load(std::memory_order_relaxed);
  s.messages = messages.load(std::memory_order_relaxed);
  s.streams = streams.load(std::memory_order_relaxed);
  s.connections_refused = connections_refused.load(std::memory_order_relaxed);
  s.preauth_oversize = preauth_oversize.load(std::memory_order_relaxed);
  s.bad_frame_macs = bad_frame_macs.load(std::memory_order_relaxed);
  s.reader_refusals = reader_refusals.load(std::memory_order_relaxed);
  return s;
}

Errc Responder::resolve(uint64_t addr, uint64_t key, uint64_t len, bool atomic,
                        std::shared_ptr<const ExportedRegion>* region, uint8_t** ptr) const {
  uint64_t id = addr >> wire::kRegionShift;
  uint64_t off = addr & wire::kOffsetMask;
  auto r = regions_.by_id(uint32_t(id));
  if (!r || id > UINT32_MAX) return Errc::NoSuchRegion;
  // Not constant-time: a 64-bit random key cannot be found by timing 2^64 guesses one by one.
  if (r->key != key) return Errc::BadKey;
  if (!r->seg->live()) return Errc::Revoked;
  uint64_t size = r->seg->size();
  if (off > size || len > size - off) return Errc::OutOfBounds;
  if (atomic && (off % 8) != 0) return Errc::Misaligned;
  *region = std::move(r);
  *ptr = (*region)->seg->data() + off;
  return Errc::Ok;
}

namespace {

// READ after its address resolved: the bytes (a word atomically, or copied when capped, or sent
// straight from the region). Fenced when they were read past the owner's lease cap.
Errc read_reply(const wire::Header& req, std::shared_ptr<const ExportedRegion>& r, uint8_t* p,
                Reply* out) {
  const SegmentHeader* hdr = r->seg->header();
  const bool capped = hdr->lease_cap_ns.load(std::memory_order_acquire) != 0;
  if (req.a2 == 8 && (reinterpret_cast<uintptr_t>(p) % 8) == 0) {
    // An aligned word is read atomically, like the owner's CPU atomics that update it.
    uint64_t v = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p))
                     .load(std::memory_order_acquire);
    out->payload.resize(8);
    std::memcpy(out->payload.data(), &v, 8);
  } else if (capped || base::kTsanBuild) {
    {
      // Like an RDMA READ, this copy races with the owner's CPU stores by design: what a
      // one-sided read returns is validated by its reader (seqlock word, checksum, version).
      // Not recorded by ThreadSanitizer; TSan builds always copy here (not `direct`, which
      // send() would read from the region where no annotation can scope it).
      TIERCE_TSAN_RACY_READS();
      out->payload.assign(p, p + req.a2);  // copied now: judged against the cap below
    }
    std::atomic_thread_fence(std::memory_order_acquire);
  } else {
    out->direct = std::span<const uint8_t>(p, size_t(req.a2));
    out->pinned = std::move(r);
  }
  // After the access (as shm peers check their lease): bytes read past the owner's cap are
  // not vouched for — e.g. a coherence home that was frozen and has not yet proven it has
  // every invalidation; the reader fails closed.
  if (past_lease_cap(hdr, monotonic_ns())) {
    out->payload.clear();
    out->direct = {};
    out->pinned.reset();
    return Errc::Fenced;
  }
  return Errc::Ok;
}

// CALL/SEND: runs the named service's handler. False when no reply is due (SEND).
bool call_service(const ServiceTable& services, Counters& counters, const wire::Header& req,
                  std::span<const uint8_t> payload, const PeerInfo& peer, Reply* out) {
  using wire::Op;
  bool reply = req.op == Op::Call;
  auto sp = wire::decode_service_payload(payload);
  if (!sp) {
    if (!reply) return false;
    out->header.status = Errc::BadRequest;
    counters.rejected_ops.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  bool refused = false;
  auto handler = services.call(sp->service, peer, &refused);
  if (refused) {
    counters.reader_refusals.fetch_add(1, std::memory_order_relaxed);
    if (!reply) return false;
    out->header.status = Errc::NotPermitted;
    std::string msg = "service '" + std::string(sp->service) +
                      "' is for the cluster's members: sign with this node's key (a client that "
                      "does not sign is a reader)";
    out->payload.assign(msg.begin(), msg.end());
    return true;
  }
  if (!handler) {
    if (!reply) return false;
    out->header.status = Errc::NoSuchService;
    std::string msg = "no service '" + std::string(sp->service) + "' on this server";
    out->payload.assign(msg.begin(), msg.end());
    return true;
  }
  try {
    auto resp = handler(peer, sp->body);
    if (!reply) return false;
    if (resp.size() > wire::kMaxMessage) {
      out->header.status = Errc::TooLarge;
      return true;
    }
    out->payload = std::move(resp);
  } catch (const std::exception& e) {
    if (!reply) return false;
    out->header.status = Errc::HandlerFailed;
    std::string msg = e.what();
    out->payload.assign(msg.begin(), msg.end());
  }
  return true;
}

}  // namespace

bool Responder::handle(const wire::Header& req, std::span<const uint8_t> payload,
                       const PeerInfo& peer, const TransportView& view, Reply* out) const {
  using wire::Op;
  out->header = wire::Header{};
  out->header.op = req.op;
  out->header.reply = true;
  out->header.id = req.id;
  out->payload.clear();
  out->direct = {};
  out->pinned.reset();
  out->fd_to_pass = -1;
  auto& h = out->header;
  auto reject = [&](Errc e) {
    h.status = e;
    counters_.rejected_ops.fetch_add(1, std::memory_order_relaxed);
    return true;
  };
  // A reader's write, CAS or FAA on a region not exported writable by readers.
  auto reader_may_not_write = [&](const ExportedRegion& r) {
    if (peer.member || r.access.readers_may_write) return false;
    counters_.reader_refusals.fetch_add(1, std::memory_order_relaxed);
    return true;
  };

  switch (req.op) {
    case Op::Read: {
      counters_.one_sided_ops.fetch_add(1, std::memory_order_relaxed);
      if (req.a2 > wire::kMaxTransfer) return reject(Errc::TooLarge);
      std::shared_ptr<const ExportedRegion> r;
      uint8_t* p = nullptr;
      if (Errc e = resolve(req.a0, req.a1, req.a2, false, &r, &p); e != Errc::Ok) return reject(e);
      if (Errc e = read_reply(req, r, p, out); e != Errc::Ok) return reject(e);
      return true;
    }
    case Op::Write: {
      counters_.one_sided_ops.fetch_add(1, std::memory_order_relaxed);
      std::shared_ptr<const ExportedRegion> r;
      uint8_t* p = nullptr;
      if (Errc e = resolve(req.a0, req.a1, payload.size(), false, &r, &p); e != Errc::Ok)
        return reject(e);
      if (reader_may_not_write(*r)) return reject(Errc::NotPermitted);
      if (payload.size() == 8 && (reinterpret_cast<uintptr_t>(p) % 8) == 0) {
        uint64_t v;
        std::memcpy(&v, payload.data(), 8);
        std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p))
            .store(v, std::memory_order_release);
      } else if (!payload.empty()) {
        std::memcpy(p, payload.data(), payload.size());
      }
      return true;
    }
    case Op::Cas:
    case Op::Faa: {
      counters_.one_sided_ops.fetch_add(1, std::memory_order_relaxed);
      if (!payload.empty()) return reject(Errc::BadRequest);
      std::shared_ptr<const ExportedRegion> r;
      uint8_t* p = nullptr;
      if (Errc e = resolve(req.a0, req.a1, 8, true, &r, &p); e != Errc::Ok) return reject(e);
      if (reader_may_not_write(*r)) return reject(Errc::NotPermitted);
      if (past_lease_cap(r->seg->header(), monotonic_ns())) return reject(Errc::Fenced);
      std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(p));
      if (req.op == Op::Cas) {
        uint64_t expected = req.a2;
        word.compare_exchange_strong(expected, req.a3, std::memory_order_acq_rel);
        h.a0 = expected;  // the old value, whether or not the swap happened
      } else {
        h.a0 = word.fetch_add(req.a2, std::memory_order_acq_rel);
      }
      return true;
    }
    case Op::Lookup: {
      if (payload.empty() || payload.size() > wire::kMaxRegionName) return reject(Errc::BadRequest);
      auto r = regions_.by_name(
          std::string_view(reinterpret_cast<const char*>(payload.data()), payload.size()));
      if (!r) return reject(Errc::NoSuchRegion);
      if (!r->seg->live()) return reject(Errc::Revoked);
      h.a0 = address_of(r->id, 0);
      h.a1 = r->key;
      h.a2 = r->seg->size();
      return true;
    }
    case Op::Map: {
      if (!view.can_pass_fd) return reject(Errc::NotPermitted);
      std::shared_ptr<const ExportedRegion> r;
      uint8_t* p = nullptr;
      if (Errc e = resolve(req.a0 & ~wire::kOffsetMask, req.a1, 0, false, &r, &p); e != Errc::Ok)
        return reject(e);
      h.a0 = address_of(r->id, 0);
      h.a2 = r->seg->size();
      // A reader gets the read-only descriptor of a region it may not write: it cannot map it
      // writable (the kernel checks, not this process). None: no MAP for it at all.
      if (!peer.member && !r->access.readers_may_write) {
        if (!r->read_only_fd) return reject(Errc::NotPermitted);
        out->fd_to_pass = r->read_only_fd.get();
      } else {
        out->fd_to_pass = r->seg->fd();
      }
      out->pinned = std::move(r);
      return true;
    }
    case Op::Call:
    case Op::Send:
      counters_.messages.fetch_add(1, std::memory_order_relaxed);
      return call_service(services_, counters_, req, payload, peer, out);
    case Op::Ping:
      return true;
    case Op::Hello:
    case Op::Auth:
    case Op::AuthOk:
    case Op::StreamOpen:
      h.status = Errc::BadRequest;  // connection-level frames out of place
      return true;
  }
  h.status = Errc::BadRequest;
  return true;
}

}  // namespace tierce::fabric
