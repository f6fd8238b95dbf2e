#include "xl/train/metrics.h"

#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

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

// The numbers of a metrics event as TensorBoard scalars: EVENT/FIELD, an array's entries
// EVENT/FIELD/I; the step is the event's, not a scalar.
std::vector<std::pair<std::string, double>> scalars_of(const std::string& event, const nlohmann::json& fields) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [name, value] : fields.items()) {
    if (name == "step") continue;
    if (value.is_number()) out.emplace_back(event + "/" + name, value.get<double>());
    if (value.is_array())
      for (size_t i = 0; i < value.size(); ++i)
        if (value[i].is_number()) out.emplace_back(event + "/" + name + "/" + std::to_string(i), value[i].get<double>());
  }
  return out;
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

void MetricsLog::add_tensorboard(const std::string& dir, int64_t purge_from) {
  events_ = std::make_unique<tensorboard::EventFile>(dir, purge_from);
}

void MetricsLog::write(const std::string& event, nlohmann::json fields) {
  if (events_ && failure_.empty() && (event == "train" || event == "valid") && fields.contains("step")) {
    events_->scalars(fields["step"].get<int64_t>(), scalars_of(event, fields));
    if (!events_->failure().empty()) failure_ = events_->failure();
  }
  if (!out_) return;
  nlohmann::json j = {{"t", utc_now_ms()}, {"tool", tool_}, {"event", event}};
  j.update(fields);
  *out_ << json_line(j) << '\n';
  out_->flush();
  if (out_->good()) return;
  failure_ = path_ + ": write error: " + std::strerror(errno);
  out_.reset();
}

int64_t tensorboard_purge_step(const std::string& dir, int64_t start_step, bool continues, bool may_replace) {
  if (continues || start_step > 0) return start_step + 1;
  bool holds_events = false;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    holds_events = holds_events || e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  if (!holds_events) return -1;
  XL_CHECK(may_replace, kExitCantCreat,
           dir << ": holds the TensorBoard events of another run (use -f to start its curves again, or --resume to "
                  "continue that run)");
  return 0;
}

}  // namespace xl::train
