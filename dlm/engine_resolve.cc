// dlm/engine_resolve.cc — the home's name directory in LockEngine (dlm.resolve): a lock name
// gets a slot of this home's table, its home ticket R0 and its first generation. The members
// cache the answer (LockEngine::resolved_, in acquire()).
#include <memory>

#include "dlm/engine.h"
#include "dlm/engine_internal.h"

namespace tierce::dlm {

std::vector<uint8_t> LockEngine::on_resolve(std::span<const uint8_t> body) {
  std::string name(body.begin(), body.end());
  Resolution res;
  if (name.empty() || name.size() > kMaxNameBytes || name.find('\0') != std::string::npos) {
    res.status = Status::BadName;
    res.message = "lock names are 1.." + std::to_string(kMaxNameBytes) + " bytes without NUL";
    return res.encode();
  }
  std::lock_guard lk(mu_);
  auto it = directory_.find(name);
  if (it == directory_.end()) {
    if (slots_.size() >= opts_.lock_slots) {
      res.status = Status::TooMany;
      res.message = "the home's lock table is full (" + std::to_string(opts_.lock_slots) +
                    " locks): raise [dlm] lock_slots";
      return res.encode();
    }
    uint32_t s = uint32_t(slots_.size());
    auto slot = std::make_unique<Slot>();
    slot->name = name;
    slot->gen = opts_.epoch << 32;
    const Token k0 = opts_.epoch << kEpochShift;
    slot->next_token = k0;
    // The home's virtual ticket R0: granted and released before anyone asked.
    Ticket r0 = new_ticket();
    auto rec = std::make_unique<Record>();
    rec->home = opts_.self_rank;
    rec->slot = s;
    rec->ticket = r0;
    rec->gen = slot->gen;
    rec->granted = rec->released = true;
    rec->token = k0;
    records_[{opts_.self_rank, s, r0}] = std::move(rec);
    const uint64_t off = uint64_t(s) * kSlotBytes;
    word_at(table_, off + 8).store(k0, std::memory_order_release);
    word_at(table_, off).store(Word{true, r0, 0}.encode(), std::memory_order_release);
    slots_.push_back(std::move(slot));
    it = directory_.emplace(name, s).first;
  }
  res.status = Status::Ok;
  res.slot = it->second;
  res.gen = slots_[it->second]->gen;
  return res.encode();
}

}  // namespace tierce::dlm
