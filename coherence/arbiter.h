// coherence/arbiter.h — the fence's arbiter: who decides that a lost app node is out (issue 29
// Part 2, docs/coherence.md "A lost node: the database as the arbiter").
//
// A dead host and a partition look the same to the homes, and a writer that fences itself after
// its COMMIT has already changed the database. So a home drops an app node it cannot read only
// through the one place every write of that node passes: the database. Each app node has a row
// (node, epoch, state in|out); every write transaction of the node reads it with a locking read
// (S lock, held to COMMIT) before its first write and writes nothing unless it says "in"
// (php_ext: the PHP extension does it; tierce_fence_check() for explicit-mode writers). A drop
// sets epoch+1, out under an X lock: every transaction of the node either committed before the
// drop (the home catches up after it) or sees "out". Only the homes set a row back to "in": each
// registers (node, home, epoch) once it reads the node's counter again, and the row flips when
// every home of the topology has registered at its epoch (never the node by itself).
//
// This header is the interface the home uses (coherence does not link a database client);
// agents/memd/arbiter_db.h is the MariaDB/MySQL implementation.
#pragma once
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace tierce::coherence {

struct ArbiterRow {
  uint64_t epoch = 0;
  bool in = false;
  std::string changed_by;  // the home (or "operator") that last changed it
};

class ArbiterError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Arbiter {
 public:
  virtual ~Arbiter() = default;
  // Creates the tables when missing and a row (epoch 1, out) for each of `nodes` that has none:
  // a node starts out and is admitted once every home reads it. Throws ArbiterError.
  virtual void ensure(const std::vector<std::string>& nodes) = 0;
  // Every row (a plain read: the latest committed state). Throws ArbiterError.
  virtual std::map<std::string, ArbiterRow> rows() = 0;
  // Drops `node`: epoch+1, out, in one transaction whose X lock waits for the node's write
  // transactions in flight. Returns the new epoch. Throws ArbiterError (also on a lock wait
  // timeout: a transaction of the node is still open — it may yet commit; retry later).
  virtual uint64_t drop(const std::string& node, const std::string& by) = 0;
  // `home` reads `node`'s counter at `epoch`: records it; if the row is still at `epoch` and out
  // and every one of `homes` has recorded that epoch, sets it in. Returns the row after this
  // (its epoch differs from `epoch` when another home dropped the node again: nothing recorded).
  virtual ArbiterRow track(const std::string& node, const std::string& home, uint64_t epoch,
                           const std::vector<std::string>& homes) = 0;
  virtual std::string describe() const = 0;  // "tierce.fence at 127.0.0.1:3306" (logs)
};

}  // namespace tierce::coherence
