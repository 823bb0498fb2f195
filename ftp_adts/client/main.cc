// ftp_adts/client/main.cc — tierce-ftp: the command line (docs/ftp.md "tierce-ftp"). Parses the
// options and the URL, builds FtpClient sessions and runs one command; every failure arrives as
// a ClientError carrying its exit code.
#include <getopt.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "ftp_adts/client/control.h"
#include "ftp_adts/client/errors.h"
#include "ftp_adts/client/mirror.h"
#include "ftp_adts/client/netrc.h"
#include "ftp_adts/client/progress.h"
#include "ftp_adts/client/transfer.h"
#include "ftp_adts/client/url.h"

#ifndef TIERCE_VERSION
#define TIERCE_VERSION "dev"
#endif

namespace {

using namespace tierce::ftpc;

const char* const kHelp = R"(Usage:
  tierce-ftp [options] get    URL [LOCAL]     download (LOCAL: the base name; "-" = stdout)
  tierce-ftp [options] put    LOCAL URL       upload (URL ending in '/': into that directory)
  tierce-ftp [options] ls     URL             list (MLSD when offered, else LIST)
  tierce-ftp [options] mkdir  URL
  tierce-ftp [options] rm     URL             a file; -r for a directory tree
  tierce-ftp [options] mirror URL LOCALDIR    remote -> local; -R local -> remote

URL = ftp://[user[:password]@]host[:port]/path. The path is relative to the login directory
(%2F at its start makes it absolute). The password is taken from the URL, else from
$TIERCE_FTP_PASSWORD, else from ~/.netrc ($NETRC); no user = anonymous.

Options:
  -c, --continue        resume a partial file (REST STREAM for get; SIZE + APPE for put)
      --only-newer      mirror: skip files whose target is as new and the same size
      --delete          mirror: delete target files that are not in the source
  -P, --parallel N      mirror: N sessions in parallel (default 1)
  -R, --reverse         mirror: local -> remote
  -r, --recursive       rm: remove a directory tree
      --adts MODE       auto (default: TPRT TCP when FEAT offers it) | off | tcp | ptcp:N | verbs
      --window N        ADTS: RETR/STOR commands in flight (default 16)
      --tls             AUTH TLS + PROT P (data connections encrypted; ADTS not used)
      --tls-insecure    like --tls, accepting any certificate
      --timeout S       connect/reply/data timeout in seconds (default 30)
      --progress        progress line on stderr (default: when stderr is a terminal)
  -q, --quiet           no progress line, no mirror summary
  -v, --verbose         print the control dialogue on stderr (passwords masked)
  -h, --help            this text
  -V, --version         the version

Exit status: 0 ok; 1 usage; 2 cannot connect / network failure / timeout; 3 login refused;
4 remote refused (55x: no such file, permission); 5 local file error; 6 transfer broken or
size mismatch; 7 mirror finished with some files failed (each listed on stderr).
)";

struct Options {
  bool resume = false, only_newer = false, del = false, reverse = false, recursive = false;
  unsigned parallel = 1;
  AdtsChoice adts;
  bool adts_explicit = false;
  bool tls = false, tls_insecure = false;
  double timeout_s = 30;
  int progress = -1;  // -1: when stderr is a TTY
  bool quiet = false, verbose = false;
  unsigned window = 16;
  std::vector<std::string> args;
};

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr, "tierce-ftp: %s\nTry 'tierce-ftp --help'.\n", msg.c_str());
  std::exit(int(Exit::Usage));
}

unsigned parse_count(const char* s, const char* what, unsigned lo, unsigned hi) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (errno || end == s || *end || v < long(lo) || v > long(hi))
    usage(std::string("invalid ") + what + " '" + s + "': give " + std::to_string(lo) + ".." +
          std::to_string(hi));
  return unsigned(v);
}

Options parse(int argc, char** argv) {
  Options o;
  enum { kOnlyNewer = 1000, kDelete, kAdts, kTls, kTlsInsecure, kTimeout, kProgress, kWindow };
  static const option longs[] = {
      {"continue", no_argument, nullptr, 'c'},
      {"only-newer", no_argument, nullptr, kOnlyNewer},
      {"delete", no_argument, nullptr, kDelete},
      {"parallel", required_argument, nullptr, 'P'},
      {"reverse", no_argument, nullptr, 'R'},
      {"recursive", no_argument, nullptr, 'r'},
      {"adts", required_argument, nullptr, kAdts},
      {"window", required_argument, nullptr, kWindow},
      {"tls", no_argument, nullptr, kTls},
      {"tls-insecure", no_argument, nullptr, kTlsInsecure},
      {"timeout", required_argument, nullptr, kTimeout},
      {"progress", no_argument, nullptr, kProgress},
      {"quiet", no_argument, nullptr, 'q'},
      {"verbose", no_argument, nullptr, 'v'},
      {"help", no_argument, nullptr, 'h'},
      {"version", no_argument, nullptr, 'V'},
      {nullptr, 0, nullptr, 0},
  };
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, "cP:RrqvhV", longs, nullptr)) != -1) {
    switch (ch) {
      case 'c': o.resume = true; break;
      case kOnlyNewer: o.only_newer = true; break;
      case kDelete: o.del = true; break;
      case 'P': o.parallel = parse_count(optarg, "parallel count", 1, 64); break;
      case 'R': o.reverse = true; break;
      case 'r': o.recursive = true; break;
      case kAdts: {
        auto c = parse_adts_choice(optarg);
        if (!c) usage(std::string("invalid --adts '") + optarg + "': auto, off, tcp, ptcp:N (1..64) or verbs");
        o.adts = *c;
        o.adts_explicit = c->mode != AdtsChoice::Mode::Auto && c->mode != AdtsChoice::Mode::Off;
        break;
      }
      case kWindow: o.window = parse_count(optarg, "window", 1, 1024); break;
      case kTls: o.tls = true; break;
      case kTlsInsecure: o.tls = o.tls_insecure = true; break;
      case kTimeout: {
        char* end = nullptr;
        double s = std::strtod(optarg, &end);
        if (end == optarg || *end || !(s > 0) || s > 86400)
          usage(std::string("invalid timeout '") + optarg + "': give seconds, e.g. --timeout 10");
        o.timeout_s = s;
        break;
      }
      case kProgress: o.progress = 1; break;
      case 'q': o.quiet = true; o.progress = 0; break;
      case 'v': o.verbose = true; break;
      case 'h': std::fputs(kHelp, stdout); std::exit(0);
      case 'V': std::printf("tierce-ftp %s\n", TIERCE_VERSION); std::exit(0);
      case '?':
      default:
        if (optopt) usage(std::string("option -") + char(optopt) + " is unknown or needs a value");
        usage(std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  for (int i = optind; i < argc; ++i) o.args.push_back(argv[i]);
  if (o.tls && o.adts_explicit)
    usage("ADTS channels carry data unencrypted: with --tls use --adts auto or off");
  return o;
}

Login login_for(const FtpUrl& u) {
  Login l;
  if (!u.user) return l;  // anonymous
  l.user = *u.user;
  if (u.password) {
    l.password = *u.password;
  } else if (const char* p = std::getenv("TIERCE_FTP_PASSWORD"); p) {
    l.password = p;
  } else if (auto n = netrc_password(load_netrc(), u.host, l.user)) {
    l.password = *n;
  } else {
    l.password = "";
  }
  return l;
}

std::string format_time(std::optional<std::time_t> t) {
  if (!t) return "-                  ";
  std::tm tm{};
  gmtime_r(&*t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S", &tm);
  return b;
}

void print_entry(const RemoteEntry& e) {
  char t = e.type == EntryType::Dir ? 'd' : e.type == EntryType::File ? '-'
           : e.type == EntryType::Link ? 'l' : '?';
  std::string size = e.size ? std::to_string(*e.size) : "-";
  std::string name = e.name;
  if (!e.link_target.empty()) name += " -> " + e.link_target;
  std::printf("%c %14s  %s  %s\n", t, size.c_str(), format_time(e.mtime).c_str(), name.c_str());
}

// ls: MLSD of the URL's path sorted by name, or the file itself when it names one.
void list_url(FtpClient& c, const FtpUrl& u) {
  std::vector<std::string> rejected;
  std::vector<RemoteEntry> entries;
  try {
    entries = c.list(u.path, &rejected);
  } catch (const ClientError& e) {
    // MLSD on a file is an error (RFC 3659 §7.1): show the file itself.
    if (e.code() != Exit::Refused || u.path.empty() || c.broken()) throw;
    auto sz = c.size(u.path);
    if (!sz) throw;
    RemoteEntry f;
    f.name = u.basename();
    f.type = EntryType::File;
    f.size = sz;
    f.mtime = c.mdtm(u.path);
    entries.push_back(f);
  }
  std::sort(entries.begin(), entries.end(),
            [](const RemoteEntry& a, const RemoteEntry& b) { return a.name < b.name; });
  for (const auto& e : entries) print_entry(e);
  for (const auto& n : rejected)
    std::fprintf(stderr, "tierce-ftp: skipped an entry with an unsafe name: '%s'\n", n.c_str());
}

// rm: removes the URL's file, or with `recursive` its directory tree (files, then the deepest
// directories first).
void remove_url(FtpClient& c, const FtpUrl& u, bool recursive) {
  if (!recursive) {
    try {
      c.dele(u.path);
    } catch (const ClientError& e) {
      if (e.code() == Exit::Refused && !c.broken() && c.is_dir(u.path))
        throw ClientError(Exit::Refused, u.path + " is a directory (use rm -r)");
      throw;
    }
    return;
  }
  if (!c.is_dir(u.path)) {
    c.dele(u.path);
    return;
  }
  std::vector<std::string> rejected;
  Tree t = scan_remote(c, u.path, false, &rejected);
  if (!rejected.empty())
    throw ClientError(Exit::Refused, u.path + " holds entries with names tierce-ftp will not "
                                              "handle (e.g. '" + rejected[0] + "'); not removed");
  std::vector<std::string> dirs;
  for (const auto& [p, e] : t) {
    if (e.type == EntryType::Dir)
      dirs.push_back(p);
    else
      c.dele(join_remote(u.path, p));
  }
  std::sort(dirs.begin(), dirs.end(), [](const std::string& a, const std::string& b) {
    return std::count(a.begin(), a.end(), '/') > std::count(b.begin(), b.end(), '/');
  });
  for (const auto& d : dirs) c.rmd(join_remote(u.path, d));
  c.rmd(u.path);
}

// mirror: the summary line and the failures; the exit code.
int report_mirror(const MirrorReport& rep, const MirrorOptions& mo, bool quiet) {
  double mbps = rep.seconds > 0 ? double(rep.bytes) / rep.seconds / 1e6 : 0;
  if (!quiet)
    std::printf("mirror: %llu files, %llu bytes transferred, %llu dirs created, %llu deleted, "
                "%llu up to date, %zu failed in %.2f s (%.1f MB/s) [%s, %u session%s]\n",
                static_cast<unsigned long long>(rep.files),
                static_cast<unsigned long long>(rep.bytes),
                static_cast<unsigned long long>(rep.dirs_created),
                static_cast<unsigned long long>(rep.deleted),
                static_cast<unsigned long long>(rep.skipped), rep.failures.size(), rep.seconds,
                mbps, rep.data_path.c_str(), mo.parallel, mo.parallel == 1 ? "" : "s");
  std::fflush(stdout);
  if (!rep.failures.empty()) {
    for (const auto& f : rep.failures) std::fprintf(stderr, "tierce-ftp: failed: %s\n", f.c_str());
    return int(Exit::Partial);
  }
  return 0;
}

int run(const Options& o) {
  if (o.args.empty()) usage("no command: get, put, ls, mkdir, rm or mirror");
  const std::string cmd = o.args[0];
  auto need = [&](size_t lo, size_t hi) {
    if (o.args.size() - 1 < lo || o.args.size() - 1 > hi)
      usage(cmd + " takes " + (lo == hi ? std::to_string(lo) : std::to_string(lo) + " or " +
                                              std::to_string(hi)) + " argument(s)");
  };
  ClientOptions co;
  co.timeout = Millis(long(std::llround(o.timeout_s * 1000)));
  co.adts = o.adts;
  co.tls = o.tls;
  co.tls_insecure = o.tls_insecure;
  co.verbose = o.verbose;
  co.pipeline_window = o.window;
  const bool progress = o.progress < 0 ? ::isatty(STDERR_FILENO) != 0 : o.progress == 1;

  auto open_client = [&](const FtpUrl& u) {
    auto c = std::make_unique<FtpClient>(u.host, u.port, login_for(u), co);
    c->open();
    return c;
  };

  if (cmd == "get") {
    need(1, 2);
    FtpUrl u = parse_url(o.args[1]);
    std::string base = u.basename();
    if (base.empty()) usage("get: the URL names a directory, not a file (use mirror)");
    std::string local = o.args.size() > 2 ? o.args[2] : base;
    struct stat st{};
    if (local != "-" && ::stat(local.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      local += "/" + base;
    auto c = open_client(u);
    auto r = get_file(*c, u.path, local, o.resume, progress);
    if (r.already_complete && !o.quiet)
      std::fprintf(stderr, "tierce-ftp: %s is already complete (%llu bytes)\n", local.c_str(),
                   static_cast<unsigned long long>(r.resumed_from));
    return 0;
  }
  if (cmd == "put") {
    need(2, 2);
    const std::string local = o.args[1];
    FtpUrl u = parse_url(o.args[2]);
    std::string remote = u.path;
    std::string lbase = local.substr(local.rfind('/') == std::string::npos ? 0 : local.rfind('/') + 1);
    if (remote.empty() || u.dir_hint) remote = join_remote(remote, lbase);
    auto c = open_client(u);
    auto r = put_file(*c, local, remote, o.resume, progress);
    if (r.already_complete && !o.quiet)
      std::fprintf(stderr, "tierce-ftp: %s is already complete on the server\n", remote.c_str());
    return 0;
  }
  if (cmd == "ls") {
    need(1, 1);
    FtpUrl u = parse_url(o.args[1]);
    auto c = open_client(u);
    list_url(*c, u);
    return 0;
  }
  if (cmd == "mkdir") {
    need(1, 1);
    FtpUrl u = parse_url(o.args[1]);
    if (u.path.empty()) usage("mkdir: the URL has no path");
    auto c = open_client(u);
    c->mkd(u.path);
    return 0;
  }
  if (cmd == "rm") {
    need(1, 1);
    FtpUrl u = parse_url(o.args[1]);
    if (u.path.empty() || u.path == "/") usage("rm: refusing to remove the login or root directory");
    auto c = open_client(u);
    remove_url(*c, u, o.recursive);
    return 0;
  }
  if (cmd == "mirror") {
    need(2, 2);
    FtpUrl u = parse_url(o.args[1]);
    MirrorOptions mo;
    mo.only_newer = o.only_newer;
    mo.del = o.del;
    mo.reverse = o.reverse;
    mo.parallel = o.parallel;
    mo.progress = progress;
    MirrorReport rep = run_mirror([&] { return open_client(u); }, u.path, o.args[2], mo);
    return report_mirror(rep, mo, o.quiet);
  }
  usage("unknown command '" + cmd + "': get, put, ls, mkdir, rm or mirror");
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);  // a closed peer is an EPIPE error, not a silent death
  Options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const ClientError& e) {
    std::fprintf(stderr, "tierce-ftp: %s\n", e.what());
    return int(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tierce-ftp: %s\n", e.what());
    return int(Exit::Network);
  }
}
