// ftp_adts/server/monitor.cc — the monitor, the pre-login process and the session process of one
// session under privilege separation (monitor.h).
//
// Log ids: FTPD02xx (logins).
#include "ftp_adts/server/monitor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "ftp_adts/server/master.h"
#include "ftp_adts/server/sandbox.h"

namespace tierce::ftpd {

namespace {

using fabric::LogLevel;
using Clock = std::chrono::steady_clock;

constexpr char kLogin = 'L', kOk = 'K', kFailed = 'F', kTooMany = 'X';
constexpr unsigned kFlagTls = 1, kFlagPbsz = 2, kFlagProt = 4;
constexpr size_t kMaxLoginMessage = 1 + 1 + 1 + 16 + 2 + kMaxLoginField + 2 + kMaxLoginField;

void put_field(std::string* out, const std::string& f) {
  out->push_back(char(f.size() & 0xff));
  out->push_back(char(f.size() >> 8));
  out->append(f);
}

bool get_field(std::string_view* in, std::string* f) {
  if (in->size() < 2) return false;
  const size_t n = size_t(uint8_t((*in)[0])) | size_t(uint8_t((*in)[1])) << 8;
  if (n > kMaxLoginField || in->size() < 2 + n) return false;
  f->assign(in->data() + 2, n);
  in->remove_prefix(2 + n);
  return true;
}

// A refusal before the session could start (the pre-login process could not be confined):
// the client hears why in one line, nothing of it was read.
void refuse(int fd, const char* line) { (void)!::send(fd, line, std::strlen(line), MSG_NOSIGNAL); }

// Reaps `pid`; an end by a signal (a crash, or a kill) is logged: the session's client saw its
// connection cut.
void wait_for(const MonitorEnv& e, pid_t pid, const char* what) {
  if (pid <= 0) return;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return;
  }
  if (WIFSIGNALED(status) && e.session.log)
    e.session.log(LogLevel::Warn, std::string("FTPD0210 the ") + what + " process " +
                                      std::to_string(pid) + " died (signal " +
                                      std::to_string(WTERMSIG(status)) + ")");
}

// The session's account, for good (privsep.h), and this process's copy of the user table
// wiped: no user's name, root or hash is left for the session's account to find.
base::Status become_account(const MonitorEnv& e, const std::string& user, bool anonymous) {
  const Account a = e.plan->account_for(user, anonymous);
  if (base::Status dropped = drop_privileges(a); !dropped.ok()) return dropped;
  wipe_user_table(e.cfg);
  e.plan->by_user.clear();
  if (e.session.log)
    e.session.log(LogLevel::Debug, "FTPD0023 session of " + user + " runs as " + a.name +
                                       " (uid " + std::to_string(a.uid) + ", gid " +
                                       std::to_string(a.gid) + ")");
  return {};
}

// The pre-login process (monitor.h): unprivileged, sandboxed, it serves the client until the
// monitor accepts a login, then relays. Never returns.
[[noreturn]] void prelogin_main(const MonitorEnv& e, int fd, int mon, int relay) {
  wipe_user_table(e.cfg);
  e.plan->by_user.clear();
  base::Status s = drop_privileges(e.plan->unprivileged);
  if (s.ok()) s = enter_prelogin_sandbox();
  if (!s.ok()) {
    if (e.session.log)
      e.session.log(LogLevel::Error, "FTPD0208 cannot confine the pre-login process (as " +
                                         e.plan->unprivileged.name + "): " + s.message() +
                                         "; connection refused");
    refuse(fd, "421 Service not available, try later\r\n");
    ::_exit(1);
  }
  SessionEnv env = e.session;
  env.after_login = {};
  env.authenticate = [mon](const LoginState& st) {
    const std::string m = encode_login_state(st);
    if (::send(mon, m.data(), m.size(), MSG_NOSIGNAL) != ssize_t(m.size())) ::_exit(1);
    char a = 0;
    ssize_t n;
    while ((n = ::recv(mon, &a, 1, 0)) < 0 && errno == EINTR) {
    }
    if (n != 1) ::_exit(1);  // the monitor is gone
    return a == kOk ? AuthAnswer::Ok : a == kTooMany ? AuthAnswer::TooMany : AuthAnswer::Failed;
  };
  serve_prelogin(env, fd, relay);
  ::_exit(0);
}

// The session process: the account's, from the login on. Never returns.
[[noreturn]] void session_main(const MonitorEnv& e, int relay, int stats, const LoginState& st,
                               const LoginGrant& g, const SockAddr& peer, const SockAddr& local) {
  SessionEnv env = e.session;
  env.authenticate = {};
  env.after_login = [&e](const std::string& user, bool anonymous) {
    return become_account(e, user, anonymous);
  };
  const std::string report = encode_session_stats(serve_after_login(env, relay, st, g, peer, local));
  (void)!::write(stats, report.data(), report.size());
  ::_exit(0);
}

// A child of the monitor: dies with it, keeps nothing of the master's.
pid_t fork_child(const MonitorEnv& e, const char* what) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    if (e.session.log)
      e.session.log(LogLevel::Error, std::string("FTPD0006 fork (") + what +
                                         "): " + std::strerror(errno));
    return pid;
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(0);
    if (e.master_ctl >= 0) ::close(e.master_ctl);
  }
  return pid;
}

// Waits for the pre-login process's next request until `deadline`; "" when it ended (EOF), went
// past the deadline or sent something too big.
std::string next_request(int mon, Clock::time_point deadline, bool* timed_out) {
  *timed_out = false;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      *timed_out = true;
      return {};
    }
    pollfd p{mon, POLLIN, 0};
    const int r = ::poll(&p, 1, int(std::min<long long>(left, 60000)));
    if (r < 0 && errno != EINTR) return {};
    if (r <= 0) continue;
    std::string m(kMaxLoginMessage + 1, '\0');
    const ssize_t n = ::recv(mon, m.data(), m.size(), MSG_TRUNC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || size_t(n) > kMaxLoginMessage) return {};
    m.resize(size_t(n));
    return m;
  }
}

}  // namespace

std::string encode_login_state(const LoginState& s) {
  std::string out;
  out.push_back(kLogin);
  out.push_back(char((s.tls ? kFlagTls : 0) | (s.pbsz ? kFlagPbsz : 0) | (s.prot_p ? kFlagProt : 0)));
  out.push_back(char(s.facts & 0x1f));
  out.append(reinterpret_cast<const char*>(s.binding.data()), s.binding.size());
  put_field(&out, s.user);
  put_field(&out, s.password);
  return out;
}

std::optional<LoginState> decode_login_state(std::string_view m) {
  LoginState s;
  if (m.size() < 3 + s.binding.size() || m[0] != kLogin) return std::nullopt;
  const unsigned flags = uint8_t(m[1]), facts = uint8_t(m[2]);
  if (flags & ~(kFlagTls | kFlagPbsz | kFlagProt) || facts & ~0x1fu) return std::nullopt;
  s.tls = flags & kFlagTls;
  s.pbsz = flags & kFlagPbsz;
  s.prot_p = flags & kFlagProt;
  s.facts = facts;
  std::memcpy(s.binding.data(), m.data() + 3, s.binding.size());
  m.remove_prefix(3 + s.binding.size());
  if (!get_field(&m, &s.user) || !get_field(&m, &s.password) || !m.empty()) return std::nullopt;
  return s;
}

SessionStats serve_separated(const MonitorEnv& e, int fd) {
  const Config& cfg = *e.cfg;
  const SockAddr peer = SockAddr::peer_of(fd), local = SockAddr::local_of(fd);
  prepare_control_socket(fd, cfg);  // the pre-login process's sandbox forbids setsockopt
  int mon[2], relay[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, mon) != 0) {
    refuse(fd, "421 Service not available, try later\r\n");
    ::close(fd);
    return {};
  }
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, relay) != 0) {
    refuse(fd, "421 Service not available, try later\r\n");
    ::close(fd);
    ::close(mon[0]);
    ::close(mon[1]);
    return {};
  }
  const pid_t pre = fork_child(e, "pre-login");
  if (pre == 0) {
    ::close(mon[0]);
    ::close(relay[1]);
    prelogin_main(e, fd, mon[1], relay[0]);
  }
  if (pre < 0) refuse(fd, "421 Service not available, try later\r\n");
  ::close(fd);  // the monitor never reads the client
  ::close(mon[1]);
  ::close(relay[0]);

  SessionStats out;
  unsigned failures = 0;
  pid_t session = -1;
  // The pre-login process has login_timeout_s; the pauses after failures come on top. Past that
  // it is not serving a client any more (a bug, or code that is not ours): it is ended.
  const auto deadline = Clock::now() + std::chrono::seconds(cfg.login_timeout_s + 10) +
                        std::chrono::milliseconds(uint64_t(cfg.login_fail_delay_ms) *
                                                  (cfg.max_login_failures + 1));
  while (pre > 0) {
    bool timed_out = false;
    const std::string m = next_request(mon[0], deadline, &timed_out);
    if (m.empty()) {
      if (timed_out && e.session.log)
        e.session.log(LogLevel::Warn, "FTPD0209 " + peer.host() +
                                          ": the pre-login process outlived the login timeout; "
                                          "ended");
      if (timed_out) ::kill(pre, SIGKILL);
      break;
    }
    std::optional<LoginState> st = decode_login_state(m);
    if (!st) {
      if (e.session.log)
        e.session.log(LogLevel::Error, "FTPD0209 " + peer.host() +
                                           ": malformed request from the pre-login process (" +
                                           std::to_string(m.size()) + " bytes); session ended");
      ::kill(pre, SIGKILL);
      break;
    }
    std::optional<LoginGrant> g = check_login(cfg, st->user, st->password);
    ::explicit_bzero(st->password.data(), st->password.size());
    if (!g) {
      ++failures;
      ++out.logins_failed;
      if (e.session.log)
        e.session.log(LogLevel::Warn, "FTPD0202 login failed: " + st->user.substr(0, 64) +
                                          " from " + peer.host() + " (attempt " +
                                          std::to_string(failures) + ")");
      // The pause slows down password guessing on this connection (here, where the pre-login
      // process cannot skip it).
      std::this_thread::sleep_for(std::chrono::milliseconds(cfg.login_fail_delay_ms));
      const bool too_many = failures >= cfg.max_login_failures;
      if (too_many && e.session.log)
        e.session.log(LogLevel::Warn, "FTPD0203 " + peer.host() + ": too many failed logins");
      const char a = too_many ? kTooMany : kFailed;
      if (::send(mon[0], &a, 1, MSG_NOSIGNAL) != 1 || too_many) break;
      continue;
    }
    int stats[2];
    if (::pipe2(stats, O_CLOEXEC) != 0) break;
    session = fork_child(e, "session");
    if (session == 0) {
      ::close(mon[0]);
      ::close(stats[0]);
      session_main(e, relay[1], stats[1], *st, *g, peer, local);
    }
    ::close(stats[1]);
    if (session > 0) {
      const char a = kOk;
      (void)!::send(mon[0], &a, 1, MSG_NOSIGNAL);
    }
    ::close(mon[0]);
    mon[0] = -1;
    ::close(relay[1]);
    relay[1] = -1;
    // Nothing more to check for this connection: the user table leaves the monitor too.
    wipe_user_table(e.cfg);
    e.plan->by_user.clear();
    if (session > 0) {
      char buf[128];
      size_t got = 0;
      for (;;) {
        const ssize_t n = ::read(stats[0], buf + got, sizeof buf - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += size_t(n);
        if (got == sizeof buf) break;
      }
      SessionStats s;
      if (decode_session_stats(std::string_view(buf, got), &s)) {
        s.logins_failed += out.logins_failed;
        out = s;
      }
    } else {
      ::kill(pre, SIGKILL);  // no session to relay to
    }
    ::close(stats[0]);
    break;
  }
  if (mon[0] >= 0) ::close(mon[0]);
  if (relay[1] >= 0) ::close(relay[1]);
  wait_for(e, session, "session");
  wait_for(e, pre, "pre-login");
  return out;
}

}  // namespace tierce::ftpd
