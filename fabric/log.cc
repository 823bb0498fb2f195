// fabric/log.cc
#include "fabric/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <mutex>

namespace tierce::fabric {

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

}  // namespace tierce::fabric
