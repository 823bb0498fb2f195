// coherence/writer.cc — the node's invalidation counter (see writer.h).
#include "coherence/writer.h"

#include "coherence/layout.h"

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

WriterLog::WriterLog(std::string segment_name) : name_(std::move(segment_name)) {
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
  IssuedNumber n;
  n.incarnation = seg_->incarnation();
  // acq_rel: the commit this invalidation follows happened before; a home that reads the new
  // value (acquire) and then renews its fence is bound to hold this invalidation first.
  n.number = word_at(seg_->data(), kWriterIssuedOffset).fetch_add(1, std::memory_order_acq_rel) + 1;
  return n;
}

IssuedNumber WriterLog::last() const {
  std::lock_guard lk(mu_);
  return read_writer_words(seg_->data());
}

std::shared_ptr<fabric::SharedSegment> WriterLog::segment() const {
  std::lock_guard lk(mu_);
  return seg_;
}

}  // namespace tierce::coherence
