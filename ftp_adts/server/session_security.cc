// ftp_adts/server/session_security.cc — TLS in a Session (RFC 4217): AUTH TLS on the control
// connection, PBSZ/PROT for the data connections, CCC (refused), and the policy that
// [tls] require puts on data transfers.
#include "ftp_adts/server/session_internal.h"

#include <exception>

namespace tierce::ftpd {

bool Session::data_policy_ok() {
  if (cfg_.tls_require && !prot_p_) {
    ctl_.reply(521, "Data connections must be encrypted: send PBSZ 0 and PROT P");
    return false;
  }
  return true;
}

void Session::cmd_auth(const std::string& arg) {
  std::string a = upper(arg);
  if (!env_.tls) {
    ctl_.reply(504, "AUTH TLS is not configured on this server");
    return;
  }
  if (ctl_.tls()) {
    ctl_.reply(503, "Already using TLS");
    return;
  }
  if (a != "TLS" && a != "TLS-C" && a != "SSL") {
    ctl_.reply(504, "AUTH " + a.substr(0, 16) + " not supported; use AUTH TLS");
    return;
  }
  if (logged_in_ && env_.after_login) {
    // Privilege separation: this process already runs as the user's account and holds no user
    // table any more, so the reset RFC 4217 asks for (a new login inside TLS) cannot happen here.
    log(LogLevel::Info, "FTPD0207 " + peer_.host() + ": AUTH TLS after login refused: the session "
                        "already runs as " + user_ + "'s account (privilege separation)");
    ctl_.reply(503, "AUTH TLS must come before the login: reconnect and send AUTH TLS first");
    return;
  }
  ctl_.reply(234, "AUTH TLS ok, start the handshake");
  try {
    ctl_.start_tls(env_.tls, std::chrono::seconds(cfg_.login_timeout_s));
  } catch (const std::exception& e) {
    log(LogLevel::Warn, "FTPD0403 " + peer_.host() + ": TLS handshake failed: " + e.what());
    quit_ = true;
    return;
  }
  // RFC 4217 §4: AUTH resets the session; the login starts over inside TLS, also for a client
  // that was logged in over the plain connection.
  if (logged_in_)
    log(LogLevel::Info, "FTPD0206 " + peer_.host() + ": AUTH TLS after login: " + user_ +
                            " logged out, log in again");
  user_.clear();
  logged_in_ = anonymous_ = writable_ = false;
  max_upload_ = session_upload_ = 0;
  root_.reset();
  cwd_ = "/";
  rest_ = 0;
  rnfr_set_ = false;
  pbsz_ = prot_p_ = false;
  port_.reset();
  adts_.reset();
}

void Session::cmd_pbsz(const std::string&) {
  if (!ctl_.tls()) {
    ctl_.reply(503, "PBSZ needs AUTH TLS first");
    return;
  }
  pbsz_ = true;
  ctl_.reply(200, "PBSZ=0");
}

void Session::cmd_prot(const std::string& arg) {
  if (!ctl_.tls()) {
    ctl_.reply(503, "PROT needs AUTH TLS first");
    return;
  }
  if (!pbsz_) {
    ctl_.reply(503, "PROT needs PBSZ first");
    return;
  }
  std::string a = upper(arg);
  if (a == "P") {
    if (adts_.configured()) {
      ctl_.reply(536, "PROT P not available during an ADTS session; send TPRT STREAM first");
      return;
    }
    prot_p_ = true;
    ctl_.reply(200, "PROT now Private");
  } else if (a == "C") {
    prot_p_ = false;
    ctl_.reply(200, "PROT now Clear");
  } else {
    ctl_.reply(536, "PROT " + a.substr(0, 4) + " not supported (C or P)");
  }
}

}  // namespace tierce::ftpd
