// fabric/private_file.cc — see private_file.h.
#include "fabric/private_file.h"

#include <openssl/crypto.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "fabric/errors.h"
#include "fabric/socket.h"

namespace tierce::fabric {

std::string read_private_file(const std::string& path, const std::string& what, size_t max_bytes,
                              const std::string& too_big_hint) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd) throw_errno("open " + what + " " + path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_errno(what + " " + path);
  if (!S_ISREG(st.st_mode))
    throw FabricError(Errc::Config, what + " " + path + " is not a regular file");
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    throw FabricError(Errc::Config,
                      what + " " + path + " is owned by uid " + std::to_string(st.st_uid) +
                          ", neither this user (uid " + std::to_string(::geteuid()) +
                          ") nor root: anyone who owns it can change it; chown it to the user "
                          "the service runs as, then chmod 600 " + path);
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    char m[8];
    std::snprintf(m, sizeof m, "%04o", unsigned(st.st_mode & 07777));
    throw FabricError(Errc::Config, what + " " + path + " is accessible to its group or others "
                                        "(mode " + m + "): chmod 600 " + path);
  }
  if (st.st_size < 0 || size_t(st.st_size) > max_bytes)
    throw FabricError(Errc::Config, what + " " + path + " is " + too_big_hint);
  std::string s(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < s.size()) {
    ssize_t n = ::read(fd.get(), s.data() + got, s.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      OPENSSL_cleanse(s.data(), s.size());
      throw_errno("read " + what + " " + path);
    }
    if (n == 0) break;
    got += size_t(n);
  }
  s.resize(got);  // (shorter only if the file shrank meanwhile: no reallocation)
  return s;
}

}  // namespace tierce::fabric
