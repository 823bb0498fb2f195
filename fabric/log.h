// fabric/log.h — the fabric's (and its users') names for base's log sink (base/log.h): every line
// starts with a stable id (e.g. "FAB0103") a user can grep for.
#pragma once

#include "base/log.h"

namespace tierce::fabric {

using base::LogLevel;
using base::LogSink;
using base::stderr_sink;
using base::to_string;

}  // namespace tierce::fabric
