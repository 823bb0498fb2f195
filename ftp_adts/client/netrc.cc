// ftp_adts/client/netrc.cc — ~/.netrc parsing and lookup (netrc.h).
#include "ftp_adts/client/netrc.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tierce::ftpc {
namespace {

// Splits into tokens; a "macdef" body (up to an empty line) is dropped here since it is the
// only construct that is line-oriented.
std::vector<std::string> tokenize(std::string_view t) {
  std::vector<std::string> out;
  size_t i = 0;
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; };
  while (i < t.size()) {
    while (i < t.size() && space(t[i])) ++i;
    if (i >= t.size()) break;
    if (t[i] == '#' ) {  // comment to end of line (GNU inetutils and curl accept these)
      while (i < t.size() && t[i] != '\n') ++i;
      continue;
    }
    std::string tok;
    if (t[i] == '"') {
      ++i;
      while (i < t.size() && t[i] != '"') {
        if (t[i] == '\\' && i + 1 < t.size()) ++i;
        tok.push_back(t[i++]);
      }
      if (i < t.size()) ++i;  // closing quote
    } else {
      while (i < t.size() && !space(t[i])) tok.push_back(t[i++]);
    }
    if (tok == "macdef") {
      // Skip the name and the body: everything up to the first empty line.
      size_t blank = t.find("\n\n", i);
      i = blank == std::string_view::npos ? t.size() : blank + 2;
      continue;
    }
    out.push_back(std::move(tok));
  }
  return out;
}

}  // namespace

std::vector<NetrcEntry> parse_netrc(std::string_view text) {
  std::vector<NetrcEntry> out;
  auto toks = tokenize(text);
  NetrcEntry* cur = nullptr;
  for (size_t i = 0; i < toks.size(); ++i) {
    const std::string& k = toks[i];
    bool has_val = i + 1 < toks.size();
    if (k == "machine" && has_val) {
      out.push_back(NetrcEntry{toks[++i], "", "", false});
      cur = &out.back();
    } else if (k == "default") {
      out.push_back(NetrcEntry{"", "", "", true});
      cur = &out.back();
    } else if (cur && (k == "login" || k == "user") && has_val) {
      cur->login = toks[++i];
    } else if (cur && (k == "password" || k == "passwd") && has_val) {
      cur->password = toks[++i];
    } else if (cur && k == "account" && has_val) {
      ++i;
    }
    // Anything else is ignored, as ftp(1) does.
  }
  return out;
}

std::optional<std::string> netrc_password(const std::vector<NetrcEntry>& entries,
                                          std::string_view host, std::string_view user) {
  for (const auto& e : entries)
    if (!e.is_default && e.machine == host && (e.login.empty() || e.login == user) &&
        !e.password.empty())
      return e.password;
  for (const auto& e : entries)
    if (e.is_default && (e.login.empty() || e.login == user) && !e.password.empty())
      return e.password;
  return std::nullopt;
}

std::vector<NetrcEntry> load_netrc() {
  std::string path;
  if (const char* n = std::getenv("NETRC"); n && *n) {
    path = n;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    path = std::string(h) + "/.netrc";
  } else {
    return {};
  }
  std::ifstream f(path);
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_netrc(ss.str());
}

}  // namespace tierce::ftpc
