// tierce-datagen — loads the RUBiS-like sample database (sample/schema.sql) with deterministic data.
//
//   tierce-datagen [--host 127.0.0.1] [--port 3306] [--user tierce] [--password tierce]
//                  [--database rubis] [--categories 20] [--users 2000] [--items 10000]
//                  [--bids 100000] [--seed 1] [--batch 1000] [--schema FILE]
//
// --schema FILE runs the file first (it drops and re-creates the tables). The same seed gives the
// same rows. Items' max_bid / nb_bids agree with their bids. Rows go in multi-row INSERTs (--batch
// rows per statement), one transaction per table. Exit 0 on success, 1 on a connection or SQL
// failure, 2 on a bad command line.

#include <mysql_driver.h>
#include <cppconn/connection.h>
#include <cppconn/exception.h>
#include <cppconn/statement.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#ifndef TIERCE_VERSION
#define TIERCE_VERSION "0.0.0"  // set by CMake to the project version
#endif

namespace {

struct Options {
  std::string host = "127.0.0.1";
  int port = 3306;
  std::string user = "tierce";
  std::string password = "tierce";
  std::string database = "rubis";
  long categories = 20;
  long users = 2000;
  long items = 10000;
  long bids = 100000;
  std::uint64_t seed = 1;
  long batch = 1000;
  std::string schema;
};

void usage(std::ostream& os) {
  os << "Usage: tierce-datagen [--host H] [--port P] [--user U] [--password PW] [--database DB]\n"
        "                      [--categories N] [--users N] [--items N] [--bids N] [--seed S]\n"
        "                      [--batch ROWS] [--schema FILE]\n"
        "Loads the Tierce sample (RUBiS-like) database. Defaults: 127.0.0.1:3306, tierce/tierce,\n"
        "rubis, 20 categories, 2000 users, 10000 items, 100000 bids, seed 1, 1000 rows per INSERT.\n"
        "--schema FILE runs FILE first (drops and re-creates the tables).\n";
}

// splitmix64: small, fast and identical on every platform (std:: distributions are not).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi] (inclusive); the modulo bias is irrelevant here.
  long range(long lo, long hi) { return lo + static_cast<long>(next() % static_cast<std::uint64_t>(hi - lo + 1)); }

 private:
  std::uint64_t s_;
};

bool parse_long(const char* s, long min, long& out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < min) return false;
  out = v;
  return true;
}

int parse_args(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(std::cout);
      std::exit(0);
    }
    if (a == "-V" || a == "--version") {
      std::cout << "tierce-datagen " << TIERCE_VERSION << "\n";
      std::exit(0);
    }
    if (i + 1 >= argc) {
      std::cerr << "tierce-datagen: " << a << " needs a value (or is unknown)\n";
      usage(std::cerr);
      return 2;
    }
    const char* v = argv[++i];
    long n = 0;
    auto num = [&](long min, long& dst) {
      if (!parse_long(v, min, n)) {
        std::cerr << "tierce-datagen: " << a << " wants an integer >= " << min << ", got '" << v << "'\n";
        return false;
      }
      dst = n;
      return true;
    };
    long port = 0, seed = 0;
    if (a == "--host") o.host = v;
    else if (a == "--port") { if (!num(1, port) || port > 65535) return 2; o.port = static_cast<int>(port); }
    else if (a == "--user") o.user = v;
    else if (a == "--password") o.password = v;
    else if (a == "--database") o.database = v;
    else if (a == "--categories") { if (!num(1, o.categories)) return 2; }
    else if (a == "--users") { if (!num(2, o.users)) return 2; }
    else if (a == "--items") { if (!num(0, o.items)) return 2; }
    else if (a == "--bids") { if (!num(0, o.bids)) return 2; }
    else if (a == "--seed") { if (!num(0, seed)) return 2; o.seed = static_cast<std::uint64_t>(seed); }
    else if (a == "--batch") { if (!num(1, o.batch)) return 2; }
    else if (a == "--schema") o.schema = v;
    else {
      std::cerr << "tierce-datagen: unknown option " << a << "\n";
      usage(std::cerr);
      return 2;
    }
  }
  if (o.bids > 0 && o.items == 0) {
    std::cerr << "tierce-datagen: --bids needs --items > 0\n";
    return 2;
  }
  return 0;
}

// Splits an SQL script on ';' outside quotes, dropping "-- " and "#" comment lines.
std::vector<std::string> split_sql(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (!quote && (c == '#' || (c == '-' && i + 1 < text.size() && text[i + 1] == '-'))) {
      while (i < text.size() && text[i] != '\n') ++i;
      cur += '\n';
      continue;
    }
    if (quote) {
      if (c == '\\' && i + 1 < text.size()) { cur += c; cur += text[++i]; continue; }
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"' || c == '`') {
      quote = c;
    } else if (c == ';') {
      if (cur.find_first_not_of(" \t\r\n") != std::string::npos) out.push_back(cur);
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (cur.find_first_not_of(" \t\r\n") != std::string::npos) out.push_back(cur);
  return out;
}

void append_escaped(std::string& dst, std::string_view s) {
  dst += '\'';
  for (char c : s) {
    if (c == '\'' || c == '\\') dst += '\\';
    dst += c;
  }
  dst += '\'';
}

std::string money(long cents) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld.%02ld", cents / 100, cents % 100);
  return buf;
}

// "2024-01-01 00:00:00" + seconds.
std::string datetime(long seconds_since_base) {
  // Base: 2024-01-01 00:00:00 UTC; days-from-civil arithmetic keeps it independent of the TZ.
  long days = seconds_since_base / 86400, rem = seconds_since_base % 86400;
  long z = days + 19723 + 719468;  // 19723 = days from 1970-01-01 to 2024-01-01
  long era = z / 146097, doe = z - era * 146097;
  long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  long y = yoe + era * 400, doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  long mp = (5 * doy + 2) / 153, d = doy - (153 * mp + 2) / 5 + 1, m = mp < 10 ? mp + 3 : mp - 9;
  if (m <= 2) ++y;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04ld-%02ld-%02ld %02ld:%02ld:%02ld", y, m, d, rem / 3600, rem / 60 % 60, rem % 60);
  return buf;
}

const char* const kWords[] = {"vintage", "rare",   "antique", "mint",    "boxed",  "signed", "classic",
                              "limited", "modern", "retro",   "handmade", "large", "small",  "golden",
                              "silver",  "wooden", "glass",   "leather", "red",    "blue"};
const char* const kThings[] = {"camera", "guitar", "watch", "lamp",  "book",   "bicycle", "chair", "vase",
                               "radio",  "poster", "coin",  "stamp", "record", "teapot",  "clock", "pen"};
const char* const kCategoryNames[] = {"Antiques", "Art",     "Books",   "Cameras",  "Clothing", "Coins",
                                      "Collectibles", "Computers", "Dolls", "Electronics", "Jewelry",
                                      "Movies",   "Music",   "Pottery", "Sports",   "Stamps",   "Tickets",
                                      "Toys",     "Travel",  "Watches"};

template <std::size_t N>
const char* pick(Rng& r, const char* const (&arr)[N]) {
  return arr[r.next() % N];
}

struct Item {
  long category, seller, initial_cents, max_cents = 0, nb_bids = 0, end_offset;
};

class Loader {
 public:
  Loader(sql::Connection& con, long batch) : con_(con), stmt_(con.createStatement()), batch_(batch) {}

  // Starts a multi-row INSERT "head VALUES ..." and flushes it every `batch` rows.
  void begin(std::string head) { head_ = std::move(head); rows_ = 0; sql_.clear(); }
  void row(const std::string& values) {
    if (rows_ == 0) { sql_ = head_; sql_ += " VALUES "; } else sql_ += ',';
    sql_ += values;
    if (++rows_ >= batch_) flush();
  }
  void flush() {
    if (rows_ > 0) stmt_->execute(sql_);
    rows_ = 0;
    sql_.clear();
  }
  void exec(const std::string& sql) { stmt_->execute(sql); }
  void commit() { con_.commit(); }

 private:
  sql::Connection& con_;
  std::unique_ptr<sql::Statement> stmt_;
  long batch_;
  std::string head_, sql_;
  long rows_ = 0;
};

int run(const Options& o) {
  auto t0 = std::chrono::steady_clock::now();
  sql::mysql::MySQL_Driver* driver = sql::mysql::get_mysql_driver_instance();
  std::unique_ptr<sql::Connection> con(
      driver->connect("tcp://" + o.host + ":" + std::to_string(o.port), o.user, o.password));
  con->setSchema(o.database);
  Loader L(*con, o.batch);
  L.exec("SET NAMES utf8mb4");

  if (!o.schema.empty()) {
    std::ifstream in(o.schema);
    if (!in) {
      std::cerr << "tierce-datagen: cannot read schema file " << o.schema << "\n";
      return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    auto stmts = split_sql(ss.str());
    for (const auto& s : stmts) L.exec(s);
    std::cout << "schema: " << stmts.size() << " statements from " << o.schema << "\n";
  }

  con->setAutoCommit(false);
  L.exec("SET SESSION unique_checks = 0");

  Rng rng(o.seed);

  // Items first in memory, then bids (which fix max_bid / nb_bids), then everything is written.
  std::vector<Item> items(static_cast<std::size_t>(o.items));
  for (auto& it : items) {
    it.category = rng.range(1, o.categories);
    it.seller = rng.range(1, o.users);
    it.initial_cents = rng.range(100, 50000);
    it.end_offset = rng.range(7 * 86400, 60 * 86400);
  }

  // categories
  L.begin("INSERT INTO categories (id, name, version)");
  for (long c = 1; c <= o.categories; ++c) {
    std::string name = kCategoryNames[(c - 1) % 20];
    if (c > 20) name += " " + std::to_string((c - 1) / 20 + 1);
    std::string v = "(" + std::to_string(c) + ",";
    append_escaped(v, name);
    v += ",1)";
    L.row(v);
  }
  L.flush();
  L.commit();

  // users
  L.begin("INSERT INTO users (id, nickname, rating, version)");
  for (long u = 1; u <= o.users; ++u) {
    std::string v = "(" + std::to_string(u) + ",'user" + std::to_string(u) + "'," +
                    std::to_string(rng.range(-5, 50)) + ",1)";
    L.row(v);
  }
  L.flush();
  L.commit();

  // bids (computed before items are written so items carry consistent aggregates)
  L.begin("INSERT INTO bids (id, item_id, user_id, amount, created)");
  long when = 0;
  for (long b = 1; b <= o.bids; ++b) {
    long idx = rng.range(0, o.items - 1);
    Item& it = items[static_cast<std::size_t>(idx)];
    long user = rng.range(1, o.users - 1);
    if (user >= it.seller) ++user;  // never the seller
    long base = it.nb_bids ? it.max_cents : it.initial_cents;
    long amount = base + rng.range(50, 2000);
    it.max_cents = amount;
    ++it.nb_bids;
    when += rng.range(1, 30);
    std::string v = "(" + std::to_string(b) + "," + std::to_string(idx + 1) + "," + std::to_string(user) + "," +
                    money(amount) + ",'" + datetime(when) + "')";
    L.row(v);
  }
  L.flush();
  L.commit();

  // items
  L.begin("INSERT INTO items (id, category_id, seller_id, name, description, initial_price, max_bid, "
          "nb_bids, end_date, version)");
  for (long i = 0; i < o.items; ++i) {
    const Item& it = items[static_cast<std::size_t>(i)];
    std::string name = std::string(pick(rng, kWords)) + " " + pick(rng, kWords) + " " + pick(rng, kThings) +
                       " #" + std::to_string(i + 1);
    std::string desc = "A " + name + " in " + (rng.next() % 2 ? "good" : "excellent") +
                       " condition, sold by user" + std::to_string(it.seller) + ". ";
    long extra = rng.range(2, 8);
    for (long k = 0; k < extra; ++k) desc += std::string(pick(rng, kWords)) + " ";
    std::string v = "(" + std::to_string(i + 1) + "," + std::to_string(it.category) + "," +
                    std::to_string(it.seller) + ",";
    append_escaped(v, name);
    v += ',';
    append_escaped(v, desc);
    v += "," + money(it.initial_cents) + "," + money(it.max_cents) + "," + std::to_string(it.nb_bids) + ",'" +
         datetime(it.end_offset) + "',1)";
    L.row(v);
  }
  L.flush();
  L.commit();

  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("loaded %s@%s:%d/%s: %ld categories, %ld users, %ld items, %ld bids in %.2f s (seed %llu)\n",
              o.user.c_str(), o.host.c_str(), o.port, o.database.c_str(), o.categories, o.users, o.items,
              o.bids, secs, static_cast<unsigned long long>(o.seed));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (int rc = parse_args(argc, argv, o)) return rc;
  try {
    return run(o);
  } catch (const sql::SQLException& e) {
    std::cerr << "tierce-datagen: SQL error " << e.getErrorCode() << " (SQLSTATE " << e.getSQLState()
              << ") on " << o.host << ":" << o.port << "/" << o.database << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tierce-datagen: " << e.what() << "\n";
    return 1;
  }
}
