// The options of xl-train-phase1 and xl-train-phase2, defined once so that both spell every
// setting the same way and one config file serves both phases.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "xl/cli/options.h"
#include "xl/model/config.h"
#include "xl/train/train_config.h"
#include "xl/train/train_request.h"

namespace xl::options {

enum class Phase { kOne, kTwo };

void add_training_options(cli::Options& cli, Phase phase);
// The request; settings given explicitly are recorded so that they override a checkpoint's.
train::TrainRequest training_request(const cli::Options& cli, Phase phase, int argc, char** argv);

// What xl-train-phase1 makes of `-c BASE --KEY=VALUE...` (BASE may be empty), checked as the
// tool checks it: for programs that prepare runs (xl-ablate's grids). Errors about the overrides
// name `source` (where they were written) instead of flags.
struct Phase1Settings {
  std::vector<std::pair<std::string, std::string>> settings;  // every setting, as --dump-config prints it
  train::TrainConfig train;
  model::ModelConfig model;
};
Phase1Settings phase1_settings(const std::string& base_config,
                               const std::vector<std::pair<std::string, std::string>>& overrides,
                               const std::string& source = "");

}  // namespace xl::options
