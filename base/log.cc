// base/log.cc
#include "base/log.h"

#include <sys/time.h>
#include <syslog.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <mutex>

namespace tierce::base {

std::string_view to_string(LogLevel l) {
  switch (l) {
    case LogLevel::Debug:
      return "debug";
    case LogLevel::Info:
      return "info";
    case LogLevel::Warn:
      return "warn";
    case LogLevel::Error:
      return "error";
  }
  return "?";
}

LogSink stderr_sink(std::string program, LogLevel min_level) {
  return [program = std::move(program), min_level](LogLevel l, std::string_view line) {
    if (l < min_level) return;
    static std::mutex mu;
    timeval tv;
    gettimeofday(&tv, nullptr);
    tm t;
    localtime_r(&tv.tv_sec, &t);
    char ts[32];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &t);
    std::lock_guard g(mu);
    std::fprintf(stderr, "%s.%03ld %s[%d] %s %.*s\n", ts, long(tv.tv_usec / 1000), program.c_str(),
                 int(getpid()), std::string(to_string(l)).c_str(), int(line.size()), line.data());
    std::fflush(stderr);
  };
}

LogSink syslog_sink(const std::string& ident) {
  // openlog keeps the pointer: the string must outlive every syslog() call.
  static std::string kept;
  kept = ident;
  ::openlog(kept.c_str(), LOG_PID | LOG_NDELAY, LOG_DAEMON);
  return [](LogLevel l, std::string_view line) {
    int prio = LOG_INFO;
    switch (l) {
      case LogLevel::Debug:
        prio = LOG_DEBUG;
        break;
      case LogLevel::Info:
        prio = LOG_INFO;
        break;
      case LogLevel::Warn:
        prio = LOG_WARNING;
        break;
      case LogLevel::Error:
        prio = LOG_ERR;
        break;
    }
    ::syslog(prio, "%.*s", int(line.size()), line.data());
  };
}

LogSink level_filter(LogSink inner, std::shared_ptr<std::atomic<LogLevel>> min) {
  return
      [inner = std::move(inner), min = std::move(min)](LogLevel l, std::string_view line) {
        if (l < min->load(std::memory_order_relaxed)) return;
        inner(l, line);
      };
}

}  // namespace tierce::base
