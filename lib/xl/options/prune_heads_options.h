// xl-prune-heads' options: which study (--mode), of which checkpoints, its output, and the
// importance and pruning settings; the evaluation and compute groups are shared.
#pragma once
#include <string>
#include <vector>

#include "xl/analysis/head_study.h"
#include "xl/cli/options.h"

namespace xl::options {

void add_prune_heads_options(cli::Options& cli);
// Every flag checked (64, or 78 for a settings file's value), the device and precision resolved.
analysis::HeadStudyRequest head_study_request(const cli::Options& cli);

// A comma list of checkpoints, where a path may hold commas itself (xl-ablate names seeded runs
// "NAME,seed=N"): pieces are joined while they name no file and joined they do.
std::vector<std::string> checkpoint_list(const std::string& text, const std::string& what);

}  // namespace xl::options
