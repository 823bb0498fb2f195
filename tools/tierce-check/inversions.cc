// tierce-check: read-read inversions — see inversions.h.
#include "inversions.h"

#include <algorithm>
#include <tuple>

namespace tcheck {

InversionResult find_inversions(const std::vector<InvRead>& reads) {
  InversionResult res;
  const size_t n = reads.size();
  std::vector<size_t> by_end(n), by_start(n);
  for (size_t i = 0; i < n; ++i) by_end[i] = by_start[i] = i;
  // Ties broken by index: deterministic witnesses and example order.
  std::sort(by_end.begin(), by_end.end(), [&](size_t a, size_t b) {
    return std::tie(reads[a].key, reads[a].t_end, a) < std::tie(reads[b].key, reads[b].t_end, b);
  });
  std::sort(by_start.begin(), by_start.end(), [&](size_t a, size_t b) {
    return std::tie(reads[a].key, reads[a].t_start, a) < std::tie(reads[b].key, reads[b].t_start, b);
  });

  // Both orders group the same keys in the same key order: walk them together, key by key.
  size_t e = 0;  // next read of by_end not yet ended before the current start
  uint64_t cur_key = 0;
  bool have = false;    // a read of cur_key has ended before the current start
  uint64_t maxv = 0;    // the highest version among them
  size_t witness = 0;   // the first of them (by end time) to show maxv
  for (size_t s = 0; s < n; ++s) {
    const size_t r = by_start[s];
    const InvRead& R = reads[r];
    if (s == 0 || R.key != cur_key) {
      cur_key = R.key;
      have = false;
      maxv = 0;
      while (e < n && reads[by_end[e]].key < cur_key) ++e;  // the rest of the previous key's reads
    }
    while (e < n && reads[by_end[e]].key == cur_key && reads[by_end[e]].t_end < R.t_start) {
      const InvRead& E = reads[by_end[e]];
      if (!have || E.version > maxv) {
        maxv = E.version;
        witness = by_end[e];
        have = true;
      }
      ++e;
    }
    if (!have) continue;
    ++res.checked;
    if (R.version < maxv) res.found.push_back({r, witness});
  }
  std::sort(res.found.begin(), res.found.end(), [&](const Inversion& a, const Inversion& b) {
    return std::tie(reads[a.later].t_start, a.later) < std::tie(reads[b.later].t_start, b.later);
  });
  return res;
}

}  // namespace tcheck
