// ftp_adts/server/session_files.cc — the commands of a Session on paths and the tree, all
// confined by ftp::Root: CWD/PWD, STAT, LIST/NLST/MLSD, SIZE/MDTM/MFMT/MLST, DELE, MKD/RMD,
// RNFR/RNTO, SITE CHMOD.
#include "ftp_adts/server/session_internal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

namespace tierce::ftpd {

namespace {

std::string quote_path(const std::string& p) {
  // RFC 959 Appendix II: a '"' inside the quoted name is doubled.
  std::string s = "\"";
  for (char c : p) {
    s.push_back(c);
    if (c == '"') s.push_back('"');
  }
  return s + "\"";
}

std::string errno_text(int neg) {
  switch (-neg) {
    case ENOENT:
      return "No such file or directory";
    case EACCES:
    case EPERM:
      return "Permission denied";
    case EEXIST:
      return "File exists";
    case ENOTDIR:
      return "Not a directory";
    case EISDIR:
      return "Is a directory";
    case ENOTEMPTY:
      return "Directory not empty";
    case EXDEV:
      return "Cannot move across file systems";
    case ELOOP:
      return "Too many levels of symbolic links";
    case ENOSPC:
      return "No space left on device";
    default:
      return std::strerror(-neg);
  }
}

}  // namespace

// ---- state: the working directory and STAT ----

void Session::cmd_stat(const std::string& arg) {
  if (arg.empty()) {
    std::vector<std::string> l{"FTP server status:",
                               " Connected to " + peer_.host(),
                               " Logged in as " + user_ + (writable_ ? "" : " (read-only)"),
                               std::string(" TYPE: ") + (ascii_ ? "ASCII" : "BINARY") +
                                   ", STRUcture: File, MODE: Stream",
                               std::string(" Control connection ") + (ctl_.tls() ? "TLS" : "plain") +
                                   ", data " + (prot_p_ ? "TLS" : "plain"),
                               std::string(" ADTS: ") + (adts_.configured() ? "on" : "off"),
                               " Session pid " + std::to_string(::getpid()),
                               "End of status"};
    ctl_.reply_multi(211, l);
    return;
  }
  std::string a = arg;
  while (a.size() >= 2 && a[0] == '-') {  // "-la" etc.
    size_t sp = a.find(' ');
    a = sp == std::string::npos ? "" : a.substr(sp + 1);
  }
  std::string v = vpath(a);
  struct stat st;
  int rc = root_->stat(v, &st);
  if (rc < 0) {
    ctl_.reply(550, errno_text(rc));
    return;
  }
  std::vector<std::string> l{"Status of " + v + ":"};
  std::time_t now = std::time(nullptr);
  if (S_ISDIR(st.st_mode)) {
    std::vector<ftp::Root::Entry> entries;
    rc = root_->list(v, &entries);
    if (rc < 0) {
      ctl_.reply(550, errno_text(rc));
      return;
    }
    for (auto& e : entries) l.push_back(" " + list_line(e.name, e.st, now));
  } else {
    l.push_back(" " + list_line(v.substr(v.rfind('/') + 1), st, now));
  }
  l.push_back("End of status");
  ctl_.reply_multi(213, l);
}

void Session::cmd_pwd(const std::string&) {
  ctl_.reply(257, quote_path(cwd_) + " is the current directory");
}

void Session::cmd_cwd(const std::string& arg) {
  std::string v = vpath(arg);
  struct stat st;
  int rc = root_->stat(v, &st);
  if (failed(rc, arg)) return;
  if (!S_ISDIR(st.st_mode)) {
    ctl_.reply(550, arg.substr(0, 256) + ": Not a directory");
    return;
  }
  cwd_ = v;
  ctl_.reply(250, "Directory changed to " + cwd_);
}

// ---- listings ----

void Session::listing(const std::string& arg, ListKind kind) {
  if (!data_policy_ok()) return;
  std::string a = arg;
  if (kind != ListKind::Mlsd) {
    // "-a", "-l", "-la": ls flags clients send; tolerated and ignored.
    while (!a.empty() && a[0] == '-') {
      size_t sp = a.find(' ');
      a = sp == std::string::npos ? "" : a.substr(sp + 1);
    }
  }
  std::string v = vpath(a);
  struct stat st;
  int rc = root_->stat(v, &st);
  if (failed(rc, a, v)) return;
  std::string out;
  std::time_t now = std::time(nullptr);
  if (S_ISDIR(st.st_mode)) {
    std::vector<ftp::Root::Entry> entries;
    rc = root_->list(v, &entries);
    if (rc < 0) {
      ctl_.reply(550, errno_text(rc));
      return;
    }
    if (kind == ListKind::Mlsd) out += mlsx_line(".", st, facts_, writable_, "cdir") + "\r\n";
    for (auto& e : entries) {
      switch (kind) {
        case ListKind::List:
          out += list_line(e.name, e.st, now) + "\r\n";
          break;
        case ListKind::Nlst:
          out += e.name + "\r\n";
          break;
        case ListKind::Mlsd:
          out += mlsx_line(e.name, e.st, facts_, writable_) + "\r\n";
          break;
      }
    }
  } else {
    if (kind == ListKind::Mlsd) {
      ctl_.reply(501, a.substr(0, 256) + ": Not a directory (MLSD lists directories; use MLST)");
      return;
    }
    std::string name = kind == ListKind::Nlst ? a : v.substr(v.rfind('/') + 1);
    out += (kind == ListKind::List ? list_line(name, st, now) : name) + "\r\n";
  }
  if (!data_channel_ready()) return;
  ctl_.reply(150, "Here comes the directory listing");
  ctl_.flush();
  auto start = Clock::now();
  TransferResult r = send_plain_or_adts(-1, 0, out.size(), out, true);
  finish_transfer(r, v, 'o', start, false);
}

// ---- files ----

bool Session::failed(int rc, const std::string& arg, const std::string& if_empty) {
  if (rc >= 0) return false;
  ctl_.reply(550, (arg.empty() ? if_empty : arg.substr(0, 256)) + ": " + errno_text(rc));
  return true;
}

void Session::cmd_size(const std::string& arg) {
  struct stat st;
  int rc = root_->stat(vpath(arg), &st);
  if (failed(rc, arg)) return;
  if (!S_ISREG(st.st_mode)) {
    ctl_.reply(550, arg.substr(0, 256) + ": Not a plain file");
    return;
  }
  ctl_.reply(213, std::to_string(st.st_size));
}

void Session::cmd_mdtm(const std::string& arg) {
  struct stat st;
  int rc = root_->stat(vpath(arg), &st);
  if (failed(rc, arg)) return;
  ctl_.reply(213, ftp::format_time_val(st.st_mtime));
}

void Session::cmd_mfmt(const std::string& arg) {
  size_t sp = arg.find(' ');
  if (sp == std::string::npos || sp + 1 >= arg.size()) {
    ctl_.reply(501, "MFMT wants <YYYYMMDDHHMMSS> <path>");
    return;
  }
  auto t = ftp::parse_time_val(arg.substr(0, sp));
  if (!t) {
    ctl_.reply(501, "MFMT: bad time value (YYYYMMDDHHMMSS, UTC)");
    return;
  }
  std::string path = arg.substr(sp + 1);
  int rc = root_->utime(vpath(path), *t);
  if (failed(rc, path)) return;
  ctl_.reply(213, "Modify=" + ftp::format_time_val(*t) + "; " + path);
}

void Session::cmd_mlst(const std::string& arg) {
  std::string v = vpath(arg);
  struct stat st;
  int rc = root_->stat(v, &st);
  if (failed(rc, arg, v)) return;
  ctl_.reply_multi(250, {"Listing " + v, " " + mlsx_line(v, st, facts_, writable_), "End"});
}

void Session::cmd_dele(const std::string& arg) {
  std::string v = vpath(arg);
  int rc = root_->unlink(v);
  if (failed(rc, arg)) return;
  log(LogLevel::Info, "FTPD0303 " + who() + ": deleted " + v);
  ctl_.reply(250, "Deleted " + v);
}

void Session::cmd_mkd(const std::string& arg) {
  std::string v = vpath(arg);
  int rc = root_->mkdir(v);
  if (failed(rc, arg)) return;
  ctl_.reply(257, quote_path(v) + " created");
}

void Session::cmd_rmd(const std::string& arg) {
  std::string v = vpath(arg);
  if (v == "/") {
    ctl_.reply(550, "Cannot remove the root directory");
    return;
  }
  int rc = root_->rmdir(v);
  if (failed(rc, arg)) return;
  ctl_.reply(250, "Removed " + v);
}

void Session::cmd_rnfr(const std::string& arg) {
  std::string v = vpath(arg);
  struct stat st;
  int rc = root_->lstat(v, &st);
  if (failed(rc, arg)) return;
  if (v == "/") {
    ctl_.reply(550, "Cannot rename the root directory");
    return;
  }
  rnfr_ = v;
  rnfr_set_ = true;
  ctl_.reply(350, "Ready for RNTO");
}

void Session::cmd_rnto(const std::string& arg) {
  std::string v = vpath(arg);
  int rc = root_->rename(rnfr_, v);
  if (failed(rc, arg)) return;
  log(LogLevel::Info, "FTPD0304 " + who() + ": renamed " + rnfr_ + " to " + v);
  ctl_.reply(250, "Renamed to " + v);
}

void Session::cmd_site(const std::string& arg) {
  std::string a = arg;
  size_t sp = a.find(' ');
  std::string sub = upper(a.substr(0, sp));
  if (sub == "HELP") {
    ctl_.reply(214, "SITE CHMOD <octal mode> <path>");
    return;
  }
  if (sub != "CHMOD") {
    ctl_.reply(500, "SITE " + sub.substr(0, 16) + " not understood (SITE HELP)");
    return;
  }
  if (!writable_) {
    ctl_.reply(550, "Permission denied");
    return;
  }
  std::string rest = sp == std::string::npos ? "" : a.substr(sp + 1);
  size_t sp2 = rest.find(' ');
  std::string mode_s = rest.substr(0, sp2);
  if (sp2 == std::string::npos || mode_s.empty() || mode_s.size() > 4 ||
      !std::all_of(mode_s.begin(), mode_s.end(), [](char c) { return c >= '0' && c <= '7'; })) {
    ctl_.reply(501, "SITE CHMOD wants <octal mode> <path>");
    return;
  }
  unsigned mode = unsigned(std::stoul(mode_s, nullptr, 8)) & 0777;  // no setuid/setgid/sticky
  std::string path = rest.substr(sp2 + 1);
  int fd = root_->open(vpath(path), O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (failed(fd, path)) return;
  int rc = ::fchmod(fd, mode);
  int e = errno;
  ::close(fd);
  if (failed(rc != 0 ? -e : 0, path)) return;
  ctl_.reply(200, "SITE CHMOD command ok");
}

}  // namespace tierce::ftpd
