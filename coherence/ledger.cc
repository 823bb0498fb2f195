// coherence/ledger.cc — what a home has applied of each origin's invalidations (see ledger.h).
#include "coherence/ledger.h"

#include <stdexcept>

#include "base/check.h"

namespace tierce::coherence {

std::string_view to_string(Standing s) {
  switch (s) {
    case Standing::Current: return "current";
    case Standing::Behind: return "behind";
    case Standing::Unknown: return "unknown";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& o, Standing s) { return o << to_string(s); }

OriginLedger::OriginLedger(size_t origins) : origins_(origins) {}

bool OriginLedger::needed(size_t origin, const IssuedNumber& n) const {
  std::lock_guard lk(mu_);
  const Origin& o = origins_.at(origin);
  if (n.incarnation != o.incarnation || o.incarnation == 0) {
    return !(n.incarnation == o.next_incarnation && o.next_above.count(n.number));
  }
  return n.number > o.covered && !o.above.count(n.number);
}

void OriginLedger::advance(Origin& o) {
  while (!o.above.empty() && *o.above.begin() == o.covered + 1) {
    o.covered = *o.above.begin();
    o.above.erase(o.above.begin());
  }
  // What `needed` and `standing` rely on: every number up to `covered` is held, and `above`
  // holds only numbers past a gap (covered + 1 missing), never one that `covered` includes.
  TIERCE_CHECK(o.above.empty() || *o.above.begin() > o.covered + 1,
               "the ledger's numbers above `covered` start past a gap");
}

void OriginLedger::applied(size_t origin, const IssuedNumber& n) {
  std::lock_guard lk(mu_);
  Origin& o = origins_.at(origin);
  if (o.incarnation == 0 || n.incarnation != o.incarnation) {
    if (n.incarnation != o.next_incarnation) {
      o.next_incarnation = n.incarnation;
      o.next_above.clear();
    }
    if (o.next_above.size() < kMaxAbove) o.next_above.insert(n.number);
    return;
  }
  if (n.number <= o.covered) return;
  TIERCE_DCHECK(o.above.size() <= kMaxAbove, "the numbers held above `covered` are bounded");
  if (o.above.size() >= kMaxAbove) {
    o.overflow = true;
    return;
  }
  o.above.insert(n.number);
  advance(o);
}

Standing OriginLedger::standing(size_t origin, const IssuedNumber& read) const {
  std::lock_guard lk(mu_);
  const Origin& o = origins_.at(origin);
  if (read.incarnation == 0 && read.number == 0 && o.incarnation == 0)
    return Standing::Current;  // a writer region nobody has issued from (not even initialised)
  if (o.incarnation == 0 || read.incarnation != o.incarnation || o.overflow)
    return Standing::Unknown;
  // Within one incarnation the counter only grows (writer.cc: a fetch-add in a segment that is
  // never reset; a new segment is a new incarnation), so a reading below `covered` is no counter
  // that went back: invalidations numbered after the reading arrived before this check (a
  // write-heavy node numbers many per renewal). Every number up to the reading is held: Current.
  // (Answering Unknown here made the home catch up — bump every page it holds — under load.)
  return read.number <= o.covered ? Standing::Current : Standing::Behind;
}

void OriginLedger::cover(size_t origin, const IssuedNumber& read) {
  std::lock_guard lk(mu_);
  Origin& o = origins_.at(origin);
  if (read.incarnation != o.incarnation) {
    std::set<uint64_t> carried;
    if (read.incarnation == o.next_incarnation) carried.swap(o.next_above);
    o.incarnation = read.incarnation;
    o.covered = 0;
    o.above = std::move(carried);
    o.next_incarnation = 0;
    o.next_above.clear();
  }
  o.overflow = false;
  if (read.number > o.covered) o.covered = read.number;
  o.above.erase(o.above.begin(), o.above.upper_bound(o.covered));
  advance(o);
}

void OriginLedger::forget(size_t origin) {
  std::lock_guard lk(mu_);
  origins_.at(origin) = Origin{};
}

OriginLedger::OriginView OriginLedger::view(size_t origin) const {
  std::lock_guard lk(mu_);
  const Origin& o = origins_.at(origin);
  return {o.incarnation, o.covered, o.above.size()};
}

}  // namespace tierce::coherence
