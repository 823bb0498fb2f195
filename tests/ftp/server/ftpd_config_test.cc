// tests/ftp/server/ftpd_config_test.cc — tierce-ftpd's configuration checks and password hashes:
// the real binary with --check (exit 2 and a message naming the key for every bad file) and
// --hash-password, and the parser and verifier directly.
#define BOOST_TEST_MODULE ftpd_config
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <crypt.h>

#include <boost/test/unit_test.hpp>

#include "ftp_adts/server/config.h"
#include "ftp_adts/server/master.h"
#include "ftp_adts/server/password.h"
#include "tests/ftp/server/ftpd_harness.h"

using namespace ftpd_test;
using tierce_test::TempDir;

namespace {

// A valid file around one changed line.
std::string base_config(const TempDir& d, const std::string& extra_top,
                        const std::string& user_extra = "") {
  return extra_top + "\n[[user]]\nname = \"alice\"\npassword = \"$6$abcdefgh$x\"\nroot = \"" +
         d.path() + "\"\n" + user_extra;
}

RunResult check(const TempDir& d, const std::string& text) {
  tierce_test::write_file(d / "ftpd.toml", text);
  return run_ftpd({"-c", d / "ftpd.toml", "--check"});
}

}  // namespace

BOOST_AUTO_TEST_CASE(valid_config_passes_check) {
  TempDir d;
  auto r = check(d, base_config(d, "listen = \"127.0.0.1:2121\"\nworkers = 2\n"
                                   "pasv_ports = \"30000-30010\"\n[adts]\nmax_streams = 8\n"));
  BOOST_TEST(r.code == 0, r.err);
  BOOST_TEST(r.out.find("is fine") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(bad_values_exit_2_naming_the_key) {
  TempDir d;
  struct Case {
    std::string text;
    std::string key;
  };
  std::vector<Case> cases = {
      {base_config(d, "workers = 0"), "workers"},
      {base_config(d, "workers = \"four\""), "workers"},
      {base_config(d, "max_sessions = -1"), "max_sessions"},
      {base_config(d, "listen = \"localhost\""), "listen"},
      {base_config(d, "listen = \"127.0.0.1:70000\""), "listen"},
      {base_config(d, "pasv_ports = \"20-10\""), "pasv_ports"},
      {base_config(d, "pasv_address = \"not-an-ip\""), "pasv_address"},
      {base_config(d, "log_level = \"loud\""), "log_level"},
      {base_config(d, "wrokers = 3"), "wrokers"},
      {base_config(d, "[adts]\nmax_streams = 1000"), "adts.max_streams"},
      {base_config(d, "[adts]\nturbo = true"), "adts.turbo"},
      {base_config(d, "[anonymous]\nroot = \"/nonexistent/dir/x\""), "anonymous.root"},
      {base_config(d, "[tls]\ncert = \"/nonexistent.pem\"\nkey = \"/nonexistent.key\""),
       "tls.cert"},
      {"[[user]]\nname = \"bob\"\npassword = \"plaintext\"\nroot = \"" + d.path() + "\"\n",
       "user.password"},
      {"[[user]]\nname = \"bob\"\npassword = \"$6$a$b\"\nroot = \"/nonexistent/x\"\n",
       "user.root"},
      {"[[user]]\nname = \"bob\"\npassword = \"$6$a$b\"\nroot = \"" + d.path() +
           "\"\nsudo = true\n",
       "user.sudo"},
      {"workers = 2\n", "user"},  // nobody could log in
      {"listen = \n", "not valid TOML"},
  };
  for (auto& c : cases) {
    auto r = check(d, c.text);
    BOOST_TEST(r.code == 2, "config:\n" << c.text << "\nexit " << r.code << " " << r.err);
    BOOST_TEST(r.err.find(c.key) != std::string::npos,
               "message should name " << c.key << ": " << r.err);
    BOOST_TEST(r.err.find("ftpd.toml") != std::string::npos, "message names the file: " << r.err);
  }
}

BOOST_AUTO_TEST_CASE(missing_file_and_bad_options_exit_2) {
  BOOST_TEST(run_ftpd({"-c", "/nonexistent/ftpd.toml", "--check"}).code == 2);
  BOOST_TEST(run_ftpd({"--bogus"}).code == 2);
  BOOST_TEST(run_ftpd({"-c"}).code == 2);
}

BOOST_AUTO_TEST_CASE(parser_reads_every_key) {
  TempDir d;
  std::string text = "listen = \"[::1]:0\"\nworkers = 3\nmax_sessions = 9\npasv_ports = \"0\"\n"
                     "idle_timeout_s = 7\ndata_timeout_s = 8\nlogin_timeout_s = 9\n"
                     "store_splice = true\nbanner = \"hi\"\n[anonymous]\nroot = \"" + d.path() + "\"\n"
                     "[adts]\nenable = false\nblock_kib = 64\n"
                     "[[user]]\nname = \"a\"\npassword = \"$y$x$y\"\nroot = \"" + d.path() +
                     "\"\nwrite = true\n";
  auto c = tierce::ftpd::parse_config(text, d / "x.toml");
  BOOST_TEST(c.listen_host == "::1");
  BOOST_TEST(c.listen_port == 0);
  BOOST_TEST(c.workers == 3u);
  BOOST_TEST(c.max_sessions == 9u);
  BOOST_TEST(c.idle_timeout_s == 7u);
  BOOST_TEST(c.store_splice);
  BOOST_TEST(!tierce::ftpd::parse_config("[anonymous]\nroot = \"" + d.path() + "\"\n", d / "y.toml")
                  .store_splice);  // copy by default
  BOOST_TEST(c.anonymous);
  BOOST_TEST(!c.adts_enable);
  BOOST_TEST(c.adts_block_kib == 64u);
  BOOST_REQUIRE(c.find_user("a"));
  BOOST_TEST(c.find_user("a")->write);
  BOOST_TEST(!c.find_user("b"));
}

BOOST_AUTO_TEST_CASE(hash_password_round_trip) {
  std::string h = hash_of("correct horse");
  BOOST_TEST(h.rfind("$y$", 0) == 0, h);
  BOOST_TEST(tierce::ftpd::verify_password("correct horse", h));
  BOOST_TEST(!tierce::ftpd::verify_password("correct horsE", h));
  BOOST_TEST(!tierce::ftpd::verify_password("", h));
  // Salted: two hashes of one password differ.
  BOOST_TEST(hash_of("correct horse") != h);
  // An empty stdin is refused.
  BOOST_TEST(run_ftpd({"--hash-password"}, "").code == 2);
}

BOOST_AUTO_TEST_CASE(sha512crypt_hashes_verify) {
  struct crypt_data cd {};
  const char* h6 = crypt_r("s3cret", "$6$saltsaltsalt$", &cd);
  BOOST_REQUIRE(h6 && h6[0] == '$');
  std::string hash = h6;
  BOOST_TEST(tierce::ftpd::verify_password("s3cret", hash));
  BOOST_TEST(!tierce::ftpd::verify_password("s3cre", hash));
  BOOST_TEST(!tierce::ftpd::verify_password("s3cret", "$6$saltsaltsalt$garbage"));
  BOOST_TEST(!tierce::ftpd::verify_password("s3cret", "plain"));
  BOOST_TEST(!tierce::ftpd::verify_password("s3cret", ""));
}

// Issue 17: an unknown user's password is checked against a real entry's hash (same algorithm and
// cost as the accounts: "$6$" entries get a "$6$" dummy, not the "$y$" default).
BOOST_AUTO_TEST_CASE(dummy_hash_has_the_cost_of_real_entries) {
  struct crypt_data cd {};
  const char* h6 = crypt_r("s3cret", "$6$rounds=20000$saltsaltsalt$", &cd);
  BOOST_REQUIRE(h6 && h6[0] == '$');
  std::string d = tierce::ftpd::dummy_hash_for({h6});
  BOOST_TEST(d.rfind("$6$rounds=20000$", 0) == 0, d);
  BOOST_TEST(!tierce::ftpd::verify_password("tierce-dummy", d));
  BOOST_TEST(tierce::ftpd::dummy_hash_for({}).rfind("$y$", 0) == 0);
}

// Issue 17: [limits], the users' upload limits and [tls] require_reuse.
BOOST_AUTO_TEST_CASE(limits_keys) {
  TempDir d;
  auto c = tierce::ftpd::parse_config(
      base_config(d, "[limits]\nmax_command_line = 1024\ncontrol_buffer_kib = 16\n"
                     "max_upload_bytes = 1000\nsession_upload_bytes = 5000\n"
                     "adts_peer_only = false\n",
                  "max_upload_bytes = 10\nsession_upload_bytes = 0\n"),
      d / "x.toml");
  BOOST_TEST(c.max_command_line == 1024u);
  BOOST_TEST(c.control_buffer_bytes == 16u * 1024);
  BOOST_TEST(c.max_upload_bytes == 1000u);
  BOOST_TEST(c.session_upload_bytes == 5000u);
  BOOST_TEST(!c.adts_peer_only);
  BOOST_TEST(c.users.at(0).max_upload_bytes == 10);
  BOOST_TEST(c.users.at(0).session_upload_bytes == 0);
  auto defaults = tierce::ftpd::parse_config(base_config(d, ""), d / "y.toml");
  BOOST_TEST(defaults.max_command_line == 4096u);
  BOOST_TEST(defaults.control_buffer_bytes == 64u * 1024);
  BOOST_TEST(defaults.max_upload_bytes == 0u);
  BOOST_TEST(defaults.adts_peer_only);
  BOOST_TEST(defaults.tls_require_reuse);
  BOOST_TEST(defaults.users.at(0).max_upload_bytes == -1);  // inherits [limits]
  auto r = check(d, base_config(d, "[limits]\ncontrol_buffer_kib = 1\n"));
  BOOST_TEST(r.code == 2);
  BOOST_TEST(r.err.find("limits.control_buffer_kib") != std::string::npos, r.err);
  r = check(d, base_config(d, "[limits]\nbogus = 1\n"));
  BOOST_TEST(r.code == 2);
  BOOST_TEST(r.err.find("limits.bogus: unknown key") != std::string::npos, r.err);
}

BOOST_AUTO_TEST_CASE(metrics_keys) {
  TempDir d;
  auto c = tierce::ftpd::parse_config(
      base_config(d, "metrics_file = \"m/ftpd.prom\"\nmetrics_interval_ms = 2000\n"),
      d / "x.toml");
  BOOST_TEST(c.metrics_file == d / "m/ftpd.prom");  // relative: the file's directory
  BOOST_TEST(c.metrics_interval_ms == 2000u);
  auto defaults = tierce::ftpd::parse_config(base_config(d, ""), d / "y.toml");
  BOOST_TEST(defaults.metrics_file.empty());
  BOOST_TEST(defaults.metrics_interval_ms == 15000u);
  auto r = check(d, base_config(d, "metrics_interval_ms = 999\n"));
  BOOST_TEST(r.code == 2);
  BOOST_TEST(r.err.find("metrics_interval_ms") != std::string::npos, r.err);
  r = check(d, base_config(d, "metrics_file = \"\"\n"));
  BOOST_TEST(r.code == 2);
  BOOST_TEST(r.err.find("metrics_file: empty") != std::string::npos, r.err);
}

// The worker's end-of-session report to the master ('S', master.h) and the master's text.
BOOST_AUTO_TEST_CASE(session_stats_message_and_master_metrics) {
  tierce::ftpd::SessionStats s{1, 2, 3, 4, 5, (uint64_t(1) << 40) + 7, UINT64_MAX};
  std::string m = tierce::ftpd::encode_session_stats(s);
  BOOST_TEST(m.size() == 57u);
  BOOST_TEST(m[0] == 'S');
  tierce::ftpd::SessionStats back;
  BOOST_TEST_REQUIRE(tierce::ftpd::decode_session_stats(m, &back));
  BOOST_TEST(back.logins_ok == 1u);
  BOOST_TEST(back.logins_failed == 2u);
  BOOST_TEST(back.files_out == 3u);
  BOOST_TEST(back.files_in == 4u);
  BOOST_TEST(back.transfers_failed == 5u);
  BOOST_TEST(back.bytes_out == (uint64_t(1) << 40) + 7);
  BOOST_TEST(back.bytes_in == UINT64_MAX);
  BOOST_TEST(!tierce::ftpd::decode_session_stats(m.substr(0, 56), &back));  // truncated
  BOOST_TEST(!tierce::ftpd::decode_session_stats(m + "x", &back));          // too long
  BOOST_TEST(!tierce::ftpd::decode_session_stats("I", &back));

  TempDir d;
  auto cfg = tierce::ftpd::parse_config(base_config(d, ""), d / "x.toml");
  tierce::ftpd::MasterEnv env;
  env.cfg = &cfg;
  env.version = "9.9";
  env.listen = "127.0.0.1:21";
  tierce::ftpd::MasterCounters c;
  c.sessions = 3;
  c.refused_per_ip = 1;
  c.bytes_out = 123456789012ull;
  tierce::ftpd::MasterGauges g;
  g.sessions = 2;
  g.idle = 1;
  std::string text = tierce::ftpd::master_metrics_text(env, c, g, 1.5);
  for (const char* want :
       {"tierce_ftpd_info{version=\"9.9\",listen=\"127.0.0.1:21\",privsep=\"off\"} 1\n",
        "# TYPE tierce_ftpd_sessions_total counter\ntierce_ftpd_sessions_total 3\n",
        "tierce_ftpd_sessions_refused_total{limit=\"max_sessions_per_ip\"} 1\n",
        "tierce_ftpd_sessions_active 2\n", "tierce_ftpd_workers{state=\"idle\"} 1\n",
        "tierce_ftpd_bytes_total{direction=\"out\"} 123456789012\n",
        "tierce_ftpd_reloads_total 0\n", "tierce_ftpd_uptime_seconds 1.5\n"})
    BOOST_TEST(text.find(want) != std::string::npos, want << " not in:\n" << text);
}
