// A training run of either phase: Skip-Retain phase 1 from scratch, or the vanilla phase 2 from a
// phase-1 checkpoint. Checkpoints carry everything a resumed run needs to continue bit for bit:
// parameters, Adam moments, every generator's state, the data cursor and the current memories.
#pragma once
#include <set>
#include <string>

#include "xl/model/config.h"
#include "xl/train/train_config.h"

namespace xl::train {

struct TrainRequest {
  std::string tool;              // for messages and metrics
  std::string command_line;
  std::string tokens;            // tokens file or "-"
  std::string output;            // latest checkpoint; the best one goes beside it (see best_path)
  bool force = false;
  bool resume = false;           // continue the run whose latest checkpoint is `output`
  std::string init;              // phase 2: the phase-1 checkpoint to start from
  bool reset_optimizer = false;  // phase 2: fresh Adam moments
  bool reset_schedule = false;   // phase 2: the LR schedule restarts at this step
  model::ModelConfig model;      // phase 1 from scratch (n_token comes from the tokens' vocab)
  TrainConfig train;
  std::set<std::string> given;   // TrainConfig fields set explicitly: they override a checkpoint's
  std::string metrics;           // JSON Lines file ("" for none)
  std::string progress = "auto";
};

// "run.h5" -> "run.best.h5"
std::string best_path(const std::string& output);

// Runs to a budget or stopping rule. Returns 0, or 128+N after signal N (a checkpoint is saved
// first). Failures throw xl::Error.
int run_training(const TrainRequest& request);

}  // namespace xl::train
