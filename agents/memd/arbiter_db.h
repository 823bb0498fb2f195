// agents/memd/arbiter_db.h — the fence's arbiter in MariaDB/MySQL (coherence/arbiter.h): the
// rows the homes drop and re-admit app nodes with, and the locking that makes a drop wait for the
// node's write transactions. One connection, re-opened after an error; every call has deadlines
// (connect, read, write, InnoDB lock wait) and throws coherence::ArbiterError instead of hanging.
#pragma once
#include <mutex>
#include <string>

#include "cluster/topology.h"
#include "coherence/arbiter.h"

typedef struct st_mysql MYSQL;

namespace tierce::memd {

// drop(node, by) refuses while `by`'s own row is not "in" (see arbiter_db.cc).
class MariaDbArbiter : public coherence::Arbiter {
 public:
  // `s`: the topology's [arbiter]; the password is read now (throws TopologyError).
  // `io_timeout_s`: connect/read/write deadline; `lock_wait_s`: how long a drop waits for the
  // node's open transactions before it gives up for this pass.
  explicit MariaDbArbiter(const cluster::ArbiterSettings& s, unsigned io_timeout_s = 2,
                          unsigned lock_wait_s = 3);
  ~MariaDbArbiter() override;

  void ensure(const std::vector<std::string>& nodes) override;
  std::map<std::string, coherence::ArbiterRow> rows() override;
  uint64_t drop(const std::string& node, const std::string& by) override;
  coherence::ArbiterRow track(const std::string& node, const std::string& home, uint64_t epoch,
                              const std::vector<std::string>& homes) override;
  std::string describe() const override;

  // The SQL that creates the tables (docs, tierce-cluster, operators).
  static std::string schema_sql(const std::string& table);

 private:
  MYSQL* conn();  // connected, or throws
  void exec(const std::string& sql);
  std::vector<std::vector<std::string>> query(const std::string& sql);
  std::string quote(const std::string& v);
  [[noreturn]] void fail(const std::string& what);
  void rollback_quietly();

  cluster::ArbiterSettings s_;
  std::string password_;
  unsigned io_timeout_s_, lock_wait_s_;
  std::mutex mu_;
  MYSQL* db_ = nullptr;
};

}  // namespace tierce::memd
