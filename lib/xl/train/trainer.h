// A training run of either phase: Skip-Retain phase 1 from scratch, or the vanilla phase 2 from a
// phase-1 checkpoint (see phase_start.h for how a phase begins). Checkpoints carry everything a
// resumed run needs to continue bit for bit: parameters, Adam moments, every generator's state,
// the data cursor and the current memories.
#pragma once
#include <string>

#include "xl/train/train_request.h"

namespace xl::train {

// Where the best checkpoint goes: "run.h5" -> "run.best.h5"; "" for stdout or a device or FIFO
// (/dev/null), which are written through and have no file beside them.
std::string best_path(const std::string& output);

// Runs to a budget or stopping rule. Returns 0, or 128+N after signal N (a checkpoint is saved
// first). Failures throw xl::Error. As one rank of a data-parallel job when the environment says
// so (see distributed.h); with request.nproc_per_node > 1 and no such environment, this process
// starts that many ranks of itself (argv: the command line to start them with).
int run_training(const TrainRequest& request, char** argv);

}  // namespace xl::train
