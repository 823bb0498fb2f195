// tests/fuzz/fuzz_config.cc — fuzzes the configuration parsers an operator's file goes through:
// the cluster topology (cluster::Topology::parse, read by every node, module and tool),
// tierce-memd's file (memd::parse_config) and tierce-ftpd's (ftpd::parse_config). On any bytes
// each returns a configuration or throws its own error type (TopologyError, memd::ConfigError,
// ftpd::ConfigError) with a message — never crashes, hangs, or lets another exception type out
// (which the daemons would report as an internal error instead of a configuration problem).
// Built twice (tests/fuzz/CMakeLists.txt): under libFuzzer (-DTIERCE_LIBFUZZER) and as a
// deterministic mutation driver in ctest:
//   fuzz_config_replay [--iterations N] [--write-seeds DIR] [FILE...]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "agents/memd/config.h"
#include "cluster/topology.h"
#include "ftp_adts/server/config.h"

namespace {

[[noreturn]] void fail(const char* parser, const std::exception& e) {
  std::fprintf(stderr, "fuzz_config: %s let a %s out: %s\n", parser, typeid(e).name(), e.what());
  std::abort();
}

template <class Error, class F>
void expect_own_error(const char* parser, F&& parse) {
  try {
    parse();
  } catch (const Error& e) {
    if (std::string_view(e.what()).empty()) fail(parser, e);  // an error says what is wrong
  } catch (const std::exception& e) {
    fail(parser, e);
  }
}

}  // namespace

// Byte 0 picks the parser; the rest is the file's text. Relative paths in it resolve against a
// directory that does not exist, so no parser reads anything real.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string origin = "/nonexistent-tierce-fuzz/config.toml";
  switch (data[0] % 3) {
    case 0:
      expect_own_error<tierce::cluster::TopologyError>(
          "Topology::parse", [&] { (void)tierce::cluster::Topology::parse(text, origin); });
      break;
    case 1:
      expect_own_error<tierce::memd::ConfigError>(
          "memd::parse_config", [&] { (void)tierce::memd::parse_config(text, origin); });
      break;
    default:
      expect_own_error<tierce::ftpd::ConfigError>(
          "ftpd::parse_config", [&] { (void)tierce::ftpd::parse_config(text, origin); });
      break;
  }
  return 0;
}

#ifndef TIERCE_LIBFUZZER
// ---- deterministic replay driver (any compiler; in ctest) ---------------------------------------
#include "replay_args.h"

static std::vector<std::string> seeds() {
  std::vector<std::string> out;
  auto with = [&](char which, std::string s) { out.push_back(std::string(1, which) + s); };
  with(0, R"([cluster]
name = "demo"
secret_file = "secret"
scheme = "dependency-lists"
version_slots = 4096
[[node]]
name = "app1"
role = "app"
memd = "tcp://127.0.0.1:7301"
[[node]]
name = "proxy1"
role = "proxy"
memd = "tcp://127.0.0.1:7302"
)");
  with(0, "[cluster]\nname = \"x\"\n[[node]]\nname = 1\n[[node]]\n");
  with(1, R"([memd]
node = "app1"
topology = "cluster.toml"
listen = ["tcp://127.0.0.1:7301", "shm://app1"]
log = "stderr"
log_level = "info"
protection = "mac"
max_preauth_frame = 256
max_connections_per_ip = 1024
[[region]]
name = "data"
size = "1M"
[pool]
size = "16M"
)");
  with(1, "[memd]\nlisten = [1, 2, {a = 3}]\n[[region]]\nsize = -1\n");
  with(2, R"(listen = "127.0.0.1:2121"
workers = 4
max_sessions = 64
max_sessions_per_ip = 8
pasv_ports = "30000-30100"
unprivileged_user = "nobody"
log_level = "info"
[anonymous]
root = "pub"
[limits]
max_command_line = 4096
control_buffer_kib = 64
max_upload_bytes = 1073741824
adts_peer_only = true
[tls]
cert = "cert.pem"
key = "key.pem"
require = true
require_reuse = true
[[user]]
name = "alice"
password = "$6$salt$abcdefghijklmnopqrstuvwxyz"
root = "alice"
write = true
run_as = "nobody"
)");
  with(2, "listen = \"[::1]:0\"\n[[user]]\nname = \"\"\npassword = \"plain\"\n");
  with(0, "a = [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n");
  with(1, "x = \"\\u0000\\uD800\"\n'''\n");
  return out;
}

int main(int argc, char** argv) {
  return tierce_fuzz::replay_main(argc, argv, "fuzz_config", 20000, seeds(), 20261126);
}
#endif  // TIERCE_LIBFUZZER
