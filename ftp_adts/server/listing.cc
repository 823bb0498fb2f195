// ftp_adts/server/listing.cc
#include "ftp_adts/server/listing.h"

#include <cctype>
#include <cstdio>

#include "ftp_adts/ftp/protocol.h"

namespace tierce::ftpd {

std::string list_line(const std::string& name, const struct stat& st, std::time_t now) {
  char mode[11];
  mode[0] = S_ISDIR(st.st_mode)    ? 'd'
            : S_ISLNK(st.st_mode)  ? 'l'
            : S_ISFIFO(st.st_mode) ? 'p'
            : S_ISSOCK(st.st_mode) ? 's'
            : S_ISCHR(st.st_mode)  ? 'c'
            : S_ISBLK(st.st_mode)  ? 'b'
                                   : '-';
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) mode[1 + i] = (st.st_mode & (0400 >> i)) ? rwx[i] : '-';
  mode[10] = 0;
  std::tm t;
  std::time_t m = st.st_mtime;
  localtime_r(&m, &t);
  char when[32];
  constexpr std::time_t kSixMonths = 182 * 24 * 3600;
  if (m > now || now - m > kSixMonths)
    std::strftime(when, sizeof when, "%b %e  %Y", &t);
  else
    std::strftime(when, sizeof when, "%b %e %H:%M", &t);
  // Owner and group are shown as "ftp": the host's account names are none of the client's
  // business (vsftpd's hide_ids), and the columns stay parseable.
  char head[128];
  std::snprintf(head, sizeof head, "%s %3lu ftp      ftp      %12llu %s ", mode,
                static_cast<unsigned long>(st.st_nlink),
                static_cast<unsigned long long>(st.st_size), when);
  return head + name;
}

std::string FactSelection::set(const std::string& spec) {
  FactSelection s;
  s.type = s.size = s.modify = s.perm = s.unix_mode = false;
  std::string out;
  size_t i = 0;
  while (i < spec.size()) {
    size_t j = spec.find(';', i);
    if (j == std::string::npos) j = spec.size();
    std::string f = spec.substr(i, j - i);
    for (char& c : f) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (f == "type") s.type = true, out += "type;";
    else if (f == "size") s.size = true, out += "size;";
    else if (f == "modify") s.modify = true, out += "modify;";
    else if (f == "perm") s.perm = true, out += "perm;";
    else if (f == "unix.mode") s.unix_mode = true, out += "UNIX.mode;";
    i = j + 1;
  }
  *this = s;
  return out;
}

std::string FactSelection::feat_line() const {
  auto f = [](bool on, const char* n) { return std::string(n) + (on ? "*;" : ";"); };
  return " MLST " + f(type, "type") + f(size, "size") + f(modify, "modify") + f(perm, "perm") +
         f(unix_mode, "UNIX.mode");
}

std::string mlsx_line(const std::string& name, const struct stat& st, const FactSelection& sel,
                      bool writable, const char* type_override) {
  ftp::Facts f;
  f.name = name;
  bool dir = S_ISDIR(st.st_mode);
  if (sel.type)
    f.type = type_override ? type_override : dir ? "dir" : S_ISREG(st.st_mode) ? "file" : "OS.unix=special";
  if (sel.size && !dir) f.size = uint64_t(st.st_size);
  if (sel.modify) f.modify = st.st_mtime;
  if (sel.perm) {
    // RFC 3659 §7.5.5: e enter, l list, c create, m mkdir, p purge (delete entries), f rename,
    // d delete; r read, a append, w write.
    if (dir)
      f.perm = writable ? "flcdmpe" : "el";
    else
      f.perm = writable ? "adfrw" : "r";
  }
  if (sel.unix_mode) f.unix_mode = unsigned(st.st_mode & 07777);
  return ftp::format_facts(f);
}

}  // namespace tierce::ftpd
