// ftp_adts/server/xferlog.cc
#include "ftp_adts/server/xferlog.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <system_error>

namespace tierce::ftpd {

std::string format_xferlog(const XferRecord& r) {
  char when[64];
  std::tm t;
  localtime_r(&r.when, &t);
  std::strftime(when, sizeof when, "%a %b %e %H:%M:%S %Y", &t);
  // Whitespace inside a name would shift every later field for the log readers (awk, xferstats).
  std::string name = r.filename.empty() ? "-" : r.filename;
  for (char& c : name)
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') c = '_';
  long secs = std::max(1L, std::lround(r.seconds));
  std::string s = when;
  s += " " + std::to_string(secs) + " " + (r.remote_host.empty() ? "-" : r.remote_host) + " " +
       std::to_string(r.bytes) + " " + name + " " + (r.ascii ? "a" : "b") + " _ " + r.direction +
       " " + r.access + " " + (r.user.empty() ? "-" : r.user) + " ftp 0 * " +
       (r.complete ? "c" : "i");
  return s;
}

Xferlog::Xferlog(const std::string& path) {
  if (path.empty()) return;
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "xferlog " + path);
}

Xferlog::~Xferlog() {
  if (fd_ >= 0) ::close(fd_);
}

void Xferlog::write(const XferRecord& r) {
  if (fd_ < 0) return;
  std::string line = format_xferlog(r) + "\n";
  // One write: O_APPEND makes it atomic with respect to the other workers' lines.
  ssize_t n = ::write(fd_, line.data(), line.size());
  (void)n;
}

}  // namespace tierce::ftpd
