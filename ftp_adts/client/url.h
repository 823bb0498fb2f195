// ftp_adts/client/url.h — ftp:// URLs as tierce-ftp takes them (docs/ftp.md):
//   ftp://[user[:password]@]host[:port]/path
// user, password and path are percent-decoded. As in RFC 1738 §3.2.2 (and curl), the path after
// the host's '/' is relative to the login directory; "%2F" makes it absolute ("ftp://h/%2Fetc").
// A decoded CR, LF or NUL anywhere is rejected: it would let a URL inject FTP commands.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tierce::ftpc {

struct FtpUrl {
  std::optional<std::string> user;      // nullopt: anonymous
  std::optional<std::string> password;  // as given in the URL
  std::string host;                     // without IPv6 brackets
  uint16_t port = 21;
  std::string path;                     // decoded; "" = the login directory
  bool dir_hint = false;                // the URL ended with '/'

  // "host:port" with brackets for IPv6, for messages.
  std::string endpoint() const;
  // The last path component ("" when the path is empty or ends with '/').
  std::string basename() const;
};

// Throws ClientError{Usage} with a message saying what is wrong.
FtpUrl parse_url(std::string_view text);

// Joins a remote directory and a name ("" + "a" = "a", "d" + "a" = "d/a", "/" + "a" = "/a").
std::string join_remote(std::string_view dir, std::string_view name);

}  // namespace tierce::ftpc
