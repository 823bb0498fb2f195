// base/tsan.h — ThreadSanitizer annotations for the few reads that race with a writer by design.
//
// Tierce has readers that copy shared memory without taking the writer's lock and then validate
// the copy (seqlock: sequence or tail re-read after an acquire fence; checksum over the copy).
// The copy itself is a data race in the C++ model — the bytes may be torn — and the validation
// throws a torn copy away. ThreadSanitizer, which only sees the plain loads, would report every
// such copy. TIERCE_TSAN_RACY_READS() marks the scope of ONE such copy: within it, the thread's
// memory accesses are not recorded (AnnotateIgnoreReadsBegin/End of the TSan runtime; it ignores
// the thread's writes as well, so keep the scope to the copy into private memory). Outside a
// TSan build (TIERCE_TSAN, tools/tsan.sh) it expands to nothing: the production code is unchanged.
//
// Use it only where the copy is validated afterwards, with a comment saying how.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define TIERCE_TSAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TIERCE_TSAN_BUILD 1
#endif
#endif

namespace tierce::base {
#ifdef TIERCE_TSAN_BUILD
inline constexpr bool kTsanBuild = true;
#else
inline constexpr bool kTsanBuild = false;
#endif
}  // namespace tierce::base

#ifdef TIERCE_TSAN_BUILD

#include <sanitizer/tsan_interface.h>

extern "C" {
// Provided by the ThreadSanitizer runtime (tsan_interface_ann.cpp).
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
}

namespace tierce::base {

class TsanRacyReads {
 public:
  TsanRacyReads(const char* file, int line) : file_(file), line_(line) {
    AnnotateIgnoreReadsBegin(file_, line_);
  }
  ~TsanRacyReads() { AnnotateIgnoreReadsEnd(file_, line_); }
  TsanRacyReads(const TsanRacyReads&) = delete;
  TsanRacyReads& operator=(const TsanRacyReads&) = delete;

 private:
  const char* file_;
  int line_;
};

// pthread_mutex_timedlock() on a robust mutex whose owner died returns EOWNERDEAD with the mutex
// held, but TSan's interceptor (clang 14) records a lock only for 0: the later unlock would be
// reported as "unlock of an unlocked mutex". Tells TSan the caller now holds `m`.
inline void tsan_note_robust_lock_recovered(void* m) {
  __tsan_mutex_pre_lock(m, __tsan_mutex_try_lock);
  __tsan_mutex_post_lock(m, __tsan_mutex_try_lock, 0);
}

}  // namespace tierce::base

#define TIERCE_TSAN_CONCAT2(a, b) a##b
#define TIERCE_TSAN_CONCAT(a, b) TIERCE_TSAN_CONCAT2(a, b)
#define TIERCE_TSAN_RACY_READS() \
  ::tierce::base::TsanRacyReads TIERCE_TSAN_CONCAT(tierce_tsan_racy_, __LINE__)(__FILE__, __LINE__)

#else

#define TIERCE_TSAN_RACY_READS() static_cast<void>(0)

namespace tierce::base {
inline void tsan_note_robust_lock_recovered(void*) {}
}  // namespace tierce::base

#endif
