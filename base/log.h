// base/log.h — a pluggable log sink: agents print to stderr/syslog, Apache modules route lines
// into the error log. Every line starts with a stable id (e.g. "FAB0103") a user can grep for.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace tierce::base {

enum class LogLevel { Debug, Info, Warn, Error };
std::string_view to_string(LogLevel l);

using LogSink = std::function<void(LogLevel, std::string_view line)>;

// The default sink: "2026-11-20T10:00:00.123 memd[123] warn FAB0103 ..." on stderr.
LogSink stderr_sink(std::string program, LogLevel min_level = LogLevel::Info);

// Lines to syslog (facility daemon), level mapped to priority.
LogSink syslog_sink(const std::string& ident);
// Drops lines below *min, which may change while running (reload of log_level).
LogSink level_filter(LogSink inner, std::shared_ptr<std::atomic<LogLevel>> min);

}  // namespace tierce::base
