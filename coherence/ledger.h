// coherence/ledger.h — what a home has applied of each app node's invalidations, by number
// (writer.h): the evidence its fence is renewed on. Plain logic, thread-safe (one mutex).
//
// For each origin node the ledger tracks one incarnation of that node's writer region and
//   covered   every invalidation numbered <= covered is applied here, or was superseded by an
//             invalidate-all made after it was issued (a catch-up)
//   above     the numbers > covered applied here (out of order: several writers at once)
// Invariant: covered only grows within an incarnation; `above` holds numbers > covered only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "coherence/writer.h"

namespace tierce::coherence {

// How a home stands toward one origin's counter as just read.
enum class Standing {
  Current,  // every number up to the one read is applied (or covered); also when numbers
            // issued after the reading were applied since (covered passed the reading)
  Behind,   // some numbers up to it were issued but are not applied here (yet: maybe in flight)
  Unknown,  // another incarnation than the one tracked (first sight, or the writer segment was
            // created anew): nothing is known of what it issued before
};
std::string_view to_string(Standing s);
std::ostream& operator<<(std::ostream& o, Standing s);

class OriginLedger {
 public:
  // At most this many out-of-order numbers are kept per origin; beyond, the origin is marked
  // Unknown (the next renewal catches up): memory stays bounded whatever the writers do.
  static constexpr size_t kMaxAbove = 1 << 16;

  explicit OriginLedger(size_t origins);

  // Before applying invalidation (n.incarnation, n.number) from `origin`: false when it is
  // covered already (then apply nothing, only acknowledge: a resent round, or a number a catch-up
  // superseded).
  bool needed(size_t origin, const IssuedNumber& n) const;
  // After applying it.
  void applied(size_t origin, const IssuedNumber& n);

  Standing standing(size_t origin, const IssuedNumber& read) const;
  // After an invalidate-all made AFTER `read` was read: everything up to it counts as covered,
  // under that incarnation (numbers of it applied beyond `read` are kept).
  void cover(size_t origin, const IssuedNumber& read);

  // Forgets everything of `origin` (taken back into the fence after an operator took it out):
  // its next reading is Unknown, so the home catches up before it vouches again.
  void forget(size_t origin);

  struct OriginView {
    uint64_t incarnation = 0, covered = 0;
    size_t above = 0;
  };
  OriginView view(size_t origin) const;

 private:
  struct Origin {
    uint64_t incarnation = 0;  // 0: none tracked yet
    uint64_t covered = 0;
    std::set<uint64_t> above;
    bool overflow = false;  // `above` overflowed: Unknown until covered
    // Numbers applied under an incarnation we do not track yet (a new httpd's segment): they
    // count once the next renewal adopts it.
    uint64_t next_incarnation = 0;
    std::set<uint64_t> next_above;
  };
  void advance(Origin& o);
  mutable std::mutex mu_;
  std::vector<Origin> origins_;
};

}  // namespace tierce::coherence
