// ftp_adts/client/progress.h — the progress line on stderr (bytes, %, rate, ETA), redrawn at most
// ten times a second, only when enabled (by default: stderr is a terminal). Thread-safe: the
// mirror's workers all report into one aggregate bar.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace tierce::ftpc {

class ProgressBar {
 public:
  ProgressBar(bool enabled, std::string label, uint64_t total);
  ~ProgressBar();
  void set(uint64_t done);       // absolute bytes so far
  void add(uint64_t delta);      // aggregate use (mirror)
  void set_total(uint64_t total);
  void finish();                 // final redraw and a newline (idempotent)
  bool enabled() const { return enabled_; }

 private:
  void draw(bool force);
  bool enabled_;
  std::string label_;
  uint64_t total_;
  uint64_t done_ = 0;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::mutex mu_;
};

// "12.3 MiB", "980 B".
std::string human_bytes(uint64_t n);

}  // namespace tierce::ftpc
