// base/config_checker.cc — typed reads of a TOML table and the stock problems in both wordings.
#include "base/config_checker.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>

#include "base/config.h"

namespace tierce::base {

using Style = CheckerWording::Style;

std::string CheckedTable::key_name(std::string_view key) const {
  if (c_->wording().style == Style::Terse) return name_ + std::string(key);
  return name_ + " " + std::string(key);
}

void CheckedTable::problem_at(std::string_view key, const std::string& msg) const {
  const toml::node* n = t_->get(key);
  c_->problem(n ? n->source() : t_->source(), msg);
}

void CheckedTable::problem(const std::string& msg) const {
  c_->problem(t_->source(), msg);
}

void CheckedTable::only_known_keys(const std::vector<std::string_view>& known) const {
  std::string list = join(known, ", ");
  std::string tail = c_->wording().style == Style::Terse ? " (known here: " + list + ")"
                                                         : " (" + name_ + " knows: " + list + ")";
  for (auto& u : unknown_keys(*t_, known))
    c_->problem(u.where, key_name(u.key) + ": unknown key" +
                             (u.suggestion.empty() ? "" : "; did you mean '" + u.suggestion + "'?") +
                             tail);
}

std::optional<std::string> CheckedTable::string(std::string_view key,
                                                const std::string& example) const {
  const toml::node* n = t_->get(key);
  if (!n) return std::nullopt;
  const CheckerWording& w = c_->wording();
  if (w.style == Style::Terse) {
    if (n->is_string()) return n->as_string()->get();
    c_->problem(n->source(), key_name(key) + ": expected a string in double quotes");
    return std::nullopt;
  }
  if (n->is_string() && !(w.strings_nonempty && n->as_string()->get().empty()))
    return n->as_string()->get();
  std::string got = n->is_string() ? "\"\"" : describe_toml_type(*n);
  c_->problem(n->source(), key_name(key) + ": expected a " +
                               (w.strings_nonempty ? "non-empty string" : "string") + ", got " +
                               got + "; write e.g. " + std::string(key) + " = " + example);
  return std::nullopt;
}

std::optional<std::string> CheckedTable::path(std::string_view key,
                                              const std::string& example) const {
  auto s = string(key, example);
  if (!s) return std::nullopt;
  if (s->empty()) {
    problem_at(key, key_name(key) + ": empty path; remove the key or write e.g. " +
                        std::string(key) + " = " + example);
    return std::nullopt;
  }
  return c_->resolve(*s);
}

std::optional<int64_t> CheckedTable::integer(std::string_view key, int64_t lo, int64_t hi,
                                             int64_t example) const {
  const toml::node* n = t_->get(key);
  if (!n) return std::nullopt;
  const CheckerWording& w = c_->wording();
  const bool terse = w.style == Style::Terse;
  std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  std::string eg = "; write e.g. " + std::string(key) + " = " + std::to_string(example);
  if (!n->is_integer()) {
    c_->problem(n->source(), key_name(key) + ": expected an integer" +
                                 (terse ? " " + range
                                        : ", got " + describe_toml_type(*n) + eg + w.integer_note));
    return std::nullopt;
  }
  int64_t v = n->as_integer()->get();
  if (v < lo || v > hi) {
    c_->problem(n->source(), key_name(key) + ": " + std::to_string(v) + " is out of range" +
                                 (terse ? "; write " + range : " " + range + eg));
    return std::nullopt;
  }
  return v;
}

std::optional<unsigned> CheckedTable::file_mode(std::string_view key,
                                                 const std::string& example) const {
  const toml::node* n = t_->get(key);
  if (!n) return std::nullopt;
  std::optional<long> m;
  if (n->is_integer()) {
    m = long(n->as_integer()->get());
  } else if (n->is_string()) {
    const std::string& v = n->as_string()->get();
    char* end = nullptr;
    unsigned long x = std::strtoul(v.c_str(), &end, 8);
    if (!v.empty() && !*end) m = long(x);
  }
  if (!m || *m < 0 || *m > 0777) {
    c_->problem(n->source(), key_name(key) + ": expected an octal mode 0..0777; write e.g. " +
                                 std::string(key) + " = " + example + " (or 0o660)");
    return std::nullopt;
  }
  return unsigned(*m);
}

std::optional<bool> CheckedTable::boolean(std::string_view key) const {
  const toml::node* n = t_->get(key);
  if (!n) return std::nullopt;
  if (n->is_boolean()) return n->as_boolean()->get();
  if (c_->wording().style == Style::Terse)
    c_->problem(n->source(), key_name(key) + ": expected true or false");
  else
    c_->problem(n->source(), key_name(key) + ": expected true or false, got " +
                                 describe_toml_type(*n) + "; write e.g. " + std::string(key) +
                                 " = true (no quotes)");
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------

void ConfigChecker::problem(const toml::source_region& where, const std::string& msg) {
  problems_.push_back(config_location(file_, where) + ": " + msg);
}

void ConfigChecker::problem(const std::string& msg) {
  problems_.push_back(file_ + ": " + msg);
}

void ConfigChecker::throw_if_any(Order order) const {
  if (problems_.empty()) return;
  std::vector<std::string> out = problems_;
  if (order == Order::FileOrder) {
    auto line_of = [&](const std::string& p) {
      size_t at = file_.size() + 1;
      return p.size() > at && std::isdigit(static_cast<unsigned char>(p[at]))
                 ? std::atol(p.c_str() + at)
                 : LONG_MAX;
    };
    std::stable_sort(out.begin(), out.end(), [&](const std::string& a, const std::string& b) {
      return line_of(a) < line_of(b);
    });
  }
  throw ConfigError(std::move(out));
}

std::string ConfigChecker::resolve(const std::string& p) const {
  std::filesystem::path path(p);
  if (path.is_relative()) path = base_ / path;
  return path.lexically_normal().string();
}

std::filesystem::path config_base_dir(const std::string& source) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::path(source).parent_path();
  return dir.empty() ? std::filesystem::current_path(ec) : std::filesystem::absolute(dir, ec);
}

}  // namespace tierce::base
