// coherence/writer.h — a node's invalidation counter (region "writer", layout.h): every update
// on the node takes the next number from it before its invalidation leaves, and every home reads
// it before it renews its fence. It is what lets a home prove it has every invalidation issued —
// even one whose message never arrived — and what lets a writer that cannot reach a home return
// anyway, after a bound, *because* that home can no longer vouch for its table.
//
// The segment lives in /dev/shm, created by whichever of the node's httpd parent
// (mod_appversion, post_config, before any child forks) and memd opens it first, and never
// replaced while either maps it (SharedSegment::open_or_create): a writer increments it with a
// CPU atomic, so neither a dead nor a frozen memd can make an issued number invisible.
// Thread-safe.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "fabric/segment.h"

namespace tierce::coherence {

// One invalidation's identity: which writer segment numbered it, and its number there.
struct IssuedNumber {
  uint64_t incarnation = 0;
  uint64_t number = 0;
};

class WriterLog {
 public:
  // Maps (or creates) `segment_name` ("<segment_prefix>.writer"). Throws fabric::FabricError.
  explicit WriterLog(std::string segment_name);

  // Takes the next number. Before that, makes sure the name still leads to the mapped object
  // (one stat(2)): a segment removed or replaced behind our back is mapped again, so the number
  // goes where the node's memd exports it from.
  IssuedNumber issue();
  // The last number issued (and the incarnation), as a home reads it.
  IssuedNumber last() const;

  const std::string& name() const { return name_; }
  std::shared_ptr<fabric::SharedSegment> segment() const;

  // Maps the segment again if its name no longer leads to the mapped object; returns whether it
  // did. (memd calls it before each fence renewal.)
  bool remap_if_replaced();

 private:
  void map_locked();
  std::string name_;
  mutable std::mutex mu_;
  std::shared_ptr<fabric::SharedSegment> seg_;
};

// Reads a writer region's incarnation and issued words from its mapped data area.
IssuedNumber read_writer_words(const void* data);

}  // namespace tierce::coherence
