// Human-readable messages go to stderr only; stdout carries exactly one product.
#pragma once
#include <sstream>
#include <string>

namespace xl::log {

enum class Level { kQuiet = 0, kInfo = 1, kDebug = 2 };

void set_level(Level level);
Level level();
void set_tool_name(const std::string& name);
const std::string& tool_name();

// Writes "[tool] message" to stderr when the level allows it.
void write(Level at, const std::string& message);
// Warnings are shown unless -q.
void warn(const std::string& message);

}  // namespace xl::log

#define XL_LOG(lvl, msg)                                                \
  do {                                                                  \
    if (::xl::log::level() >= (lvl)) {                                  \
      std::ostringstream xl_log_os_;                                    \
      xl_log_os_ << msg;                                                \
      ::xl::log::write((lvl), xl_log_os_.str());                        \
    }                                                                   \
  } while (0)
#define XL_INFO(msg) XL_LOG(::xl::log::Level::kInfo, msg)
#define XL_DEBUG(msg) XL_LOG(::xl::log::Level::kDebug, msg)
#define XL_WARN(msg)                                                    \
  do {                                                                  \
    std::ostringstream xl_log_os_;                                      \
    xl_log_os_ << msg;                                                  \
    ::xl::log::warn(xl_log_os_.str());                                  \
  } while (0)
