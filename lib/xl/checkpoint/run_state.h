// Where a training run stands, beyond its tensors: step and token counts, the data cursor, the
// learning-rate schedule's position, each phase's record and the validation history. A checkpoint
// stores it as the JSON attribute `state` (man 5 xl-checkpoint).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace xl::checkpoint {

// One phase of the run (phase 1, then phase 2): where it started, how far it went, its schedule.
struct PhaseRecord {
  std::string phase;          // phase1 | phase2 | imported
  int64_t start_step = 0;     // the run's step count when the phase began
  int64_t start_tokens = 0;   // the run's token count when the phase began
  double elapsed = 0;         // seconds of training in this phase
  nlohmann::json schedule;    // the learning-rate schedule it trained with (kind, lr, eta_min, warmup, steps, origin)
};

// The training split a run reads, known by its text and length: the data cursor and the memories
// are positions in it.
struct TrainData {
  std::string sha256;  // of the text the split was tokenized from
  int64_t tokens = 0;
  bool operator==(const TrainData& o) const { return sha256 == o.sha256 && tokens == o.tokens; }
};

struct RunState {
  int64_t step = 0;                    // updates over the whole run
  int64_t tokens_seen = 0;             // training tokens over the whole run (all ranks)
  int64_t epoch = 0, offset = 0;       // the data cursor: epoch and position in each stream
  int64_t schedule_origin = 0;         // the run step at which the schedule's step 0 lies
  double last_lr = 0;                  // the learning rate of the last update
  std::vector<PhaseRecord> phases;     // oldest first; the last one is running or was the last to run
  std::optional<double> best_loss;     // best validation loss of the current phase
  int64_t best_step = -1;
  std::vector<std::pair<int64_t, double>> history;  // (step, validation loss) of the current phase
  double loss_scale = 0;               // fp16: the dynamic loss scale (0: none)
  int64_t loss_scale_good_steps = 0;   // fp16: good steps since the scale last changed
  int64_t skipped_steps = 0;           // fp16: steps skipped because their gradients overflowed
  int world_size = 1;                  // data-parallel ranks of the run that wrote it
  std::string command_line;            // of the process that wrote the checkpoint
  std::string imported_from;           // xl-import-torch: the state_dict it came from
  std::optional<TrainData> train_data;  // the split trained on (not recorded before xl 0.2)

  const PhaseRecord* current() const { return phases.empty() ? nullptr : &phases.back(); }
  double elapsed() const;              // seconds of training over all phases

  nlohmann::json to_json() const;
  // 65 naming `file` for a malformed state; missing keys keep their defaults.
  static RunState from_json(const nlohmann::json& j, const std::string& file);
};

}  // namespace xl::checkpoint
