#include "xl/util/progress.h"

#include <unistd.h>

#include <cstdio>

#include "xl/util/error.h"
#include "xl/util/log.h"

namespace xl {

Progress::Progress(const std::string& mode) {
  XL_CHECK(mode == "auto" || mode == "always" || mode == "never", kExitUsage,
           "--progress must be auto, always or never");
  live_ = mode == "always" || (mode == "auto" && ::isatty(2));
  if (log::level() == log::Level::kQuiet) live_ = false;
}

Progress::~Progress() { clear(); }

void Progress::clear() {
  if (live_ && shown_ > 0) {
    std::fprintf(stderr, "\r%*s\r", static_cast<int>(shown_), "");
    std::fflush(stderr);
    shown_ = 0;
  }
}

void Progress::update(const std::string& line) {
  if (!live_) return;
  clear();
  std::fprintf(stderr, "%s", line.c_str());
  std::fflush(stderr);
  shown_ = line.size();
}

void Progress::print(const std::string& line) {
  clear();
  XL_INFO(line);
}

}  // namespace xl
