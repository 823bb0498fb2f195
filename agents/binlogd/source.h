// agents/binlogd/source.h — the change log as tierce-binlogd reads it: a MariaDB replica
// connection (Connector/C's replication API, mariadb_rpl.h) that starts after a GTID position
// and hands over one committed transaction at a time, with what it invalidates.
//
//   connect   checks the server's settings (log_bin, binlog_format=ROW, binlog_row_image=FULL,
//             binlog_row_metadata=FULL: a missing one is refused with its name and the line to
//             write), then asks for the events after the position (@slave_connect_state,
//             GTID mode: @mariadb_slave_capability=4), with heartbeats when idle
//   next      GTID event → its table maps and row events (names from Mapping) → XID or COMMIT:
//             the transaction. A transaction whose rows touch no watched table names nothing
//             (it still moves the position). A statement logged as a statement (DDL, TRUNCATE,
//             anything but BEGIN/COMMIT/XA/SAVEPOINT and account statements) invalidates all.
//
// Errors are Status values: Unavailable (connection lost, read timeout: the caller reconnects
// with backoff), FailedPrecondition (a setting missing: the caller stops), NotFound (the
// position was purged from the server's binlogs: the caller invalidates everything and starts
// from the server's current position).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agents/binlogd/mapping.h"
#include "agents/binlogd/row_decoder.h"
#include "base/status.h"

struct st_mysql;
struct st_mariadb_rpl;
struct st_mariadb_rpl_event;

namespace tierce::binlogd {

struct SourceSettings {
  std::string host = "127.0.0.1";
  int port = 3306;
  std::string socket;  // a unix socket instead of host:port, when set
  std::string user, password;
  uint32_t server_id = 4242;  // this replica's id: unique among the server's replicas
  std::chrono::milliseconds heartbeat{500};
  std::chrono::seconds connect_timeout{3};
};

// A GTID position: the last transaction of each replication domain ("0-1-42,1-2-7").
class GtidPosition {
 public:
  static base::Result<GtidPosition> parse(const std::string& text);
  void advance(uint32_t domain, uint32_t server, uint64_t seq);
  std::string text() const;
  bool empty() const { return last_.empty(); }
  bool operator==(const GtidPosition& o) const { return last_ == o.last_; }

 private:
  std::map<uint32_t, std::pair<uint32_t, uint64_t>> last_;  // domain -> (server, seq)
};

struct Transaction {
  std::string gtid;                      // "D-S-N"
  uint32_t domain = 0, server = 0;
  uint64_t seq = 0;
  uint32_t timestamp = 0;                // the server's commit time, in seconds
  std::chrono::steady_clock::time_point arrived;  // when its last event arrived here
  size_t rows = 0;                       // row changes in watched tables
  std::vector<std::string> names;        // what it invalidates
  bool invalidate_all = false;
  std::string why_all;                   // why, for the log
};

class BinlogSource {
 public:
  BinlogSource(SourceSettings settings, const Mapping& mapping);
  ~BinlogSource();
  BinlogSource(const BinlogSource&) = delete;
  BinlogSource& operator=(const BinlogSource&) = delete;

  // Connects and checks the settings; nothing is read yet.
  base::Status connect();
  // The server's current position (@@gtid_binlog_pos) over the connection.
  base::Result<GtidPosition> current_position();
  // Starts the event stream after `from`.
  base::Status start(const GtidPosition& from);
  // The next whole transaction. Blocks until one is complete, the connection fails, or
  // interrupt() is called (then Unavailable "interrupted").
  base::Result<Transaction> next();
  // From another thread: makes a blocked next() return (shuts the socket down).
  void interrupt();
  void close();

  uint64_t events() const { return events_; }
  uint64_t heartbeats() const { return heartbeats_; }

 private:
  base::Status check_settings();
  base::Status fetch_error(const char* during);
  void handle_rows(st_mariadb_rpl_event* ev, Transaction& tx);
  void handle_query(st_mariadb_rpl_event* ev, Transaction& tx);

  SourceSettings settings_;
  const Mapping& mapping_;
  st_mysql* mysql_ = nullptr;
  st_mariadb_rpl* rpl_ = nullptr;
  st_mariadb_rpl_event* event_ = nullptr;
  std::map<uint64_t, TableMap> tables_;  // by table id, as the stream announced them
  std::atomic<int> socket_{-1};
  std::atomic<bool> interrupted_{false};
  uint64_t events_ = 0, heartbeats_ = 0;
};

}  // namespace tierce::binlogd
