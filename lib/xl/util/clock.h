// UTC timestamps for provenance attributes and metrics.
#pragma once
#include <string>

namespace xl {

// "2026-11-22T05:53:46Z"
std::string utc_now();
// "2026-11-22T05:53:46.123Z" (milliseconds, for metrics events)
std::string utc_now_ms();

}  // namespace xl
