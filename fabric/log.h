// fabric/log.h — a pluggable log sink: agents print to stderr/syslog, Apache modules route lines
// into the error log. Every line starts with a stable id (e.g. "FAB0103") a user can grep for.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace tierce::fabric {

enum class LogLevel { Debug, Info, Warn, Error };
std::string_view to_string(LogLevel l);

using LogSink = std::function<void(LogLevel, std::string_view line)>;

// The default sink: "2026-11-20T10:00:00.123 memd[123] warn FAB0103 ..." on stderr.
LogSink stderr_sink(std::string program, LogLevel min_level = LogLevel::Info);

}  // namespace tierce::fabric
