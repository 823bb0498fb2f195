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
#include <optional>
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

// One argument check (libseccomp's SCMP_An macros leave datum_b to the compiler: -Wextra warns).
scmp_arg_cmp arg(unsigned n, scmp_compare op, scmp_datum_t a, scmp_datum_t b = 0) {
  return scmp_arg_cmp{n, op, a, b};
}

std::string seccomp_error(const char* step, int rc) {
  return std::string("seccomp: ") + step + ": " + std::strerror(-rc);
}

}  // namespace

base::Status enter_prelogin_sandbox() {
  scmp_filter_ctx ctx = ::seccomp_init(SCMP_ACT_ERRNO(EPERM));
  if (!ctx) return base::Status(base::Code::Internal, "seccomp_init failed");
  // Each rule in turn; the first failure stops the rest and is reported with its call.
  int rc = 0;
  const char* step = "seccomp_rule_add";
  auto allow = [&](int call, std::optional<scmp_arg_cmp> arg = std::nullopt) {
    if (rc < 0) return;
    rc = arg ? ::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, call, 1, *arg)
             : ::seccomp_rule_add(ctx, SCMP_ACT_ALLOW, call, 0);
    if (rc < 0) step = "seccomp_rule_add (a rule with an argument check)";
  };
  for (int call : kAllowed) allow(call);
  // Memory, never executable: mmap and mprotect without PROT_EXEC.
  for (int call : {SCMP_SYS(mmap), SCMP_SYS(mprotect)})
    allow(call, arg(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));  // (prot & PROT_EXEC) == 0
  // fcntl: the status flags only (the relay makes its socket non-blocking), and F_GETFD.
  for (int cmd : {F_GETFL, F_SETFL, F_GETFD})
    allow(SCMP_SYS(fcntl), arg(1, SCMP_CMP_EQ, unsigned(cmd)));
  // Signals to itself only (abort() raises SIGABRT with tgkill).
  const unsigned self = unsigned(::getpid());
  allow(SCMP_SYS(tgkill), arg(0, SCMP_CMP_EQ, self));
  allow(SCMP_SYS(kill), arg(0, SCMP_CMP_EQ, self));
#if defined(TIERCE_SANITIZED)
  // The sanitizers' runtime checks whether memory is readable by writing it into a pipe it makes
  // (UBSan's vptr check on a caught exception, for one): refused, it reports a false error. A
  // pipe reaches nothing outside the process; allowed in sanitizer builds only.
  allow(SCMP_SYS(pipe));
  allow(SCMP_SYS(pipe2));
#endif
  if (rc >= 0) {
    rc = ::seccomp_load(ctx);
    step = "seccomp_load";
  }
  ::seccomp_release(ctx);
  if (rc < 0) return base::Status(base::Code::Internal, seccomp_error(step, rc));
  return {};
}

}  // namespace tierce::ftpd
