// ftp_adts/client/transfer.cc — single-file get and put (transfer.h).
#include "ftp_adts/client/transfer.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "ftp_adts/client/progress.h"

namespace tierce::ftpc {
namespace {

[[noreturn]] void local_fail(const std::string& what, const std::string& path) {
  throw ClientError(Exit::Local, what + " " + path + ": " + std::strerror(errno));
}

// An unnamed scratch file for a download to standard output that cannot be written in place:
// in $TMPDIR (else /tmp), O_TMPFILE when the file system has it, else created and unlinked.
Fd open_spool() {
  const char* env = std::getenv("TMPDIR");
  std::string dir = env && *env ? env : "/tmp";
  Fd fd(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (fd) return fd;
  std::string tmpl = dir + "/tierce-ftp.XXXXXX";
  fd.reset(::mkostemp(tmpl.data(), O_CLOEXEC));
  if (!fd) local_fail("cannot create a scratch file in", dir);
  ::unlink(tmpl.c_str());
  return fd;
}

// write(2) of all of [p, p+n) to fd (a pipe, a terminal, a file...), waiting when it is
// non-blocking and full.
void write_out(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w > 0) {
      p += w;
      n -= size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      pollfd pf{fd, POLLOUT, 0};
      ::poll(&pf, 1, -1);
      continue;
    }
    if (w == 0) errno = EIO;
    local_fail("cannot write", "to standard output");
  }
}

// `get URL -`. Standard output is written with write(2) only, in order from its current position
// (a pipe, a terminal, a file opened by the shell, with or without O_APPEND). A plain data
// connection into a pipe or terminal writes straight through; an ADTS session (whose receiver
// writes by position, possibly out of order) or a seekable standard output goes through an
// unnamed scratch file that is then copied out.
TransferOutcome get_to_stdout(FtpClient& c, const std::string& remote,
                              std::optional<uint64_t> rsize, bool progress) {
  TransferOutcome out;
  const bool direct = !c.adts_active() && ::lseek(STDOUT_FILENO, 0, SEEK_CUR) < 0;
  Fd fd = direct ? Fd(::dup(STDOUT_FILENO)) : open_spool();
  if (!fd) local_fail("cannot use", "standard output");
  ProgressBar bar(progress, remote, rsize.value_or(0));
  out.bytes = c.retr(BatchItem{remote, fd.get(), 0, 0, false, {}}, rsize.value_or(0),
                     [&](uint64_t done, uint64_t) { bar.set(done); });
  bar.finish();
  if (!direct) {
    std::vector<uint8_t> buf(1 << 20);
    for (uint64_t at = 0; at < out.bytes;) {
      ssize_t r = ::pread(fd.get(), buf.data(),
                          size_t(std::min<uint64_t>(buf.size(), out.bytes - at)), off_t(at));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        if (r == 0) errno = EIO;
        local_fail("cannot read", "the scratch file");
      }
      write_out(STDOUT_FILENO, buf.data(), size_t(r));
      at += uint64_t(r);
    }
  }
  if (rsize && out.bytes != *rsize)
    throw ClientError(Exit::Transfer, "size mismatch for " + remote + ": received " +
                                          std::to_string(out.bytes) + " bytes, the server said " +
                                          std::to_string(*rsize));
  return out;
}

// Fails early (exit 5, nothing changed) when `local` could not be written: a directory, a file
// we may not write, a directory we may not create it in.
void check_writable(const std::string& local) {
  struct stat st{};
  if (::stat(local.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw ClientError(Exit::Local, local + " is a directory");
    if (::access(local.c_str(), W_OK) != 0) local_fail("cannot open", local);
    return;
  }
  if (errno != ENOENT) local_fail("cannot open", local);
  size_t slash = local.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : local.substr(0, slash);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) local_fail("cannot create", local);
}

}  // namespace

TransferOutcome get_file(FtpClient& c, const std::string& remote, const std::string& local,
                         bool resume, bool progress) {
  std::optional<uint64_t> rsize = c.size(remote);
  if (local == "-") return get_to_stdout(c, remote, rsize, progress);
  TransferOutcome out;
  // -c: the REST offset is the size of the local file, nothing else (0 when there is none).
  uint64_t offset = 0;
  if (resume) {
    struct stat st{};
    if (::stat(local.c_str(), &st) == 0 && S_ISREG(st.st_mode)) offset = uint64_t(st.st_size);
    if (rsize && offset == *rsize && offset > 0) {
      out.already_complete = true;
      out.resumed_from = offset;
      return out;
    }
    if (rsize && offset > *rsize)
      throw ClientError(Exit::Transfer, "cannot resume: " + local + " (" +
                                            std::to_string(offset) +
                                            " bytes) is larger than the remote file (" +
                                            std::to_string(*rsize) + " bytes)");
  }
  check_writable(local);
  // The local file is opened (created; truncated unless -c) only once the server has accepted
  // the RETR: a refused get (55x) leaves an existing file untouched and creates nothing. A
  // transfer that breaks after it started keeps the partial file, for -c to resume.
  Fd fd;
  auto open_local = [&]() -> base::Result<int> {
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (resume ? 0 : O_TRUNC);
    fd.reset(::open(local.c_str(), flags, 0644));
    if (!fd)
      return base::Status(base::Code::Internal,
                          "cannot open " + local + ": " + std::strerror(errno));
    return fd.get();
  };
  out.resumed_from = offset;
  ProgressBar bar(progress, remote, rsize.value_or(0));
  bar.set(offset);
  out.bytes = c.retr(BatchItem{remote, -1, offset, 0, false, open_local}, rsize.value_or(0),
                     [&](uint64_t done, uint64_t) { bar.set(offset + done); });
  bar.finish();
  if (!fd) {
    if (base::Result<int> opened = open_local(); !opened.ok())
      throw ClientError(Exit::Local, opened.message());
  }
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) local_fail("cannot stat", local);
  if (rsize && uint64_t(st.st_size) != *rsize)
    throw ClientError(Exit::Transfer, "size mismatch for " + local + ": " +
                                          std::to_string(st.st_size) + " bytes, the server "
                                          "said " + std::to_string(*rsize));
  if (auto t = c.mdtm(remote)) {
    timespec ts[2] = {{*t, 0}, {*t, 0}};
    ::futimens(fd.get(), ts);
  }
  if (::close(fd.release()) != 0) local_fail("cannot write", local);
  return out;
}

TransferOutcome put_file(FtpClient& c, const std::string& local, const std::string& remote,
                         bool resume, bool progress) {
  TransferOutcome out;
  Fd fd(::open(local.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) local_fail("cannot open", local);
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) local_fail("cannot stat", local);
  if (S_ISDIR(st.st_mode))
    throw ClientError(Exit::Local, local + " is a directory (use mirror -R to upload a tree)");
  if (!S_ISREG(st.st_mode)) throw ClientError(Exit::Local, local + " is not a regular file");
  const uint64_t lsize = uint64_t(st.st_size);
  uint64_t offset = 0;
  if (resume) {
    offset = c.size(remote).value_or(0);
    if (offset == lsize && lsize > 0) {
      out.already_complete = true;
      out.resumed_from = offset;
      return out;
    }
    if (offset > lsize)
      throw ClientError(Exit::Transfer, "cannot resume: the remote " + remote + " (" +
                                            std::to_string(offset) + " bytes) is larger than " +
                                            local + " (" + std::to_string(lsize) + " bytes)");
  }
  out.resumed_from = offset;
  ProgressBar bar(progress, local, lsize);
  bar.set(offset);
  out.bytes = c.stor(remote, fd.get(), offset, lsize - offset, offset > 0,
                     [&](uint64_t done, uint64_t) { bar.set(offset + done); });
  bar.finish();
  if (auto rs = c.size(remote); rs && *rs != lsize)
    throw ClientError(Exit::Transfer, "size mismatch for " + remote + ": the server has " +
                                          std::to_string(*rs) + " bytes, " + local + " has " +
                                          std::to_string(lsize));
  c.mfmt(remote, st.st_mtim.tv_sec);
  return out;
}

}  // namespace tierce::ftpc
