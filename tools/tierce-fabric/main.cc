// tools/tierce-fabric — the operator's client for any fabric server (memd, lockd, tests):
// directory lookups, one-sided reads and atomics, service calls, and local segment management.
// Exit codes: 0 done, 1 the operation failed (message says why), 2 bad usage.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fabric/fabric.h"
#include "fabric/identity.h"

#ifndef TIERCE_VERSION
#define TIERCE_VERSION "0.0.0"  // set by CMake to the project version
#endif

using namespace tierce::fabric;

namespace {

const char* kUsage = R"(Usage: tierce-fabric [options] COMMAND ARGS...

Talks to a Tierce fabric server (tierce-memd, tierce-lockd) at URI = tcp://HOST:PORT,
shm:///path/to/socket or verbs://HOST:PORT.

Commands:
  lookup URI REGION                 print the region's descriptor (addr len key)
  read URI REGION OFFSET [LEN]      hex dump LEN bytes (default 8; 8 bytes also as u64)
  write-u64 URI REGION OFFSET VALUE store a 64-bit word
  faa URI REGION OFFSET ADD         fetch-and-add; prints the old value
  cas URI REGION OFFSET EXPECT NEW  compare-and-swap; prints the old value
  call URI SERVICE [TEXT]           request/response message; prints the reply (e.g. memd.list)
  ping URI [COUNT]                  round trips; prints min/median latency
  segment create NAME BYTES         create a shared segment (/dev/shm) for memd to export
  segment info NAME                 show a segment's header
  segment rm NAME                   remove a segment's name
  transports                        which backends this host can use
  keygen FILE                       make a node key (Ed25519, PEM, mode 0600; never overwrites)
                                    and print its public key, for the node's public_key in the
                                    topology
  pubkey FILE                       print the public key of a node key file

Options:
  --secret-file FILE   shared secret (default $TIERCE_SECRET_FILE or /etc/tierce/secret)
  --timeout MS         deadline of each operation (default 2000)
  --node-key FILE      sign as a node with its key (needs --node): a MEMBER, not a reader, at
                       servers that know the cluster's keys — writes, atomics and members-only
                       services (coherence.membership, dlm.*) need it there (docs/SECURITY.md)
  --node NAME          the node whose key --node-key is
)";

[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr, "tierce-fabric: %s\n\n%s", why.c_str(), kUsage);
  std::exit(2);
}

uint64_t num(const std::string& s, const char* what) {
  char* end = nullptr;
  errno = 0;
  uint64_t v = std::strtoull(s.c_str(), &end, 0);
  if (errno || !end || *end || s.empty()) usage_error(std::string("bad ") + what + " '" + s + "'");
  return v;
}

// The options and the command's words; exits on -h, -V and bad usage.
struct Cli {
  std::string secret_file =
      getenv("TIERCE_SECRET_FILE") ? getenv("TIERCE_SECRET_FILE") : "/etc/tierce/secret";
  Millis timeout{2000};
  std::string node_key_file, node_name;
  std::vector<std::string> args;
};

Cli parse_cli(int argc, char** argv) {
  Cli c;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--secret-file" && i + 1 < argc)
      c.secret_file = argv[++i];
    else if (a == "--node-key" && i + 1 < argc)
      c.node_key_file = argv[++i];
    else if (a == "--node" && i + 1 < argc)
      c.node_name = argv[++i];
    else if (a == "--timeout" && i + 1 < argc)
      c.timeout = Millis(num(argv[++i], "timeout"));
    else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "-V" || a == "--version") {
      std::printf("tierce-fabric %s\n", TIERCE_VERSION);
      std::exit(0);
    } else if (a.rfind("--", 0) == 0)
      usage_error("unknown option " + a);
    else
      c.args.push_back(a);
  }
  if (c.args.empty()) usage_error("no command");
  if (c.node_key_file.empty() != c.node_name.empty())
    usage_error("--node-key and --node go together (the key, and the node it belongs to)");
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const Cli cli = parse_cli(argc, argv);
  const std::string& secret_file = cli.secret_file;
  const Millis timeout = cli.timeout;
  const std::vector<std::string>& args = cli.args;
  const std::string& cmd = args[0];
  auto need = [&](size_t n) {
    if (args.size() < n + 1) usage_error(cmd + " needs " + std::to_string(n) + " argument(s)");
  };
  try {
    if (cmd == "transports") {
      tierce::base::Result<std::string> v = verbs_device_probe();
      std::printf("tcp    yes\nshm    yes (same host only)\nverbs  %s (%s)\n",
                  v.ok() ? "yes" : "no", v.ok() ? v->c_str() : v.message().c_str());
      return 0;
    }
    if (cmd == "keygen" || cmd == "pubkey") {
      need(1);
      NodeKey k = cmd == "keygen" ? NodeKey::generate() : NodeKey::from_file(args[1]);
      if (cmd == "keygen") k.write_file(args[1]);
      std::printf("%s\n", format_public_key(k.public_key()).c_str());
      return 0;
    }
    if (cmd == "segment") {
      need(2);
      const std::string& sub = args[1];
      if (sub == "create") {
        need(3);
        auto s = SharedSegment::create(args[2], num(args[3], "size"), 0660);
        std::printf("created %s: %" PRIu64 " bytes, incarnation %016" PRIx64 "\n", args[2].c_str(),
                    uint64_t(s.size()), s.incarnation());
        return 0;
      }
      if (sub == "info") {
        auto s = SharedSegment::open(args[2]);
        auto* h = s.header();
        uint64_t now = monotonic_ns(), lease = h->lease_deadline_ns.load();
        static const char* states[] = {"creating", "live", "revoked"};
        uint64_t st = h->state.load();
        std::printf("segment      %s\nbytes        %" PRIu64 "\nincarnation  %016" PRIx64
                    "\ncreator pid  %" PRIu64 "\nstate        %s\nlease        %s\n",
                    args[2].c_str(), uint64_t(h->data_len), h->incarnation, h->creator_pid,
                    st < 3 ? states[st] : "?",
                    lease == 0    ? "never exported"
                    : lease > now ? "held by an exporter"
                                  : "expired (no exporter)");
        return 0;
      }
      if (sub == "rm") {
        SharedSegment::unlink(args[2]);
        return 0;
      }
      usage_error("unknown segment command " + sub);
    }
    need(1);
    ClientOptions o;
    o.secret = Secret::from_file(secret_file);
    if (!cli.node_key_file.empty()) {
      o.identity.node = cli.node_name;
      o.identity.key = NodeKey::from_file(cli.node_key_file);
    }
    o.op_timeout = timeout;
    o.connect_timeout = timeout;
    auto c = connect(args[1], o);
    if (cmd == "lookup") {
      need(2);
      auto r = c->lookup(args[2]);
      std::printf("region %s at %s: addr 0x%" PRIx64 " len %" PRIu64 " key 0x%016" PRIx64 "\n",
                  args[2].c_str(), r.node.c_str(), r.addr, r.len, r.key);
    } else if (cmd == "read") {
      need(3);
      auto r = c->lookup(args[2]);
      uint64_t off = num(args[3], "offset"), len = args.size() > 4 ? num(args[4], "length") : 8;
      std::vector<uint8_t> buf(len);
      c->read(r, off, buf.data(), len);
      for (size_t i = 0; i < buf.size(); i += 16) {
        std::printf("%08zx ", size_t(off + i));
        for (size_t j = i; j < std::min(buf.size(), i + 16); ++j) std::printf(" %02x", buf[j]);
        std::printf("\n");
      }
      if (len == 8) {
        uint64_t v;
        std::memcpy(&v, buf.data(), 8);
        std::printf("u64 %" PRIu64 "\n", v);
      }
    } else if (cmd == "write-u64") {
      need(4);
      auto r = c->lookup(args[2]);
      uint64_t v = num(args[4], "value");
      c->write(r, num(args[3], "offset"), &v, 8);
    } else if (cmd == "faa") {
      need(4);
      auto r = c->lookup(args[2]);
      std::printf("%" PRIu64 "\n", c->faa64(r, num(args[3], "offset"), num(args[4], "addend")));
    } else if (cmd == "cas") {
      need(5);
      auto r = c->lookup(args[2]);
      std::printf("%" PRIu64 "\n", c->cas64(r, num(args[3], "offset"), num(args[4], "expected"),
                                            num(args[5], "new value")));
    } else if (cmd == "call") {
      need(2);
      std::string body = args.size() > 3 ? args[3] : "";
      auto reply =
          c->call(args[2], std::span(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
      std::fwrite(reply.data(), 1, reply.size(), stdout);
      if (!reply.empty() && reply.back() != '\n') std::putchar('\n');
    } else if (cmd == "ping") {
      int n = args.size() > 2 ? int(num(args[2], "count")) : 10;
      std::vector<double> us;
      for (int i = 0; i < n; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        c->ping();
        us.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      std::sort(us.begin(), us.end());
      std::printf("%s (%s via %s): %d pings, min %.1f us, median %.1f us\n", c->peer_uri().c_str(),
                  c->peer_name().c_str(), std::string(to_string(c->transport())).c_str(), n,
                  us.front(), us[us.size() / 2]);
    } else {
      usage_error("unknown command " + cmd);
    }
  } catch (const FabricError& e) {
    std::fprintf(stderr, "tierce-fabric: %s\n", e.what());
    return 1;
  }
  return 0;
}
