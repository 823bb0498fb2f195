// tests/php/test_php_fence.cc — the fence check (php_ext/fence.h, docs/php_extension.md "The
// fence check") inside PHP's embed SAPI against a real MariaDB: a topology with an [arbiter]
// (table tierce.fence, this node app1; no homes are needed: the database decides). mysqli and PDO
// writes commit while app1's row says 'in' and keep what the app reads of them (affected rows,
// insert id, info, errors); with 'out' or no row they are refused (the table unchanged, a warning
// naming the node); the check's S lock holds a home's bump off until the transaction ends; a
// transaction that checks after a bump is refused; reads are never checked; multi-statement texts;
// tierce_fence_check(); what it costs.
#define BOOST_TEST_MODULE php_fence
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <nlohmann/json.hpp>  // before PHP's headers (they #define snprintf)

extern "C" {
#include <sapi/embed/php_embed.h>
#include "zend_ini.h"
}

#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>

#include "coherence/layout.h"
#include "fabric/segment.h"
#include "tests/agents/memd_test_util.h"
#include "tests/php/php_embed_util.h"
#include "tests/php/php_test_util.h"

using namespace std::chrono_literals;
using tierce_test::TempDir;
using tierce_test::write_file;
using json = nlohmann::json;

namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
  return s;
}

// The whole environment, once per process (PHP's embed SAPI starts once).
struct Env {
  TempDir dir;
  php_test::MariaDb db;
  std::string secret, topo_path;
  std::string prefix = "/tierce.phpfence" + std::to_string(::getpid());
  std::optional<php_test::Embed> embed;  // last: shut down first

  Env() {
    ::chmod(dir.path().c_str(), 0755);
    db.start(dir / "db", dir / "mariadb.log", dir / "sql.log");
    BOOST_REQUIRE(db.sql(kSetup) == 0);
    secret = tierce_test::make_secret(dir);
    topo_path = dir / "cluster.toml";
    // The homes (memd) are not started: the fence needs the database only.
    std::string t = "[cluster]\nname = \"fence\"\nsecret_file = \"" + secret +
                    "\"\ntransport = \"tcp\"\nversion_slots = 4096\n"
                    "[coherence]\nlease_ms = 1000\nclock_skew_ms = 20\n"
                    "[arbiter]\ntable = \"tierce.fence\"\n";
    for (const char* n : {"app1", "app2"})
      t += std::string("[[node]]\nname = \"") + n +
           "\"\nrole = \"app\"\nmemd = [\"tcp://127.0.0.1:" +
           std::to_string(tierce_test::free_port()) + "\"]\nsegment_prefix = \"" + prefix + "." +
           n + "\"\n";
    write_file(topo_path, t);
    std::string ini =
        "extension=mysqlnd\nextension=mysqli\nextension=pdo\nextension=pdo_mysql\n"
        "extension=" TIERCE_PHP_EXTENSION
        "\n"
        "display_errors=stderr\nerror_reporting=E_ALL\nlog_errors=1\nerror_log=" +
        (dir / "php-error.log") + "\n" + "tierce.topology=" + topo_path +
        "\ntierce.node=app1\n"
        "mysqli.default_socket=" +
        db.socket() + "\npdo_mysql.default_socket=" + db.socket() + "\n";
    write_file(dir / "php.ini", ini);
    ::setenv("PHPRC", (dir / "php.ini").c_str(), 1);
    ::setenv("PHP_INI_SCAN_DIR", "", 1);
    embed.emplace();
  }
  ~Env() {
    embed.reset();  // PHP first, while the servers it talks to are up
    for (const char* n : {"app1", "app2"})
      tierce::fabric::SharedSegment::unlink(prefix + "." + n + tierce::coherence::kWriterSuffix);
  }

  // The arbiter table as the brief of issue 29 Part 2 gives it (the homes create it).
  static constexpr const char* kSetup =
      "CREATE DATABASE t; CREATE TABLE t.items (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
      "name VARCHAR(64) NOT NULL, price INT NOT NULL DEFAULT 0) ENGINE=InnoDB;"
      "INSERT INTO t.items (id, name, price) VALUES (1,'a',10),(2,'b',20),(3,'c',30),(4,'d',40),"
      "(5,'e',50);"
      "CREATE DATABASE tierce; CREATE TABLE IF NOT EXISTS tierce.fence ("
      "  node VARCHAR(64) NOT NULL PRIMARY KEY,"
      "  epoch BIGINT UNSIGNED NOT NULL,"
      "  state ENUM('in','out') NOT NULL,"
      "  changed_by VARCHAR(64) NOT NULL DEFAULT '',"
      "  changed_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE "
      "CURRENT_TIMESTAMP(3)) ENGINE=InnoDB;"
      "INSERT INTO tierce.fence (node, epoch, state) VALUES ('app1', 1, 'in'), ('app2', 1, 'in');";

  // Runs `code` (PHP, without the opening tag) as one request; returns what it printed. @SOCK@
  // in the code is the database's socket.
  std::string php(const std::string& code, const std::map<std::string, std::string>& ini = {}) {
    std::string out = embed->run(replace_all(kPrelude + code + kEpilogue, "@SOCK@", db.socket()), ini,
                                 /*as_script=*/true);
    BOOST_TEST_MESSAGE(out);
    return out;
  }

  // Every script: warnings collected (printed at the end as warnings=[...]), the fence's counters
  // before (printed at the end as deltas, fence=...), a mysqli and a PDO connection that throw.
  static constexpr const char* kPrelude = R"PHP(
$W = [];
set_error_handler(function ($no, $str) use (&$W) { $W[] = $str; return true; });
$C0 = tierce_status()['counters'];
function fence_delta() {
  global $C0;
  $c = tierce_status()['counters'];
  $d = [];
  foreach (['fence_checks', 'fence_refused', 'fence_wraps', 'fence_check_failures'] as $k)
    $d[$k] = $c[$k] - $C0[$k];
  return $d;
}
mysqli_report(MYSQLI_REPORT_ERROR | MYSQLI_REPORT_STRICT);
$db = new mysqli('localhost', 'root', '', 't');
$pdo = new PDO('mysql:dbname=t', 'root', '', [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
function other_sql($sql) {  // another connection (the mariadb client): its answer or its error
  return trim(str_replace("\n", " ", (string)shell_exec(
      'mariadb --no-defaults -S @SOCK@ -uroot -N -B t -e ' . escapeshellarg($sql) . ' 2>&1')));
}
$BUMP = "SET SESSION innodb_lock_wait_timeout = 1; UPDATE tierce.fence SET state = 'out', " .
        "epoch = epoch + 1, changed_by = 'app2' WHERE node = 'app1'; SELECT 'bumped'";
)PHP";
  static constexpr const char* kEpilogue = R"PHP(
echo "\nwarnings=", json_encode($W), "\n";
echo "fence=", json_encode(fence_delta()), "\n";
echo "@@", json_encode(tierce_status()), "\n";
)PHP";

  std::string price(int id) {
    return db.sql_value("SELECT price FROM items WHERE id = " + std::to_string(id));
  }
  void set_row(const std::string& sql) { BOOST_REQUIRE(db.sql(sql) == 0); }
};

Env* g_env = nullptr;
struct GlobalEnv {
  GlobalEnv() {
    for (const char* p : {"mariadbd", "mariadb-install-db", "mariadb"})
      if (!php_test::on_path(p)) {
        std::cout << "SKIP: " << p << " is not installed (Debian package mariadb-server / "
                  << "mariadb-client): the fence test needs a real MariaDB" << std::endl;
        std::exit(77);
      }
    g_env = new Env();
  }
  ~GlobalEnv() { delete g_env; }
};
BOOST_TEST_GLOBAL_FIXTURE(GlobalEnv);

std::string field(const std::string& out, const std::string& name) {  // "name=value\n"
  size_t p = out.find("\n" + name + "=");
  if (p == std::string::npos) {
    if (out.rfind(name + "=", 0) != 0) return "<none>";
    p = 0;
  } else {
    p += 1;
  }
  p += name.size() + 1;
  return out.substr(p, out.find('\n', p) - p);
}
json json_field(const std::string& out, const std::string& name) {
  std::string v = field(out, name);
  try {
    return json::parse(v);
  } catch (...) {
    BOOST_FAIL("no JSON " << name << " in:\n" << out);
  }
  return {};
}
json status_of(const std::string& out) {
  size_t at = out.rfind("\n@@");
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, "no status printed; PHP said:\n" << out);
  return json::parse(out.substr(at + 3));
}
int delta(const std::string& out, const char* counter) {
  return json_field(out, "fence")[counter].get<int>();
}

// app1's row 'out' (epoch 7, by home app2) for the scope; 'in' again after it.
struct NodeOut {
  NodeOut() {
    g_env->set_row(
        "UPDATE tierce.fence SET state = 'out', epoch = 7, changed_by = 'app2' "
        "WHERE node = 'app1'");
  }
  ~NodeOut() { g_env->db.sql("UPDATE tierce.fence SET state = 'in' WHERE node = 'app1'"); }
};

const char* kOutMessage =
    "PHPEXT0301 app node app1 is OUT of the fence (tierce.fence: epoch 7, by home app2 at ";

}  // namespace

BOOST_AUTO_TEST_CASE(the_fence_is_on_with_an_arbiter) {
  json s = status_of(g_env->php(""));
  BOOST_TEST(s["fence"]["enabled"].get<bool>());
  BOOST_TEST(s["fence"]["table"].get<std::string>() == "tierce.fence");
  BOOST_TEST(s["fence"]["node"].get<std::string>() == "app1");
  BOOST_TEST(s["cluster"].get<bool>(), s["cluster_error"]);
}

BOOST_AUTO_TEST_CASE(admitted_mysqli_writes_commit_and_keep_what_the_app_reads) {
  std::string out = g_env->php(R"PHP(
$db->query("UPDATE items SET price = 11 WHERE id = 1");
echo "affected=", $db->affected_rows, "\n";
echo "info=", $db->info, "\n";
$db->query("INSERT INTO items (name, price) VALUES ('new', 1)");
echo "insert_id=", $db->insert_id, "\n";
$st = $db->prepare("UPDATE items SET price = ? WHERE id = ?");
$p = 22; $id = 2; $st->bind_param('ii', $p, $id); $st->execute();
echo "stmt_affected=", $st->affected_rows, "\n";
$db->execute_query("UPDATE items SET price = ? WHERE id = ?", [33, 3]);
echo "open_after_autocommit=", $db->query("SELECT @@in_transaction")->fetch_row()[0], "\n";
$db->begin_transaction();
$db->query("UPDATE items SET price = 44 WHERE id = 4");
$db->query("UPDATE items SET price = 45 WHERE id = 4");
$db->commit();
$db->autocommit(false);
$db->query("UPDATE items SET price = 55 WHERE id = 5"); $db->commit();
$db->query("UPDATE items SET price = 56 WHERE id = 5"); $db->commit();
$db->autocommit(true);
$db->begin_transaction();
$db->multi_query("UPDATE items SET price = 1 WHERE id = 1; UPDATE items SET price = 2 WHERE id = 2");
while ($db->more_results() && $db->next_result()) {}
$db->commit();
)PHP");
  BOOST_TEST(field(out, "affected") == "1");
  BOOST_TEST(field(out, "info").rfind("Rows matched: 1", 0) == 0, field(out, "info"));
  BOOST_TEST(std::stoi("0" + field(out, "insert_id")) > 5, field(out, "insert_id"));
  BOOST_TEST(field(out, "stmt_affected") == "1");
  BOOST_TEST(field(out, "open_after_autocommit") == "0");
  BOOST_TEST(json_field(out, "warnings").empty());
  BOOST_TEST(g_env->price(1) == "1");
  BOOST_TEST(g_env->price(2) == "2");
  BOOST_TEST(g_env->price(3) == "33");
  BOOST_TEST(g_env->price(4) == "45");
  BOOST_TEST(g_env->price(5) == "56");
  // one check per write transaction: 4 autocommit writes (each wrapped), the explicit one, the two
  // of autocommit off, the multi_query's
  BOOST_TEST(delta(out, "fence_checks") == 8);
  BOOST_TEST(delta(out, "fence_wraps") == 4);
  BOOST_TEST(delta(out, "fence_refused") == 0);
}

BOOST_AUTO_TEST_CASE(admitted_pdo_writes_commit) {
  std::string out = g_env->php(R"PHP(
echo "exec=", $pdo->exec("UPDATE items SET price = 61 WHERE id = 1"), "\n";
$pdo->exec("INSERT INTO items (name, price) VALUES ('p', 1)");
echo "last_id=", $pdo->lastInsertId(), "\n";
$st = $pdo->prepare("UPDATE items SET price = :p WHERE id = :id");
$st->execute([':p' => 62, ':id' => 2]);
echo "rows=", $st->rowCount(), "\n";
$pdo->setAttribute(PDO::ATTR_EMULATE_PREPARES, false);
$st = $pdo->prepare("UPDATE items SET price = ? WHERE id = ?");
$st->execute([63, 3]);
$pdo->beginTransaction();
$pdo->exec("UPDATE items SET price = 64 WHERE id = 4");
$pdo->exec("UPDATE items SET price = 65 WHERE id = 4");
$pdo->commit();
echo "in_transaction=", var_export($pdo->inTransaction(), true), "\n";
// several statements in autocommit: PDO::exec reads all their results, the COMMIT follows
$pdo->exec("UPDATE items SET price = 66 WHERE id = 5; UPDATE items SET price = 67 WHERE id = 1");
)PHP");
  BOOST_TEST(field(out, "exec") == "1");
  BOOST_TEST(std::stoi("0" + field(out, "last_id")) > 5, field(out, "last_id"));
  BOOST_TEST(field(out, "rows") == "1");
  BOOST_TEST(field(out, "in_transaction") == "false");
  BOOST_TEST(json_field(out, "warnings").empty());
  BOOST_TEST(g_env->price(1) == "67");
  BOOST_TEST(g_env->price(2) == "62");
  BOOST_TEST(g_env->price(3) == "63");
  BOOST_TEST(g_env->price(4) == "65");
  BOOST_TEST(g_env->price(5) == "66");
  BOOST_TEST(delta(out, "fence_checks") == 6);
  BOOST_TEST(delta(out, "fence_wraps") == 5);
}

BOOST_AUTO_TEST_CASE(a_failed_write_keeps_its_error_and_holds_no_lock) {
  std::string out = g_env->php(R"PHP(
mysqli_report(MYSQLI_REPORT_OFF);
$r = $db->query("INSERT INTO items (id, name) VALUES (1, 'dup')");
echo "ok=", var_export($r, true), "\n";
echo "errno=", $db->errno, "\n";
echo "error=", $db->error, "\n";
echo "open=", $db->query("SELECT @@in_transaction")->fetch_row()[0], "\n";
try { $pdo->exec("INSERT INTO items (id, name) VALUES (2, 'dup')"); echo "pdo=inserted\n"; }
catch (PDOException $e) { echo "pdo=", $e->errorInfo[1], "\n"; }
// as autocommit would: a multi-statement text whose second statement fails keeps its first
try { $pdo->exec("UPDATE items SET price = 1502 WHERE id = 2; INSERT INTO items (id, name) VALUES (1, 'dup')"); }
catch (PDOException $e) { echo "pdo_multi=", $e->errorInfo[1], "\n"; }
// ... and a write that succeeded stays even when the driver throws after it (no index used)
mysqli_report(MYSQLI_REPORT_ALL);
try { $db->query("UPDATE items SET price = 1501 WHERE name = 'a'"); echo "index=quiet\n"; }
catch (mysqli_sql_exception $e) { echo "index=", $e->getMessage(), "\n"; }
mysqli_report(MYSQLI_REPORT_OFF);
// nothing is left locked: another connection takes the row and app1's fence row at once
echo "other=", other_sql("SET SESSION innodb_lock_wait_timeout = 1; " .
                         "UPDATE items SET name = name WHERE id = 1; " .
                         "UPDATE tierce.fence SET epoch = epoch WHERE node = 'app1'; SELECT 'free'"), "\n";
)PHP");
  BOOST_TEST(field(out, "ok") == "false");
  BOOST_TEST(field(out, "errno") == "1062");
  BOOST_TEST(field(out, "error").find("Duplicate entry '1'") != std::string::npos,
             field(out, "error"));
  BOOST_TEST(field(out, "open") == "0");
  BOOST_TEST(field(out, "pdo") == "1062");
  BOOST_TEST(field(out, "other") == "free");
  BOOST_TEST(field(out, "pdo_multi") == "1062");
  BOOST_TEST(g_env->price(2) == "1502");
  BOOST_TEST(field(out, "index").find("No index used") != std::string::npos, field(out, "index"));
  BOOST_TEST(g_env->price(1) == "1501");
}

BOOST_AUTO_TEST_CASE(an_out_node_s_writes_are_refused) {
  g_env->set_row("UPDATE t.items SET price = id * 10");
  std::string out;
  {
    NodeOut out_of_the_fence;
    out = g_env->php(R"PHP(
try { $db->query("UPDATE items SET price = 700 WHERE id = 1"); echo "strict=written\n"; }
catch (mysqli_sql_exception $e) { echo "strict=", $e->getCode(), "\n"; }
try { $db->execute_query("UPDATE items SET price = ? WHERE id = ?", [701, 1]); echo "execute_query=written\n"; }
catch (mysqli_sql_exception $e) { echo "execute_query=", $e->getCode(), "\n"; }
mysqli_report(MYSQLI_REPORT_OFF);
$r = $db->query("INSERT INTO items (name, price) VALUES ('x', 702)");
echo "silent=", var_export($r, true), " ", $db->errno, "\n";
$st = $db->prepare("UPDATE items SET price = ? WHERE id = ?");
$p = 703; $id = 2; $st->bind_param('ii', $p, $id);
echo "prepared=", var_export($st->execute(), true), " ", $st->errno, "\n";
// an explicit transaction: it reads; its first write and every later one fail; COMMIT commits nothing
$db->begin_transaction();
echo "read=", $db->query("SELECT price FROM items WHERE id = 3")->fetch_row()[0], "\n";
$a = $db->query("UPDATE items SET price = 704 WHERE id = 3");
$b = $db->query("DELETE FROM items WHERE id = 4");
echo "txn=", var_export($a, true), " ", var_export($b, true), " ", $db->errno, "\n";
echo "read_after=", $db->query("SELECT price FROM items WHERE id = 3")->fetch_row()[0], "\n";
echo "commit=", var_export($db->commit(), true), "\n";
// autocommit off: the same in its implicit transactions
$db->autocommit(false);
echo "autocommit_off=", var_export($db->query("UPDATE items SET price = 705 WHERE id = 5"), true), "\n";
$db->commit();
$db->autocommit(true);
// DDL would end a READ ONLY transaction and run outside it: it is not run at all
try { $db->query("CREATE TABLE zz (a INT)"); echo "ddl=created\n"; }
catch (TierceException $e) { echo "ddl=", $e->getCode(), "\n"; }
try { $pdo->exec("UPDATE items SET price = 706 WHERE id = 1"); echo "pdo=written\n"; }
catch (PDOException $e) { echo "pdo=", $e->errorInfo[1], "\n"; }
$pdo->beginTransaction();
try { $pdo->prepare("UPDATE items SET price = ? WHERE id = ?")->execute([707, 2]); echo "pdo_txn=written\n"; }
catch (PDOException $e) { echo "pdo_txn=", $e->errorInfo[1], "\n"; }
$pdo->commit();
// DDL as the first write of a transaction: not run, and the transaction goes on READ ONLY
$pdo->beginTransaction();
try { $pdo->exec("CREATE TABLE zz2 (a INT)"); echo "pdo_ddl=created\n"; }
catch (TierceException $e) { echo "pdo_ddl=", $e->getCode(), "\n"; }
echo "pdo_still_in=", var_export($pdo->inTransaction(), true), "\n";
try { $pdo->exec("UPDATE items SET price = 708 WHERE id = 3"); echo "pdo_after_ddl=written\n"; }
catch (PDOException $e) { echo "pdo_after_ddl=", $e->errorInfo[1], "\n"; }
$pdo->commit();
echo "reads=", count($pdo->query("SELECT * FROM items")->fetchAll()), "\n";
)PHP");
  }
  BOOST_TEST(field(out, "strict") == "1792");
  BOOST_TEST(field(out, "execute_query") == "1792");
  BOOST_TEST(field(out, "silent") == "false 1792");
  BOOST_TEST(field(out, "prepared") == "false 1792");
  BOOST_TEST(field(out, "read") == "30");
  BOOST_TEST(field(out, "txn") == "false false 1792");
  BOOST_TEST(field(out, "read_after") == "30");
  BOOST_TEST(field(out, "commit") == "true");
  BOOST_TEST(field(out, "autocommit_off") == "false");
  BOOST_TEST(field(out, "ddl") == "301");
  BOOST_TEST(field(out, "pdo") == "1792");
  BOOST_TEST(field(out, "pdo_txn") == "1792");
  BOOST_TEST(field(out, "pdo_ddl") == "301");
  BOOST_TEST(field(out, "pdo_still_in") == "true");
  BOOST_TEST(field(out, "pdo_after_ddl") == "1792");
  BOOST_TEST(std::stoi("0" + field(out, "reads")) >= 5);
  // the table is unchanged
  BOOST_TEST(
      g_env->db.sql_value("SELECT GROUP_CONCAT(price ORDER BY id) FROM items WHERE id <= 5") ==
      "10,20,30,40,50");
  BOOST_TEST(g_env->db.sql_value("SELECT COUNT(*) FROM items WHERE price >= 700") == "0");
  BOOST_TEST(g_env->db.sql_value("SHOW TABLES LIKE 'zz%'") == "");
  // each refused write (or transaction) is warned about, naming the node
  json w = json_field(out, "warnings");
  // one per refused autocommit write or transaction (not for the DDL: an exception)
  BOOST_TEST(w.size() == 8u, w.dump());
  for (const auto& m : w)
    BOOST_TEST(m.get<std::string>().find(kOutMessage) != std::string::npos, m);
  BOOST_TEST(delta(out, "fence_refused") >= 12);
  // and logged
  BOOST_TEST(php_test::tail_of(g_env->dir / "php-error.log").find(kOutMessage) !=
             std::string::npos);
  // re-admitted: writes go through again
  std::string again = g_env->php("$db->query('UPDATE items SET price = 11 WHERE id = 1');\n");
  BOOST_TEST(json_field(again, "warnings").empty());
  BOOST_TEST(g_env->price(1) == "11");
}

BOOST_AUTO_TEST_CASE(a_missing_row_or_a_failed_check_refuses) {
  g_env->set_row("DELETE FROM tierce.fence WHERE node = 'app1'");
  std::string missing = g_env->php(R"PHP(
try { $db->query("UPDATE items SET price = 800 WHERE id = 1"); echo "write=written\n"; }
catch (mysqli_sql_exception $e) { echo "write=", $e->getCode(), "\n"; }
)PHP");
  g_env->set_row("INSERT INTO tierce.fence (node, epoch, state) VALUES ('app1', 1, 'in')");
  BOOST_TEST(field(missing, "write") == "1792");
  json w = json_field(missing, "warnings");
  BOOST_REQUIRE(w.size() == 1u);
  BOOST_TEST(w[0].get<std::string>().find("PHPEXT0302 app node app1 has no row in tierce.fence") !=
                 std::string::npos,
             w[0]);
  // the check itself fails (here: no table): refused too
  g_env->set_row("RENAME TABLE tierce.fence TO tierce.fence_moved");
  std::string failed = g_env->php(R"PHP(
try { $pdo->exec("UPDATE items SET price = 801 WHERE id = 1"); echo "write=written\n"; }
catch (PDOException $e) { echo "write=", $e->errorInfo[1], "\n"; }
)PHP");
  g_env->set_row("RENAME TABLE tierce.fence_moved TO tierce.fence");
  BOOST_TEST(field(failed, "write") == "1792");
  json f = json_field(failed, "warnings");
  BOOST_REQUIRE(f.size() == 1u);
  BOOST_TEST(f[0].get<std::string>().find(
                 "PHPEXT0303 the fence check of app node app1 failed (1146") != std::string::npos,
             f[0]);
  BOOST_TEST(delta(failed, "fence_check_failures") == 1);
  BOOST_TEST(g_env->price(1) != "800");
  BOOST_TEST(g_env->price(1) != "801");
}

BOOST_AUTO_TEST_CASE(the_check_s_lock_holds_a_bump_off_until_the_transaction_ends) {
  std::string out = g_env->php(R"PHP(
// an autocommit write holds nothing after it returned
$db->query("UPDATE items SET price = 901 WHERE id = 1");
echo "after_autocommit=", other_sql($BUMP), "\n";
other_sql("UPDATE tierce.fence SET state = 'in' WHERE node = 'app1'");
// a transaction that wrote holds its S lock on app1's row until it ends
$db->begin_transaction();
$db->query("UPDATE items SET price = 902 WHERE id = 2");
$t = microtime(true);
echo "during=", other_sql($BUMP), "\n";
echo "waited_ms=", round((microtime(true) - $t) * 1000), "\n";
echo "state_during=", other_sql("SELECT state FROM tierce.fence WHERE node = 'app1'"), "\n";
$db->commit();
echo "after_commit=", other_sql($BUMP), "\n";
// PDO the same
other_sql("UPDATE tierce.fence SET state = 'in' WHERE node = 'app1'");
$pdo->beginTransaction();
$pdo->exec("UPDATE items SET price = 903 WHERE id = 3");
echo "pdo_during=", other_sql($BUMP), "\n";
$pdo->commit();
echo "pdo_after_commit=", other_sql($BUMP), "\n";
)PHP");
  g_env->set_row("UPDATE tierce.fence SET state = 'in' WHERE node = 'app1'");
  BOOST_TEST(field(out, "after_autocommit") == "bumped");
  BOOST_TEST(field(out, "during").find("Lock wait timeout") != std::string::npos,
             field(out, "during"));
  BOOST_TEST(std::stoi("0" + field(out, "waited_ms")) >= 900);
  BOOST_TEST(field(out, "state_during") == "in");
  BOOST_TEST(field(out, "after_commit") == "bumped");
  BOOST_TEST(field(out, "pdo_during").find("Lock wait timeout") != std::string::npos);
  BOOST_TEST(field(out, "pdo_after_commit") == "bumped");
  // the transactions that checked before the bump committed (the homes catch up on them)
  BOOST_TEST(g_env->price(1) == "901");
  BOOST_TEST(g_env->price(2) == "902");
  BOOST_TEST(g_env->price(3) == "903");
  BOOST_TEST(json_field(out, "warnings").empty());
}

BOOST_AUTO_TEST_CASE(a_transaction_that_checks_after_the_bump_is_refused) {
  std::string out = g_env->php(R"PHP(
mysqli_report(MYSQLI_REPORT_OFF);
$db->begin_transaction();
// its snapshot is from before the bump; the locking read sees the bump all the same
echo "read=", $db->query("SELECT price FROM items WHERE id = 2")->fetch_row()[0], "\n";
echo "bump=", other_sql($BUMP), "\n";
echo "write=", var_export($db->query("UPDATE items SET price = 1001 WHERE id = 2"), true), " ", $db->errno, "\n";
$db->commit();
)PHP");
  g_env->set_row("UPDATE tierce.fence SET state = 'in' WHERE node = 'app1'");
  BOOST_TEST(field(out, "bump") == "bumped");
  BOOST_TEST(field(out, "write") == "false 1792");
  BOOST_TEST(g_env->price(2) == field(out, "read"));
  json w = json_field(out, "warnings");
  BOOST_REQUIRE(w.size() == 1u);
  BOOST_TEST(w[0].get<std::string>().find("PHPEXT0301 app node app1 is OUT of the fence") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(reads_are_never_checked) {
  NodeOut out_of_the_fence;  // reads work for an out node too
  std::string out = g_env->php(R"PHP(
$n = 0;
$n += count($db->query("SELECT * FROM items")->fetch_all());
$n += count($db->query("SELECT * FROM items WHERE id = 1 FOR UPDATE")->fetch_all());
$n += count($db->query("SELECT * FROM items WHERE id = 2 LOCK IN SHARE MODE")->fetch_all());
$db->query("SET @x = 1"); $db->query("SHOW TABLES")->fetch_all();
$st = $db->prepare("SELECT price FROM items WHERE id = ?"); $id = 3; $st->bind_param('i', $id);
$st->execute(); $n += count($st->get_result()->fetch_all());
$db->begin_transaction(); $n += count($db->query("SELECT * FROM items")->fetch_all()); $db->commit();
$n += count($pdo->query("SELECT * FROM items")->fetchAll());
$s = $pdo->prepare("SELECT * FROM items WHERE id = ?"); $s->execute([4]); $n += count($s->fetchAll());
echo "rows=", $n, "\n";
)PHP");
  BOOST_TEST(std::stoi("0" + field(out, "rows")) >= 19, field(out, "rows"));
  BOOST_TEST(delta(out, "fence_checks") == 0);
  BOOST_TEST(delta(out, "fence_refused") == 0);
  BOOST_TEST(json_field(out, "warnings").empty());
}

BOOST_AUTO_TEST_CASE(multi_statement_texts) {
  std::string out = g_env->php(R"PHP(
// autocommit: the fence cannot wrap several statements whose results stay pending
try { $db->multi_query("UPDATE items SET price = 1101 WHERE id = 1; UPDATE items SET price = 1102 WHERE id = 2");
      echo "auto=ran\n"; }
catch (TierceException $e) { echo "auto=", $e->getCode(), "\n"; echo "auto_message=", $e->getMessage(), "\n"; }
// in a transaction it checks before them
$db->begin_transaction();
$db->multi_query("UPDATE items SET price = 1103 WHERE id = 3; UPDATE items SET price = 1104 WHERE id = 4");
while ($db->more_results() && $db->next_result()) {}
$db->commit();
// a write after a COMMIT in the same text belongs to a transaction no check ran in
$db->begin_transaction();
try { $db->multi_query("UPDATE items SET price = 1105 WHERE id = 5; COMMIT; UPDATE items SET price = 1106 WHERE id = 1");
      echo "boundary=ran\n"; }
catch (TierceException $e) { echo "boundary=", $e->getCode(), "\n"; }
$db->rollback();
)PHP");
  BOOST_TEST(field(out, "auto") == "304");
  BOOST_TEST(field(out, "auto_message").find("begin_transaction") != std::string::npos);
  BOOST_TEST(field(out, "boundary") == "304");
  BOOST_TEST(g_env->price(1) != "1101");
  BOOST_TEST(g_env->price(2) != "1102");
  BOOST_TEST(g_env->price(3) == "1103");
  BOOST_TEST(g_env->price(4) == "1104");
  BOOST_TEST(g_env->price(5) != "1105");
  BOOST_TEST(g_env->price(1) != "1106");
}

BOOST_AUTO_TEST_CASE(tierce_fence_check_runs_the_check_on_demand) {
  std::string out = g_env->php(R"PHP(
$db->begin_transaction();
echo "in_txn=", var_export(tierce_fence_check($db), true), "\n";
$c = tierce_status()['counters']['fence_checks'];
$db->query("UPDATE items SET price = 1201 WHERE id = 1");  // checked already: no second check
echo "extra_checks=", tierce_status()['counters']['fence_checks'] - $c, "\n";
$db->commit();
echo "outside=", var_export(tierce_fence_check($db), true), "\n";
$pdo->beginTransaction();
echo "pdo=", var_export(tierce_fence_check($pdo), true), "\n";
$pdo->rollBack();
try { tierce_fence_check(new stdClass); } catch (TypeError $e) { echo "type=", $e->getMessage(), "\n"; }
echo "out_bump=", other_sql($BUMP), "\n";
$db->begin_transaction();
echo "out=", var_export(tierce_fence_check($db), true), "\n";
$db->rollback();
// a transaction refused by the observer stays refused, even once the row says 'in' again
mysqli_report(MYSQLI_REPORT_OFF);
$db->begin_transaction();
$db->query("UPDATE items SET price = 1202 WHERE id = 2");
other_sql("UPDATE tierce.fence SET state = 'in' WHERE node = 'app1'");
echo "refused_txn=", var_export(tierce_fence_check($db), true), "\n";
$db->rollback();
$db->begin_transaction();
echo "next_txn=", var_export(tierce_fence_check($db), true), "\n";
$db->rollback();
)PHP");
  g_env->set_row("UPDATE tierce.fence SET state = 'in' WHERE node = 'app1'");
  BOOST_TEST(field(out, "in_txn") == "true");
  BOOST_TEST(field(out, "extra_checks") == "0");
  BOOST_TEST(field(out, "outside") == "false");
  BOOST_TEST(field(out, "pdo") == "true");
  BOOST_TEST(field(out, "type").find("must be of type mysqli|PDO") != std::string::npos);
  BOOST_TEST(field(out, "out") == "false");
  BOOST_TEST(field(out, "refused_txn") == "false");
  BOOST_TEST(field(out, "next_txn") == "true");
  BOOST_TEST(g_env->price(1) == "1201");
  json w = json_field(out, "warnings");
  BOOST_REQUIRE(w.size() == 4u);
  BOOST_TEST(w[0].get<std::string>().find("PHPEXT0306") != std::string::npos);
  BOOST_TEST(w[1].get<std::string>().find("PHPEXT0301 app node app1 is OUT") != std::string::npos);
  BOOST_TEST(w[2].get<std::string>().find("PHPEXT0301 app node app1 is OUT") != std::string::npos);
  BOOST_TEST(w[3].get<std::string>().find("stays read-only") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_session_reset_starts_over) {
  // change_user ends the transaction on the server: the next write is checked again. (mysqlnd
  // keeps the status from before the reset: the check finds no transaction open after all, and
  // the write is wrapped: a second check in its own transaction.)
  std::string out = g_env->php(R"PHP(
$db->begin_transaction();
$db->query("UPDATE items SET price = 1301 WHERE id = 1");
$db->change_user('root', '', 't');
$db->query("UPDATE items SET price = 1302 WHERE id = 2");
)PHP");
  BOOST_TEST(delta(out, "fence_checks") >= 2);
  BOOST_TEST(delta(out, "fence_wraps") == 1);  // autocommit after the reset
  BOOST_TEST(g_env->price(2) == "1302");
  BOOST_TEST(g_env->price(1) != "1301");  // rolled back by the reset
}

BOOST_AUTO_TEST_CASE(automatic_mode_is_fenced_too) {
  std::string out = g_env->php("$db->query('UPDATE items SET price = 1401 WHERE id = 1');\n",
                               {{"tierce.auto", "1"}});
  json s = status_of(out);
  BOOST_TEST(delta(out, "fence_checks") == 1);
  bool named = false;
  for (const auto& n : s["request"]["invalidates"]) named |= n.get<std::string>() == "row:items:1";
  BOOST_TEST(named, s["request"].dump());
  BOOST_TEST(g_env->price(1) == "1401");
}

BOOST_AUTO_TEST_CASE(what_the_fence_costs) {
  // Reported, not asserted: the fence's own round trips per autocommit write (BEGIN, the check,
  // COMMIT) and per transaction (the check), against the whole write.
  std::string out = g_env->php(R"PHP(
$n = 300;
$t = microtime(true);
for ($i = 0; $i < $n; $i++) $db->query("UPDATE items SET price = $i WHERE id = 1");
echo "autocommit_us=", round((microtime(true) - $t) / $n * 1e6), "\n";
$c = tierce_status()['counters'];
$t = microtime(true);
for ($i = 0; $i < $n; $i++) { $db->begin_transaction(); $db->query("UPDATE items SET price = $i WHERE id = 2"); $db->commit(); }
echo "transaction_us=", round((microtime(true) - $t) / $n * 1e6), "\n";
$d = tierce_status()['counters'];
echo "fence_us_per_transaction=", round(($d['fence_us'] - $c['fence_us']) / $n), "\n";
$t = microtime(true);
$db->begin_transaction();
for ($i = 0; $i < $n; $i++) $db->query("UPDATE items SET price = $i WHERE id = 3");
$db->commit();
echo "in_one_transaction_us=", round((microtime(true) - $t) / $n * 1e6), "\n";
echo "fence_us_per_wrap=", round(($c['fence_us'] - $C0['fence_us']) / $n), "\n";
)PHP");
  BOOST_TEST_MESSAGE("autocommit write: "
                     << field(out, "autocommit_us") << " us, of which the fence "
                     << field(out, "fence_us_per_wrap") << " us (BEGIN, check, COMMIT)");
  BOOST_TEST_MESSAGE("BEGIN + write + COMMIT: "
                     << field(out, "transaction_us") << " us, of which the fence "
                     << field(out, "fence_us_per_transaction") << " us (the check)");
  BOOST_TEST_MESSAGE("a write in a long transaction (checked once): "
                     << field(out, "in_one_transaction_us") << " us");
  std::cout << "fence cost: autocommit write " << field(out, "autocommit_us") << " us (fence "
            << field(out, "fence_us_per_wrap") << " us); BEGIN+write+COMMIT "
            << field(out, "transaction_us") << " us (fence "
            << field(out, "fence_us_per_transaction") << " us); a write in a long transaction "
            << field(out, "in_one_transaction_us") << " us" << std::endl;
  BOOST_TEST(delta(out, "fence_wraps") == 300);
  BOOST_TEST(delta(out, "fence_checks") == 601);
}
