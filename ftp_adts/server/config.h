// ftp_adts/server/config.h — tierce-ftpd's configuration (ftpd.toml, docs/ftp.md "tierce-ftpd"):
// the parsed, checked form every other part of the server reads. Loading collects every problem of
// the file; each message names the file and the key ("ftpd.toml:3:1: workers: ...").
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/config.h"
#include "fabric/log.h"

namespace tierce::ftpd {

// Every problem of one file, one per line (base/config.h: read with base::read_config_file, 1 MiB
// at most, parsed with base::parse_toml).
using ConfigError = base::ConfigError;

struct UserConfig {
  std::string name;
  std::string password_hash;  // crypt(3): "$y$..." (yescrypt) or "$6$..." (sha512crypt)
  std::string root;           // absolute host directory: the user's "/"
  bool write = false;         // STOR/APPE/STOU/DELE/MKD/RMD/RNFR/MFMT/SITE CHMOD
  std::string run_as;         // system account its sessions run as when started as root
                              // ("" = unprivileged_user; privsep.h)
  // Upload limits of this user ([limits] values when absent; 0 = none): the largest file an
  // upload may leave, and the bytes one session may upload in all.
  int64_t max_upload_bytes = -1;
  int64_t session_upload_bytes = -1;
};

struct Config {
  std::string source;  // the file it came from (absolute)

  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 2121;
  unsigned workers = 4;             // idle pre-forked workers kept ready
  unsigned max_sessions = 64;       // busy workers at most
  unsigned worker_sessions = 0;     // a worker exits after this many sessions (0 = never)
  uint16_t pasv_min = 0, pasv_max = 0;  // 0-0 = any ephemeral port
  std::string pasv_address;         // announced in 227; "" = the control socket's address
  unsigned idle_timeout_s = 300;
  unsigned data_timeout_s = 60;
  bool store_splice = false;        // plain STOR/APPE: splice (true) or recv + pwrite (adts.h)
  unsigned login_timeout_s = 30;
  unsigned login_fail_delay_ms = 1000;  // pause after a failed PASS (slows password guessing)
  unsigned max_login_failures = 3;      // then 421 and close
  unsigned max_sessions_per_ip = 8;     // sessions from one client address at once (0 = no limit)
  // Started as root: the account of anonymous sessions and of users without run_as (privsep.h).
  std::string unprivileged_user = "nobody";
  std::string xferlog;
  fabric::LogLevel log_level = fabric::LogLevel::Info;
  std::string ready_file;
  // Prometheus text of the master's counters for node-exporter's textfile collector, rewritten
  // every metrics_interval_ms by the master (docs/ftp.md "Metrics"); "" = none. Reloadable.
  std::string metrics_file;
  unsigned metrics_interval_ms = 15000;
  std::string banner = "Tierce FTP server ready";

  bool anonymous = false;
  std::string anonymous_root;
  // Started as root: the account of anonymous sessions ([anonymous] run_as); "" =
  // unprivileged_user. No writable user may run as it (privsep.h).
  std::string anonymous_run_as;

  bool tls = false;
  std::string tls_cert, tls_key;
  bool tls_require = false;

  bool adts_enable = true;
  unsigned adts_max_streams = 16;
  unsigned adts_block_kib = 1024;
  bool adts_zero_copy = true;

  // [limits] (issue 17): bounded resources per session; docs/ftp.md "Limits".
  size_t max_command_line = 4096;        // a longer line gets "500 Command line too long"
  size_t control_buffer_bytes = 64 << 10;  // control input buffered during a transfer; more: 421
  uint64_t max_upload_bytes = 0;         // size an upload may leave a file at; 0 = no limit
  uint64_t session_upload_bytes = 0;     // bytes one session may upload; 0 = no limit
  bool adts_peer_only = true;            // ADTS streams only from the control peer's address
  bool tls_require_reuse = true;         // [tls] require_reuse: PROT P data must resume the
                                         // control connection's TLS session

  std::vector<UserConfig> users;

  const UserConfig* find_user(const std::string& name) const;
};

// Parses and checks; throws ConfigError listing every problem.
Config parse_config(const std::string& text, const std::string& source_name);
Config load_config(const std::string& path);

}  // namespace tierce::ftpd
