// tools/tierce-check/options.cc — tierce-check's command line: the usage text, parsing and
// checking each option, and --cluster (cluster.json).
#include "check.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#ifndef TIERCE_VERSION
#define TIERCE_VERSION "0.0.0"  // set by CMake to the project version
#endif

namespace tcheck {
namespace {

const char* kUsage =
    "Usage: tierce-check [--cluster DIR/cluster.json] [--proxy URL]... [--app URL]...\n"
    "                    [--readers 8] [--writers 2] [--ops N | --duration S] [--write-ratio 0.1]\n"
    "                    [--hot 100] [--items 10000] [--users 2000] [--categories 20] [--seed 1]\n"
    "                    [--during \"SHELL COMMAND\"@SECONDS]... [--max-error-ratio 0.01]\n"
    "                    [--timeout 10] [--direct] [--json FILE] [--quiet]\n"
    "                    [--window NAME=FROM-TO]... [--no-pace] [--site HOST[:PORT]] [--strict]\n"
    "                    [--rate OPS_PER_S] [--timeline]\n"
    "                    [--sql-writers 0] [--sql-rate 20] [--sql-stale-bound-ms 1000] [--mariadb HOST[:PORT]]\n"
    "                    [--mariadb-user tierce] [--mariadb-password tierce] [--mariadb-database rubis]\n"
    "Readers GET item.php / category.php / user.php through the proxies (--direct: the app "
    "nodes);\n"
    "writers POST bid.php / edit.php to the app nodes. A read showing an entity version older "
    "than\n"
    "one whose update returned before the read started is a STALE READ.\n"
    "A read showing an entity version older than another read of that entity (through any proxy)\n"
    "showed, when that read returned before this one started, is a READ-READ INVERSION: always\n"
    "counted and reported (summary and --json \"read_inversions\", up to 5 examples); --strict "
    "makes\n"
    "inversions fail the run like stale reads (reads must then also agree with each other's "
    "real-time\n"
    "order, not only be fresh).\n"
    "--window NAME=FROM-TO (seconds since the start; repeatable, a NAME given again adds a "
    "range):\n"
    "reads, checked and stale reads, read-read inversions, writes with their latency p50/p99/max,\n"
    "and errors of the operations that started in it, printed and in --json \"windows\".\n"
    "--no-pace: readers and writers each go as fast as they can (--write-ratio only decides "
    "whether\n"
    "there are readers and writers at all): a stalled write path (a fault) does not hold reads "
    "back.\n"
    "--rate R: open loop: operations are issued on a schedule, R per second in all (reads\n"
    "R x (1 - write ratio), writes R x write ratio, each role's schedule shared by its threads),\n"
    "not when the previous one returned; latencies are measured from the scheduled time (so a\n"
    "stall shows as the queue it causes). Operations that start > 50 ms after their time are\n"
    "counted as late: many means the threads or the machine could not keep the rate. Implies\n"
    "--no-pace.\n"
    "--timeline: per-second counts (by the second the operation started or was scheduled) in\n"
    "--json \"timeline\": reads, stale reads, writes, their latency p50/p99, errors.\n"
    "--site: the Host header of reads through the proxies (default: each proxy's own address). "
    "Give\n"
    "the site name the proxies share, as a load balancer in front of them forwards it: the "
    "proxies\n"
    "then share cache keys (RCacheCoop).\n"
    "--sql-writers N: N more writer threads that update MariaDB directly, bypassing PHP (as a cron\n"
    "job or an administrator would: the app sends no invalidation), changing what bid.php / edit.php\n"
    "change, in one transaction each, and recording each entity's new version and commit time, at\n"
    "--sql-rate transactions per second in all (default 20; beside the --ops budget, until the\n"
    "readers are done: their row locks would otherwise serialize the PHP writers and set the\n"
    "run's length); --sql-rate 0: as fast as they can, sharing the writes' budget and pacing with\n"
    "the --writers. MariaDB: --mariadb HOST[:PORT] (TCP),\n"
    "--mariadb-user, --mariadb-password, --mariadb-database, or cluster.json's \"mariadb\".\n"
    "Their promise is BOUNDED staleness: a read that starts more than --sql-stale-bound-ms after\n"
    "such a commit and shows an older version of the entity is an SQL STALE READ (fails the run);\n"
    "one within the bound is not, but counts in the STALE WINDOW of that write: the start of the\n"
    "last read still showing an older version minus the commit time, 0 when none did (count, p50,\n"
    "p99, max, how many non-zero; --json \"sql\"). SQL errors (refused, deadlock, timeouts) count\n"
    "as write errors (kinds sql_*). Writes through PHP keep the strict rule above.\n"
    "Exit: 0 no stale read (and no SQL stale read), errors <= --max-error-ratio (and with --strict\n"
    "no read-read inversion);\n"
    "1 otherwise; 2 bad usage.\n";

long long to_ll(const std::string& opt, const std::string& v, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno || x < lo || x > hi)
    usage_error(opt + " wants an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
  return x;
}
double to_d(const std::string& opt, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !(x >= lo && x <= hi))
    usage_error(opt + " wants a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
  return x;
}
// --mariadb HOST[:PORT] (port 3306 when left out).
void parse_mariadb(const std::string& opt, const std::string& v, MariaDbTarget& m) {
  size_t colon = v.rfind(':');
  m.host = v.substr(0, colon);
  if (colon != std::string::npos) m.port = unsigned(to_ll(opt + " (port)", v.substr(colon + 1), 1, 65535));
  if (m.host.empty() || m.host.find_first_of(" \t/") != std::string::npos)
    usage_error(opt + " wants HOST[:PORT], got '" + v + "'");
}

// cluster.json's "mariadb" object: what the command line left out.
void load_cluster_mariadb(const nlohmann::json& j, MariaDbTarget& m) {
  auto db = j.find("mariadb");
  if (db == j.end() || !db->is_object()) return;
  auto str = [&](const char* k, std::optional<std::string>& dst) {
    auto v = db->find(k);
    if (!dst && v != db->end() && v->is_string()) dst = v->get<std::string>();
  };
  str("user", m.user);
  str("password", m.password);
  str("database", m.database);
  auto host = db->find("host"), port = db->find("port");
  if (m.host.empty() && host != db->end() && host->is_string()) {
    m.host = host->get<std::string>();
    if (port != db->end() && port->is_number_unsigned()) m.port = port->get<unsigned>();
  }
}

}  // namespace

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "tierce-check: %s\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (a == "-V" || a == "--version") {
      std::printf("tierce-check %s\n", TIERCE_VERSION);
      std::exit(0);
    }
    std::string v;
    bool has_inline = false;
    if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
      v = a.substr(a.find('=') + 1);
      a = a.substr(0, a.find('='));
      has_inline = true;
    }
    auto val = [&]() -> std::string {
      if (has_inline) return v;
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--proxy") o.proxies.push_back(val());
    else if (a == "--app") o.apps.push_back(val());
    else if (a == "--readers") o.readers = int(to_ll(a, val(), 0, 1024));
    else if (a == "--writers") o.writers = int(to_ll(a, val(), 0, 1024));
    else if (a == "--ops") o.ops = to_ll(a, val(), 1, 1LL << 40);
    else if (a == "--duration") o.duration = to_d(a, val(), 0.001, 1e7);
    else if (a == "--write-ratio") o.write_ratio = to_d(a, val(), 0, 1);
    else if (a == "--hot") o.hot = int(to_ll(a, val(), 1, 1LL << 30));
    else if (a == "--items") o.items = int(to_ll(a, val(), 1, 1LL << 30));
    else if (a == "--users") o.users = int(to_ll(a, val(), 1, 1LL << 30));
    else if (a == "--categories") o.categories = int(to_ll(a, val(), 1, 1LL << 30));
    else if (a == "--seed") o.seed = uint64_t(to_ll(a, val(), 0, (1LL << 62)));
    else if (a == "--during") {
      std::string s = val();
      size_t at = s.rfind('@');
      if (at == std::string::npos || at == 0) usage_error("--during wants \"COMMAND\"@SECONDS, got '" + s + "'");
      During d;
      d.command = s.substr(0, at);
      d.at_s = to_d("--during (seconds)", s.substr(at + 1), 0, 1e7);
      o.during.push_back(d);
    } else if (a == "--window") {
      std::string s = val();
      size_t eq = s.find('='), dash = eq == std::string::npos ? eq : s.find('-', eq + 1);
      if (eq == std::string::npos || eq == 0 || dash == std::string::npos)
        usage_error("--window wants NAME=FROM-TO (seconds), got '" + s + "'");
      std::string name = s.substr(0, eq);
      for (char c : name)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
          usage_error("--window NAME: letters, digits, '_', '-', '.' only, got '" + name + "'");
      double from = to_d("--window (FROM)", s.substr(eq + 1, dash - eq - 1), 0, 1e7);
      double to = to_d("--window (TO)", s.substr(dash + 1), 0, 1e7);
      if (to <= from) usage_error("--window '" + s + "' ends before it starts");
      auto it = std::find_if(o.windows.begin(), o.windows.end(), [&](const Window& w) { return w.name == name; });
      if (it == o.windows.end()) {
        o.windows.push_back(Window{name, {}});
        it = o.windows.end() - 1;
      }
      it->ranges.emplace_back(from, to);
    } else if (a == "--json") o.json_path = val();
    else if (a == "--cluster") o.cluster_path = val();
    else if (a == "--quiet") o.quiet = true;
    else if (a == "--site") {
      o.site = val();
      if (o.site.empty() || o.site.find_first_of(" \t\r\n/") != std::string::npos)
        usage_error("--site wants a host name with an optional :port, got '" + o.site + "'");
    }
    else if (a == "--direct") o.direct = true;
    else if (a == "--no-pace") o.pace = false;
    else if (a == "--strict") o.strict = true;
    else if (a == "--rate") {
      o.rate = to_d(a, val(), 0.01, 1e6);
      o.pace = false;
    } else if (a == "--timeline")
      o.timeline = true;
    else if (a == "--sql-writers") o.sql_writers = int(to_ll(a, val(), 0, 1024));
    else if (a == "--sql-stale-bound-ms") o.sql_stale_bound_ms = to_d(a, val(), 0, 1e7);
    else if (a == "--sql-rate") o.sql_rate = to_d(a, val(), 0, 1e6);
    else if (a == "--mariadb") parse_mariadb(a, val(), o.mariadb);
    else if (a == "--mariadb-user") o.mariadb.user = val();
    else if (a == "--mariadb-password") o.mariadb.password = val();
    else if (a == "--mariadb-database") o.mariadb.database = val();
    else if (a == "--max-error-ratio") o.max_error_ratio = to_d(a, val(), 0, 1);
    else if (a == "--timeout") o.timeout = to_d(a, val(), 0.01, 3600);
    else usage_error("unknown argument '" + a + "'");
  }
  if (o.ops && o.duration) usage_error("give --ops or --duration, not both");
  if (!o.ops && !o.duration) o.ops = 10000;
  return o;
}


// Fills URLs / sizes / cache kind from cluster.json where the command line left them out.
void load_cluster(Options& o) {
  std::ifstream f(o.cluster_path);
  if (!f) usage_error("cannot read --cluster file '" + o.cluster_path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    usage_error(o.cluster_path + ": not valid JSON: " + e.what());
  }
  std::vector<std::string> proxies, apps;
  if (auto nodes = j.find("nodes"); nodes != j.end() && nodes->is_array()) {
    for (const auto& n : *nodes) {
      if (!n.is_object()) continue;
      auto role = n.find("role"), url = n.find("url");
      if (role == n.end() || url == n.end() || !role->is_string() || !url->is_string()) continue;
      if (*role == "proxy") proxies.push_back(url->get<std::string>());
      else if (*role == "app") apps.push_back(url->get<std::string>());
    }
  }
  if (o.proxies.empty()) o.proxies = proxies;
  if (o.apps.empty()) o.apps = apps;
  if (auto opts = j.find("options"); opts != j.end() && opts->is_object()) {
    auto num = [&](const char* k, std::optional<int>& dst) {
      auto v = opts->find(k);
      if (!dst && v != opts->end() && v->is_number_integer()) dst = v->get<int>();
    };
    num("items", o.items);
    num("users", o.users);
    num("categories", o.categories);
    if (auto c = opts->find("cache"); c != opts->end() && c->is_string()) o.cache = c->get<std::string>();
  }
  load_cluster_mariadb(j, o.mariadb);
  if (auto st = j.find("state"); st != j.end() && st->is_string() && *st != "up")
    std::fprintf(stderr, "tierce-check: warning: %s says state '%s', not 'up'\n", o.cluster_path.c_str(),
                 st->get<std::string>().c_str());
}

}  // namespace tcheck
