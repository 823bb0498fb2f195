// benchmarks/dlm/dlm_bench.cc — tierce-dlm-bench: latency of the lock manager as an application
// sees it (seed 000 ch. 4, Fig. 4.6 serial lock/unlock, Fig. 4.8 lock cascades), and of the lock
// a user would otherwise pick (a Redis SET NX PX + Lua compare-and-delete), measured the same way.
// A program that prints numbers; never a test of timing. benchmarks/dlm/run.py starts the lockds
// and redis-server and drives it (benchmarks/dlm/README.md).
//
//   tierce-dlm-bench serial  --socket S --lock NAME --mode x|s --iterations N [--warmup W]
//   tierce-dlm-bench cascade --sockets S1,S2,... --lock NAME --mode x|s --waiters N --rounds R
//   tierce-dlm-bench redis-serial --host H --port P --iterations N [--warmup W] [--spin-us U]
//   tierce-dlm-bench lockname --topology FILE --node NODE [--prefix P]
//   tierce-dlm-bench ready --sockets S1,S2,... [--members M] [--timeout-ms T]
//
// Output: human text on stderr; one JSON object per result on stdout (one line each), so a driver
// reads stdout only. Exit status: 0 done, 1 a lock operation or connection failed (the message
// says which), 2 bad usage.
#include <hiredis/hiredis.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cluster/hash.h"
#include "cluster/topology.h"
#include "dlm/client.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using tierce::dlm::HeldLock;
using tierce::dlm::LockClient;
using tierce::dlm::LockError;
using tierce::dlm::Mode;

constexpr const char* kProgram = "tierce-dlm-bench";
constexpr auto kLockTimeout = 30s;  // a lock not granted in 30 s is a failure (a hang), not a sample

struct Usage : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void usage(FILE* out) {
  std::fprintf(
      out,
      "Usage: %s MODE [options]\n"
      "Lock manager latency benchmark (seed 000 Fig. 4.6 / 4.8); benchmarks/dlm/README.md.\n"
      "\n"
      "  serial --socket S --lock NAME --mode x|s --iterations N [--warmup W]\n"
      "      one client on lockd socket S: lock then unlock, N times; lock, unlock and pair\n"
      "      latency (p50/p90/p99/mean, us)\n"
      "  cascade --sockets S1,S2,... --lock NAME --mode x|s --waiters N --rounds R\n"
      "      a holder on S1 holds NAME exclusively; N waiters (own clients, round-robin over the\n"
      "      sockets from S2: S2, S3, ..., S1, S2, ...) queue in mode x|s; the holder releases\n"
      "      at t0; each waiter releases as soon as it is granted; cascade = last grant - t0\n"
      "      (median/mean over R rounds, us) [--warmup W] untimed rounds first (default 1)\n"
      "      [--settle-ms M] extra wait after the queue looks complete (default 5)\n"
      "      [--holder H] (diagnostic) the holder on H, waiter i on socket i mod #sockets\n"
      "  redis-serial --host H --port P --iterations N [--warmup W] [--key K] [--spin-us U]\n"
      "      SET K token NX PX 30000 / EVAL compare-and-delete, as serial; --spin-us: poll the\n"
      "      socket U us for each reply before blocking (as LockClient does; default 0)\n"
      "  lockname --topology FILE --node NODE [--prefix P]\n"
      "      print the first name P-0, P-1, ... whose home is NODE\n"
      "  ready --sockets S1,S2,... [--members M] [--timeout-ms T]\n"
      "      wait until every lockd answers and sees all M members up (default: #sockets)\n"
      "\n"
      "Any mode: --raw 1 adds every sample to the JSON line.\n"
      "stdout: one JSON line per result; stderr: the same in words.\n"
      "Exit: 0 done, 1 a lock operation or connection failed, 2 bad usage.\n",
      kProgram);
}

// --- options --------------------------------------------------------------------------------

struct Args {
  std::string mode;
  std::map<std::string, std::string> kv;

  std::string str(const std::string& k, std::optional<std::string> def = std::nullopt) const {
    auto it = kv.find(k);
    if (it != kv.end()) return it->second;
    if (def) return *def;
    throw Usage("--" + k + " is required for " + mode);
  }
  long num(const std::string& k, std::optional<long> def = std::nullopt, long min = 0) const {
    auto it = kv.find(k);
    if (it == kv.end()) {
      if (def) return *def;
      throw Usage("--" + k + " is required for " + mode);
    }
    char* end = nullptr;
    long v = std::strtol(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end || v < min)
      throw Usage("--" + k + " wants an integer >= " + std::to_string(min) + ", not '" +
                  it->second + "'");
    return v;
  }
  Mode lock_mode() const {
    std::string m = str("mode");
    if (m == "x" || m == "exclusive") return Mode::Exclusive;
    if (m == "s" || m == "shared") return Mode::Shared;
    throw Usage("--mode wants x or s, not '" + m + "'");
  }
  void only(std::initializer_list<const char*> allowed) const {
    for (auto& [k, v] : kv) {
      bool ok = k == "raw";
      for (const char* a : allowed) ok = ok || k == a;
      if (!ok) throw Usage("unknown option --" + k + " for " + mode);
    }
  }
};

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) throw Usage("a mode is required");
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) != 0) throw Usage("unexpected argument '" + s + "'");
    s = s.substr(2);
    auto eq = s.find('=');
    if (eq != std::string::npos) {
      a.kv[s.substr(0, eq)] = s.substr(eq + 1);
      continue;
    }
    if (i + 1 >= argc) throw Usage("--" + s + " needs a value");
    a.kv[s] = argv[++i];
  }
  return a;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// --- statistics -----------------------------------------------------------------------------

double us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Summary {
  size_t n = 0;
  double min = 0, p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto pct = [&](double p) {  // nearest rank
    size_t i = size_t(std::ceil(p / 100.0 * double(v.size())));
    return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
  };
  s.min = v.front();
  s.max = v.back();
  s.p50 = pct(50);
  s.p90 = pct(90);
  s.p99 = pct(99);
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  return s;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += c;
    }
  }
  return o;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}

bool g_raw = false;  // --raw 1: the JSON also carries every sample

std::string json_array(const std::vector<double>& v) {
  std::string o = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) o += ",";
    o += num(v[i]);
  }
  return o + "]";
}

std::string json(const Summary& s) {
  return "{\"n\":" + std::to_string(s.n) + ",\"min\":" + num(s.min) + ",\"p50\":" + num(s.p50) +
         ",\"p90\":" + num(s.p90) + ",\"p99\":" + num(s.p99) + ",\"max\":" + num(s.max) +
         ",\"mean\":" + num(s.mean) + "}";
}

void human(const char* what, const Summary& s) {
  std::fprintf(stderr, "  %-8s p50 %9.1f  p90 %9.1f  p99 %9.1f  mean %9.1f  max %9.1f us (n=%zu)\n",
               what, s.p50, s.p90, s.p99, s.mean, s.max, s.n);
}

std::string mode_name(Mode m) { return m == Mode::Exclusive ? "x" : "s"; }

// --- serial ---------------------------------------------------------------------------------

// Times `lock` and `unlock` W + N times; reports the last N.
template <typename LockFn, typename UnlockFn>
void serial_loop(long warmup, long iterations, LockFn lock, UnlockFn unlock, std::vector<double>* l,
                 std::vector<double>* u, std::vector<double>* p) {
  l->reserve(size_t(iterations));
  u->reserve(size_t(iterations));
  p->reserve(size_t(iterations));
  for (long i = 0; i < warmup + iterations; ++i) {
    auto t0 = Clock::now();
    auto h = lock(i);
    auto t1 = Clock::now();
    unlock(h, i);
    auto t2 = Clock::now();
    if (i < warmup) continue;
    l->push_back(us(t1 - t0));
    u->push_back(us(t2 - t1));
    p->push_back(us(t2 - t0));
  }
}

// `floor`: the round trip of the cheapest request the server answers (lockd: STATUS; redis:
// PING): what any lock or unlock costs at least through that channel.
void report_serial(const std::string& head_json, const std::string& title,
                   const std::vector<double>& l, const std::vector<double>& u,
                   const std::vector<double>& p, const char* floor_name,
                   const std::vector<double>& floor) {
  Summary sl = summarize(l), su = summarize(u), sp = summarize(p), sf = summarize(floor);
  std::string raw;
  if (g_raw)
    raw = ",\"samples\":{\"lock\":" + json_array(l) + ",\"unlock\":" + json_array(u) +
          ",\"pair\":" + json_array(p) + "}";
  std::printf("{%s,\"lock\":%s,\"unlock\":%s,\"pair\":%s,\"floor_op\":\"%s\",\"floor\":%s%s}\n",
              head_json.c_str(), json(sl).c_str(), json(su).c_str(), json(sp).c_str(), floor_name,
              json(sf).c_str(), raw.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", title.c_str());
  human("lock", sl);
  human("unlock", su);
  human("pair", sp);
  human(floor_name, sf);
}

// Times `op` n times (after a few untimed calls).
template <typename Op>
std::vector<double> time_op(long n, Op op) {
  std::vector<double> v;
  v.reserve(size_t(n));
  for (long i = 0; i < n + 10; ++i) {
    auto t0 = Clock::now();
    op();
    auto t1 = Clock::now();
    if (i >= 10) v.push_back(us(t1 - t0));
  }
  return v;
}

int cmd_serial(const Args& a) {
  a.only({"socket", "lock", "mode", "iterations", "warmup"});
  const std::string socket = a.str("socket"), name = a.str("lock");
  const Mode mode = a.lock_mode();
  const long n = a.num("iterations", std::nullopt, 1), w = a.num("warmup", 100);
  LockClient c(socket);
  std::vector<double> l, u, p;
  serial_loop(
      w, n, [&](long) { return c.lock(name, mode, kLockTimeout); },
      [&](HeldLock& h, long) { h.unlock(); }, &l, &u, &p);
  auto floor = time_op(std::max(50L, n / 4), [&] { (void)c.status(); });
  report_serial("\"bench\":\"serial\",\"socket\":\"" + json_escape(socket) + "\",\"lock_name\":\"" +
                    json_escape(name) + "\",\"mode\":\"" + mode_name(mode) +
                    "\",\"iterations\":" + std::to_string(n) + ",\"warmup\":" + std::to_string(w),
                "serial " + std::string(tierce::dlm::to_string(mode)) + " '" + name + "' via " +
                    socket + ", " + std::to_string(n) + " iterations:",
                l, u, p, "status", floor);
  return 0;
}

// --- cascade --------------------------------------------------------------------------------

struct StatusCounts {
  long waiting = 0, holds = 0;
  std::string counters;  // the whole counters line: unchanged == nothing moved
};

StatusCounts parse_status(const std::string& text) {
  StatusCounts s;
  std::istringstream in(text);
  std::string line;
  bool saw_holds = false;
  while (std::getline(in, line)) {
    if (line.rfind("local holds:", 0) == 0) {
      // "local holds: H, waiting/withdrawn: W, queue records: R"
      if (std::sscanf(line.c_str(), "local holds: %ld, waiting/withdrawn: %ld", &s.holds,
                      &s.waiting) == 2)
        saw_holds = true;
    } else if (line.rfind("counters:", 0) == 0) {
      s.counters = line;
    }
  }
  if (!saw_holds)
    throw Failure("cannot read 'local holds: H, waiting/withdrawn: W' in lockd's status:\n" + text);
  return s;
}

struct Cascade {
  // Shared between the main thread and the waiters. Two condition variables, and the main thread
  // is woken only by the last waiter: a waiter that finishes must not wake the others (or the
  // main thread) while the cascade still runs — on 2 cores that steals the CPU it measures.
  std::mutex mu;
  std::condition_variable start;  // waiters wait for the next round (or quit)
  std::condition_variable main;   // the main thread waits for sent == N / done == N
  long round = 0;         // waiters start round r when round >= r
  bool quit = false;
  long sent = 0;          // waiters about to call lock() this round
  long done = 0;          // waiters that were granted and released (or failed) this round
  std::vector<Clock::time_point> granted;
  std::string error;
};

int cmd_cascade(const Args& a) {
  a.only({"sockets", "lock", "mode", "waiters", "rounds", "settle-ms", "warmup", "holder"});
  const auto sockets = split(a.str("sockets"), ',');
  if (sockets.empty()) throw Usage("--sockets wants S1,S2,...");
  const std::string name = a.str("lock");
  const Mode mode = a.lock_mode();
  const long waiters = a.num("waiters", std::nullopt, 1), rounds = a.num("rounds", std::nullopt, 1);
  const long warmup = a.num("warmup", 1);
  const auto settle = std::chrono::milliseconds(a.num("settle-ms", 5));

  // Waiter i sits on socket (i + 1) mod #sockets: the first waiter is on another node than the
  // holder (S2, S3, ..., S1, S2, ...), so even a queue of one crosses nodes.
  // With --holder H (a diagnostic): the holder on H, waiter i on socket i mod #sockets.
  const std::string holder_socket = a.str("holder", "");
  auto socket_of = [&](long i) {
    return size_t(i + (holder_socket.empty() ? 1 : 0)) % sockets.size();
  };
  LockClient holder(holder_socket.empty() ? sockets[0] : holder_socket);
  std::vector<std::unique_ptr<LockClient>> status;  // one per lockd, only for status()
  for (auto& s : sockets) status.push_back(std::make_unique<LockClient>(s));
  if (!holder_socket.empty() &&
      std::find(sockets.begin(), sockets.end(), holder_socket) == sockets.end())
    status.push_back(std::make_unique<LockClient>(holder_socket));
  std::vector<std::unique_ptr<LockClient>> clients;
  for (long i = 0; i < waiters; ++i)
    clients.push_back(std::make_unique<LockClient>(sockets[socket_of(i)]));

  Cascade cs;
  cs.granted.resize(size_t(waiters));
  std::vector<std::thread> threads;
  for (long i = 0; i < waiters; ++i) {
    threads.emplace_back([&, i] {
      long my = 0;
      for (;;) {
        {
          std::unique_lock lk(cs.mu);
          cs.start.wait(lk, [&] { return cs.quit || cs.round > my; });
          if (cs.quit) return;
          ++my;
          if (++cs.sent == waiters) cs.main.notify_one();
        }
        std::string err;
        Clock::time_point t{};
        try {
          HeldLock h = clients[size_t(i)]->lock(name, mode, kLockTimeout);
          t = Clock::now();
          h.unlock();
        } catch (const std::exception& e) {
          err = "waiter " + std::to_string(i) + " (on " + sockets[socket_of(i)] +
                "): " + e.what();
        }
        cs.granted[size_t(i)] = t;  // own slot; published to the main thread by mu below
        {
          std::lock_guard lk(cs.mu);
          if (!err.empty() && cs.error.empty()) cs.error = err;
          if (++cs.done == waiters || !err.empty()) cs.main.notify_one();
        }
      }
    });
  }
  auto stop_threads = [&] {
    {
      std::lock_guard lk(cs.mu);
      cs.quit = true;
    }
    cs.start.notify_all();
    for (auto& t : threads) t.join();
  };

  // Queued = every waiter's lockd counts it as waiting and no lockd's counters move for three
  // consecutive polls (the CAS/FAA, SUCCESSOR/SHARED_REQ/SRSL_REQ messages have all landed).
  auto wait_queued = [&](std::vector<double>* queue_ms) {
    const auto start = Clock::now(), until = start + 10s;
    std::string last;
    int stable = 0;
    for (;;) {
      long w = 0;
      std::string sig;
      for (auto& s : status) {
        StatusCounts c = parse_status(s->status());
        w += c.waiting;
        sig += c.counters + "\n";
      }
      if (w >= waiters && sig == last) {
        if (++stable >= 3) break;
      } else {
        stable = 0;
      }
      last = sig;
      if (Clock::now() > until)
        throw Failure("the " + std::to_string(waiters) + " waiters did not all queue within 10 s (" +
                      std::to_string(w) + " waiting)");
      std::this_thread::sleep_for(1ms);
    }
    queue_ms->push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    std::this_thread::sleep_for(settle);
  };

  std::vector<double> last_grant, first_grant, release_call, queue_ms;
  std::vector<std::vector<double>> last_by_socket(sockets.size());
  try {
    for (long r = 0; r < warmup + rounds; ++r) {
      HeldLock h = holder.lock(name, Mode::Exclusive, kLockTimeout);
      {
        std::lock_guard lk(cs.mu);
        cs.sent = 0;
        cs.done = 0;
        ++cs.round;
      }
      cs.start.notify_all();
      {
        std::unique_lock lk(cs.mu);
        cs.main.wait(lk, [&] { return cs.sent == waiters; });
      }
      wait_queued(&queue_ms);
      {
        std::lock_guard lk(cs.mu);
        if (cs.done != 0)
          throw Failure(std::to_string(cs.done) + " waiter(s) finished while the holder held the "
                        "lock exclusively" + (cs.error.empty() ? "" : ": " + cs.error));
      }
      const auto t0 = Clock::now();
      h.unlock();
      const auto t1 = Clock::now();
      {
        std::unique_lock lk(cs.mu);
        if (!cs.main.wait_for(lk, kLockTimeout + 5s,
                              [&] { return cs.done == waiters || !cs.error.empty(); }))
          throw Failure("the cascade did not finish within " +
                        std::to_string((kLockTimeout + 5s).count()) + " s");
        if (!cs.error.empty()) throw Failure(cs.error);
        if (r < warmup) continue;
        auto [mn, mx] = std::minmax_element(cs.granted.begin(), cs.granted.end());
        last_grant.push_back(us(*mx - t0));
        first_grant.push_back(us(*mn - t0));
        release_call.push_back(us(t1 - t0));
        // The last grant among the waiters of each lockd (which node's waiters finish last).
        for (size_t k = 0; k < sockets.size(); ++k) {
          std::optional<Clock::time_point> last;
          for (long i = 0; i < waiters; ++i)
            if (socket_of(i) == k) last = std::max(last.value_or(cs.granted[size_t(i)]), cs.granted[size_t(i)]);
          if (last) last_by_socket[k].push_back(us(*last - t0));
        }
      }
    }
  } catch (...) {
    stop_threads();
    throw;
  }
  stop_threads();

  Summary sl = summarize(last_grant), sf = summarize(first_grant), sr = summarize(release_call),
          sq = summarize(queue_ms);
  std::printf(
      "{\"bench\":\"cascade\",\"sockets\":%zu,\"lock_name\":\"%s\",\"mode\":\"%s\",\"waiters\":%ld,"
      "\"rounds\":%ld,\"cascade\":%s,\"first_grant\":%s,\"holder_unlock\":%s,\"queue_wait_ms\":%s%s}\n",
      sockets.size(), json_escape(name).c_str(), mode_name(mode).c_str(), waiters, rounds,
      json(sl).c_str(), json(sf).c_str(), json(sr).c_str(), json(sq).c_str(),
      g_raw ? (",\"samples\":{\"cascade\":" + json_array(last_grant) + ",\"first_grant\":" +
               json_array(first_grant) + "}")
                  .c_str()
            : "");
  std::fflush(stdout);
  std::string by_socket = "[";
  for (size_t k = 0; k < sockets.size(); ++k) {
    if (k) by_socket += ",";
    by_socket += last_by_socket[k].empty() ? "null" : json(summarize(last_by_socket[k]));
  }
  by_socket += "]";
  std::printf(
      "{\"bench\":\"cascade-by-socket\",\"mode\":\"%s\",\"waiters\":%ld,\"last_grant_by_socket\":%s}\n",
      mode_name(mode).c_str(), waiters, by_socket.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "cascade %s '%s', %ld waiters over %zu lockds, %ld rounds:\n",
               std::string(tierce::dlm::to_string(mode)).c_str(), name.c_str(), waiters,
               sockets.size(), rounds);
  human("cascade", sl);
  human("first", sf);
  human("release", sr);
  for (size_t k = 0; k < sockets.size(); ++k)
    if (!last_by_socket[k].empty())
      human(("last@S" + std::to_string(k + 1)).c_str(), summarize(last_by_socket[k]));
  return 0;
}

// --- redis ----------------------------------------------------------------------------------

struct Redis {
  redisContext* c = nullptr;
  // > 0: after sending, poll the socket this long before blocking in read (what LockClient does
  // by default, 50 us): takes the client's own wake-up out of the comparison. redis-server
  // still sleeps in epoll_wait.
  std::chrono::microseconds spin{0};
  Redis(const std::string& host, int port) {
    timeval tv{5, 0};
    c = redisConnectWithTimeout(host.c_str(), port, tv);
    if (!c || c->err)
      throw Failure("cannot connect to redis at " + host + ":" + std::to_string(port) + ": " +
                    (c ? c->errstr : "out of memory") + " (is redis-server running?)");
    redisSetTimeout(c, tv);
  }
  ~Redis() {
    if (c) redisFree(c);
  }
  struct Reply {
    explicit Reply(redisReply* x) : r(x) {}
    Reply(const Reply&) = delete;
    Reply& operator=(const Reply&) = delete;
    redisReply* r;
    ~Reply() {
      if (r) freeReplyObject(r);
    }
  };
  redisReply* spin_command(int argc, const char** argv, const size_t* lens) {
    if (redisAppendCommandArgv(c, argc, argv, lens) != REDIS_OK) return nullptr;
    int done = 0;
    while (!done)
      if (redisBufferWrite(c, &done) != REDIS_OK) return nullptr;
    const auto until = Clock::now() + spin;
    char b;
    while (::recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0 &&
           (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) && Clock::now() < until) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    void* r = nullptr;
    if (redisGetReply(c, &r) != REDIS_OK) return nullptr;
    return static_cast<redisReply*>(r);
  }
  Reply command(const char* what, int argc, const char** argv, const size_t* lens) {
    auto* r = spin.count() > 0 ? spin_command(argc, argv, lens)
                               : static_cast<redisReply*>(redisCommandArgv(c, argc, argv, lens));
    if (!r) throw Failure(std::string(what) + ": redis connection error: " + c->errstr);
    if (r->type == REDIS_REPLY_ERROR) {
      std::string e(r->str, r->len);
      freeReplyObject(r);
      throw Failure(std::string(what) + ": redis error: " + e);
    }
    return Reply(r);
  }
};

constexpr const char* kUnlockLua =
    "if redis.call(\"get\",KEYS[1])==ARGV[1] then return redis.call(\"del\",KEYS[1]) "
    "else return 0 end";

int cmd_redis(const Args& a) {
  a.only({"host", "port", "iterations", "warmup", "key", "spin-us"});
  const std::string host = a.str("host", "127.0.0.1"), key = a.str("key", "tierce-bench-lock");
  const long port = a.num("port", std::nullopt, 1), n = a.num("iterations", std::nullopt, 1),
             w = a.num("warmup", 100), spin_us = a.num("spin-us", 0);
  Redis r(host, int(port));
  r.spin = std::chrono::microseconds(spin_us);
  std::mt19937_64 rng(std::random_device{}());
  const std::string prefix = std::to_string(rng());
  std::vector<double> l, u, p;
  serial_loop(
      w, n,
      [&](long i) {
        std::string token = prefix + "-" + std::to_string(i);
        const char* argv[] = {"SET", key.c_str(), token.c_str(), "NX", "PX", "30000"};
        size_t lens[] = {3, key.size(), token.size(), 2, 2, 5};
        auto rep = r.command("SET NX PX", 6, argv, lens);
        if (rep.r->type != REDIS_REPLY_STATUS || std::string(rep.r->str, rep.r->len) != "OK")
          throw Failure("SET " + key + " NX PX 30000: not granted (the key is held by someone "
                        "else; a stale key from another run expires within 30 s)");
        return token;
      },
      [&](std::string& token, long) {
        const char* argv[] = {"EVAL", kUnlockLua, "1", key.c_str(), token.c_str()};
        size_t lens[] = {4, std::strlen(kUnlockLua), 1, key.size(), token.size()};
        auto rep = r.command("EVAL compare-and-delete", 5, argv, lens);
        if (rep.r->type != REDIS_REPLY_INTEGER || rep.r->integer != 1)
          throw Failure("EVAL compare-and-delete of " + key + " did not delete it (lost the key?)");
      },
      &l, &u, &p);
  auto floor = time_op(std::max(50L, n / 4), [&] {
    const char* argv[] = {"PING"};
    size_t lens[] = {4};
    (void)r.command("PING", 1, argv, lens);
  });
  report_serial("\"bench\":\"redis-serial\",\"host\":\"" + json_escape(host) +
                    "\",\"port\":" + std::to_string(port) + ",\"spin_us\":" +
                    std::to_string(spin_us) + ",\"mode\":\"x\",\"iterations\":" +
                    std::to_string(n) + ",\"warmup\":" + std::to_string(w),
                "redis SET NX PX / EVAL compare-and-delete on " + host + ":" +
                    std::to_string(port) + ", " + std::to_string(n) + " iterations:",
                l, u, p, "ping", floor);
  return 0;
}

// --- ready --------------------------------------------------------------------------------

// Waits until every lockd answers on its socket and sees all `members` up ("members: 1(up) ...").
int cmd_ready(const Args& a) {
  a.only({"sockets", "members", "timeout-ms"});
  const auto sockets = split(a.str("sockets"), ',');
  const long members = a.num("members", long(sockets.size()), 1);
  const auto until = Clock::now() + std::chrono::milliseconds(a.num("timeout-ms", 10000));
  std::string last_problem;
  std::vector<std::unique_ptr<LockClient>> clients(sockets.size());
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < sockets.size() && all; ++i) {
      try {
        if (!clients[i]) clients[i] = std::make_unique<LockClient>(sockets[i], 200ms);
        std::string st = clients[i]->status();
        long up = 0, down = 0;
        for (size_t p = 0; (p = st.find("(up)", p)) != std::string::npos; ++p) ++up;
        for (size_t p = 0; (p = st.find("(DOWN)", p)) != std::string::npos; ++p) ++down;
        if (up != members || down != 0) {
          all = false;
          last_problem = sockets[i] + " sees " + std::to_string(up) + " of " +
                         std::to_string(members) + " members up";
        }
      } catch (const std::exception& e) {
        clients[i].reset();
        all = false;
        last_problem = e.what();
      }
    }
    if (all) {
      std::printf("{\"bench\":\"ready\",\"sockets\":%zu}\n", sockets.size());
      return 0;
    }
    if (Clock::now() > until) throw Failure("the lockds are not all up: " + last_problem);
    std::this_thread::sleep_for(20ms);
  }
}

// --- lockname -------------------------------------------------------------------------------

int cmd_lockname(const Args& a) {
  a.only({"topology", "node", "prefix"});
  auto topo = tierce::cluster::Topology::load(a.str("topology"));
  const std::string node = a.str("node"), prefix = a.str("prefix", "bench");
  (void)topo.rank_of(node);  // throws when not a member
  for (long i = 0; i < 1000000; ++i) {
    std::string s = prefix + "-" + std::to_string(i);
    if (topo.lock_home_of(tierce::cluster::hash64(s)).name == node) {
      std::printf("%s\n", s.c_str());
      return 0;
    }
  }
  throw Failure("no name " + prefix + "-N homed at " + node + " among the first million");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    usage(stdout);
    return 0;
  }
  try {
    Args a = parse(argc, argv);
    g_raw = a.num("raw", 0) != 0;
    if (a.mode == "serial") return cmd_serial(a);
    if (a.mode == "cascade") return cmd_cascade(a);
    if (a.mode == "redis-serial") return cmd_redis(a);
    if (a.mode == "lockname") return cmd_lockname(a);
    if (a.mode == "ready") return cmd_ready(a);
    throw Usage("unknown mode '" + a.mode + "'");
  } catch (const Usage& e) {
    std::fprintf(stderr, "%s: %s; see %s --help\n", kProgram, e.what(), kProgram);
    return 2;
  } catch (const tierce::cluster::TopologyError& e) {
    std::fprintf(stderr, "%s: %s\n", kProgram, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kProgram, e.what());
    return 1;
  }
}
