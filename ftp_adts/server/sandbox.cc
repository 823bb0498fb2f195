// ftp_adts/server/sandbox.cc — the pre-login process's seccomp filter (sandbox.h), on libseccomp.
#include "ftp_adts/server/sandbox.h"

#include <fcntl.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

// Built with AddressSanitizer or UndefinedBehaviorSanitizer (GCC's macro, clang's feature test).
#if defined(__SANITIZE_ADDRESS__)
#define TIERCE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define TIERCE_SANITIZED 1
#endif
#endif

namespace tierce::ftpd {

namespace {

// Calls allowed whatever their arguments: I/O on descriptors already held, waiting, time,
// memory management without new executable mappings (mmap/mprotect are checked below), random
// bytes for TLS, and the process's own end.
constexpr int kAllowed[] = {
    SCMP_SYS(read),          SCMP_SYS(write),        SCMP_SYS(readv),
    SCMP_SYS(writev),        SCMP_SYS(recvfrom),     SCMP_SYS(sendto),
    SCMP_SYS(recvmsg),       SCMP_SYS(sendmsg),      SCMP_SYS(poll),
    SCMP_SYS(ppoll),         SCMP_SYS(shutdown),     SCMP_SYS(close),
    SCMP_SYS(getsockopt),    SCMP_SYS(lseek),        SCMP_SYS(fstat),
    SCMP_SYS(newfstatat),    SCMP_SYS(clock_gettime), SCMP_SYS(clock_nanosleep),
    SCMP_SYS(nanosleep),     SCMP_SYS(gettimeofday), SCMP_SYS(getrandom),
    SCMP_SYS(futex),         SCMP_SYS(brk),          SCMP_SYS(munmap),
    SCMP_SYS(mremap),        SCMP_SYS(madvise),      SCMP_SYS(getpid),
    SCMP_SYS(gettid),        SCMP_SYS(getuid),       SCMP_SYS(geteuid),
    SCMP_SYS(getgid),        SCMP_SYS(getegid),      SCMP_SYS(rt_sigreturn),
    SCMP_SYS(rt_sigprocmask), SCMP_SYS(sigaltstack), SCMP_SYS(restart_syscall),
    SCMP_SYS(sched_yield),   SCMP_SYS(exit),         SCMP_SYS(exit_group),
};

std::string seccomp_error(const char* step, int rc) {
  return std::string("seccomp: ") + step + ": " + std::strerror(-rc);
}

}  // namespace

base::Status enter_prelogin_sandbox() {
  scmp_filter_ctx ctx = ::seccomp_init(SCMP_ACT_ERRNO(EPERM));
  if (!ctx) return base::Status(base::Code::Internal, "seccomp_init failed");
  auto fail = [&](const char* step, int rc) {
    ::seccomp_release(ctx);
    return base::Status(base::Code::Internal, seccomp_error(step, rc));
  };
  for (int call : kAllowed)
    if (int rc = ::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, call, 0); rc < 0)
      return fail("seccomp_rule_add", rc);
  // Memory, never executable: mmap and mprotect without PROT_EXEC.
  for (int call : {SCMP_SYS(mmap), SCMP_SYS(mprotect)})
    if (int rc = ::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, call, 1,
                                    SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
        rc < 0)
      return fail("seccomp_rule_add (mmap/mprotect)", rc);
  // fcntl: the status flags only (the relay makes its socket non-blocking), and F_GETFD.
  for (int cmd : {F_GETFL, F_SETFL, F_GETFD})
    if (int rc = ::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(fcntl), 1,
                                    SCMP_A1(SCMP_CMP_EQ, unsigned(cmd)));
        rc < 0)
      return fail("seccomp_rule_add (fcntl)", rc);
  // Signals to itself only (abort() raises SIGABRT with tgkill).
  const pid_t self = ::getpid();
  if (int rc = ::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
                                  SCMP_A0(SCMP_CMP_EQ, unsigned(self)));
      rc < 0)
    return fail("seccomp_rule_add (tgkill)", rc);
  if (int rc = ::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(kill), 1,
                                  SCMP_A0(SCMP_CMP_EQ, unsigned(self)));
      rc < 0)
    return fail("seccomp_rule_add (kill)", rc);
#if defined(TIERCE_SANITIZED)
  // The sanitizers' runtime checks whether memory is readable by writing it into a pipe it makes
  // (UBSan's vptr check on a caught exception, for one): refused, it reports a false error. A
  // pipe reaches nothing outside the process; allowed in sanitizer builds only.
  for (int call : {SCMP_SYS(pipe), SCMP_SYS(pipe2)})
    if (int rc = ::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, call, 0); rc < 0)
      return fail("seccomp_rule_add (pipe)", rc);
#endif
  if (int rc = ::seccomp_load(ctx); rc < 0) return fail("seccomp_load", rc);
  ::seccomp_release(ctx);
  return {};
}

}  // namespace tierce::ftpd
