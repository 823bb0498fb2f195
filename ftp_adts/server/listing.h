// ftp_adts/server/listing.h — directory listings as FTP clients read them: LIST lines in the
// `ls -l` shape every client parses (the de-facto format of wu-ftpd/vsftpd), NLST names, and the
// MLST/MLSD facts of RFC 3659 with the fact selection of OPTS MLST.
#pragma once

#include <sys/stat.h>

#include <ctime>
#include <string>
#include <vector>

#include "ftp_adts/ftp/root.h"

namespace tierce::ftpd {

// "-rw-r--r--   1 ftp      ftp          1234 Nov 21 04:21 name" (no CRLF). Entries older than six
// months or in the future show the year instead of the time, as ls does.
std::string list_line(const std::string& name, const struct stat& st, std::time_t now);

// Which MLST facts to send (OPTS MLST type;size;modify;).
struct FactSelection {
  bool type = true, size = true, modify = true, perm = true, unix_mode = true;
  // "type;size;" -> the known ones selected; returns the canonical "type;size;" reply text.
  std::string set(const std::string& spec);
  std::string feat_line() const;  // " MLST type*;size*;modify*;perm*;UNIX.mode*;"
  // The selection as 5 bits (type, size, modify, perm, UNIX.mode from bit 0), and back.
  unsigned bits() const {
    return unsigned(type) | unsigned(size) << 1 | unsigned(modify) << 2 | unsigned(perm) << 3 |
           unsigned(unix_mode) << 4;
  }
  static FactSelection from_bits(unsigned b) {
    return {bool(b & 1), bool(b & 2), bool(b & 4), bool(b & 8), bool(b & 16)};
  }
};

// One MLSx fact line (no CRLF, no leading space). `type_override` = "cdir"/"pdir" for "." and "..".
std::string mlsx_line(const std::string& name, const struct stat& st, const FactSelection& sel,
                      bool writable, const char* type_override = nullptr);

}  // namespace tierce::ftpd
