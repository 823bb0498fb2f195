// dlm/types.cc — names of the lock manager's modes and statuses (logs, messages, the C API).
#include "dlm/types.h"

namespace tierce::dlm {

std::string_view to_string(Mode m) {
  switch (m) {
    case Mode::Shared:
      return "shared";
    case Mode::Exclusive:
      return "exclusive";
  }
  return "?";
}

std::string_view to_string(Status s) {
  switch (s) {
    case Status::Ok:
      return "ok";
    case Status::Timeout:
      return "timeout";
    case Status::WouldBlock:
      return "would block";
    case Status::NotHeld:
      return "not held";
    case Status::HomeDown:
      return "home down";
    case Status::BadName:
      return "bad name";
    case Status::LeaseLost:
      return "lease lost";
    case Status::TooMany:
      return "too many";
    case Status::ShuttingDown:
      return "shutting down";
    case Status::BadRequest:
      return "bad request";
    case Status::Internal:
      return "internal error";
  }
  return "unknown status";
}

}  // namespace tierce::dlm
