// ftp_adts/server/xferlog.h — the wu-ftpd transfer log, one line per completed or aborted transfer:
//   current-time transfer-time remote-host file-size filename transfer-type special-action
//   direction access-mode username service-name authentication-method authenticated-user-id
//   completion-status
// e.g. "Sat Nov 21 04:21:00 2026 1 127.0.0.1 1048576 /pub/a.bin b _ o r alice ftp 0 * c".
// Workers append with one write(2) per line on an O_APPEND file, so lines of concurrent workers
// never interleave.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>

namespace tierce::ftpd {

struct XferRecord {
  std::time_t when = 0;          // end of the transfer
  double seconds = 0;            // how long it took
  std::string remote_host;
  uint64_t bytes = 0;
  std::string filename;          // the virtual path
  bool ascii = false;            // transfer-type a / b
  char direction = 'o';          // o outgoing (RETR), i incoming (STOR), d deleted
  char access = 'r';             // a anonymous, r real user, g guest
  std::string user;
  bool complete = true;          // c / i
};

// The line without its newline.
std::string format_xferlog(const XferRecord& r);

class Xferlog {
 public:
  Xferlog() = default;
  // Opens (creates) `path` for appending; "" = no log. Throws std::system_error.
  explicit Xferlog(const std::string& path);
  ~Xferlog();
  Xferlog(const Xferlog&) = delete;
  Xferlog& operator=(const Xferlog&) = delete;
  void write(const XferRecord& r);

 private:
  int fd_ = -1;
};

}  // namespace tierce::ftpd
