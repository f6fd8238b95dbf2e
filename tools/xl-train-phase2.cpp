// xl-train-phase2: the vanilla phase: training resumed from a phase-1 checkpoint without skipping.
#include "xl/cli/options.h"
#include "xl/cli/tool_main.h"
#include "xl/model/parallel.h"
#include "xl/train/train_options.h"

int main(int argc, char** argv) {
  return xl::cli::run_tool("xl-train-phase2", argc, argv, xl::cli::Runtime::kTorch, [](int argc, char** argv) {
    xl::cli::Options cli({"xl-train-phase2", "Continue a phase-1 checkpoint with vanilla training (phase 2: no skipping).",
                          "[OPTIONS] --init PHASE1.h5 [TOKENS] -o CHECKPOINT",
                          "Phase 2 of the Skip Cross-head Transformer-XL: starts from a phase-1 checkpoint (--init)\n"
                          "and trains without skipping layers. By default it continues the optimizer state, the step\n"
                          "counter, the learning-rate schedule and the data cursor; --reset-optimizer and\n"
                          "--reset-schedule restart them. SCH (--sch-beta) defaults to phase 1's setting. Every other\n"
                          "setting defaults to phase 1's and may be overridden. Checkpoints, signals, --resume and\n"
                          "metrics work as in xl-train-phase1.",
                          "  xl-train-phase2 --init p1.h5 --time-budget 10m tokens.h5 -o p2.h5 --metrics p2.jsonl\n"
                          "  xl-train-phase2 --init p1.h5 --reset-schedule --max-steps 40000 tokens.h5 -o p2.h5"});
    xl::train::add_training_options(cli, xl::train::Phase::kTwo);
    if (!cli.parse(argc, argv)) return 0;
    xl::model::set_threads(cli.threads());
    return xl::train::run_training(xl::train::training_request(cli, xl::train::Phase::kTwo, argc, argv));
  });
}
