#include "xl/util/log.h"

#include <cstdio>
#include <mutex>

namespace xl::log {
namespace {
Level g_level = Level::kInfo;
std::string g_tool = "xl";
std::mutex g_mutex;
}  // namespace

void set_level(Level level) { g_level = level; }
Level level() { return g_level; }
void set_tool_name(const std::string& name) { g_tool = name; }
const std::string& tool_name() { return g_tool; }

void write(Level at, const std::string& message) {
  if (g_level < at) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "%s: %s\n", g_tool.c_str(), message.c_str());
  std::fflush(stderr);
}

void warn(const std::string& message) {
  if (g_level == Level::kQuiet) return;
  write(Level::kQuiet, "warning: " + message);
}

}  // namespace xl::log
