// tests/dlm/client/ipc_latency.cc — not a test: the cost of the local IPC alone. lock + unlock
// of an uncontended lock through LockClient -> IpcServer -> a trivial service that grants at
// once, in one process over a real unix socket. Prints p50/p90/p99 in microseconds.
//
//   dlm_ipc_latency [iterations (default 100000)] [server spin us (default 50)]
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "agents/lockd/ipc_server.h"
#include "dlm/client.h"

using namespace tierce;
using Clock = std::chrono::steady_clock;

namespace {

class TrivialService final : public dlm::LocalLockService {
 public:
  void acquire(dlm::OwnerId, const std::string&, dlm::Mode, std::chrono::milliseconds,
               std::function<void(const dlm::Grant&)> done) override {
    dlm::Grant g;
    g.status = dlm::Status::Ok;
    g.hold = ++next_;
    g.token = next_;
    done(g);
  }
  dlm::Status release(dlm::OwnerId, dlm::HoldId) override { return dlm::Status::Ok; }
  void owner_gone(dlm::OwnerId) override {}
  void set_revoked_callback(RevokedFn) override {}
  std::string status_text() override { return "trivial\n"; }

 private:
  std::atomic<uint64_t> next_{0};
};

double pct(std::vector<double>& v, double p) {
  size_t i = std::min(v.size() - 1, size_t(p * double(v.size())));
  std::nth_element(v.begin(), v.begin() + long(i), v.end());
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 100000;
  lockd::IpcOptions o;
  if (argc > 2) o.spin = std::chrono::microseconds(std::atoi(argv[2]));
  std::string path = "/tmp/tdlm-latency-" + std::to_string(::getpid()) + ".sock";
  TrivialService svc;
  lockd::IpcServer server(path, svc, {}, o);
  dlm::LockClient c(path);
  for (int i = 0; i < 20000; ++i) c.lock("bench", dlm::Mode::Exclusive).unlock();  // warm up
  std::vector<double> pair, lock_only;
  pair.reserve(size_t(n));
  lock_only.reserve(size_t(n));
  auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    auto h = c.lock("bench", dlm::Mode::Exclusive);
    auto t1 = Clock::now();
    h.unlock();
    auto t2 = Clock::now();
    pair.push_back(std::chrono::duration<double, std::micro>(t2 - t0).count());
    lock_only.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  double total = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("lock+unlock round trip over IpcServer (%d iterations, server spin %lld us):\n", n,
              (long long)o.spin.count());
  std::printf("  lock+unlock  p50 %.1f us  p90 %.1f us  p99 %.1f us\n", pct(pair, 0.5),
              pct(pair, 0.9), pct(pair, 0.99));
  std::printf("  lock alone   p50 %.1f us  p90 %.1f us  p99 %.1f us\n", pct(lock_only, 0.5),
              pct(lock_only, 0.9), pct(lock_only, 0.99));
  std::printf("  throughput   %.0f lock+unlock/s\n", n / total);
  return 0;
}
