// What the process has used so far, for reports and metrics.
#pragma once

namespace xl {

// Peak resident set size in MB (2^20 bytes).
double peak_rss_mb();
// Resident set size now, in MB (0 when /proc is not there).
double rss_mb();

}  // namespace xl
