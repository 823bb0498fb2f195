// base/config.h — what tierce-memd, tierce-lockd and tierce-ftpd share about a configuration file,
// without imposing one schema: reading it (a regular file, at most kMaxConfigBytes), parsing its
// TOML (toml++) with errors that name FILE:LINE:COLUMN, unknown-key detection with a "did you
// mean" hint, and the SIGHUP reload discipline (Reloader): load and check the new file completely,
// then apply it whole or keep the running one and say why.
//
// Each daemon keeps its own schema and messages (agents/memd/config.h, agents/lockd/config.h,
// ftp_adts/server/config.h); every problem is one line "FILE:LINE:COL: what is wrong; what to
// write instead", and all the problems of a file are reported at once.
#pragma once

#include <toml++/toml.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/log.h"

namespace tierce::base {

// Larger configuration files are refused: a daemon's file is a few KiB, and a path that names a
// huge file (a log, a disk image) is a mistake to report, not a file to read into memory.
inline constexpr size_t kMaxConfigBytes = size_t(1) << 20;  // 1 MiB

// Every problem found in one file, one per line in what().
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

// The text of the configuration file `path`, read with read(2) into one buffer of the file's size
// (no stream buffer: a caller holding secrets in it, such as tierce-ftpd's password hashes, can
// wipe the one copy). Refuses, with a ConfigError whose one problem starts with "PATH: ", a path
// that cannot be opened, that is not a regular file (a directory, a FIFO, a device), or a file
// larger than max_bytes.
std::string read_config_file(const std::string& path, size_t max_bytes = kMaxConfigBytes);

// "FILE:LINE:COL" of a node or key (just "FILE" when toml++ knows no position).
std::string config_location(const std::string& file, const toml::source_region& where);

// Parses `text` as TOML. A syntax error throws ConfigError with one problem
// "SOURCE:LINE:COL: not valid TOML: DESCRIPTION" followed by " (hint)" when `hint` is not empty.
toml::table parse_toml(std::string_view text, const std::string& source_name,
                       std::string_view hint = {});

// "a string", "an integer", ...: a node's type for messages.
std::string describe_toml_type(const toml::node& n);

// Levenshtein distance, for "did you mean" hints on misspelt keys.
size_t edit_distance(std::string_view a, std::string_view b);

// One key of a table that is not in its schema.
struct UnknownKey {
  std::string key;
  toml::source_region where;
  std::string suggestion;  // the closest known key (distance <= 2, or the key plus a "_unit"
                           // suffix: "rescan" for "rescan_ms"); "" when none is close
};

// Every key of `t` that is not in `known`, in the table's order.
std::vector<UnknownKey> unknown_keys(const toml::table& t,
                                     const std::vector<std::string_view>& known);

// "a, b, c".
std::string join(const std::vector<std::string>& v, std::string_view sep);
std::string join(const std::vector<std::string_view>& v, std::string_view sep);

// Counters of a daemon's reloads (SIGHUP), for its status output.
struct ReloadCounters {
  uint64_t reloads = 0;  // applied
  uint64_t failed = 0;   // refused: the running configuration stayed in effect
};

// The reload discipline shared by the daemons. run() logs "<start_id> SIGHUP: reloading SOURCE",
// calls `load` (which reads AND checks the new file completely: everything that can fail must fail
// there, before anything changes), then either
//   - load threw: logs one line per problem, "<failed_id> reload failed, the running
//     configuration stays in effect: PROBLEM", counts a failed reload, returns false; or
//   - calls `apply` with the new value (which must not fail: it only swaps in what load built) and
//     logs "<done_id> reload done: SUMMARY", SUMMARY being what apply returned; counts a reload.
// Not thread-safe: call from the daemon's main loop.
class Reloader {
 public:
  struct Ids {
    std::string start, failed, done;  // e.g. "MEMD0010", "MEMD0011", "MEMD0013"
  };
  Reloader() = default;
  Reloader(std::string source, LogSink log, Ids ids)
      : source_(std::move(source)), log_(std::move(log)), ids_(std::move(ids)) {}

  template <class Loaded>
  bool run(const std::function<Loaded()>& load, const std::function<std::string(Loaded&)>& apply) {
    started();
    Loaded next;
    try {
      next = load();
    } catch (const ConfigError& e) {
      refused(e.problems());
      return false;
    } catch (const std::exception& e) {
      refused({e.what()});
      return false;
    }
    applied(apply(next));
    return true;
  }

  const ReloadCounters& counters() const { return counters_; }
  const std::string& source() const { return source_; }

 private:
  void started();
  void refused(const std::vector<std::string>& problems);
  void applied(const std::string& summary);

  std::string source_;
  LogSink log_;
  Ids ids_;
  ReloadCounters counters_;
};

}  // namespace tierce::base
