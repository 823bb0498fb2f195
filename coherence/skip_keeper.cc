// coherence/skip_keeper.cc — lifts skip marks of homes that answer again (see skip_keeper.h).
#include "coherence/skip_keeper.h"

#include "coherence/layout.h"
#include "fabric/segment.h"

namespace tierce::coherence {

SkipMarkKeeper::SkipMarkKeeper(WriterLog& writer, ClusterClient& client,
                               std::vector<std::string> homes, std::string node,
                               fabric::LogSink log)
    : writer_(writer),
      client_(client),
      homes_(std::move(homes)),
      node_(std::move(node)),
      log_(std::move(log)),
      pending_seen_(homes_.size(), 0),
      logged_(homes_.size(), 0) {}

void SkipMarkKeeper::pass() {
  uint64_t held = 0;
  for (size_t i = 0; i < homes_.size() && i < kMaxSkipHomes; ++i) {
    uint64_t w = writer_.skip_word(i);
    if (w == 0) {
      pending_seen_[i] = 0;
      continue;
    }
    if (skip_state(w) == SkipState::Pending) {
      // Its writer was stopped between setting and dating it: date it (a time after the
      // moment it became visible), so that writers may stop waiting one bound later.
      if (pending_seen_[i] && writer_.date_pending_skip(i)) {
        ++stats_.dated;
        w = writer_.skip_word(i);
      } else {
        pending_seen_[i] = 1;
      }
    }
    if (client_.home_answers(homes_[i])) {
      if (writer_.clear_skip(i, w)) {
        ++stats_.cleared;
        logged_[i] = 0;
        pending_seen_[i] = 0;
        if (log_)
          log_(fabric::LogLevel::Info,
               "COH0221 " + node_ + ": home " + homes_[i] +
                   " answers again: skip mark cleared, this node's updates wait for it again (it "
                   "vouches once it holds every invalidation issued meanwhile)");
        continue;
      }
    }
    ++held;
    if (logged_[i] != w && log_) {
      logged_[i] = w;
      log_(fabric::LogLevel::Warn,
           "COH0220 " + node_ + ": home " + homes_[i] +
               " is marked in this node's writer region (it did not acknowledge an update): "
               "updates stop waiting for it one fence bound after the mark, and it vouches for "
               "nothing until it answers again and the mark is cleared");
    }
  }
  stats_.held = held;
}

std::vector<std::string> SkipMarkKeeper::held() const {
  std::vector<std::string> v;
  const uint64_t now = fabric::monotonic_ns();
  for (size_t i = 0; i < homes_.size() && i < kMaxSkipHomes; ++i) {
    uint64_t w = writer_.skip_word(i);
    if (w == 0) continue;
    std::string since = skip_state(w) == SkipState::Pending
                            ? "pending"
                            : std::to_string(now > w ? (now - w) / 1'000'000 : 0);
    v.push_back(homes_[i] + " " + since);
  }
  return v;
}

}  // namespace tierce::coherence
