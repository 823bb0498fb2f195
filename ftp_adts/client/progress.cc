// ftp_adts/client/progress.cc — the progress line (progress.h).
#include "ftp_adts/client/progress.h"

#include <cstdio>

namespace tierce::ftpc {

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

ProgressBar::ProgressBar(bool enabled, std::string label, uint64_t total)
    : enabled_(enabled), label_(std::move(label)), total_(total),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::set(uint64_t done) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> g(mu_);
  done_ = done;
  draw(false);
}

void ProgressBar::add(uint64_t delta) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> g(mu_);
  done_ += delta;
  draw(false);
}

void ProgressBar::set_total(uint64_t total) {
  std::lock_guard<std::mutex> g(mu_);
  total_ = total;
}

void ProgressBar::finish() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> g(mu_);
  if (finished_) return;
  draw(true);
  std::fputc('\n', stderr);
  finished_ = true;
}

void ProgressBar::draw(bool force) {
  auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  double secs = std::chrono::duration<double>(now - start_).count();
  double rate = secs > 0 ? double(done_) / secs : 0;
  std::string pct = total_ ? std::to_string(int(100.0 * double(done_) / double(total_))) + "%"
                           : std::string("--%");
  std::string eta = "--:--";
  if (total_ && rate > 0 && done_ <= total_) {
    long s = long(double(total_ - done_) / rate);
    char b[32];
    std::snprintf(b, sizeof b, "%ld:%02ld", s / 60, s % 60);
    eta = b;
  }
  std::string label = label_.size() > 30 ? "..." + label_.substr(label_.size() - 27) : label_;
  std::fprintf(stderr, "\r%-30s %10s / %-10s %4s %10s/s ETA %s\x1b[K", label.c_str(),
               human_bytes(done_).c_str(), total_ ? human_bytes(total_).c_str() : "?",
               pct.c_str(), human_bytes(uint64_t(rate)).c_str(), eta.c_str());
  std::fflush(stderr);
}

}  // namespace tierce::ftpc
