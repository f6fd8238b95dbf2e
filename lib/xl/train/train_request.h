// What a training tool asks for: the files, the settings given on the command line and in config
// files (which override what a checkpoint holds), and where progress goes.
#pragma once
#include <set>
#include <string>

#include "xl/model/config.h"
#include "xl/train/train_config.h"

namespace xl::train {

struct TrainRequest {
  std::string tool;                 // for messages and metrics
  std::string command_line;
  std::string tokens;               // tokens file or "-"
  std::string output;               // latest checkpoint; the best one goes beside it (see best_path)
  bool force = false;
  bool resume = false;              // continue the run whose latest checkpoint is `output`
  bool start_or_resume = false;     // resume set when `output` exists: a job a scheduler may requeue
  std::string init;                 // phase 2: the phase-1 checkpoint to start from
  bool reset_optimizer = false;     // phase 2: fresh Adam moments
  model::ModelConfig model;         // ModelConfig's defaults overridden by the model options given
  std::set<std::string> model_given;  // the ModelConfig fields given
  TrainConfig train;
  std::set<std::string> given;      // the TrainConfig fields given
  SettingOrigins origins;           // where each setting given came from: the command line or a config file
  std::string metrics;              // JSON Lines file ("" for none)
  std::string tensorboard;          // TensorBoard directory ("" for none)
  std::string progress = "auto";
  std::string device = "auto";      // --device
  std::string attention_probs = "auto";      // --attention-probs: auto, keep or recompute
  int64_t attention_probs_budget = 4000000000;  // --attention-probs-budget: auto's bound, bytes a step
  int nproc_per_node = 1;           // data parallel: ranks this process starts (without torchrun)
  std::string dist_backend = "auto";
  double dist_timeout = 300;        // seconds a collective may wait for the other ranks
};

}  // namespace xl::train
