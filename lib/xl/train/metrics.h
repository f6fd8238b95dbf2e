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
  void write(const std::string& event, nlohmann::json fields);

 private:
  std::unique_ptr<std::ofstream> out_;
  std::string path_, tool_;
};


}  // namespace xl::train
