// fabric/random.cc
#include "fabric/random.h"

#include <sys/random.h>

#include <cerrno>

#include "fabric/errors.h"

namespace tierce::fabric {

void random_bytes(void* dst, size_t len) {
  auto* p = static_cast<uint8_t*>(dst);
  while (len > 0) {
    ssize_t n = getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("getrandom");
    }
    p += n;
    len -= size_t(n);
  }
}

uint64_t random_u64() {
  uint64_t v;
  random_bytes(&v, sizeof v);
  return v;
}

}  // namespace tierce::fabric
