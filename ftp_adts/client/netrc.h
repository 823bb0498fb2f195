// ftp_adts/client/netrc.h — ~/.netrc (the format of ftp(1) and curl): "machine HOST login USER
// password PASS", "default ...", "macdef NAME" (skipped up to the next blank line), tokens
// separated by any white space, double-quoted tokens with backslash escapes.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tierce::ftpc {

struct NetrcEntry {
  std::string machine;  // "" for the default entry
  std::string login;
  std::string password;
  bool is_default = false;
};

std::vector<NetrcEntry> parse_netrc(std::string_view text);

// The password for user@host: the first "machine host" entry whose login is user (or has no
// login), else the default entry with that login (or none). nullopt when nothing matches.
std::optional<std::string> netrc_password(const std::vector<NetrcEntry>& entries,
                                          std::string_view host, std::string_view user);

// Reads $NETRC or ~/.netrc; empty when missing or unreadable.
std::vector<NetrcEntry> load_netrc();

}  // namespace tierce::ftpc
