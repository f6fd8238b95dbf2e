// Training metrics as JSON Lines: one object per event (train, valid, checkpoint, done), each with
// a UTC timestamp and the tool's name. Appended to on --resume. With --tensorboard DIR the same
// numbers go to TensorBoard too: each number of a train or valid event is a scalar tagged
// EVENT/FIELD (an array's entries EVENT/FIELD/I) at the event's step.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "xl/tensorboard/event_file.h"

namespace xl::train {

class MetricsLog {
 public:
  MetricsLog() = default;  // disabled
  MetricsLog(const std::string& path, const std::string& tool, bool append, bool force);
  // Also (or only, with `path` empty) to TensorBoard: a new event file in `dir` whose curves start
  // again at `purge_from` (a resumed or later phase: the step after its start; -1: a new run).
  void add_tensorboard(const std::string& dir, int64_t purge_from);
  // A write that fails (a reader that quit, a full disk) ends the log: failure() says why, and the
  // trainer stops the run with its step saved, where a throw here would lose the steps since the
  // last checkpoint.
  void write(const std::string& event, nlohmann::json fields);
  // "PATH: write error: REASON", or empty.
  const std::string& failure() const { return failure_; }

 private:
  std::unique_ptr<std::ofstream> out_;
  std::unique_ptr<tensorboard::EventFile> events_;
  std::string path_, tool_, failure_;
};

// The step a training's TensorBoard curves start again at (MetricsLog::add_tensorboard): after
// the step it starts at when it continues a run (--resume, a phase 2); 0 when a new run takes a
// directory that holds events (-f or --start-or-resume), -1 in a fresh one. 73 when a new run
// would mix its curves with another's without -f.
int64_t tensorboard_purge_step(const std::string& dir, int64_t start_step, bool continues, bool may_replace);

}  // namespace xl::train
