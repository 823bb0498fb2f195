// agents/binlogd/source.cc — the replica connection and the transactions it yields (source.h).
#include "agents/binlogd/source.h"

#include <mysql.h>
#include <mariadb_rpl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "coherence/protocol.h"

namespace tierce::binlogd {
namespace {

using base::Code;

constexpr unsigned kErrFatalReadingBinlog = 1236;  // ER_MASTER_FATAL_ERROR_READING_BINLOG

std::span<const uint8_t> bytes(const void* p, size_t n) {
  return {static_cast<const uint8_t*>(p), p ? n : 0};
}

std::string str(const MARIADB_STRING& s) { return s.str ? std::string(s.str, s.length) : ""; }

std::string upper_prefix(const std::string& s, size_t n) {
  std::string o;
  for (char c : s) {
    if (o.size() >= n) break;
    if (o.empty() && (c == ' ' || c == '\n' || c == '\t' || c == '(')) continue;
    o += char(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  }
  return o;
}

bool starts(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }

// Statements that change no table's rows: transaction control and account management.
bool neutral_statement(const std::string& sql) {
  std::string u = upper_prefix(sql, 24);
  for (std::string_view p : {"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT",
                             "XA START", "XA END", "XA PREPARE", "CREATE USER", "DROP USER",
                             "ALTER USER", "RENAME USER", "GRANT", "REVOKE", "SET PASSWORD",
                             "FLUSH", "CREATE ROLE", "DROP ROLE", "ANALYZE", "OPTIMIZE"})
    if (starts(u, p)) return true;
  return false;
}

// The numbers of the SIGNEDNESS bitmap: one bit per numeric column, YEAR included (as
// row_decoder.cc's numeric()).
size_t numeric_columns(const MARIADB_STRING& types) {
  size_t n = 0;
  for (size_t i = 0; i < types.length; ++i) {
    unsigned t = static_cast<unsigned char>(types.str[i]);
    if (t <= MYSQL_TYPE_DOUBLE || t == MYSQL_TYPE_LONGLONG || t == MYSQL_TYPE_INT24 ||
        t == MYSQL_TYPE_YEAR || t == MYSQL_TYPE_NEWDECIMAL)
      n += t != MYSQL_TYPE_NULL ? 1 : 0;
  }
  return n;
}

}  // namespace

// ---- GtidPosition ------------------------------------------------------------------------------

base::Result<GtidPosition> GtidPosition::parse(const std::string& text) {
  GtidPosition p;
  size_t i = 0;
  auto bad = [&] {
    return base::Result<GtidPosition>(Code::InvalidArgument,
                                      "not a GTID position: \"" + text.substr(0, 80) +
                                          "\" (expected D-S-N[,D-S-N...])",
                                      "BINLOGD0140");
  };
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ',' || text[i] == ' ' || text[i] == '\n')) ++i;
    if (i >= text.size()) break;
    uint64_t part[3] = {0, 0, 0};
    for (int k = 0; k < 3; ++k) {
      size_t j = i;
      while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
      if (j == i || j - i > 19) return bad();
      part[k] = std::stoull(text.substr(i, j - i));
      i = j;
      if (k < 2) {
        if (i >= text.size() || text[i] != '-') return bad();
        ++i;
      }
    }
    if (part[0] > UINT32_MAX || part[1] > UINT32_MAX) return bad();
    p.advance(uint32_t(part[0]), uint32_t(part[1]), part[2]);
    if (i < text.size() && text[i] != ',' && text[i] != ' ' && text[i] != '\n') return bad();
  }
  return p;
}

void GtidPosition::advance(uint32_t domain, uint32_t server, uint64_t seq) {
  last_[domain] = {server, seq};
}

std::string GtidPosition::text() const {
  std::string o;
  for (const auto& [d, sn] : last_) {
    if (!o.empty()) o += ',';
    o += std::to_string(d) + "-" + std::to_string(sn.first) + "-" + std::to_string(sn.second);
  }
  return o;
}

// ---- BinlogSource -----------------------------------------------------------------------------

BinlogSource::BinlogSource(SourceSettings settings, const Mapping& mapping)
    : settings_(std::move(settings)), mapping_(mapping) {}

BinlogSource::~BinlogSource() { close(); }

void BinlogSource::close() {
  if (event_) mariadb_free_rpl_event(event_);
  event_ = nullptr;
  if (rpl_) mariadb_rpl_close(rpl_);
  rpl_ = nullptr;
  if (mysql_) mysql_close(mysql_);
  mysql_ = nullptr;
  socket_ = -1;
  tables_.clear();
}

void BinlogSource::interrupt() {
  interrupted_ = true;
  int fd = socket_.load();
  if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
}

base::Status BinlogSource::connect() {
  close();
  interrupted_ = false;
  mysql_ = mysql_init(nullptr);
  if (!mysql_) return {Code::ResourceExhausted, "mysql_init failed (out of memory)", "BINLOGD0130"};
  unsigned ct = unsigned(settings_.connect_timeout.count());
  // A heartbeat comes every `heartbeat` when the server has nothing to send: a read that waits
  // four of them (at least 2 s) is a dead server or a cut link.
  unsigned rt = unsigned(std::max<int64_t>(2, (settings_.heartbeat.count() * 4 + 999) / 1000));
  mysql_optionsv(mysql_, MYSQL_OPT_CONNECT_TIMEOUT, &ct);
  mysql_optionsv(mysql_, MYSQL_OPT_READ_TIMEOUT, &rt);
  mysql_optionsv(mysql_, MYSQL_OPT_WRITE_TIMEOUT, &rt);
  const char* sock = settings_.socket.empty() ? nullptr : settings_.socket.c_str();
  if (!mysql_real_connect(mysql_, sock ? nullptr : settings_.host.c_str(), settings_.user.c_str(),
                          settings_.password.c_str(), nullptr, unsigned(settings_.port), sock, 0)) {
    std::string where = sock ? settings_.socket : settings_.host + ":" + std::to_string(settings_.port);
    base::Status s{mysql_errno(mysql_) == 1045 ? Code::PermissionDenied : Code::Unavailable,
                   "cannot connect to MariaDB at " + where + " as " + settings_.user + ": " +
                       mysql_error(mysql_),
                   "BINLOGD0130"};
    close();
    return s;
  }
  socket_ = int(mysql_get_socket(mysql_));
  return check_settings();
}

base::Status BinlogSource::check_settings() {
  if (mysql_query(mysql_, "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, "
                          "@@binlog_row_metadata") != 0)
    return {Code::Unavailable, std::string("reading the server's binlog settings: ") + mysql_error(mysql_),
            "BINLOGD0130"};
  MYSQL_RES* res = mysql_store_result(mysql_);
  MYSQL_ROW row = res ? mysql_fetch_row(res) : nullptr;
  std::vector<std::string> v;
  for (int i = 0; row && i < 4; ++i) v.emplace_back(row[i] ? row[i] : "");
  if (res) mysql_free_result(res);
  if (v.size() != 4) return {Code::Unavailable, "reading the server's binlog settings: no row", "BINLOGD0130"};
  std::vector<std::string> missing;
  if (v[0] != "1") missing.push_back("log_bin (is OFF)");
  if (v[1] != "ROW") missing.push_back("binlog_format = ROW (is " + v[1] + ")");
  if (v[2] != "FULL") missing.push_back("binlog_row_image = FULL (is " + v[2] + ")");
  if (v[3] != "FULL") missing.push_back("binlog_row_metadata = FULL (is " + v[3] + ")");
  if (missing.empty()) return {};
  std::string m;
  for (const auto& x : missing) m += (m.empty() ? "" : ", ") + x;
  return {Code::FailedPrecondition,
          "the server does not log what this agent reads: " + m +
              ". Add to the server's [mysqld] section: log_bin, binlog_format = ROW, "
              "binlog_row_image = FULL, binlog_row_metadata = FULL; then restart it",
          "BINLOGD0120"};
}

base::Result<GtidPosition> BinlogSource::current_position() {
  if (!mysql_) return base::Result<GtidPosition>(Code::FailedPrecondition, "not connected", "BINLOGD0134");
  if (mysql_query(mysql_, "SELECT @@gtid_binlog_pos") != 0)
    return base::Result<GtidPosition>(Code::Unavailable,
                                      std::string("reading @@gtid_binlog_pos: ") + mysql_error(mysql_),
                                      "BINLOGD0130");
  MYSQL_RES* res = mysql_store_result(mysql_);
  MYSQL_ROW row = res ? mysql_fetch_row(res) : nullptr;
  std::string text = row && row[0] ? row[0] : "";
  if (res) mysql_free_result(res);
  return GtidPosition::parse(text);
}

base::Status BinlogSource::start(const GtidPosition& from) {
  std::string hb = std::to_string(uint64_t(settings_.heartbeat.count()) * 1000000ULL);
  for (const std::string& q :
       {"SET @slave_connect_state='" + from.text() + "'", std::string("SET @slave_gtid_strict_mode=0"),
        std::string("SET @slave_gtid_ignore_duplicates=0"),
        std::string("SET @master_binlog_checksum='NONE'"),
        std::string("SET @mariadb_slave_capability=4"), "SET @master_heartbeat_period=" + hb})
    if (mysql_query(mysql_, q.c_str()) != 0)
      return {Code::Unavailable, "\"" + q + "\": " + mysql_error(mysql_), "BINLOGD0130"};
  rpl_ = mariadb_rpl_init(mysql_);
  if (!rpl_) return {Code::Internal, "mariadb_rpl_init failed", "BINLOGD0130"};
  mariadb_rpl_optionsv(rpl_, MARIADB_RPL_SERVER_ID, unsigned(settings_.server_id));
  mariadb_rpl_optionsv(rpl_, MARIADB_RPL_FILENAME, "", size_t(0));
  mariadb_rpl_optionsv(rpl_, MARIADB_RPL_START, 4UL);
  mariadb_rpl_optionsv(rpl_, MARIADB_RPL_FLAGS, 0U);
  if (mariadb_rpl_open(rpl_) != 0) return fetch_error("opening the binlog stream");
  return {};
}

base::Status BinlogSource::fetch_error(const char* during) {
  if (interrupted_) return {Code::Unavailable, "interrupted", "BINLOGD0130"};
  unsigned e = mysql_ ? mysql_errno(mysql_) : 0;
  std::string m = mysql_ ? mysql_error(mysql_) : "no connection";
  if (e == 0 && rpl_) {
    e = mariadb_rpl_errno(rpl_);
    m = mariadb_rpl_error(rpl_);
  }
  if (e == kErrFatalReadingBinlog &&
      (m.find("GTID") != std::string::npos || m.find("purged") != std::string::npos))
    return {Code::NotFound, std::string(during) + ": " + m, "BINLOGD0131"};
  return {Code::Unavailable,
          std::string(during) + ": " + (m.empty() ? "connection closed" : m) + " (error " +
              std::to_string(e) + ")",
          "BINLOGD0130"};
}

void BinlogSource::handle_rows(MARIADB_RPL_EVENT* ev, Transaction& tx) {
  auto& re = ev->event.rows;
  auto it = tables_.find(re.table_id);
  if (it == tables_.end()) {
    tx.invalidate_all = true;
    tx.why_all = "a row event for table id " + std::to_string(re.table_id) +
                 " that no table map announced";
    return;
  }
  const TableMap& t = it->second;
  if (!mapping_.watched(t.database)) return;
  if (re.compressed || ev->event_type == WRITE_ROWS_COMPRESSED_EVENT_V1 ||
      ev->event_type == UPDATE_ROWS_COMPRESSED_EVENT_V1 ||
      ev->event_type == DELETE_ROWS_COMPRESSED_EVENT_V1) {
    tx.invalidate_all = true;
    tx.why_all = "compressed row events (log_bin_compress = ON) are not read";
    return;
  }
  sqldeps::RowChange kind = re.type == WRITE_ROWS    ? sqldeps::RowChange::Insert
                            : re.type == UPDATE_ROWS ? sqldeps::RowChange::Update
                                                     : sqldeps::RowChange::Delete;
  size_t nb = (re.column_count + 7) / 8;
  auto rows = decode_rows(t, kind, bytes(re.column_bitmap, nb),
                          bytes(re.column_update_bitmap ? re.column_update_bitmap : re.column_bitmap, nb),
                          bytes(re.row_data, re.row_data_size));
  if (!rows) {
    tx.invalidate_all = true;
    tx.why_all = rows.message();
    return;
  }
  for (const RowPair& r : *rows) {
    ++tx.rows;
    if (tx.invalidate_all) continue;
    base::Status s = mapping_.names(t, kind, r, tx.names);
    if (!s.ok()) {
      tx.invalidate_all = true;
      tx.why_all = s.message();
    }
  }
  if (!tx.invalidate_all && tx.names.size() > coherence::kMaxDependencies) {
    tx.invalidate_all = true;
    tx.why_all = std::to_string(tx.names.size()) + " names in one transaction (more than " +
                 std::to_string(coherence::kMaxDependencies) + ", one round's most)";
  }
}

void BinlogSource::handle_query(MARIADB_RPL_EVENT* ev, Transaction& tx) {
  std::string sql = str(ev->event.query.statement);
  if (neutral_statement(sql)) return;
  tx.invalidate_all = true;
  tx.why_all = "a statement logged as a statement: \"" + sql.substr(0, 80) + "\"";
}

base::Result<Transaction> BinlogSource::next() {
  if (!rpl_) return base::Result<Transaction>(Code::FailedPrecondition, "not started", "BINLOGD0134");
  Transaction tx;
  bool in_tx = false, standalone = false;
  for (;;) {
    event_ = mariadb_rpl_fetch(rpl_, event_);
    if (!event_) return base::Result<Transaction>(fetch_error("reading the binlog"));
    ++events_;
    MARIADB_RPL_EVENT* ev = event_;
    switch (ev->event_type) {
      case GTID_EVENT:
        tx = Transaction{};
        in_tx = true;
        tx.domain = ev->event.gtid.domain_id;
        tx.server = ev->server_id;
        tx.seq = ev->event.gtid.sequence_nr;
        tx.timestamp = ev->timestamp;
        tx.gtid = std::to_string(tx.domain) + "-" + std::to_string(tx.server) + "-" +
                  std::to_string(tx.seq);
        standalone = ev->event.gtid.flags & FL_STANDALONE;
        break;
      case TABLE_MAP_EVENT: {
        auto& m = ev->event.table_map;
        TableMapParts p{m.table_id,
                        str(m.database),
                        str(m.table),
                        bytes(m.column_types.str, m.column_types.length),
                        bytes(m.metadata.str, m.metadata.length),
                        bytes(m.signed_indicator, (numeric_columns(m.column_types) + 7) / 8),
                        bytes(m.column_names.data, m.column_names.length),
                        bytes(m.simple_primary_keys.data, m.simple_primary_keys.length),
                        bytes(m.prefixed_primary_keys.data, m.prefixed_primary_keys.length)};
        auto t = decode_table_map(p);
        if (t) {
          tables_[m.table_id] = std::move(*t);
        } else {
          tables_.erase(m.table_id);
          if (in_tx && mapping_.watched(p.database)) {
            tx.invalidate_all = true;
            tx.why_all = t.message();
          }
        }
        break;
      }
      case QUERY_EVENT: {
        std::string u = upper_prefix(str(ev->event.query.statement), 8);
        if (u == "BEGIN") break;
        if (u == "COMMIT" && in_tx) {
          tx.arrived = std::chrono::steady_clock::now();
          return tx;
        }
        if (in_tx) handle_query(ev, tx);
        if (in_tx && standalone) {
          tx.arrived = std::chrono::steady_clock::now();
          return tx;
        }
        break;
      }
      case XID_EVENT:
      case XA_PREPARE_LOG_EVENT:
        if (in_tx) {
          tx.arrived = std::chrono::steady_clock::now();
          return tx;
        }
        break;
      case HEARTBEAT_LOG_EVENT:
        ++heartbeats_;
        break;
      default:
        if (IS_ROW_EVENT(ev) && in_tx) handle_rows(ev, tx);
        break;
    }
  }
}

}  // namespace tierce::binlogd
