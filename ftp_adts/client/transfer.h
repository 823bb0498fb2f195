// ftp_adts/client/transfer.h — `get` and `put` of one file: resume (-c: REST STREAM for get,
// SIZE + APPE for put), size check against SIZE afterwards (mismatch = exit 6), modification
// times carried over (MDTM -> local mtime; local mtime -> MFMT when the server offers it), and
// the progress line.
#pragma once

#include <cstdint>
#include <string>

#include "ftp_adts/client/control.h"

namespace tierce::ftpc {

struct TransferOutcome {
  uint64_t bytes = 0;         // moved now
  uint64_t resumed_from = 0;  // bytes already there (-c)
  bool already_complete = false;
};

// Downloads `remote` to `local` ("-" = standard output). Throws ClientError.
TransferOutcome get_file(FtpClient& c, const std::string& remote, const std::string& local,
                         bool resume, bool progress);
// Uploads `local` to `remote`. Throws ClientError.
TransferOutcome put_file(FtpClient& c, const std::string& local, const std::string& remote,
                         bool resume, bool progress);

}  // namespace tierce::ftpc
