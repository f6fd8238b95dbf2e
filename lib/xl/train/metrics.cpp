#include "xl/train/metrics.h"

#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <ctime>

#include "xl/util/error.h"

namespace xl::train {

std::string utc_timestamp() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  char buf[40];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", std::gmtime(&t));
  char out[48];
  std::snprintf(out, sizeof(out), "%s.%03dZ", buf, static_cast<int>(ms));
  return out;
}

MetricsLog::MetricsLog(const std::string& path, const std::string& tool, bool append, bool force)
    : path_(path), tool_(tool) {
  struct stat st;
  XL_CHECK(append || force || ::stat(path.c_str(), &st) != 0, kExitCantCreat,
           path << ": already exists (use -f to overwrite, or --resume to append)");
  out_ = std::make_unique<std::ofstream>(path, append ? std::ios::app : std::ios::trunc);
  XL_CHECK(*out_, kExitCantCreat, "cannot create " << path << ": " << std::strerror(errno));
}

void MetricsLog::write(const std::string& event, nlohmann::json fields) {
  if (!out_) return;
  nlohmann::json j = {{"t", utc_timestamp()}, {"tool", tool_}, {"event", event}};
  j.update(fields);
  *out_ << j.dump() << '\n';
  out_->flush();
  XL_CHECK(out_->good(), kExitIoErr, path_ << ": write error");
}

}  // namespace xl::train
