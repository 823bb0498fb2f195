// tools/tierce-wanem/main.cc — tierce-wanem: a user-space WAN emulator relay for tests and
// benchmarks (docs/ftp.md "tierce-wanem"). Parses the command line, binds every listener, says
// "ready", relays until SIGTERM/SIGINT, then prints what it moved. With --send it is instead the
// client of a running relay's --control socket (control.h).
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>

#include "tools/tierce-wanem/control.h"
#include "tools/tierce-wanem/options.h"
#include "tools/tierce-wanem/relay.h"

#ifndef TIERCE_VERSION
#define TIERCE_VERSION "0.0.0"  // set by CMake to the project version
#endif

namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;

// A port range of a thousand listeners plus their connections needs more than the usual 1024
// descriptors: take what the hard limit allows.
void raise_fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

// Written to a temporary name and renamed, so a poller never reads half a file.
bool write_ready_file(const std::string& path, size_t listeners) {
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "ready " << listeners << " listeners pid " << ::getpid() << "\n";
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tierce::wanem;
  Options opts;
  try {
    opts = parse_options(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "tierce-wanem: %s\n(tierce-wanem --help for usage)\n", e.what());
    return kExitUsage;
  }
  if (opts.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (opts.version) {
    std::printf("tierce-wanem %s\n", TIERCE_VERSION);
    return 0;
  }
  if (!opts.send.empty()) {
    try {
      std::string answer = send_command(opts.control, opts.send);
      std::printf("%s\n", answer.c_str());
      return answer.rfind("ok", 0) == 0 ? 0 : kExitRuntime;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tierce-wanem: %s\n", e.what());
      return kExitRuntime;
    }
  }

  // Signals arrive through a signalfd the loop polls; SIGPIPE is not a way to learn that a peer
  // left (writev's EPIPE is).
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  int sigfd = ::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) {
    std::perror("tierce-wanem: signalfd");
    return kExitRuntime;
  }
  raise_fd_limit();

  try {
    Relay relay(opts);
    // The line first, then the file: whoever waits for the file finds the line in the log.
    std::printf(
        "tierce-wanem: ready (%zu listeners, delay %llu us, rate %s, window %llu bytes%s)\n",
        relay.listener_count(), (unsigned long long)opts.delay_us,
        opts.rate ? (std::to_string(opts.rate) + " B/s").c_str() : "unlimited",
        (unsigned long long)opts.window,
        opts.control.empty() ? "" : (", control " + opts.control).c_str());
    std::fflush(stdout);
    if (!opts.ready_file.empty() && !write_ready_file(opts.ready_file, relay.listener_count())) {
      std::fprintf(stderr, "tierce-wanem: cannot write ready file %s\n", opts.ready_file.c_str());
      return kExitRuntime;
    }
    relay.run(sigfd);
    const RelayStats& s = relay.stats();
    std::fprintf(stderr,
                 "tierce-wanem: stopped: %llu connections (%llu failed to connect), %llu bytes "
                 "to targets, %llu bytes to clients\n",
                 (unsigned long long)s.accepted, (unsigned long long)s.connect_failures,
                 (unsigned long long)s.bytes_to_target, (unsigned long long)s.bytes_to_client);
  } catch (const StartError& e) {
    std::fprintf(stderr, "tierce-wanem: %s\n", e.what());
    return kExitRuntime;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tierce-wanem: %s\n", e.what());
    return kExitRuntime;
  }
  return 0;
}
