// coherence/skip_keeper.h — clears a node's skip marks (writer.h, docs/coherence.md "Skip marks")
// once the marked homes answer again.
//
// A writer marks a home that did not acknowledge an invalidation; from the mark's time + the fence
// bound on, the node's updates stop waiting for it, and the home does not vouch while the mark is
// there. Someone on the writer's node must lift the mark when the home is back, or the home stays
// fenced for good: the node's writer agent (memd [writer]) and its memd's home role both run a
// keeper (two keepers clear the same word with a compare-and-swap: harmless).
//
// Clearing is always safe: it only makes writers wait for the home again. Every number issued
// while the mark held was issued before the clear, so the home's first renewal after it reads a
// counter that covers them, and it must hold them (apply, or catch up) before it vouches again.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "coherence/client.h"
#include "coherence/writer.h"
#include "fabric/log.h"

namespace tierce::coherence {

struct SkipMarkStats {
  uint64_t held = 0;     // marks set now (after the last pass)
  uint64_t cleared = 0;  // marks lifted because the home answered
  uint64_t dated = 0;    // pending marks of a writer that died before dating them
};

class SkipMarkKeeper {
 public:
  // `homes`: the app nodes in topology order (the skip word index). `node`: ours (log lines).
  SkipMarkKeeper(WriterLog& writer, ClusterClient& client, std::vector<std::string> homes,
                 std::string node, fabric::LogSink log);

  // One pass: each marked home that answers is cleared; a mark left pending for longer than one
  // pass is dated. Not thread-safe (one thread calls it). Cheap when nothing is marked.
  void pass();
  SkipMarkStats stats() const { return stats_; }
  // "home since_ms" of the marks held, for status pages.
  std::vector<std::string> held() const;

 private:
  WriterLog& writer_;
  ClusterClient& client_;
  std::vector<std::string> homes_;
  std::string node_;
  fabric::LogSink log_;
  std::vector<uint64_t> pending_seen_;  // a pending word seen at the previous pass
  std::vector<uint64_t> logged_;        // the mark we last logged as held, per home
  SkipMarkStats stats_;
};

}  // namespace tierce::coherence
