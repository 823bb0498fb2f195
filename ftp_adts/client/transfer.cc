// ftp_adts/client/transfer.cc — single-file get and put (transfer.h).
#include "ftp_adts/client/transfer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ftp_adts/client/progress.h"

namespace tierce::ftpc {
namespace {

[[noreturn]] void local_fail(const std::string& what, const std::string& path) {
  throw ClientError(Exit::Local, what + " " + path + ": " + std::strerror(errno));
}

}  // namespace

TransferOutcome get_file(FtpClient& c, const std::string& remote, const std::string& local,
                         bool resume, bool progress) {
  TransferOutcome out;
  const bool to_stdout = local == "-";
  std::optional<uint64_t> rsize = c.size(remote);
  Fd fd;
  uint64_t offset = 0;
  if (to_stdout) {
    fd.reset(::dup(STDOUT_FILENO));
  } else {
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (resume ? 0 : O_TRUNC);
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
    fd.reset(::open(local.c_str(), flags, 0644));
    if (!fd) local_fail("cannot open", local);
  }
  out.resumed_from = offset;
  ProgressBar bar(progress, remote, rsize.value_or(0));
  bar.set(offset);
  out.bytes = c.retr(remote, fd.get(), offset, rsize.value_or(0),
                     [&](uint64_t done, uint64_t) { bar.set(offset + done); });
  bar.finish();
  if (!to_stdout) {
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
  }
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
