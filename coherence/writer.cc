// coherence/writer.cc — the node's invalidation counter (see writer.h).
#include "coherence/writer.h"

#include "coherence/layout.h"

#include <algorithm>

namespace tierce::coherence {

namespace {
// Whoever maps the segment first writes its words; every mapper writes the same values (the
// magic and the segment's own incarnation), so a race between the httpd and memd is harmless.
// Nothing is issued before this ran in the issuing process.
void init_words(fabric::SharedSegment& s) {
  void* d = s.data();
  word_at(d, kWriterIncarnationOffset).store(s.incarnation(), std::memory_order_relaxed);
  uint64_t zero = 0;
  word_at(d, 0).compare_exchange_strong(zero, kWriterMagic, std::memory_order_release);
}
}  // namespace

IssuedNumber read_writer_words(const void* data) {
  void* d = const_cast<void*>(data);
  IssuedNumber n;
  if (word_at(d, 0).load(std::memory_order_acquire) != kWriterMagic) return n;  // not yet
  n.incarnation = word_at(d, kWriterIncarnationOffset).load(std::memory_order_relaxed);
  n.number = word_at(d, kWriterIssuedOffset).load(std::memory_order_acquire);
  return n;
}

std::string_view to_string(SkipState s) {
  switch (s) {
    case SkipState::None:
      return "none";
    case SkipState::Pending:
      return "pending";
    case SkipState::Since:
      return "since";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& o, SkipState s) {
  return o << to_string(s);
}

WriterReading parse_writer_reading(const uint64_t* w, size_t n, size_t home) {
  WriterReading r;
  if (n < kWriterHeaderBytes / 8 || w[0] != kWriterMagic) return r;  // not yet: nothing issued
  r.issued = {w[kWriterIncarnationOffset / 8], w[kWriterIssuedOffset / 8]};
  r.digest = w[kWriterDigestOffset / 8];
  if (home < kMaxSkipHomes && skip_offset(home) / 8 < n) r.skip = w[skip_offset(home) / 8];
  return r;
}

WriterLog::WriterLog(std::string segment_name, uint64_t digest)
    : name_(std::move(segment_name)), digest_(digest) {
  std::lock_guard lk(mu_);
  map_locked();
}

void WriterLog::map_locked() {
  auto s = std::make_shared<fabric::SharedSegment>(
      fabric::SharedSegment::open_or_create(name_, kWriterBytes));
  init_words(*s);
  seg_ = std::move(s);
}

bool WriterLog::remap_if_replaced() {
  std::lock_guard lk(mu_);
  if (seg_->still_named()) return false;
  map_locked();
  return true;
}

IssuedNumber WriterLog::issue() {
  std::lock_guard lk(mu_);
  if (!seg_->still_named()) {
    try {
      map_locked();
    } catch (const std::exception&) {
      // Cannot map the name (someone removed /dev/shm/... and we may not create it): keep
      // numbering in the segment we have — memd keeps exporting the one it mapped too.
    }
  }
  // The digest before the number: a home that reads the number reads the digest it was issued
  // under (or a later one).
  auto& d = word_at(seg_->data(), kWriterDigestOffset);
  if (digest_ != 0 && d.load(std::memory_order_relaxed) != digest_)
    d.store(digest_, std::memory_order_release);
  IssuedNumber n;
  n.incarnation = seg_->incarnation();
  // seq_cst: the commit this invalidation follows happened before; a home that reads the new
  // value and then renews its fence is bound to hold this invalidation first. And the skip words
  // a writer reads after this (skip_word) are read after the number is visible: a mark cleared
  // after that read is cleared after this number, so the home's next renewal sees it.
  n.number = word_at(seg_->data(), kWriterIssuedOffset).fetch_add(1, std::memory_order_seq_cst) + 1;
  return n;
}

void WriterLog::set_agent_numbering(bool on) {
  auto seg = segment();
  word_at(seg->data(), kWriterAgentOffset).store(on ? 1 : 0, std::memory_order_seq_cst);
}

bool WriterLog::agent_numbering() const {
  auto seg = segment();
  return word_at(seg->data(), kWriterAgentOffset).load(std::memory_order_acquire) != 0;
}

IssuedNumber WriterLog::last() const {
  std::lock_guard lk(mu_);
  return read_writer_words(seg_->data());
}

WriterReading WriterLog::reading(size_t home) const {
  std::lock_guard lk(mu_);
  void* d = seg_->data();
  WriterReading r;
  r.issued = read_writer_words(d);
  if (word_at(d, 0).load(std::memory_order_acquire) != kWriterMagic) return r;
  r.digest = word_at(d, kWriterDigestOffset).load(std::memory_order_acquire);
  if (home < kMaxSkipHomes) r.skip = word_at(d, skip_offset(home)).load(std::memory_order_seq_cst);
  return r;
}

uint64_t WriterLog::skip_word(size_t home) const {
  if (home >= kMaxSkipHomes) return 0;
  auto seg = segment();  // held: a remap meanwhile must not unmap the word under us
  // seq_cst: read after the number was taken (issue()), never before it (docs/coherence.md).
  return word_at(seg->data(), skip_offset(home)).load(std::memory_order_seq_cst);
}

uint64_t WriterLog::mark_skip(size_t home) {
  if (home >= kMaxSkipHomes) return 0;
  auto seg = segment();
  auto& w = word_at(seg->data(), skip_offset(home));
  uint64_t expected = 0;
  if (!w.compare_exchange_strong(expected, kSkipPending, std::memory_order_seq_cst))
    return expected;  // marked already (or being marked)
  // Visible from now on; the time stored is taken after that, so it is never earlier.
  uint64_t now = std::max<uint64_t>(fabric::monotonic_ns(), kSkipPending + 1);
  expected = kSkipPending;
  w.compare_exchange_strong(expected, now, std::memory_order_seq_cst);
  return w.load(std::memory_order_seq_cst);
}

bool WriterLog::date_pending_skip(size_t home) {
  if (home >= kMaxSkipHomes) return false;
  auto seg = segment();
  uint64_t expected = kSkipPending;
  uint64_t now = std::max<uint64_t>(fabric::monotonic_ns(), kSkipPending + 1);
  return word_at(seg->data(), skip_offset(home))
      .compare_exchange_strong(expected, now, std::memory_order_seq_cst);
}

bool WriterLog::clear_skip(size_t home, uint64_t seen) {
  if (home >= kMaxSkipHomes || seen == 0) return false;
  auto seg = segment();
  return word_at(seg->data(), skip_offset(home))
      .compare_exchange_strong(seen, 0, std::memory_order_seq_cst);
}

std::shared_ptr<fabric::SharedSegment> WriterLog::segment() const {
  std::lock_guard lk(mu_);
  return seg_;
}

}  // namespace tierce::coherence
