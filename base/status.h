// base/status.h — how a function says it failed, when its caller is expected to handle it:
// `Status` (a code, the message id of the condition, a message for the log) and `Result<T>` (a
// value or a Status), in the manner of abseil's Status/StatusOr.
//
// The project's rule (docs/errors.md has it whole):
//   - a bug of this program            → TIERCE_CHECK / TIERCE_DCHECK (base/check.h): abort;
//   - a failure the caller handles on its path (a malformed frame, a refused request, a peer
//     down, a missing account) → return Status or Result<T>; never an out-parameter string;
//   - a failure that ends the whole operation at a boundary (start-up: configuration, topology,
//     privileges; a library's API whose caller can only give up: fabric::connect, LockClient,
//     the FTP client) → an exception of that boundary's class, caught where it is reported.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "base/check.h"

namespace tierce::base {

// What kind of failure: for the caller's decision (retry, refuse, give up), not for the log —
// the message says what happened, the message id which condition it is.
enum class Code : unsigned char {
  Ok = 0,
  InvalidArgument,     // the input is malformed or out of range (a frame, a name, an option)
  NotFound,            // what was named does not exist (an account, a file, a key)
  AlreadyExists,
  PermissionDenied,
  Unavailable,         // a peer or a resource is down or unreachable: may work later
  DeadlineExceeded,    // no answer within the deadline (the peer may still act on the request)
  ResourceExhausted,   // a quota, a table or a pool is full
  FailedPrecondition,  // the state does not allow it now (not logged in, not leased, fenced)
  Internal,            // a failure of the system below (a system call, a library)
};

constexpr std::string_view to_string(Code c) {
  switch (c) {
    case Code::Ok: return "ok";
    case Code::InvalidArgument: return "invalid argument";
    case Code::NotFound: return "not found";
    case Code::AlreadyExists: return "already exists";
    case Code::PermissionDenied: return "permission denied";
    case Code::Unavailable: return "unavailable";
    case Code::DeadlineExceeded: return "deadline exceeded";
    case Code::ResourceExhausted: return "resource exhausted";
    case Code::FailedPrecondition: return "failed precondition";
    case Code::Internal: return "internal";
  }
  return "?";
}

inline std::ostream& operator<<(std::ostream& o, Code c) { return o << to_string(c); }

class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  // `msgid` names the condition (its id in docs/msgids.txt), or is empty for a failure the
  // caller reports under its own id; it must be a string literal (kept by pointer).
  Status(Code code, std::string message, const char* msgid = "")
      : code_(code), msgid_(msgid ? msgid : ""), message_(std::move(message)) {
    TIERCE_CHECK(code != Code::Ok, "a failure Status has a failure code");
  }

  bool ok() const { return code_ == Code::Ok; }
  Code code() const { return code_; }
  std::string_view msgid() const { return msgid_; }
  const std::string& message() const { return message_; }
  // "MSGID message", or the message alone without an id; "ok" for success.
  std::string to_string() const {
    if (ok()) return "ok";
    return *msgid_ ? std::string(msgid_) + " " + message_ : message_;
  }

 private:
  Code code_ = Code::Ok;
  const char* msgid_ = "";
  std::string message_;
};

// A value, or the Status saying why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Status failure) : v_(std::in_place_index<1>, std::move(failure)) {  // NOLINT
    TIERCE_CHECK(!std::get<1>(v_).ok(), "a Result without a value holds a failure");
  }
  Result(Code code, std::string message, const char* msgid = "")
      : Result(Status(code, std::move(message), msgid)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  // Success when ok(), else the failure.
  Status status() const { return ok() ? Status() : std::get<1>(v_); }
  // The failure's message; empty on success (so a test can always print it).
  const std::string& message() const {
    static const std::string kNone;
    return ok() ? kNone : std::get<1>(v_).message();
  }

  T& value() & {
    TIERCE_CHECK(ok(), "value() of a Result that holds a failure");
    return std::get<0>(v_);
  }
  const T& value() const& {
    TIERCE_CHECK(ok(), "value() of a Result that holds a failure");
    return std::get<0>(v_);
  }
  T&& value() && {
    TIERCE_CHECK(ok(), "value() of a Result that holds a failure");
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tierce::base
