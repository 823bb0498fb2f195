// base/config_checker.h — the one checker of the daemons' TOML files (memd, lockd, ftpd): it
// collects every problem of a file (an operator fixes a file in one pass), each one line
//   FILE:LINE:COL: KEY: what is wrong; what to write instead
// and reads typed values with their ranges, paths relative to the file, and unknown keys with a
// "did you mean" hint. The schema and its own messages stay with each daemon.
//
// The stock problems come in the two wordings the daemons print (their tests hold the texts):
// Guided (memd, lockd: the type found and an example line to write) and Terse (ftpd).
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tierce::base {

struct CheckerWording {
  enum class Style { Guided, Terse };
  Style style = Style::Guided;
  // Guided: an empty string is refused by string() ("expected a non-empty string, got \"\"").
  bool strings_nonempty = false;
  // Guided: what follows the example of an integer given with the wrong type.
  std::string integer_note = " (no quotes, no unit)";
};

class ConfigChecker;

// One table of the file as the checker reads it; `name` prefixes its keys in messages ("[memd]"
// gives "[memd] node", Terse "tls." gives "tls.cert"). A value is returned only when it passed;
// otherwise the problem is noted and nullopt returned, as for an absent key.
class CheckedTable {
 public:
  CheckedTable(ConfigChecker& checker, const toml::table& t, std::string name)
      : c_(&checker), t_(&t), name_(std::move(name)) {}

  const toml::table& toml() const { return *t_; }
  const toml::node* node(std::string_view key) const { return t_->get(key); }
  const std::string& name() const { return name_; }
  void rename(std::string name) { name_ = std::move(name); }
  std::string key_name(std::string_view key) const;

  // A problem at `key`'s value (Prereq: the key is present), or at the table itself.
  void problem_at(std::string_view key, const std::string& msg) const;
  void problem(const std::string& msg) const;

  // Every key that is not in `known`: "KEY: unknown key; did you mean 'X'? (NAME knows: ...)".
  void only_known_keys(const std::vector<std::string_view>& known) const;

  // `example` is the value to suggest (Guided: "write e.g. KEY = EXAMPLE"; Terse: unused).
  std::optional<std::string> string(std::string_view key, const std::string& example = {}) const;
  // A string naming a file, made absolute against the configuration file's directory; an empty
  // one is refused ("empty path").
  std::optional<std::string> path(std::string_view key, const std::string& example = {}) const;
  std::optional<int64_t> integer(std::string_view key, int64_t lo, int64_t hi,
                                 int64_t example = 0) const;
  std::optional<bool> boolean(std::string_view key) const;
  // A file mode 0..0777: an integer (0o660) or an octal string ("0660").
  std::optional<unsigned> file_mode(std::string_view key, const std::string& example = "\"0660\"") const;

 private:
  ConfigChecker* c_;
  const toml::table* t_;
  std::string name_;
};

class ConfigChecker {
 public:
  // `file` names the file in messages; `base_dir` is where relative paths start.
  ConfigChecker(std::string file, std::filesystem::path base_dir, CheckerWording wording = {})
      : file_(std::move(file)), base_(std::move(base_dir)), wording_(std::move(wording)) {}

  CheckedTable table(const toml::table& t, std::string name) {
    return CheckedTable(*this, t, std::move(name));
  }

  void problem(const toml::source_region& where, const std::string& msg);
  void problem(const std::string& msg);  // about the whole file: "FILE: msg"
  const std::vector<std::string>& problems() const { return problems_; }
  bool ok() const { return problems_.empty(); }

  enum class Order { AsFound, FileOrder };
  // Throws ConfigError with the problems, if any. FileOrder: by line, so the list reads like
  // the file; problems without a line come last.
  void throw_if_any(Order order = Order::AsFound) const;

  // `p` made absolute against base_dir (when relative), then lexically normal.
  std::string resolve(const std::string& p) const;
  const CheckerWording& wording() const { return wording_; }

 private:
  std::string file_;
  std::filesystem::path base_;
  CheckerWording wording_;
  std::vector<std::string> problems_;
};

// The directory relative paths of the file `source` start from: its own directory, absolute
// (the daemons change to / when they go to the background).
std::filesystem::path config_base_dir(const std::string& source);

}  // namespace tierce::base
