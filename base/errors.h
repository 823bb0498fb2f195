// base/errors.h — errno as text and as an exception, the same way everywhere.
#pragma once

#include <cerrno>
#include <string>
#include <system_error>

namespace tierce::base {

// strerror_r's text for `e` ("No such file or directory"), thread-safe.
std::string errno_text(int e);

// Throws std::system_error for the current errno, `what` saying what was being done.
[[noreturn]] inline void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

}  // namespace tierce::base
