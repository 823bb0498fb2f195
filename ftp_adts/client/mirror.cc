// ftp_adts/client/mirror.cc — mirror planner and executor (mirror.h).
#include "ftp_adts/client/mirror.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "ftp_adts/client/progress.h"

namespace tierce::ftpc {
namespace {

size_t depth(const std::string& p) { return size_t(std::count(p.begin(), p.end(), '/')); }

std::string join_local(const std::string& root, const std::string& rel) {
  if (rel.empty()) return root;
  if (!root.empty() && root.back() == '/') return root + rel;
  return root + "/" + rel;
}

// Files up to this many bytes are batched (pipelined over ADTS); bigger ones go one at a time.
constexpr uint64_t kBatchBytes = 8ull << 20;
// A file whose session broke is tried again on a fresh session this many times.
constexpr int kMaxAttempts = 3;

}  // namespace

MirrorPlan plan_mirror(const Tree& source, const Tree& target, const MirrorOptions& o) {
  MirrorPlan p;
  std::set<std::string> blocked;  // source dirs whose subtree we cannot mirror (type clash)
  auto is_blocked = [&](const std::string& path) {
    for (size_t s = path.find('/'); s != std::string::npos; s = path.find('/', s + 1))
      if (blocked.count(path.substr(0, s))) return true;
    return false;
  };
  for (const auto& [path, s] : source) {
    if (is_blocked(path)) continue;
    auto t = target.find(path);
    const bool exists = t != target.end();
    if (s.type == EntryType::Dir) {
      if (!exists) {
        p.mkdirs.push_back(path);
      } else if (t->second.type != EntryType::Dir) {
        if (o.del) {
          p.delete_files.push_back(path);
          p.mkdirs.push_back(path);
        } else {
          p.conflicts.push_back(path + ": a directory in the source but not in the target "
                                       "(--delete replaces it)");
          blocked.insert(path);
        }
      }
    } else if (s.type == EntryType::File) {
      if (!exists) {
        p.copies.push_back({path, s});
      } else if (t->second.type == EntryType::Dir) {
        p.conflicts.push_back(path + ": a file in the source, a directory in the target");
      } else if (t->second.type != EntryType::File) {
        if (o.del) {
          p.delete_files.push_back(path);
          p.copies.push_back({path, s});
        } else {
          p.conflicts.push_back(path + ": not a regular file in the target (--delete replaces it)");
        }
      } else if (!o.only_newer) {
        p.copies.push_back({path, s});
      } else {
        const TreeEntry& te = t->second;
        // The target's time is known to within [mtime, mtime + precision): the source is newer
        // only when it is past that whole interval.
        bool newer = s.mtime && te.mtime && *s.mtime > *te.mtime + (te.precision - 1);
        if (s.size != te.size || newer)
          p.copies.push_back({path, s});
        else
          ++p.skipped;
      }
    } else {
      ++p.skipped;  // symlinks and specials are not mirrored
    }
  }
  if (o.del) {
    for (const auto& [path, t] : target) {
      if (source.count(path)) continue;
      if (t.type == EntryType::Dir)
        p.delete_dirs.push_back(path);
      else
        p.delete_files.push_back(path);
    }
  }
  std::sort(p.delete_dirs.begin(), p.delete_dirs.end(), [](const auto& a, const auto& b) {
    return depth(a) != depth(b) ? depth(a) > depth(b) : a > b;
  });
  std::stable_sort(p.copies.begin(), p.copies.end(), [](const CopyItem& a, const CopyItem& b) {
    return a.src.size > b.src.size;
  });
  return p;
}

Tree scan_local(const std::string& root) {
  Tree tree;
  std::deque<std::string> dirs{""};
  while (!dirs.empty()) {
    std::string rel = dirs.front();
    dirs.pop_front();
    std::string dpath = join_local(root, rel);
    DIR* d = ::opendir(dpath.c_str());
    if (!d) {
      if (rel.empty() && errno == ENOENT) return tree;
      throw ClientError(Exit::Local, "cannot read directory " + dpath + ": " + std::strerror(errno));
    }
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    for (const auto& n : names) {
      std::string r = rel.empty() ? n : rel + "/" + n;
      struct stat st{};
      if (::lstat(join_local(root, r).c_str(), &st) != 0) continue;  // vanished meanwhile
      TreeEntry te;
      te.mtime = st.st_mtim.tv_sec;
      if (S_ISDIR(st.st_mode)) {
        te.type = EntryType::Dir;
        dirs.push_back(r);
      } else if (S_ISREG(st.st_mode)) {
        te.type = EntryType::File;
        te.size = uint64_t(st.st_size);
      } else if (S_ISLNK(st.st_mode)) {
        te.type = EntryType::Link;
      }
      tree[r] = te;
    }
  }
  return tree;
}

Tree scan_remote(FtpClient& c, const std::string& root, bool missing_ok,
                 std::vector<std::string>* rejected) {
  Tree tree;
  std::deque<std::string> dirs{""};
  while (!dirs.empty()) {
    std::string rel = dirs.front();
    dirs.pop_front();
    std::vector<RemoteEntry> entries;
    try {
      entries = c.list(join_remote(root, rel), rejected);
    } catch (const ClientError& e) {
      if (rel.empty() && missing_ok && e.code() == Exit::Refused) return tree;
      throw;
    }
    for (auto& e : entries) {
      std::string r = rel.empty() ? e.name : rel + "/" + e.name;
      TreeEntry te;
      te.type = e.type;
      te.size = e.size.value_or(0);
      te.mtime = e.mtime;
      te.precision = e.mtime_precision;
      if (e.type == EntryType::Dir) dirs.push_back(r);
      tree[r] = te;
    }
  }
  return tree;
}

namespace {

// State shared by the copy workers. Invariant: every index of plan.copies ends up exactly once
// in `done_count` (copied or failed).
struct CopyQueue {
  std::mutex mu;
  const std::vector<CopyItem>* copies = nullptr;
  size_t next = 0;
  std::deque<std::pair<size_t, int>> retry;  // index, attempts so far
  std::vector<int> attempts;
  MirrorReport* report = nullptr;
  std::string last_connect_error;

  // Up to `max` items and kBatchBytes (at least one item); retries first.
  std::vector<size_t> take(size_t max) {
    std::lock_guard<std::mutex> g(mu);
    std::vector<size_t> b;
    uint64_t bytes = 0;
    while (b.size() < max) {
      size_t idx;
      if (!retry.empty()) {
        idx = retry.front().first;
      } else if (next < copies->size()) {
        idx = next;
      } else {
        break;
      }
      uint64_t sz = (*copies)[idx].src.size;
      if (!b.empty() && bytes + sz > kBatchBytes) break;
      if (!retry.empty())
        retry.pop_front();
      else
        ++next;
      b.push_back(idx);
      bytes += sz;
    }
    return b;
  }
  void put_back(size_t idx) {
    std::lock_guard<std::mutex> g(mu);
    retry.emplace_back(idx, attempts[idx]);
  }
  void fail(const std::string& path, const std::string& why) {
    std::lock_guard<std::mutex> g(mu);
    report->failures.push_back(path + ": " + why);
  }
  // A copy a broken connection left unfinished: queued again (for a worker with a working
  // connection) until it has had kMaxAttempts, then failed with `why`.
  void retry_or_fail(size_t idx, const std::string& why) {
    bool again;
    {
      std::lock_guard<std::mutex> g(mu);
      again = ++attempts[idx] < kMaxAttempts;
    }
    if (again)
      put_back(idx);
    else
      fail((*copies)[idx].path, why);
  }
  void ok(uint64_t bytes) {
    std::lock_guard<std::mutex> g(mu);
    report->files++;
    report->bytes += bytes;
  }
};

void set_mtime(int fd, std::time_t t) {
  timespec ts[2] = {{t, 0}, {t, 0}};
  ::futimens(fd, ts);
}

// One batch, remote -> local.
void get_batch(FtpClient& c, CopyQueue& q, const std::vector<size_t>& batch,
               const std::string& remote_root, const std::string& local_root, ProgressBar& bar) {
  const auto& copies = *q.copies;
  std::vector<BatchItem> items;
  std::vector<size_t> which;  // items[k] is copies[which[k]]
  std::vector<Fd> fds;
  for (size_t idx : batch) {
    const std::string lp = join_local(local_root, copies[idx].path);
    // O_NOFOLLOW: a symlink planted at the target is refused, never written through.
    Fd fd(::open(lp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd) {
      q.fail(copies[idx].path, std::string("cannot open ") + lp + ": " + std::strerror(errno));
      continue;
    }
    items.push_back(
        BatchItem{join_remote(remote_root, copies[idx].path), fd.get(), 0, 0, false, {}});
    which.push_back(idx);
    fds.push_back(std::move(fd));
  }
  std::vector<char> reported(items.size(), 0);
  std::vector<size_t> need_mdtm;
  auto on_done = [&](size_t k, const BatchResult& r) {
    reported[k] = 1;
    const CopyItem& ci = copies[which[k]];
    const std::string lp = join_local(local_root, ci.path);
    if (!r.ok) {
      q.fail(ci.path, r.error);
      ::unlink(lp.c_str());
      return;
    }
    struct stat st{};
    ::fstat(fds[k].get(), &st);
    if (uint64_t(st.st_size) != ci.src.size && ci.src.type == EntryType::File &&
        ci.src.size != 0) {
      q.fail(ci.path, "size mismatch: got " + std::to_string(st.st_size) + " bytes, the listing "
                      "said " + std::to_string(ci.src.size));
      return;
    }
    if (ci.src.mtime && ci.src.precision <= 1)
      set_mtime(fds[k].get(), *ci.src.mtime);
    else
      need_mdtm.push_back(k);
    q.ok(r.bytes);
    bar.add(r.bytes);
  };
  try {
    c.retr_many(items, on_done);
  } catch (const ClientError& e) {
    for (size_t k = 0; k < items.size(); ++k) {
      if (reported[k]) continue;
      ::unlink(join_local(local_root, copies[which[k]].path).c_str());
      q.retry_or_fail(which[k], e.what());
    }
    return;
  }
  // Listing times were coarse (LIST): ask for the exact one, so the next --only-newer run agrees.
  for (size_t k : need_mdtm) {
    const CopyItem& ci = copies[which[k]];
    std::optional<std::time_t> t;
    if (c.has_feature("MDTM")) {
      try {
        t = c.mdtm(items[k].remote);
      } catch (const ClientError&) {
        if (c.broken()) break;
      }
    }
    if (!t) t = ci.src.mtime;
    if (t) set_mtime(fds[k].get(), *t);
  }
}

// One batch, local -> remote.
void put_batch(FtpClient& c, CopyQueue& q, const std::vector<size_t>& batch,
               const std::string& remote_root, const std::string& local_root, ProgressBar& bar) {
  const auto& copies = *q.copies;
  std::vector<BatchItem> items;
  std::vector<size_t> which;
  std::vector<Fd> fds;
  std::vector<std::time_t> mtimes;
  for (size_t idx : batch) {
    const std::string lp = join_local(local_root, copies[idx].path);
    Fd fd(::open(lp.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st{};
    if (!fd || ::fstat(fd.get(), &st) != 0) {
      q.fail(copies[idx].path, std::string("cannot open ") + lp + ": " + std::strerror(errno));
      continue;
    }
    items.push_back(BatchItem{join_remote(remote_root, copies[idx].path), fd.get(), 0,
                              uint64_t(st.st_size), false, {}});
    which.push_back(idx);
    fds.push_back(std::move(fd));
    mtimes.push_back(st.st_mtim.tv_sec);
  }
  std::vector<char> reported(items.size(), 0);
  std::vector<size_t> sent;
  try {
    c.stor_many(items, [&](size_t k, const BatchResult& r) {
      reported[k] = 1;
      if (!r.ok) {
        q.fail(copies[which[k]].path, r.error);
        return;
      }
      sent.push_back(k);
      q.ok(r.bytes);
      bar.add(r.bytes);
    });
  } catch (const ClientError& e) {
    for (size_t k = 0; k < items.size(); ++k)
      if (!reported[k]) q.retry_or_fail(which[k], e.what());
    return;
  }
  for (size_t k : sent) {
    try {
      c.mfmt(items[k].remote, mtimes[k]);
    } catch (const ClientError&) {
      if (c.broken()) break;
    }
  }
}

}  // namespace

MirrorReport run_mirror(const std::function<std::unique_ptr<FtpClient>()>& connect,
                        const std::string& remote_root, const std::string& local_root,
                        const MirrorOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  MirrorReport rep;
  std::unique_ptr<FtpClient> first = connect();
  rep.data_path = first->data_path();
  std::vector<std::string> rejected;
  Tree remote, local;
  MirrorPlan plan;
  if (!o.reverse) {
    if (!remote_root.empty() && remote_root != "/" && !first->is_dir(remote_root))
      throw ClientError(Exit::Refused, remote_root + " is not a directory on the server");
    remote = scan_remote(*first, remote_root, false, &rejected);
    if (::mkdir(local_root.c_str(), 0755) != 0 && errno != EEXIST)
      throw ClientError(Exit::Local, "cannot create " + local_root + ": " + std::strerror(errno));
    struct stat st{};
    if (::stat(local_root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw ClientError(Exit::Local, local_root + " is not a directory");
    local = scan_local(local_root);
    plan = plan_mirror(remote, local, o);
  } else {
    struct stat st{};
    if (::stat(local_root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw ClientError(Exit::Local, local_root + " is not a directory");
    local = scan_local(local_root);
    if (!remote_root.empty() && remote_root != "/" && !first->is_dir(remote_root))
      first->mkd(remote_root);
    remote = scan_remote(*first, remote_root, true, &rejected);
    plan = plan_mirror(local, remote, o);
  }
  for (const auto& n : rejected)
    std::fprintf(stderr, "tierce-ftp: ignoring a remote entry with an unsafe name: '%s'\n",
                 n.c_str());
  for (const auto& c : plan.conflicts) rep.failures.push_back(c);
  rep.skipped = plan.skipped;

  // Deletions first (a file may have to make room for a directory of the same name).
  for (const auto& f : plan.delete_files) {
    try {
      if (!o.reverse) {
        if (::unlink(join_local(local_root, f).c_str()) != 0 && errno != ENOENT)
          throw ClientError(Exit::Local, std::string("cannot delete: ") + std::strerror(errno));
      } else {
        first->dele(join_remote(remote_root, f));
      }
      rep.deleted++;
    } catch (const ClientError& e) {
      if (first->broken()) throw;
      rep.failures.push_back(f + ": " + e.what());
    }
  }
  for (const auto& d : plan.delete_dirs) {
    try {
      if (!o.reverse) {
        if (::rmdir(join_local(local_root, d).c_str()) != 0 && errno != ENOENT)
          throw ClientError(Exit::Local, std::string("cannot delete: ") + std::strerror(errno));
      } else {
        first->rmd(join_remote(remote_root, d));
      }
      rep.deleted++;
    } catch (const ClientError& e) {
      if (first->broken()) throw;
      rep.failures.push_back(d + ": " + e.what());
    }
  }
  std::set<std::string> failed_dirs;
  for (const auto& d : plan.mkdirs) {
    try {
      if (!o.reverse) {
        if (::mkdir(join_local(local_root, d).c_str(), 0755) != 0 && errno != EEXIST)
          throw ClientError(Exit::Local, std::string("cannot create: ") + std::strerror(errno));
      } else {
        first->mkd(join_remote(remote_root, d));
      }
      rep.dirs_created++;
    } catch (const ClientError& e) {
      if (first->broken()) throw;
      rep.failures.push_back(d + ": " + e.what());
      failed_dirs.insert(d);
    }
  }
  // Files under a directory we could not create fail without a try.
  std::vector<CopyItem> copies;
  for (auto& ci : plan.copies) {
    bool under = false;
    for (size_t s = ci.path.find('/'); s != std::string::npos; s = ci.path.find('/', s + 1))
      if (failed_dirs.count(ci.path.substr(0, s))) under = true;
    if (under)
      rep.failures.push_back(ci.path + ": its directory could not be created");
    else
      copies.push_back(std::move(ci));
  }

  uint64_t total = 0;
  for (const auto& ci : copies) total += ci.src.size;
  ProgressBar bar(o.progress, o.reverse ? "mirror -R" : "mirror", total);
  CopyQueue q;
  q.copies = &copies;
  q.attempts.assign(copies.size(), 0);
  q.report = &rep;
  const unsigned n = std::max(1u, std::min<unsigned>(o.parallel, unsigned(copies.size())));
  auto worker = [&](std::unique_ptr<FtpClient> c) {
    for (;;) {
      if (!c || c->broken()) {
        {
          std::lock_guard<std::mutex> g(q.mu);
          if (q.next >= copies.size() && q.retry.empty()) return;
        }
        try {
          c = connect();
        } catch (const ClientError& e) {
          std::lock_guard<std::mutex> g(q.mu);
          q.last_connect_error = e.what();
          return;  // the other sessions carry on; leftovers are failed after the join
        }
      }
      auto batch = q.take(c->adts_active() ? 64 : 1);
      if (batch.empty()) return;
      if (o.reverse)
        put_batch(*c, q, batch, remote_root, local_root, bar);
      else
        get_batch(*c, q, batch, remote_root, local_root, bar);
    }
  };
  if (!copies.empty()) {
    std::vector<std::thread> threads;
    for (unsigned i = 1; i < n; ++i) threads.emplace_back(worker, nullptr);
    worker(std::move(first));
    for (auto& t : threads) t.join();
    // Whatever is left had no session to run on.
    while (q.next < copies.size()) rep.failures.push_back(copies[q.next++].path + ": " +
                                                          q.last_connect_error);
    for (auto& [idx, att] : q.retry)
      rep.failures.push_back(copies[idx].path + ": " + q.last_connect_error);
  }
  bar.finish();
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace tierce::ftpc
