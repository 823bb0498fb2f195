// ftp_adts/server/session_login.cc — USER, PASS and QUIT of a Session, and the login itself:
// the user's root opened, then privilege separation's hook (SessionEnv::after_login).
#include "ftp_adts/server/session_internal.h"

#include <string.h>

#include <optional>
#include <thread>
#include <vector>

#include "ftp_adts/server/password.h"

namespace tierce::ftpd {

// ---- access ----

void Session::cmd_user(const std::string& arg) {
  if (logged_in_) {
    ctl_.reply(530, "Already logged in; cannot change to another user");
    return;
  }
  if (cfg_.tls_require && !ctl_.tls()) {
    ctl_.reply(530, "TLS required: send AUTH TLS first");
    return;
  }
  user_ = arg;
  if ((arg == "anonymous" || arg == "ftp") && cfg_.anonymous)
    ctl_.reply(331, "Anonymous login ok, send your e-mail address as password");
  else
    ctl_.reply(331, "Password required for " + arg.substr(0, 64));
}

void Session::login_ok(std::string name, std::string root, bool anonymous, bool write,
                       const UserConfig* u) {
  // Read before after_login: it wipes the user table `u` points into.
  uint64_t max_upload = u && u->max_upload_bytes >= 0 ? uint64_t(u->max_upload_bytes)
                                                      : cfg_.max_upload_bytes;
  uint64_t session_upload = u && u->session_upload_bytes >= 0 ? uint64_t(u->session_upload_bytes)
                                                              : cfg_.session_upload_bytes;
  u = nullptr;
  // ---- privilege separation (privsep.h): the one call of the session into it ----
  const base::Status dropped =
      env_.after_login ? env_.after_login(name, anonymous) : base::Status();
  if (!dropped.ok()) {
    log(LogLevel::Error, "FTPD0205 " + peer_.host() + ": cannot drop privileges for " + name +
                             ": " + dropped.message() + "; session ended");
    ctl_.reply(421, "Internal error; try later");
    quit_ = true;
    return;
  }
  // The root is opened as the session's account (after the drop): the kernel checks its path as
  // for any other open, so a root the account could not reach (a directory under one it may not
  // search, a symlink planted towards one) is not handed to it by root.
  try {
    root_ = std::make_unique<ftp::Root>(root);
  } catch (const std::exception& e) {
    log(LogLevel::Error, "FTPD0204 " + peer_.host() + ": cannot open the root of " + name + ": " +
                             e.what() +
                             (env_.after_login ? " (as the session's account: it needs search "
                                                 "permission on every directory above the root)"
                                               : ""));
    ctl_.reply(421, "Cannot open your home directory; try later");
    quit_ = true;
    return;
  }
  forget_tls_key();
  logged_in_ = true;
  anonymous_ = anonymous;
  writable_ = write;
  max_upload_ = max_upload;
  session_upload_ = session_upload;
  cwd_ = "/";
  user_ = name;
  ++logins_ok_;
  log(LogLevel::Info, "FTPD0201 login ok: " + name + " from " + peer_.host() +
                          (anonymous ? " (anonymous, read-only)" : write ? "" : " (read-only)"));
  ctl_.reply(230, anonymous ? "Anonymous access granted, restrictions apply" : "Login successful");
}

// Under privilege separation, with [tls] require_reuse, a logged-in session needs no TLS private
// key: every PROT P data connection resumes the control connection's session (a resumption signs
// nothing), and AUTH TLS is refused after login. So the key leaves this process's memory before
// the session's first command runs as its account (docs/SECURITY.md "tierce-ftpd").
void Session::forget_tls_key() {
  if (!env_.tls || !env_.after_login || !cfg_.tls_require_reuse) return;
  bool gone = env_.tls->forget_private_key();
  if (ftp::TlsConnection* t = ctl_.tls_connection()) gone = t->forget_private_key() && gone;
  tls_key_dropped_ = gone;
  if (gone)
    log(LogLevel::Debug, "FTPD0407 " + peer_.host() +
                             ": the TLS private key is out of this session (data connections "
                             "resume the control connection's TLS session)");
  else
    log(LogLevel::Warn, "FTPD0408 " + peer_.host() +
                            ": the TLS private key could not be dropped from this session (its "
                            "key type has no placeholder): it stays in the session's memory");
}

std::optional<LoginGrant> check_login(const Config& cfg, const std::string& user,
                                      const std::string& password) {
  if ((user == "anonymous" || user == "ftp") && cfg.anonymous)
    return LoginGrant{"anonymous", cfg.anonymous_root, true, false, nullptr};
  if (const UserConfig* u = cfg.find_user(user)) {
    if (!verify_password(password, u->password_hash)) return std::nullopt;
    return LoginGrant{u->name, u->root, false, u->write, u};
  }
  // Spend the same time on unknown names as on known ones: no user enumeration by timing.
  // The check runs against a real entry's hash (same algorithm and cost); result ignored.
  std::vector<std::string> known;
  for (const auto& k : cfg.users) known.push_back(k.password_hash);
  verify_password(password, dummy_hash_for(known));
  return std::nullopt;
}

void Session::cmd_pass(const std::string& arg) {
  if (logged_in_) {
    ctl_.reply(230, "Already logged in");
    return;
  }
  if (user_.empty()) {
    ctl_.reply(503, "Login with USER first");
    return;
  }
  if (env_.authenticate) {
    ask_monitor(arg);
    return;
  }
  if (std::optional<LoginGrant> g = check_login(cfg_, user_, arg)) {
    login_ok(g->name, g->root, g->anonymous, g->write, g->user);
    return;
  }
  ++failures_;
  ++logins_failed_;
  log(LogLevel::Warn, "FTPD0202 login failed: " + user_.substr(0, 64) + " from " + peer_.host() +
                          " (attempt " + std::to_string(failures_) + ")");
  user_.clear();
  // The pause slows down password guessing on this connection.
  std::this_thread::sleep_for(Millis(cfg_.login_fail_delay_ms));
  if (failures_ >= cfg_.max_login_failures) {
    ctl_.reply(421, "Too many failed logins, closing the control connection");
    log(LogLevel::Warn, "FTPD0203 " + peer_.host() + ": too many failed logins");
    quit_ = true;
    return;
  }
  ctl_.reply(530, "Login incorrect");
}

// Privilege separation's pre-login process: the monitor checks the password (it alone holds the
// user table), counts the failures, makes the pause after one and logs it (monitor.cc).
void Session::ask_monitor(const std::string& password) {
  if (user_.size() > kMaxLoginField || password.size() > kMaxLoginField) {
    user_.clear();
    ctl_.reply(530, "Login incorrect");
    return;
  }
  LoginState st;
  st.user = user_;
  st.password = password;
  st.tls = ctl_.tls();
  st.pbsz = pbsz_;
  st.prot_p = prot_p_;
  if (st.tls) st.binding = ctl_.tls_binding();
  st.facts = facts_.bits();
  const AuthAnswer a = env_.authenticate(st);
  ::explicit_bzero(st.password.data(), st.password.size());
  switch (a) {
    case AuthAnswer::Ok:
      // The session process answers (230, or 421 when its root cannot be opened); this process
      // relays from now on (serve_prelogin).
      handed_over_ = true;
      quit_ = true;
      return;
    case AuthAnswer::Failed:
      user_.clear();
      ctl_.reply(530, "Login incorrect");
      return;
    case AuthAnswer::TooMany:
      ctl_.reply(421, "Too many failed logins, closing the control connection");
      quit_ = true;
      return;
  }
}

void Session::cmd_quit(const std::string&) {
  ctl_.reply(221, "Goodbye");
  quit_ = true;
}

}  // namespace tierce::ftpd
