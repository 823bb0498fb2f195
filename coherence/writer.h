// coherence/writer.h — a node's invalidation counter (region "writer", layout.h): every update
// on the node takes the next number from it before its invalidation leaves, and every home reads
// it before it renews its fence. It is what lets a home prove it has every invalidation issued —
// even one whose message never arrived — and what lets a writer that cannot reach a home return
// anyway, after a bound, *because* that home can no longer vouch for its table.
//
// The segment lives in /dev/shm, created by whichever of the node's httpd parent
// (mod_appversion, post_config, before any child forks), memd and writer agent opens it first,
// and never replaced while any maps it (SharedSegment::open_or_create): a writer increments it
// with a CPU atomic, so neither a dead nor a frozen memd can make an issued number invisible.
//
// It also holds the writer's SKIP marks (layout.h): a writer that cannot get a home's
// acknowledgement marks it; from the mark's time + the fence bound on, writers of this node stop
// waiting for that home, because a home never renews its fence while a writer it reads marks it
// (docs/coherence.md "Skip marks"). The node's writer agent clears a mark once the home answers.
// Thread-safe.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <string_view>

#include "coherence/layout.h"
#include "fabric/segment.h"

namespace tierce::coherence {

// One invalidation's identity: which writer segment numbered it, and its number there.
struct IssuedNumber {
  uint64_t incarnation = 0;
  uint64_t number = 0;
};

// What a home reads of one origin's writer region (one read of its header and skip words).
struct WriterReading {
  IssuedNumber issued;
  uint64_t digest = 0;  // the numbering process's topology digest (0: nobody numbered yet)
  uint64_t skip = 0;    // the skip word for the reading home (0: not marked)
};

// A skip word's meaning (layout.h).
enum class SkipState {
  None,     // 0: writers wait for the home
  Pending,  // kSkipPending: a writer is setting it (no time yet)
  Since,    // a time: writers stop waiting once the fence bound has passed from it
};
std::string_view to_string(SkipState s);
std::ostream& operator<<(std::ostream& o, SkipState s);
inline SkipState skip_state(uint64_t word) {
  return word == 0 ? SkipState::None : word == kSkipPending ? SkipState::Pending : SkipState::Since;
}

class WriterLog {
 public:
  // Maps (or creates) `segment_name` ("<segment_prefix>.writer"). Throws fabric::FabricError.
  // `digest`: the topology digest of the process that will number here (issue() stores it in the
  // region first); 0 for a process that only reads it (memd, the writer agent).
  explicit WriterLog(std::string segment_name, uint64_t digest = 0);

  // Takes the next number. Before that, makes sure the name still leads to the mapped object
  // (one stat(2)): a segment removed or replaced behind our back is mapped again, so the number
  // goes where the node's memd exports it from; and stores the digest when it differs.
  IssuedNumber issue();
  // The last number issued (and the incarnation), as a home reads it.
  IssuedNumber last() const;
  // The whole reading a home takes, for home index `home` (topology order of the app nodes).
  WriterReading reading(size_t home) const;

  // ---- skip marks (homes beyond kMaxSkipHomes are never marked: writers wait for them) -------
  uint64_t skip_word(size_t home) const;
  // Marks `home` unless it is marked already: CAS 0 -> pending, then the time now (so the time
  // is never earlier than the moment the mark became visible to a reading home). Returns the
  // word as it is after the call (0 when the home cannot be marked).
  uint64_t mark_skip(size_t home);
  // A pending mark whose writer died before dating it: dates it now. Returns whether it did.
  bool date_pending_skip(size_t home);
  // Clears the mark if it still holds `seen` (a mark set again meanwhile is another mark).
  bool clear_skip(size_t home, uint64_t seen);

  // The agent word (layout.h offset 32): whether the node's writer agent numbers for its httpd
  // children. Set by the writer agent at start (socket or not).
  void set_agent_numbering(bool on);
  bool agent_numbering() const;
  const std::string& name() const { return name_; }
  std::shared_ptr<fabric::SharedSegment> segment() const;

  // Maps the segment again if its name no longer leads to the mapped object; returns whether it
  // did. (memd calls it before each fence renewal.)
  bool remap_if_replaced();

 private:
  void map_locked();
  std::string name_;
  uint64_t digest_ = 0;
  mutable std::mutex mu_;
  std::shared_ptr<fabric::SharedSegment> seg_;
};

// Reads a writer region's incarnation and issued words from its mapped data area.
IssuedNumber read_writer_words(const void* data);
// Parses what a home read of a writer region (at least kWriterHeaderBytes, and the skip word of
// `home` when the bytes reach it; an unmagic header reads as nothing issued).
WriterReading parse_writer_reading(const uint64_t* words, size_t n_words, size_t home);

}  // namespace tierce::coherence
