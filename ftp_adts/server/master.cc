// ftp_adts/server/master.cc
//
// Log ids: FTPD00xx (master and workers).
#include "ftp_adts/server/master.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "base/metrics.h"
#include "base/net.h"
#include "ftp_adts/server/data.h"
#include "ftp_adts/server/monitor.h"
#include "ftp_adts/server/session.h"

namespace tierce::ftpd {

namespace {

using fabric::LogLevel;

constexpr char kBusy = 'B', kIdle = 'I', kQuit = 'Q', kAccept = 'A', kRefuse = 'R', kStats = 'S',
               kOld = 'O';
constexpr const char* kTooMany = "421 Too many sessions, try later\r\n";
constexpr const char* kTooManyFromIp = "421 Too many connections from your address\r\n";
constexpr const char* kReloading = "421 The server reloaded its configuration: connect again\r\n";
constexpr size_t kMaxMessage = 64;  // 'B' + a numeric IPv6 address fits
static_assert(1 + 7 * 8 <= kMaxMessage, "the 'S' message must fit");

struct Worker {
  enum class State { Idle, Busy, Retiring } state = State::Idle;
  int ctl = -1;      // master's end of the pair; -1 once the worker closed it
  std::string peer;  // the client's host while it serves a session ("" otherwise)
  bool asked = false;  // sent its 'B' (privilege separation: its only message; see message())
  bool reported = false;  // sent its 'S' for the session it serves (taken once per 'B')
  uint64_t generation = 0;  // Master::generation_ when it was forked (its configuration)
};

// After the worker told the master about a connection ('B'): waits for 'A', 'R' or 'O' and
// returns it. A 'Q' that crossed the 'B' is remembered in *quit. EOF: the master is gone, the
// worker exits.
char ask_master(int ctl, bool* quit, const fabric::LogSink& log) {
  for (;;) {
    pollfd p{ctl, POLLIN, 0};
    int n = ::poll(&p, 1, 10000);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // The master answers at once unless something is badly wrong: serve rather than hang.
      if (log) log(LogLevel::Warn, "FTPD0024 no answer from the master about a connection; served");
      return kAccept;
    }
    char c = 0;
    ssize_t r = ::read(ctl, &c, 1);
    if (r <= 0) ::_exit(0);
    if (c == kQuit) *quit = true;
    if (c == kAccept || c == kRefuse || c == kOld) return c;
  }
}

[[noreturn]] void worker_main(const MasterEnv& env, int listen_fd, int ctl, pid_t master) {
  // Die with the master (kill -9 of the master must not leave orphans serving the port).
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != master) ::_exit(0);
  sigset_t all;
  sigemptyset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);  // the master's blocked set is for its signalfd
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGHUP, SIG_IGN);
  const bool privsep = env.privsep && env.privsep->enabled;
  // This worker's own session ticket keys: a ticket issued by another worker (another client's
  // session) cannot be decrypted here, nor this worker's there.
  if (env.tls) {
    try {
      env.tls->new_ticket_keys();
    } catch (const std::exception& e) {
      if (env.log) env.log(LogLevel::Error, std::string("FTPD0406 worker: ") + e.what());
      ::_exit(1);
    }
  }
  SessionEnv senv{env.cfg, env.log, env.xferlog, env.tls, {}, {}};
  unsigned served = 0;
  bool quit = false;
  for (;;) {
    if (quit) ::_exit(0);
    pollfd p[2] = {{listen_fd, POLLIN, 0}, {ctl, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      ::_exit(1);
    }
    if (p[1].revents) {
      char c = 0;
      ssize_t n = ::read(ctl, &c, 1);
      if (n <= 0 || c == kQuit) ::_exit(0);
    }
    if (!(p[0].revents & POLLIN)) continue;
    // Several idle workers wake for one connection; the losers get EAGAIN (the socket is
    // non-blocking) and go back to poll.
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::string busy(1, kBusy);
    busy += SockAddr::peer_of(fd).host().substr(0, kMaxMessage - 1);
    if (::write(ctl, busy.data(), busy.size()) != ssize_t(busy.size())) ::_exit(0);
    const char answer = ask_master(ctl, &quit, env.log);
    if (answer == kOld) {
      // This worker has the configuration of before a reload: the client connects again, to a
      // worker forked with the new one. Nothing was read from it.
      (void)!::send(fd, kReloading, std::strlen(kReloading), MSG_NOSIGNAL);
      ::shutdown(fd, SHUT_WR);
      ::close(fd);
      ::_exit(0);
    }
    if (answer == kRefuse) {
      // Nothing was read from this client: the worker may accept the next connection.
      (void)!::send(fd, kTooManyFromIp, std::strlen(kTooManyFromIp), MSG_NOSIGNAL);
      ::shutdown(fd, SHUT_WR);
      ::close(fd);
      if (privsep) ::_exit(0);  // its one 'B' is spent (Master::message)
      if (::write(ctl, &kIdle, 1) != 1) ::_exit(0);
      continue;
    }
    // Privilege separation: this process serves this one session and then exits, so it gives up
    // the listening socket before the first client byte is read. Code running in the session
    // (any login, anonymous included) can then not accept() other clients' connections.
    if (privsep) {
      ::close(listen_fd);
      listen_fd = -1;
    }
    // Privilege separation: this process becomes the session's monitor (monitor.h); the client
    // is served by an unprivileged pre-login process, then by one running as the user's account.
    // The Config object is not const (main's), only our view of it: this process's copy (fork).
    const SessionStats stats =
        privsep ? serve_separated({senv, const_cast<Config*>(env.cfg), env.privsep, ctl}, fd)
                : serve_session(senv, fd);
    ++served;
    const std::string report = encode_session_stats(stats);
    if (::write(ctl, report.data(), report.size()) != ssize_t(report.size())) ::_exit(0);
    // Privilege separation: one session per process, logged in or not (the pre-login code
    // handled what the client sent; a fresh worker starts clean).
    if (privsep) ::_exit(0);
    if (env.cfg->worker_sessions && served >= env.cfg->worker_sessions) ::_exit(0);
    if (::write(ctl, &kIdle, 1) != 1) ::_exit(0);
  }
}

class Master {
 public:
  Master(const MasterEnv& env, int listen_fd, int sigfd)
      : env_(env), cfg_(*env.cfg), listen_fd_(listen_fd), sigfd_(sigfd) {}
  int run();

 private:
  void log(LogLevel l, const std::string& s) {
    if (env_.log) env_.log(l, s);
  }
  void spawn();
  void maintain();
  void reap();
  void drain(pid_t pid, Worker& w);
  void turn_away();
  void message(pid_t pid, Worker& w, std::string_view m);
  void reload();
  void stop();
  size_t count(Worker::State s) const {
    size_t n = 0;
    for (auto& [pid, w] : workers_) n += w.state == s;
    return n;
  }

  // metrics_file (docs/ftp.md "Metrics"): written from this loop, not from a thread (the master
  // forks; a thread holding a lock at fork would leave it held in the worker).
  void write_metrics();
  void metrics_changed(const std::string& old_file);  // after a reload
  void remove_metrics();
  int poll_timeout_ms(int other) const;

  const MasterEnv& env_;
  const Config& cfg_;
  int listen_fd_;
  int sigfd_;
  std::map<pid_t, Worker> workers_;
  uint64_t generation_ = 0;  // configurations applied (reloads done); workers carry theirs
  bool stopping_ = false;
  const bool privsep_ = env_.privsep && env_.privsep->enabled;
  unsigned spawn_failures_ = 0;
  MasterCounters n_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point next_metrics_{};
  bool metrics_failing_ = false;
};

void Master::write_metrics() {
  if (cfg_.metrics_file.empty()) return;
  next_metrics_ = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(cfg_.metrics_interval_ms);
  MasterGauges g;
  for (auto& [pid, w] : workers_) {
    g.sessions += !w.peer.empty();
    g.idle += w.state == Worker::State::Idle;
    g.busy += w.state == Worker::State::Busy;
    g.retiring += w.state == Worker::State::Retiring;
  }
  const double up =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  try {
    base::write_textfile(cfg_.metrics_file, master_metrics_text(env_, n_, g, up));
    if (metrics_failing_)
      log(LogLevel::Info, "FTPD0050 " + cfg_.metrics_file + " written again");
    metrics_failing_ = false;
  } catch (const std::exception& e) {
    if (!metrics_failing_)
      log(LogLevel::Warn, std::string("FTPD0050 cannot write the metrics file: ") + e.what() +
                              "; retried every metrics_interval_ms (logged again when it works)");
    metrics_failing_ = true;
  }
}

void Master::remove_metrics() {
  if (!cfg_.metrics_file.empty()) ::unlink(cfg_.metrics_file.c_str());
}

void Master::metrics_changed(const std::string& old_file) {
  if (old_file != cfg_.metrics_file && !old_file.empty()) ::unlink(old_file.c_str());
  metrics_failing_ = false;
  if (cfg_.metrics_file.empty()) return;
  log(LogLevel::Info, "FTPD0051 metrics written to " + cfg_.metrics_file + " every " +
                          std::to_string(cfg_.metrics_interval_ms) + " ms");
  write_metrics();
}

int Master::poll_timeout_ms(int other) const {
  if (cfg_.metrics_file.empty()) return other;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  next_metrics_ - std::chrono::steady_clock::now())
                  .count();
  int m = int(std::max<int64_t>(0, std::min<int64_t>(left, 3600000)));
  return other < 0 ? m : std::min(other, m);
}

void Master::spawn() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    log(LogLevel::Error, std::string("FTPD0006 socketpair: ") + std::strerror(errno));
    ++spawn_failures_;
    ++n_.fork_failures;
    return;
  }
  pid_t master = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    log(LogLevel::Error, std::string("FTPD0006 fork: ") + std::strerror(errno));
    ::close(sv[0]);
    ::close(sv[1]);
    ++spawn_failures_;
    ++n_.fork_failures;
    return;
  }
  if (pid == 0) {
    // The child keeps only what a worker needs: no other worker's pipe, no signalfd.
    for (auto& [p, w] : workers_)
      if (w.ctl >= 0) ::close(w.ctl);
    ::close(sigfd_);
    ::close(sv[0]);
    worker_main(env_, listen_fd_, sv[1], master);
  }
  ::close(sv[1]);
  Worker w;
  w.ctl = sv[0];
  w.generation = generation_;
  workers_[pid] = w;
  spawn_failures_ = 0;
  ++n_.workers_started;
  log(LogLevel::Debug, "FTPD0002 worker " + std::to_string(pid) + " started");
}

void Master::maintain() {
  if (stopping_) return;
  size_t idle = count(Worker::State::Idle);
  // Keep `workers` idle ones, but never more live workers than max_sessions (so never more than
  // max_sessions busy). A failing fork is retried on the next event, not in a tight loop.
  while (idle < cfg_.workers && workers_.size() < cfg_.max_sessions && spawn_failures_ < 3) {
    size_t before = workers_.size();
    spawn();
    if (workers_.size() == before) break;
    ++idle;
  }
  for (auto& [pid, w] : workers_) {
    if (idle <= cfg_.workers) break;
    if (w.state == Worker::State::Idle && w.ctl >= 0) {
      (void)!::write(w.ctl, &kQuit, 1);
      w.state = Worker::State::Retiring;
      --idle;
    }
  }
}

void Master::reap() {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    auto it = workers_.find(pid);
    if (it == workers_.end()) continue;
    bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (clean || stopping_) {
      log(LogLevel::Debug, "FTPD0003 worker " + std::to_string(pid) + " exited");
    } else {
      ++n_.workers_died;
      std::string how = WIFSIGNALED(status)
                            ? "killed by signal " + std::to_string(WTERMSIG(status))
                            : "exit status " + std::to_string(WEXITSTATUS(status));
      log(LogLevel::Warn, "FTPD0004 worker " + std::to_string(pid) + " died (" + how +
                              ") while " +
                              (it->second.state == Worker::State::Busy ? "serving a session"
                                                                       : "idle") +
                              "; replacing it");
    }
    drain(pid, it->second);
    if (it->second.ctl >= 0) ::close(it->second.ctl);
    workers_.erase(it);
  }
}

// What a worker wrote before it exited and the master has not read yet: a worker's last message
// (its 'S') is in the channel before its SIGCHLD, but one SIGCHLD (of another worker) can make
// reap() collect this one too before the poll loop read it — then its session went uncounted
// (tests/metrics ftpd: 1 run in ~10). Read it all now, without blocking.
void Master::drain(pid_t pid, Worker& w) {
  if (w.ctl < 0) return;
  char buf[kMaxMessage];
  for (int i = 0; i < 16; ++i) {  // a worker has at most a few messages in flight
    ssize_t r = ::recv(w.ctl, buf, sizeof buf, MSG_DONTWAIT);
    if (r <= 0) return;
    message(pid, w, std::string_view(buf, size_t(r)));
  }
}

// One message of a worker (master.h). A worker may lie after its privileges were dropped: with
// privilege separation a worker serves one connection, so everything after its first 'B' is
// ignored (an 'I' would make it count as idle, or clear its address from the per-address count);
// and the answer is sent without blocking, so a worker that does not read cannot stall the master.
void Master::message(pid_t pid, Worker& w, std::string_view m) {
  if (m.empty()) return;
  if (m[0] == kStats) {
    SessionStats s;
    if (!w.asked || w.reported || !decode_session_stats(m, &s)) return;
    w.reported = true;
    n_.logins_ok += s.logins_ok;
    n_.logins_failed += s.logins_failed;
    n_.files_out += s.files_out;
    n_.files_in += s.files_in;
    n_.transfers_failed += s.transfers_failed;
    n_.bytes_out += s.bytes_out;
    n_.bytes_in += s.bytes_in;
    return;
  }
  if (privsep_ && w.asked) return;
  if (m[0] == kIdle) {
    w.peer.clear();
    if (w.state != Worker::State::Retiring) w.state = Worker::State::Idle;
    return;
  }
  if (m[0] != kBusy) return;
  w.asked = true;
  w.reported = false;
  if (w.generation != generation_) {
    // Forked before a reload, and past its wait when the 'Q' came: the master reads messages in
    // order, one thread, so a 'B' read after reload() is a connection the old configuration must
    // not serve (a removed user could still log in). The worker turns it away and quits.
    ++n_.refused_reload;
    w.peer.clear();
    log(LogLevel::Info, "FTPD0025 a connection from " + std::string(m.substr(1)) +
                            " reached a worker of the configuration before the reload: turned "
                            "away with 421 (the client connects again)");
    if (w.ctl >= 0) (void)!::send(w.ctl, &kOld, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    return;
  }
  if (w.state != Worker::State::Retiring) w.state = Worker::State::Busy;
  // Counted by address group: an IPv6 client by its /64 (base::address_group).
  std::string host = base::address_group(m.substr(1));
  size_t same = 0;
  for (auto& [p, o] : workers_) same += p != pid && !o.peer.empty() && o.peer == host;
  char answer = kAccept;
  if (cfg_.max_sessions_per_ip && same >= cfg_.max_sessions_per_ip) {
    answer = kRefuse;
    ++n_.refused_per_ip;
    w.peer.clear();
    log(LogLevel::Warn, "FTPD0022 " + host + " has " + std::to_string(same) +
                            " sessions already (max_sessions_per_ip " +
                            std::to_string(cfg_.max_sessions_per_ip) +
                            "): connection turned away with 421");
  } else {
    w.peer = host;
    ++n_.sessions;
  }
  if (w.ctl >= 0) (void)!::send(w.ctl, &answer, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

// SIGHUP. The workers alive now were forked with the old configuration (their own copy of it, of
// the TLS context, of the accounts): every one is told to quit ('Q') and counted as retiring, so
// maintain() forks fresh ones with the new configuration. An idle worker quits at once; a busy one
// finishes its session with the old configuration, then reads the 'Q' and quits.
void Master::reload() {
  const std::string old_metrics = cfg_.metrics_file;
  const unsigned old_interval = cfg_.metrics_interval_ms;
  const bool done = env_.reload && env_.reload();
  if (done && (old_metrics != cfg_.metrics_file || old_interval != cfg_.metrics_interval_ms))
    metrics_changed(old_metrics);
  else
    write_metrics();  // the reload counters moved
  if (!done) return;
  ++generation_;  // before any further message is read: see message()
  size_t told = 0;
  for (auto& [pid, w] : workers_) {
    if (w.state == Worker::State::Retiring) continue;
    w.state = Worker::State::Retiring;
    if (w.ctl >= 0) (void)!::send(w.ctl, &kQuit, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    ++told;
  }
  log(LogLevel::Info, "FTPD0016 " + std::to_string(told) +
                          " worker(s) retired: new sessions are served with the new "
                          "configuration, sessions in progress finish with the old one");
}

void Master::turn_away() {
  for (;;) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    // Best effort: a fresh socket's send buffer always takes these few bytes.
    (void)!::send(fd, kTooMany, std::strlen(kTooMany), MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
    ++n_.refused_max_sessions;
    log(LogLevel::Warn, "FTPD0005 too many sessions (" + std::to_string(cfg_.max_sessions) +
                            " busy): connection turned away with 421");
  }
}

void Master::stop() {
  stopping_ = true;
  for (auto& [pid, w] : workers_) ::kill(pid, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!workers_.empty() && std::chrono::steady_clock::now() < deadline) {
    reap();
    if (workers_.empty()) break;
    pollfd p{sigfd_, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      signalfd_siginfo si;
      (void)!::read(sigfd_, &si, sizeof si);
    }
  }
  for (auto& [pid, w] : workers_) ::kill(pid, SIGKILL);
  while (!workers_.empty()) {
    int status;
    pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) break;
    auto it = workers_.find(pid);
    if (it != workers_.end()) {
      if (it->second.ctl >= 0) ::close(it->second.ctl);
      workers_.erase(it);
    }
  }
}

int Master::run() {
  maintain();
  metrics_changed("");
  std::vector<pollfd> fds;
  std::vector<pid_t> owners;
  for (;;) {
    fds.clear();
    owners.clear();
    fds.push_back({sigfd_, POLLIN, 0});
    owners.push_back(0);
    for (auto& [pid, w] : workers_)
      if (w.ctl >= 0) {
        fds.push_back({w.ctl, POLLIN, 0});
        owners.push_back(pid);
      }
    // Workers told to quit while idle (a reload, a surplus) are about to exit and be replaced:
    // until they are reaped the connections wait in the backlog rather than being turned away.
    size_t quitting = 0;
    for (auto& [pid, w] : workers_)
      quitting += w.state == Worker::State::Retiring && w.peer.empty();
    bool full = count(Worker::State::Idle) == 0 && workers_.size() >= cfg_.max_sessions &&
                quitting == 0;
    if (full) {
      fds.push_back({listen_fd_, POLLIN, 0});
      owners.push_back(-1);
    }
    // A failed fork is retried after a pause rather than never.
    int timeout = poll_timeout_ms(spawn_failures_ ? 1000 : -1);
    int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      log(LogLevel::Error, std::string("FTPD0017 poll: ") + std::strerror(errno));
      stop();
      remove_metrics();
      return 1;
    }
    if (n == 0) spawn_failures_ = 0;
    // Worker messages first, so a worker that just went idle is counted before the master
    // considers turning a connection away.
    for (size_t i = 1; i < fds.size(); ++i) {
      if (!fds[i].revents || owners[i] <= 0) continue;
      auto it = workers_.find(owners[i]);
      if (it == workers_.end()) continue;
      char buf[kMaxMessage];
      ssize_t r = ::read(it->second.ctl, buf, sizeof buf);
      if (r <= 0) {
        ::close(it->second.ctl);
        it->second.ctl = -1;  // dying; reaped on SIGCHLD
        it->second.peer.clear();
        if (it->second.state == Worker::State::Idle) it->second.state = Worker::State::Retiring;
        continue;
      }
      message(pid_t(owners[i]), it->second, std::string_view(buf, size_t(r)));
    }
    if (fds[0].revents) {
      signalfd_siginfo si;
      while (::read(sigfd_, &si, sizeof si) == ssize_t(sizeof si)) {
        if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
          log(LogLevel::Info, std::string("FTPD0008 ") + strsignal(int(si.ssi_signo)) +
                                  ": stopping " + std::to_string(workers_.size()) + " workers");
          ::close(listen_fd_);
          stop();
          remove_metrics();
          return 0;
        }
        if (si.ssi_signo == SIGCHLD) reap();
        if (si.ssi_signo == SIGHUP) reload();
      }
    }
    if (full && fds.back().revents) turn_away();
    reap();
    maintain();
    if (!cfg_.metrics_file.empty() && std::chrono::steady_clock::now() >= next_metrics_)
      write_metrics();
  }
}

}  // namespace

std::string master_metrics_text(const MasterEnv& env, const MasterCounters& c,
                                const MasterGauges& g, double uptime_s) {
  base::Metrics m;
  const bool privsep = env.privsep && env.privsep->enabled;
  m.gauge("tierce_ftpd_info", "Always 1; the labels say which tierce-ftpd this is.", uint64_t(1),
          {{"version", env.version}, {"listen", env.listen},
           {"privsep", privsep ? "on" : "off"}});
  m.gauge("tierce_ftpd_uptime_seconds", "Seconds since the master started.", uptime_s);
  m.gauge("tierce_ftpd_sessions_active", "Sessions being served now.", uint64_t(g.sessions));
  m.gauge("tierce_ftpd_max_sessions", "The max_sessions setting.",
          uint64_t(env.cfg->max_sessions));
  m.counter("tierce_ftpd_sessions_total", "Connections accepted and served by a worker.",
            c.sessions);
  m.counter("tierce_ftpd_sessions_refused_total", "Connections turned away with 421, by limit.",
            c.refused_max_sessions, {{"limit", "max_sessions"}});
  m.counter("tierce_ftpd_sessions_refused_total", "Connections turned away with 421, by limit.",
            c.refused_per_ip, {{"limit", "max_sessions_per_ip"}});
  m.counter("tierce_ftpd_sessions_refused_total", "Connections turned away with 421, by limit.",
            c.refused_reload, {{"limit", "reload"}});
  for (auto [state, v] : {std::pair<const char*, size_t>{"idle", g.idle}, {"busy", g.busy},
                          {"retiring", g.retiring}})
    m.gauge("tierce_ftpd_workers", "Worker processes, by state.", uint64_t(v),
            {{"state", state}});
  m.counter("tierce_ftpd_logins_total", "Logins, by result (counted when the session ends).",
            c.logins_ok, {{"result", "ok"}});
  m.counter("tierce_ftpd_logins_total", "Logins, by result (counted when the session ends).",
            c.logins_failed, {{"result", "failed"}});
  m.counter("tierce_ftpd_transfers_total",
            "Transfers, by direction and result (counted when the session ends).", c.files_out,
            {{"direction", "out"}, {"result", "ok"}});
  m.counter("tierce_ftpd_transfers_total",
            "Transfers, by direction and result (counted when the session ends).", c.files_in,
            {{"direction", "in"}, {"result", "ok"}});
  m.counter("tierce_ftpd_transfers_failed_total",
            "Transfers that failed, either direction (counted when the session ends).",
            c.transfers_failed);
  m.counter("tierce_ftpd_bytes_total",
            "Data bytes moved, by direction, failed transfers included (counted when the "
            "session ends).",
            c.bytes_out, {{"direction", "out"}});
  m.counter("tierce_ftpd_bytes_total",
            "Data bytes moved, by direction, failed transfers included (counted when the "
            "session ends).",
            c.bytes_in, {{"direction", "in"}});
  m.counter("tierce_ftpd_workers_started_total", "Worker processes forked.", c.workers_started);
  m.counter("tierce_ftpd_workers_died_total",
            "Workers that died (a signal or a non-zero exit status; FTPD0004).", c.workers_died);
  m.counter("tierce_ftpd_fork_failures_total", "Workers that could not be forked (FTPD0006).",
            c.fork_failures);
  base::ReloadCounters r;
  if (env.reload_counters) r = env.reload_counters();
  m.counter("tierce_ftpd_reloads_total", "Configuration reloads applied (SIGHUP).", r.reloads);
  m.counter("tierce_ftpd_failed_reloads_total",
            "Configuration reloads refused (the running configuration kept).", r.failed);
  return m.text();
}

std::string encode_session_stats(const SessionStats& s) {
  std::string m(1, kStats);
  for (uint64_t v : {s.logins_ok, s.logins_failed, s.files_out, s.files_in, s.transfers_failed,
                     s.bytes_out, s.bytes_in})
    for (int i = 0; i < 8; ++i) m += char(uint8_t(v >> (8 * i)));
  return m;
}

bool decode_session_stats(std::string_view m, SessionStats* out) {
  if (m.size() != 1 + 7 * 8 || m[0] != kStats) return false;
  uint64_t v[7];
  for (int k = 0; k < 7; ++k) {
    v[k] = 0;
    for (int i = 7; i >= 0; --i) v[k] = (v[k] << 8) | uint8_t(m[1 + 8 * k + i]);
  }
  *out = {v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
  return true;
}

int run_master(const MasterEnv& env, int listen_fd, int sigfd) {
  Master m(env, listen_fd, sigfd);
  return m.run();
}

}  // namespace tierce::ftpd
