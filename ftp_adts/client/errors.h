// ftp_adts/client/errors.h — the error type of tierce-ftp and the exit codes of docs/ftp.md
// ("tierce-ftp — command line"). Every failure below main() is a ClientError carrying the exit
// code the user sees, so the code is decided where the failure is understood, not in main().
#pragma once

#include <stdexcept>
#include <string>

namespace tierce::ftpc {

enum class Exit : int {
  Ok = 0,
  Usage = 1,      // bad command line or URL
  Network = 2,    // cannot connect, connection lost, timeout, 421
  Login = 3,      // USER/PASS (or AUTH TLS) refused
  Refused = 4,    // the server refused the command (55x: no such file, permission ...)
  Local = 5,      // a local file or directory could not be read or written
  Transfer = 6,   // a transfer broke (426, ADTS stream failure) or its size did not match
  Partial = 7,    // mirror finished but some files failed
};

class ClientError : public std::runtime_error {
 public:
  ClientError(Exit code, const std::string& what) : std::runtime_error(what), code_(code) {}
  Exit code() const { return code_; }

 private:
  Exit code_;
};

}  // namespace tierce::ftpc
