#include "xl/train/metrics.h"

#include <chrono>
#include <cstring>
#include <ctime>

#include "xl/util/clock.h"
#include "xl/util/error.h"
#include "xl/util/io.h"

namespace xl::train {

MetricsLog::MetricsLog(const std::string& path, const std::string& tool, bool append, bool force)
    : path_(path), tool_(tool) {
  XL_CHECK(append || force || io::is_stream(path) || !io::is_file(path), kExitCantCreat,
           path << ": already exists (use -f to overwrite, or --resume to append)");
  // A stream (--metrics /dev/stderr) is appended to: truncating it would erase what the shell's
  // file already holds.
  out_ = std::make_unique<std::ofstream>(path, append || io::is_stream(path) ? std::ios::app : std::ios::trunc);
  XL_CHECK(*out_, kExitCantCreat, "cannot create " << path << ": " << std::strerror(errno));
}

void MetricsLog::write(const std::string& event, nlohmann::json fields) {
  if (!out_) return;
  nlohmann::json j = {{"t", utc_now_ms()}, {"tool", tool_}, {"event", event}};
  j.update(fields);
  *out_ << j.dump() << '\n';
  out_->flush();
  if (out_->good()) return;
  failure_ = path_ + ": write error: " + std::strerror(errno);
  out_.reset();
}

}  // namespace xl::train
