// The command-line and INI options of xl-train-phase1 and xl-train-phase2 (shared, so both
// programs spell every setting the same way and share configs).
#pragma once
#include "xl/cli/options.h"
#include "xl/train/trainer.h"

namespace xl::train {

enum class Phase { kOne, kTwo };

void add_training_options(cli::Options& cli, Phase phase);
// Builds the request; explicitly given settings are recorded so they override a checkpoint's.
TrainRequest training_request(const cli::Options& cli, Phase phase, int argc, char** argv);

// "90", "90s", "15m", "2h" -> seconds; 64 naming `what` on junk.
double parse_duration(const std::string& text, const std::string& what);

}  // namespace xl::train
