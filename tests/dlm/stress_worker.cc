// tests/dlm/stress_worker.cc — one client process of the lock manager stress test (stress.py):
// takes a lock through its node's lockd (dlm/client.h) in random modes and checks mutual
// exclusion on real shared state — a file mapped by every worker on the host:
//
//   offset  size  field
//   0       8     counter: incremented (read, pause, write) by every exclusive section
//   8       8     highest exclusive fencing token seen
//   16      8     violations: overlaps and token regressions found by any worker
//   24      8     exclusive sections completed
//   32      8     stop: set by the driver when its fault steps are over; a worker runs at least
//                 ITERATIONS sections, and on until then (so that every step finds it at work)
//   40+32i  32    slot i (one per worker): pid (8), mode inside the lock (8): 0 out, 1 shared,
//                 2 exclusive; the process's start time (8, /proc/PID/stat field 22, clock
//                 ticks since boot); unused (8)
//
// A worker entering announces itself in its slot, then looks at every other slot whose process
// is alive: another exclusive (or, entering exclusively, anyone) inside is a violation. Slots of
// dead processes are ignored: a node killed mid-section leaves its worker's slot behind, and the
// next holder may enter once the lock manager has given the lock away (that is the point).
//
// "Alive" means: that pid exists, is not exiting or a zombie, AND started at the recorded time.
// The pid alone is not enough: the driver reaps a killed holder at once, and on a busy machine
// (pid_max 32768 here, thousands of processes per test run) its pid is handed to another process
// within seconds — which the old check took for the holder still inside its section, reporting
// a violation that never happened (issue 14: every reported violation named the killed holder).
//
// Usage: stress_worker SOCKET STATEFILE SLOT LOCKNAME ITERATIONS SEED [MODE]
// Exit: 0 done, 1 a violation or an unexpected error, 3 the lockd went away (node killed).
// MODE (the driver's fault steps):
//   --hold-forever  takes the lock exclusively, prints "HOLDING <token>" and sleeps (the driver
//                   SIGKILLs it: the lock must be released when the holder process dies)
//   --hold-ms=N     takes it exclusively, prints "HOLDING <token>", stays inside N ms (the
//                   driver SIGSTOPs it meanwhile), leaves, unlocks and exits 0
//   --wait          prints "WAITING", then asks for it exclusively (the driver SIGKILLs it while
//                   it waits: its queue entry must not block the others)
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "dlm/client.h"

using tierce::dlm::LockClient;
using tierce::dlm::LockError;
using tierce::dlm::Mode;
using tierce::dlm::Status;

namespace {
constexpr int kSlots = 64;
struct Slot {
  std::atomic<int64_t> pid;
  std::atomic<int64_t> mode;
  std::atomic<uint64_t> start;  // start time of that process (clock ticks since boot)
  uint64_t unused;
};
struct State {
  std::atomic<uint64_t> counter;
  std::atomic<uint64_t> max_token;
  std::atomic<uint64_t> violations;
  std::atomic<uint64_t> sections;
  std::atomic<uint64_t> stop;
  Slot slots[kSlots];
};
static_assert(sizeof(State) == 40 + 32 * kSlots);

// What /proc/PID/stat says of a process: its state, flags, start time and name.
struct ProcStat {
  bool exists = false;
  char state = 0;
  unsigned long flags = 0;
  unsigned long long start = 0;
  std::string comm;
};

ProcStat proc_stat(int64_t pid) {
  ProcStat ps;
  if (pid <= 0) return ps;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%lld/stat", static_cast<long long>(pid));
  FILE* f = std::fopen(path, "r");
  if (!f) return ps;
  char buf[2048] = {};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  ps.exists = n > 0;
  // "pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime
  //  stime cutime cstime priority nice num_threads itrealvalue starttime ..." (proc(5))
  const char* open = std::strchr(buf, '(');
  const char* close = std::strrchr(buf, ')');
  if (!open || !close || close < open) return ps;
  ps.comm.assign(open + 1, close);
  std::sscanf(close + 1,
              " %c %*d %*d %*d %*d %*d %lu %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
              &ps.state, &ps.flags, &ps.start);
  return ps;
}

// A process counts as alive until it starts exiting: one that is exiting (PF_EXITING, after a
// SIGKILL: it runs no more user code, and its lockd connection closes during the exit) or a
// zombie (exited, not reaped by its parent yet) is dead for this purpose — and so is another
// process that was given the same pid later (its start time differs).
bool alive(int64_t pid, uint64_t start) {
  ProcStat ps = proc_stat(pid);
  if (!ps.exists) return false;
  constexpr unsigned long kPfExiting = 0x4;
  if (ps.state == 'Z' || ps.state == 'X' || (ps.flags & kPfExiting)) return false;
  return ps.start == start;
}

// Announces `mode` in slot `me` and returns how many live others conflict with it.
int enter(State& st, int me, int64_t mode) {
  st.slots[me].mode.store(mode);
  int conflicts = 0;
  for (int i = 0; i < kSlots; ++i) {
    if (i == me) continue;
    int64_t m = st.slots[i].mode.load();
    if (m == 0 || (mode == 1 && m == 1)) continue;
    const int64_t pid = st.slots[i].pid.load();
    const uint64_t start = st.slots[i].start.load();
    if (!alive(pid, start)) {
      // Say so when the pid now belongs to another process: what the old check mistook.
      static uint64_t noted = 0;  // slots already reported (once per worker and slot)
      ProcStat ps = proc_stat(pid);
      if (ps.exists && ps.start != start && ps.state != 'Z' && !(noted & (1ull << i)) &&
          (noted |= 1ull << i))
        std::fprintf(stderr,
                     "note: slot %d's pid %lld (inside %s, started at tick %llu) is now another "
                     "process, '%s' started at tick %llu: the holder is gone, not inside\n",
                     i, static_cast<long long>(pid), m == 2 ? "exclusively" : "shared",
                     static_cast<unsigned long long>(start), ps.comm.c_str(), ps.start);
      continue;
    }
    {
      std::fprintf(stderr, "VIOLATION: slot %d entered %s while slot %d (pid %lld) is inside %s\n", me,
                   mode == 2 ? "exclusively" : "shared", i,
                   static_cast<long long>(st.slots[i].pid.load()), m == 2 ? "exclusively" : "shared");
      ++conflicts;
    }
  }
  return conflicts;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s SOCKET STATEFILE SLOT LOCK ITERATIONS SEED [--hold-forever]\n",
                 argv[0]);
    return 2;
  }
  const std::string socket = argv[1], statefile = argv[2], lock = argv[4];
  const int me = std::atoi(argv[3]);
  const int iterations = std::atoi(argv[5]);
  const unsigned seed = unsigned(std::atoi(argv[6]));
  const std::string mode = argc > 7 ? argv[7] : "";
  const bool hold_forever = mode == "--hold-forever";
  const bool wait_only = mode == "--wait";
  const int hold_ms = mode.rfind("--hold-ms=", 0) == 0 ? std::atoi(mode.c_str() + 10) : -1;
  if (!mode.empty() && !hold_forever && !wait_only && hold_ms < 0) {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  if (me < 0 || me >= kSlots) {
    std::fprintf(stderr, "SLOT must be 0..%d\n", kSlots - 1);
    return 2;
  }
  int fd = ::open(statefile.c_str(), O_RDWR);
  if (fd < 0) {
    std::perror("open state file");
    return 1;
  }
  void* p = ::mmap(nullptr, sizeof(State), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  State& st = *static_cast<State*>(p);
  st.slots[me].mode.store(0);
  st.slots[me].start.store(proc_stat(::getpid()).start);
  st.slots[me].pid.store(::getpid());
  std::mt19937 rng(seed);
  try {
    LockClient client(socket);
    if (wait_only) {
      std::printf("WAITING\n");
      std::fflush(stdout);
      auto h = client.lock(lock, Mode::Exclusive, std::chrono::milliseconds(60000));
      std::fprintf(stderr, "worker --wait: granted (token %llu) before it was killed\n",
                   static_cast<unsigned long long>(h.token()));
      return 1;
    }
    if (hold_ms >= 0) {
      auto h = client.lock(lock, Mode::Exclusive, std::chrono::milliseconds(20000));
      st.violations += uint64_t(enter(st, me, 2));
      std::printf("HOLDING %llu\n", static_cast<unsigned long long>(h.token()));
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
      st.slots[me].mode.store(0);
      h.unlock();
      return 0;
    }
    if (hold_forever) {
      auto h = client.lock(lock, Mode::Exclusive, std::chrono::milliseconds(20000));
      st.violations += uint64_t(enter(st, me, 2));
      std::printf("HOLDING %llu\n", static_cast<unsigned long long>(h.token()));
      std::fflush(stdout);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    int done = 0;
    while (done < iterations || st.stop.load() == 0) {
      const bool excl = rng() % 3 == 0;
      tierce::dlm::HeldLock h;
      try {
        h = client.lock(lock, excl ? Mode::Exclusive : Mode::Shared, std::chrono::milliseconds(20000));
      } catch (const LockError& e) {
        // A node of the cluster died: its locks are unavailable (HomeDown) until it is back,
        // or our hold was revoked. Not a violation: retry.
        // LeaseLost: our lockd lost contact with the home (frozen, partitioned) while asking.
        if (e.status() == Status::HomeDown || e.status() == Status::Timeout ||
            e.status() == Status::LeaseLost) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          continue;
        }
        throw;
      }
      if (excl) {
        st.violations += uint64_t(enter(st, me, 2));
        uint64_t prev = st.max_token.load();
        if (h.token() <= prev) {
          std::fprintf(stderr, "VIOLATION: exclusive token %llu not above %llu\n",
                       static_cast<unsigned long long>(h.token()), static_cast<unsigned long long>(prev));
          ++st.violations;
        }
        st.max_token.store(std::max(prev, h.token()));
        uint64_t c = st.counter.load();
        std::this_thread::sleep_for(std::chrono::microseconds(200 + rng() % 300));
        st.counter.store(c + 1);
        ++st.sections;
      } else {
        st.violations += uint64_t(enter(st, me, 1));
        if (h.token() <= st.max_token.load()) {
          std::fprintf(stderr, "VIOLATION: shared token %llu not above the last exclusive's\n",
                       static_cast<unsigned long long>(h.token()));
          ++st.violations;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100 + rng() % 200));
      }
      st.slots[me].mode.store(0);
      try {
        h.unlock();
      } catch (const LockError& e) {
        // revoked meanwhile (a node died, our lockd was cut off): fine
        if (e.status() != Status::NotHeld && e.status() != Status::LeaseLost) throw;
      }
      ++done;
    }
    return 0;
  } catch (const LockError& e) {
    std::fprintf(stderr, "worker: %s (status %d)\n", e.what(), int(e.status()));
    return e.status() == Status::Internal ? 3 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker: %s\n", e.what());
    return 1;
  }
}
