// base/check.h — the program's own invariants, checked: one way to fail when the code itself is
// wrong (Varnish's AN/AZ/CHECK_OBJ, abseil's CHECK/DCHECK).
//
//   TIERCE_CHECK(cond, "what must hold")   always on: on failure it writes
//       "TIERCE CHECK failed at file:line: cond (what must hold)" to stderr and aborts;
//   TIERCE_DCHECK(cond, "what must hold")  the same in debug builds (NDEBUG unset: the sanitizer
//       build), nothing in release builds (cond is not evaluated) — for hot paths.
//
// Only for what this program guarantees itself (a counter that matches its entries, a state a
// slab must be in). Never for what a peer, a client or a file sends: bad input is an error with a
// message, and an abort on it would let anyone who can send a frame stop the daemon (a remote
// denial of service). Exceptions, Status returns and log lines stay the way to report those.
#pragma once

namespace tierce::base {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const char* what) noexcept;
}  // namespace tierce::base

#define TIERCE_CHECK(cond, what) \
  ((cond) ? static_cast<void>(0) : ::tierce::base::check_failed(__FILE__, __LINE__, #cond, what))

#ifdef NDEBUG
#define TIERCE_DCHECK(cond, what) static_cast<void>(sizeof(!(cond)))
#else
#define TIERCE_DCHECK(cond, what) TIERCE_CHECK(cond, what)
#endif
