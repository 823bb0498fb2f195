// base/config.cc
#include "base/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/errors.h"

namespace tierce::base {

namespace {

template <class Strings>
std::string join_any(const Strings& v, std::string_view sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += sep;
    s += v[i];
  }
  return s;
}

}  // namespace

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  return join_any(v, sep);
}

std::string join(const std::vector<std::string_view>& v, std::string_view sep) {
  return join_any(v, sep);
}

ConfigError::ConfigError(std::vector<std::string> problems)
    : std::runtime_error(join(problems, "\n")), problems_(std::move(problems)) {}

std::string read_config_file(const std::string& path, size_t max_bytes) {
  auto refuse = [&](const std::string& why) {
    return ConfigError({path + ": cannot read the configuration file: " + why});
  };
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw refuse(errno_text(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) throw refuse(errno_text(errno));
  if (!S_ISREG(st.st_mode))
    throw refuse(std::string("not a regular file (") +
                 (S_ISDIR(st.st_mode)    ? "a directory"
                  : S_ISFIFO(st.st_mode) ? "a FIFO"
                  : S_ISCHR(st.st_mode)  ? "a character device"
                  : S_ISBLK(st.st_mode)  ? "a block device"
                  : S_ISSOCK(st.st_mode) ? "a socket"
                                         : "not a file") +
                 "); name the TOML file itself");
  auto too_big = [&](uint64_t size) {
    return refuse(std::to_string(size) + " bytes is larger than the " + std::to_string(max_bytes) +
                  "-byte limit of a configuration file; is this the right file?");
  };
  if (uint64_t(st.st_size) > max_bytes) throw too_big(uint64_t(st.st_size));
  // One byte more than the limit, to notice a file that grew since fstat.
  std::string text(size_t(st.st_size) + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw refuse(errno_text(errno));
    if (n == 0) break;
    got += size_t(n);
    if (got > max_bytes) throw too_big(got);
  }
  text.resize(got);
  return text;
}

std::string config_location(const std::string& file, const toml::source_region& where) {
  if (where.begin.line == 0) return file;
  return file + ":" + std::to_string(where.begin.line) + ":" + std::to_string(where.begin.column);
}

toml::table parse_toml(std::string_view text, const std::string& source_name,
                       std::string_view hint) {
  try {
    return toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    std::string where = config_location(source_name, e.source());
    if (e.source().begin.line == 0) where += ":?:?";
    throw ConfigError({where + ": not valid TOML: " + std::string(e.description()) +
                       (hint.empty() ? std::string() : " (" + std::string(hint) + ")")});
  }
}

std::string describe_toml_type(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a floating-point number";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::date:
      return "a date";
    case toml::node_type::time:
      return "a time";
    case toml::node_type::date_time:
      return "a date-time";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "nothing";
  }
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<UnknownKey> unknown_keys(const toml::table& t,
                                     const std::vector<std::string_view>& known) {
  std::vector<UnknownKey> out;
  for (auto&& [k, v] : t) {
    (void)v;
    std::string_view key = k.str();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    UnknownKey u{std::string(key), k.source(), {}};
    size_t best = 3;  // farther than this is no typo
    for (auto a : known) {
      // "rescan" for "rescan_ms": a unit suffix forgotten counts as a near miss.
      size_t d = a.rfind(std::string(key) + "_", 0) == 0 ? 1 : edit_distance(key, a);
      if (d < best) {
        best = d;
        u.suggestion = std::string(a);
      }
    }
    out.push_back(std::move(u));
  }
  return out;
}

void Reloader::started() {
  if (log_) log_(LogLevel::Info, ids_.start + " SIGHUP: reloading " + source_);
}

void Reloader::refused(const std::vector<std::string>& problems) {
  ++counters_.failed;
  if (!log_) return;
  for (auto& p : problems)
    log_(LogLevel::Error,
         ids_.failed + " reload failed, the running configuration stays in effect: " + p);
}

void Reloader::applied(const std::string& summary) {
  ++counters_.reloads;
  if (log_) log_(LogLevel::Info, ids_.done + " reload done: " + summary);
}

}  // namespace tierce::base
