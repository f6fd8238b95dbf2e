#include "xl/train/metrics.h"

#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "xl/util/clock.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/json_io.h"

namespace xl::train {
namespace {

// --resume appends to the run's log. A file that is not one (a checkpoint named by mistake) is
// refused before a byte is written to it; a line that a killed run left unfinished, or NUL bytes
// a stopped machine left (zero_filled), are cut off, so that the next event starts a line of its own.
void prepare_to_append(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty()) return;
  const size_t whole = whole_lines_size(text);
  const bool zeros = zero_filled(text, whole);
  XL_CHECK(text.front() == '{' || (whole == 0 && zeros), kExitDataErr,
           path << ": not a metrics log (JSON Lines) to append to: give --metrics the run's own log, or a new file");
  if (whole == text.size()) return;
  XL_CHECK(text[whole] == '{' || zeros, kExitDataErr, path << ": its last line is not a metrics event");
  std::error_code ec;
  std::filesystem::resize_file(path, whole, ec);
  XL_CHECK(!ec, kExitCantCreat, path << ": cannot cut the line a killed run left unfinished: " << ec.message());
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, const std::string& tool, bool append, bool force)
    : path_(path), tool_(tool) {
  XL_CHECK(append || force || io::is_stream(path) || !io::is_file(path), kExitCantCreat,
           path << ": already exists (use -f to overwrite, or --resume to append)");
  if (append && !io::is_stream(path) && io::is_file(path)) prepare_to_append(path);
  // A stream (--metrics /dev/stderr) is appended to: truncating it would erase what the shell's
  // file already holds.
  out_ = std::make_unique<std::ofstream>(path, append || io::is_stream(path) ? std::ios::app : std::ios::trunc);
  XL_CHECK(*out_, kExitCantCreat, "cannot create " << path << ": " << std::strerror(errno));
}

void MetricsLog::write(const std::string& event, nlohmann::json fields) {
  if (!out_) return;
  nlohmann::json j = {{"t", utc_now_ms()}, {"tool", tool_}, {"event", event}};
  j.update(fields);
  *out_ << json_line(j) << '\n';
  out_->flush();
  if (out_->good()) return;
  failure_ = path_ + ": write error: " + std::strerror(errno);
  out_.reset();
}

}  // namespace xl::train
