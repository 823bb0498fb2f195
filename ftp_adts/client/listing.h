// ftp_adts/client/listing.h — directory listings as the client sees them: MLSD lines (RFC 3659
// facts, exact) and LIST lines (unix "ls -l" as vsftpd, ProFTPD, Pure-FTPd print them, and the
// MS-DOS style of IIS), both turned into RemoteEntry. LIST times are coarse (minute, or day for
// old files) and we record that precision so the mirror planner does not see every file as newer.
//
// Names are checked before anything uses them: a name with '/', NUL, CR or LF, or equal to "."
// or "..", is refused (a hostile server must not make the mirror write outside LOCALDIR).
#pragma once

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tierce::ftpc {

enum class EntryType { File, Dir, Link, Other };

struct RemoteEntry {
  std::string name;
  EntryType type = EntryType::Other;
  std::optional<uint64_t> size;
  std::optional<std::time_t> mtime;  // UTC seconds
  std::time_t mtime_precision = 1;   // 1 (MLSD/MDTM), 60 (LIST "Nov 21 09:30"), 86400 ("2024")
  std::string link_target;           // LIST "name -> target"
};

// A name we may use as one path component locally.
bool safe_name(std::string_view name);

// One "ls -l" or DOS LIST line; nullopt for "total N", blank and unparsable lines. `now` decides
// the year of "Mon DD HH:MM" dates (the most recent such date not more than a day ahead).
std::optional<RemoteEntry> parse_list_line(std::string_view line, std::time_t now);

// One MLSD line; nullopt for cdir/pdir entries and malformed lines.
std::optional<RemoteEntry> parse_mlsd_line(std::string_view line);

// A whole listing (CRLF or LF lines). Entries with unsafe names are dropped and their names put
// in `rejected` (when given) so the caller can warn.
std::vector<RemoteEntry> parse_listing(std::string_view data, bool mlsd, std::time_t now,
                                       std::vector<std::string>* rejected = nullptr);

}  // namespace tierce::ftpc
