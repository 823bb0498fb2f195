// base/errors.cc
#include "base/errors.h"

#include <cstring>

namespace tierce::base {

std::string errno_text(int e) {
  char buf[128];
  return std::string(strerror_r(e, buf, sizeof buf));  // GNU: may return a static string
}

}  // namespace tierce::base
