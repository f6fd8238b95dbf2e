// Training metrics as JSON Lines: one object per event (train, valid, checkpoint, done), each with
// a UTC timestamp and the tool's name. Appended to on --resume.
#pragma once
#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <string>

namespace xl::train {

class MetricsLog {
 public:
  MetricsLog() = default;  // disabled
  MetricsLog(const std::string& path, const std::string& tool, bool append, bool force);
  // A write that fails (a reader that quit, a full disk) ends the log: failure() says why, and the
  // trainer stops the run with its step saved, where a throw here would lose the steps since the
  // last checkpoint.
  void write(const std::string& event, nlohmann::json fields);
  // "PATH: write error: REASON", or empty.
  const std::string& failure() const { return failure_; }

 private:
  std::unique_ptr<std::ofstream> out_;
  std::string path_, tool_, failure_;
};


}  // namespace xl::train
