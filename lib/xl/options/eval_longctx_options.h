// xl-eval-longctx's options: the checkpoint and tokens, the output rows (--format, --per-token); the
// evaluation and compute groups are shared.
#pragma once
#include "xl/analysis/memory_sweep.h"
#include "xl/cli/options.h"

namespace xl::options {

void add_eval_longctx_options(cli::Options& cli);
// Every flag checked (64, or 78 for a settings file's value), the device and precision resolved,
// torch's generator seeded.
analysis::MemorySweepRequest memory_sweep_request(const cli::Options& cli);

}  // namespace xl::options
