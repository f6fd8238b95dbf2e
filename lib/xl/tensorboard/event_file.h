// TensorBoard's event files, written without TensorFlow or protobuf: TFRecord frames (length, its
// masked CRC-32C, an Event protobuf, its masked CRC-32C) holding the events a scalar curve needs.
// The few protobuf fields are written by hand (proto3 wire format): a library for them would cost
// xl a dependency for about sixty lines (see doc/metrics.md).
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5;
//             SessionLog session_log = 7; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
//   SessionLog { Status status = 1; }       (START = 1)
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace xl::tensorboard {

// One writer's file in a run directory: DIR/events.out.tfevents.SECONDS.HOST.PID.xl, created with
// its directory; TensorBoard reads a directory's files in name order, so a resumed run's file
// follows the first one's.
class EventFile {
 public:
  // `purge_from`: the step a resumed run starts again at; events of earlier writers at this step
  // and later are superseded (a SessionLog START at that step, TensorBoard's purge_step). -1: none.
  EventFile(const std::string& dir, int64_t purge_from = -1);
  // Scalars (tag, value) at `step`, one event, flushed so that a killed run keeps what it wrote.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  const std::string& path() const { return path_; }
  // "PATH: write error: REASON" once a write failed (then nothing more is written), or empty.
  const std::string& failure() const { return failure_; }

 private:
  void record(const std::string& event);
  std::string path_, failure_;
  std::ofstream out_;
};

}  // namespace xl::tensorboard
