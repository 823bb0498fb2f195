#include "base/check.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace tierce::base {

namespace {
void put(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= size_t(w);
  }
}
}  // namespace

// write(2) and abort() only: it may run where the heap or a lock is the thing that broke.
void check_failed(const char* file, int line, const char* cond, const char* what) noexcept {
  char num[16];
  int i = sizeof num - 1;
  num[i] = '\0';
  unsigned v = line > 0 ? unsigned(line) : 0;
  do {
    num[--i] = char('0' + v % 10);
    v /= 10;
  } while (v && i > 0);
  put("TIERCE CHECK failed at ");
  put(file);
  put(":");
  put(num + i);
  put(": ");
  put(cond);
  put(" (");
  put(what);
  put(")\n");
  std::abort();
}

}  // namespace tierce::base
