// ftp_adts/client/mirror.h — `mirror`: make a target tree like a source tree, remote -> local or
// (-R) local -> remote.
//
//   1. Both trees are listed (remote: MLSD, else LIST, recursively; local: lstat, symlinks are
//      never followed) into Tree maps keyed by the relative path ("a/b/c").
//   2. plan_mirror() — pure, unit-tested — decides what to create, copy and delete.
//   3. The executor deletes (--delete), creates directories, then hands the copies out from one
//      shared queue, biggest files first (so the tail of the run is short), to -P N sessions in
//      parallel. A session takes a batch of small files at a time: over ADTS the batch is
//      pipelined (RETR/STOR commands ahead of the transfers).
//   4. Modification times follow the copies (local mtime from the remote modify fact or MDTM;
//      remote MFMT when offered), so a second --only-newer run copies nothing.
//
// Remote names come from a listing and are checked (listing.h: no '/', not ".."): nothing is ever
// written outside LOCALDIR.
#pragma once

#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ftp_adts/client/control.h"
#include "ftp_adts/client/listing.h"
#include "ftp_adts/client/url.h"

namespace tierce::ftpc {

struct TreeEntry {
  EntryType type = EntryType::Other;
  uint64_t size = 0;
  std::optional<std::time_t> mtime;
  std::time_t precision = 1;  // seconds of uncertainty of mtime (LIST: 60 or 86400)
};
using Tree = std::map<std::string, TreeEntry>;  // relative path -> entry; parents sort first

struct MirrorOptions {
  bool only_newer = false;
  bool del = false;
  bool reverse = false;  // local -> remote
  unsigned parallel = 1;
  bool progress = false;
};

struct CopyItem {
  std::string path;
  TreeEntry src;
};

struct MirrorPlan {
  std::vector<std::string> mkdirs;        // target directories to create, parents first
  std::vector<CopyItem> copies;           // biggest first
  std::vector<std::string> delete_files;  // target files and links (--delete)
  std::vector<std::string> delete_dirs;   // target directories, deepest first (--delete)
  std::vector<std::string> conflicts;     // "path: why" — a file where a dir is, and so on
  uint64_t skipped = 0;                   // up to date (or not a file/dir)
};

MirrorPlan plan_mirror(const Tree& source, const Tree& target, const MirrorOptions& o);

// Lists a local tree (lstat, no symlink following). A missing root is an empty tree.
Tree scan_local(const std::string& root);
// Lists a remote tree under `root` ("" = login directory). A missing root is an empty tree when
// `missing_ok`; otherwise a ClientError. Unsafe names are dropped and reported in `rejected`.
Tree scan_remote(FtpClient& c, const std::string& root, bool missing_ok,
                 std::vector<std::string>* rejected);

struct MirrorReport {
  uint64_t files = 0, bytes = 0, dirs_created = 0, deleted = 0, skipped = 0;
  double seconds = 0;
  std::vector<std::string> failures;  // "path: reason"
  std::string data_path;
};

// Runs a whole mirror. `connect` makes a new logged-in client (one per parallel session).
MirrorReport run_mirror(const std::function<std::unique_ptr<FtpClient>()>& connect,
                        const std::string& remote_root, const std::string& local_root,
                        const MirrorOptions& o);

}  // namespace tierce::ftpc
