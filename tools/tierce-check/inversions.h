// tierce-check: read-read inversions (pure logic, no I/O).
//
// A read R2 of data key k INVERTS when it saw version v2 of k and some read R1 of k that ENDED
// before R2 STARTED (R1.t_end < R2.t_start, strictly: reads that overlap or touch never count)
// saw v1 > v2. Reads of every proxy count together. A read counts once however many earlier reads
// it inverts against; its witness is the earliest-ending read with the highest version among the
// reads that ended before it started.
//
// Per key, reads are ordered by end time and by start time; one sweep over the starts keeps the
// running maximum version of the reads that ended before the current start: O(n log n) for n
// reads, O(n) memory (the checker keeps every read for the stale-read check anyway).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tcheck {

struct InvRead {
  uint64_t key = 0, version = 0;
  int64_t t_start = 0, t_end = 0;  // monotonic clock, same unit for all reads
};

struct Inversion {
  size_t later = 0;    // index of the inverted read (R2) in the input
  size_t earlier = 0;  // index of its witness (R1): ended before R2 started, saw a higher version
};

struct InversionResult {
  long long checked = 0;          // reads with at least one read of their key ended before they started
  std::vector<Inversion> found;   // one per inverted read, by R2's start time (then input index)
};

// The reads may come in any order (threads finish out of order).
InversionResult find_inversions(const std::vector<InvRead>& reads);

}  // namespace tcheck
