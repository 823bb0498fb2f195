// benchmarks/php_ext/php_ext_cost.cc — what the tierce PHP extension costs per SQL call, measured
// inside PHP's embed SAPI (libphp8.2-embed) against a real MariaDB. A benchmark, never a test.
//
// One process = one mode (PHP loads an extension once per process, so the three modes are three
// processes; benchmarks/php_ext/cost.py runs them alternately, several rounds):
//   --mode none   the extension is not loaded
//   --mode off    loaded, tierce.auto=0 (observers installed, nothing derived)
//   --mode auto   loaded, tierce.auto=1 (every mysqli call observed, SQL -> dependency names)
//
// Each of --requests PHP requests runs --batch prepared `SELECT ... FROM items WHERE id = ?`
// (prepare + bind_param once per request, then execute + get_result + fetch per query: one observed
// call per query) and --batch `$db->query("SELECT ... WHERE id = <literal>")` calls (one observed
// call each, every SQL text new: no hit in the extension's cache of compiled SQL), then --batch
// query() calls over 20 repeated texts (ids 1..20: compiled once, then cache hits). A request is a page: its tracker holds `batch` row names, like a page that reads
// `batch` rows. Only the loops are timed (hrtime inside PHP); request start-up / shutdown and the
// connect are not.
//
// MariaDB: --socket SOCK uses a running server (database `bench` is created if missing); without
// it, the program starts its own as user mysql in a temp directory (mariadb-install-db + mariadbd,
// as tests/php/test_php_embed.cc does) and stops it at the end.
//
// Prints one line: PHP_EXT_COST {json} with ns per query of each loop, the extension's counters
// over the timed requests (observed calls, observe_ns) and the parameters.

#include <sapi/embed/php_embed.h>

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#ifndef TIERCE_PHP_EXTENSION
#define TIERCE_PHP_EXTENSION ""
#endif
#ifndef TIERCE_SAMPLE_SCHEMA
#define TIERCE_SAMPLE_SCHEMA ""
#endif

namespace {

std::string g_out;
pid_t g_own_db = -1;  // our own mariadbd, killed on every exit path (it drops PR_SET_PDEATHSIG)
size_t ub_write(const char* s, size_t n) {
  g_out.append(s, n);
  return n;
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "php_ext_cost: %s\n", msg.c_str());
  if (g_own_db > 0) ::kill(g_own_db, SIGTERM);
  std::exit(1);
}

pid_t spawn(const std::vector<std::string>& argv, const std::string& log) {
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execvp(a[0], a.data());
    ::_exit(127);
  }
  return pid;
}

int run_cmd(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = spawn(argv, log);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string read_file(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const std::string& p, const std::string& s) {
  std::ofstream f(p);
  f << s;
  if (!f) die("cannot write " + p);
}

// A MariaDB of our own (when no --socket): as user mysql in a temp directory.
struct OwnMariaDB {
  std::string dir, sock, log;
  pid_t pid = -1;
  void start() {
    char tmpl[] = "/tmp/php_ext_cost.XXXXXX";
    if (!::mkdtemp(tmpl)) die("mkdtemp failed");
    dir = tmpl;
    ::chmod(dir.c_str(), 0755);
    passwd* pw = ::getpwnam("mysql");
    if (!pw) die("no mysql user: apt-get install mariadb-server");
    std::string base = dir + "/db";
    ::mkdir(base.c_str(), 0755);
    if (::chown(base.c_str(), pw->pw_uid, pw->pw_gid) != 0) die("chown " + base + " (run as root)");
    // A private tmpdir: bootstraps running at once in one /tmp collide on temporary table names.
    std::string tmp = base + "/tmp";
    ::mkdir(tmp.c_str(), 0755);
    if (::chown(tmp.c_str(), pw->pw_uid, pw->pw_gid) != 0) die("chown " + tmp + " (run as root)");
    sock = base + "/mysqld.sock";
    log = dir + "/mariadb.log";
    if (run_cmd({"mariadb-install-db", "--no-defaults", "--user=mysql", "--datadir=" + base + "/data",
                 "--tmpdir=" + tmp, "--auth-root-authentication-method=socket", "--skip-test-db"},
                log) != 0)
      die("mariadb-install-db failed, see " + log);
    pid = spawn({"mariadbd", "--no-defaults", "--user=mysql", "--datadir=" + base + "/data",
                 "--tmpdir=" + tmp, "--socket=" + sock, "--skip-networking", "--innodb-buffer-pool-size=64M",
                 "--pid-file=" + base + "/mysqld.pid"}, log);
    g_own_db = pid;
    for (int i = 0; i < 600; ++i) {
      if (run_cmd({"mariadb", "--no-defaults", "-S", sock, "-uroot", "-e", "SELECT 1"}, dir + "/sql.log") == 0)
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    die("MariaDB did not start, see " + log);
  }
  ~OwnMariaDB() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      int st;
      ::waitpid(pid, &st, 0);
    }
    if (!dir.empty()) run_cmd({"rm", "-rf", dir}, "/dev/null");
  }
};

// The database `bench`: the sample app's schema, `rows` items (ids 1..rows).
void prepare_db(const std::string& sock, const std::string& schema, int rows, const std::string& log) {
  std::string sql = "CREATE DATABASE IF NOT EXISTS bench; USE bench; " + read_file(schema) +
                    "\nINSERT INTO items (id, category_id, seller_id, name, description, initial_price, "
                    "end_date) VALUES ";
  for (int i = 1; i <= rows; ++i) {
    if (i > 1 && i % 2000 == 1) sql += ";\nINSERT INTO items (id, category_id, seller_id, name, description, "
                                       "initial_price, end_date) VALUES ";
    sql += (i % 2000 == 1) ? "" : ",";
    sql += std::string("(") + std::to_string(i) + "," + std::to_string(1 + i % 20) +
           "," + std::to_string(1 + i % 100) + ",'item " + std::to_string(i) +
           "','a description of some length for the item',10.00,'2030-01-01 00:00:00')";
  }
  sql += ";\n";
  // Too long for one argv string (MAX_ARG_STRLEN): through a file.
  char tmpl[] = "/tmp/php_ext_cost_sql.XXXXXX";
  int fd = ::mkstemp(tmpl);
  if (fd < 0) die("mkstemp failed");
  ::close(fd);
  write_file(tmpl, sql);
  int rc = run_cmd({"mariadb", "--no-defaults", "-S", sock, "-uroot", "-e", std::string("SOURCE ") + tmpl}, log);
  ::unlink(tmpl);
  if (rc != 0)
    die("loading the bench database failed, see " + log);
}

std::string run_request(const std::string& code) {
  g_out.clear();
  if (php_request_startup() != SUCCESS) die("php_request_startup failed");
  std::string src = code;
  zend_try {
    zend_eval_stringl(src.data(), src.size(), nullptr, const_cast<char*>("php_ext_cost"));
  }
  zend_end_try();
  php_request_shutdown(nullptr);
  return g_out;
}

// Extracts `"key":number` from PHP's json_encode output (flat, numbers only).
double field(const std::string& js, const std::string& key) {
  std::string k = "\"" + key + "\":";
  size_t at = js.find(k);
  if (at == std::string::npos) die("no " + key + " in PHP output: " + js.substr(0, 2000));
  return std::strtod(js.c_str() + at + k.size(), nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "auto", sock, ext = TIERCE_PHP_EXTENSION, schema = TIERCE_SAMPLE_SCHEMA;
  int requests = 200, batch = 50, warm = 20, rows = 20000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--mode") mode = val();
    else if (a == "--socket") sock = val();
    else if (a == "--ext") ext = val();
    else if (a == "--schema") schema = val();
    else if (a == "--requests") requests = std::stoi(val());
    else if (a == "--batch") batch = std::stoi(val());
    else if (a == "--warm") warm = std::stoi(val());
    else if (a == "--rows") rows = std::stoi(val());
    else if (a == "--prepare-only") mode = "prepare-only";
    else {
      std::fprintf(stderr,
                   "usage: php_ext_cost --mode none|off|auto [--socket SOCK] [--ext tierce.so] "
                   "[--schema schema.sql] [--requests N] [--batch N] [--warm N] [--rows N]\n"
                   "       php_ext_cost --prepare-only --socket SOCK   (create database bench)\n");
      return 2;
    }
  }
  if (mode != "none" && mode != "off" && mode != "auto" && mode != "prepare-only") die("--mode none|off|auto");
  if (mode != "none" && mode != "prepare-only" && ::access(ext.c_str(), R_OK) != 0)
    die("extension " + ext + " not found (--ext)");

  OwnMariaDB own;
  if (sock.empty()) {
    own.start();
    sock = own.sock;
    prepare_db(sock, schema, rows, own.dir + "/sql.log");
  } else if (mode == "prepare-only") {
    prepare_db(sock, schema, rows, "/dev/stderr");
    return 0;
  }

  char tmpl[] = "/tmp/php_ext_cost_ini.XXXXXX";
  if (!::mkdtemp(tmpl)) die("mkdtemp failed");
  std::string ini_dir = tmpl;
  std::string ini = "extension=mysqlnd\nextension=mysqli\n";
  if (mode != "none")
    ini += "extension=" + ext + "\ntierce.auto=" + (mode == "auto" ? "1" : "0") + "\n" +
           "tierce.schema=" + schema + "\ntierce.lockd_socket=" + ini_dir + "/no-lockd.sock\n";
  ini += "display_errors=stderr\nerror_reporting=E_ALL\nmysqli.default_socket=" + sock + "\n";
  write_file(ini_dir + "/php.ini", ini);
  ::setenv("PHPRC", (ini_dir + "/php.ini").c_str(), 1);
  ::setenv("PHP_INI_SCAN_DIR", "", 1);
  php_embed_module.ub_write = ub_write;
  if (php_embed_init(0, nullptr) != SUCCESS) die("php_embed_init failed");
  // php_embed_init starts a request: end it, every measured request is ours.
  php_request_shutdown(nullptr);

  const std::string cols = "id, category_id, seller_id, name, max_bid, nb_bids, version";
  auto page = [&](int req) {
    std::string b = std::to_string(batch), r = std::to_string(rows), q = std::to_string(req);
    return std::string(
               "$db = new mysqli('localhost', 'root', '', 'bench');\n"
               "mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);\n"
               "$has = function_exists('tierce_status');\n"
               "function cpu_ns() { $r = getrusage(); return ($r['ru_utime.tv_sec'] + $r['ru_stime.tv_sec']) * 1000000000"
               " + ($r['ru_utime.tv_usec'] + $r['ru_stime.tv_usec']) * 1000; }\n"
               "$c0 = $has ? tierce_status()['counters'] : ['observed' => 0, 'observe_ns' => 0];\n"
               "$st = $db->prepare('SELECT " + cols + " FROM items WHERE id = ?');\n"
               "$id = 0; $st->bind_param('i', $id);\n"
               "$c1 = $has ? tierce_status()['counters'] : $c0;\n"
               "$t0 = hrtime(true); $u0 = cpu_ns();\n"
               "for ($i = 0; $i < " + b + "; $i++) {\n"
               "  $id = 1 + ((" + q + " * " + b + " + $i) * 7919) % " + r + ";\n"
               "  $st->execute(); $row = $st->get_result()->fetch_assoc();\n"
               "}\n"
               "$t1 = hrtime(true); $u1 = cpu_ns();\n"
               "$c2 = $has ? tierce_status()['counters'] : $c0;\n"
               "for ($i = 0; $i < " + b + "; $i++) {\n"
               "  $k = 1 + ((" + q + " * " + b + " + $i) * 104729) % " + r + ";\n"
               "  $row = $db->query('SELECT " + cols + " FROM items WHERE id = ' . $k)->fetch_assoc();\n"
               "}\n"
               "$t2 = hrtime(true); $u2 = cpu_ns();\n"
               "$c3 = $has ? tierce_status()['counters'] : $c0;\n"
               "for ($i = 0; $i < " + b + "; $i++) {\n"
               "  $row = $db->query('SELECT " + cols + " FROM items WHERE id = ' . (1 + $i % 20))->fetch_assoc();\n"
               "}\n"
               "$t3 = hrtime(true); $u3 = cpu_ns();\n"
               "$c4 = $has ? tierce_status()['counters'] : $c0;\n"
               "$deps = $has ? count(tierce_status()['request']['depends'] ?? []) : 0;\n"
               "echo json_encode(['prep_ns' => $t1 - $t0, 'query_ns' => $t2 - $t1, 'hot_ns' => $t3 - $t2,\n"
               "  'prep_cpu' => $u1 - $u0, 'query_cpu' => $u2 - $u1, 'hot_cpu' => $u3 - $u2,\n"
               "  'hot_observed' => $c4['observed'] - $c3['observed'],\n"
               "  'hot_observe_ns' => $c4['observe_ns'] - $c3['observe_ns'],\n"
               "  'prep_observed' => $c2['observed'] - $c1['observed'],\n"
               "  'prep_observe_ns' => $c2['observe_ns'] - $c1['observe_ns'],\n"
               "  'query_observed' => $c3['observed'] - $c2['observed'],\n"
               "  'query_observe_ns' => $c3['observe_ns'] - $c2['observe_ns'],\n"
               "  'setup_observed' => $c1['observed'] - $c0['observed'], 'depends' => $deps]);\n");
  };
  for (int i = 0; i < warm; ++i) {
    std::string out = run_request(page(i));
    field(out, "prep_ns");  // dies with PHP's output if the page failed
  }
  double prep_ns = 0, query_ns = 0, prep_obs = 0, prep_obs_ns = 0, q_obs = 0, q_obs_ns = 0, deps = 0;
  double hot_ns = 0, hot_obs = 0, hot_obs_ns = 0, prep_cpu = 0, query_cpu = 0, hot_cpu = 0;
  for (int i = 0; i < requests; ++i) {
    std::string out = run_request(page(warm + i));
    prep_ns += field(out, "prep_ns");
    query_ns += field(out, "query_ns");
    prep_obs += field(out, "prep_observed");
    prep_obs_ns += field(out, "prep_observe_ns");
    q_obs += field(out, "query_observed");
    q_obs_ns += field(out, "query_observe_ns");
    deps += field(out, "depends");
    hot_ns += field(out, "hot_ns");
    prep_cpu += field(out, "prep_cpu");
    query_cpu += field(out, "query_cpu");
    hot_cpu += field(out, "hot_cpu");
    hot_obs += field(out, "hot_observed");
    hot_obs_ns += field(out, "hot_observe_ns");
  }
  // php_embed_shutdown() ends a request itself: give it one (as the php_embed test does).
  if (php_request_startup() == SUCCESS) php_embed_shutdown();
  run_cmd({"rm", "-rf", ini_dir}, "/dev/null");
  double n = static_cast<double>(requests) * batch;
  std::printf(
      "PHP_EXT_COST {\"mode\": \"%s\", \"queries_per_loop\": %.0f, \"requests\": %d, \"batch\": %d, "
      "\"prep_ns_per_query\": %.1f, \"query_ns_per_query\": %.1f, \"prep_observed\": %.0f, "
      "\"prep_observe_ns\": %.0f, \"query_observed\": %.0f, \"query_observe_ns\": %.0f, "
      "\"hot_ns_per_query\": %.1f, \"hot_observed\": %.0f, \"hot_observe_ns\": %.0f, "
      "\"prep_cpu_ns_per_query\": %.1f, \"query_cpu_ns_per_query\": %.1f, \"hot_cpu_ns_per_query\": %.1f, "
      "\"depends_per_request\": %.1f}\n",
      mode.c_str(), n, requests, batch, prep_ns / n, query_ns / n, prep_obs, prep_obs_ns, q_obs, q_obs_ns,
      hot_ns / n, hot_obs, hot_obs_ns, prep_cpu / n, query_cpu / n, hot_cpu / n, deps / requests);
  return 0;
}
