// xl-train-phase2: the vanilla phase: training continued from a phase-1 checkpoint (or a pruned or
// imported model) without skipping.
#include "xl/cli/tool_main.h"
#include "xl/compute/torch_process.h"
#include "xl/options/train_options.h"
#include "xl/train/distributed.h"
#include "xl/train/trainer.h"

int main(int argc, char** argv) {
  xl::compute::prepare_torch_process();
  return xl::cli::run_tool("xl-train-phase2", argc, argv, [](int argc, char** argv) {
    xl::train::start_as_rank();  // before a bad flag can end it
    xl::cli::Options cli({"xl-train-phase2", "Continue a phase-1 checkpoint with vanilla training (phase 2: no skipping).",
                          "[OPTIONS] --init PHASE1.h5 [TOKENS] -o CHECKPOINT",
                          "Phase 2 of the Skip Cross-head Transformer-XL: starts from a phase-1 checkpoint (--init)\n"
                          "and trains without skipping layers. It continues the optimizer state (--reset-optimizer\n"
                          "starts afresh), the step count, the data cursor and phase 1's final memories (when it trains\n"
                          "on the same data in the same batch shape; it says which). A pruned model (xl-prune-heads)\n"
                          "or one imported from PyTorch (xl-import-torch) trains on from its weights, with a fresh\n"
                          "optimizer. Its budget (--max-steps, --max-tokens, --time-budget) is its own and counts\n"
                          "from its start (--budget-from run: from the run's). Its learning rate follows a schedule\n"
                          "of its own: from the rate phase 1 ended with (or --lr), annealed to --eta-min over its\n"
                          "budget (--schedule-from run continues phase 1's schedule instead). Other settings default\n"
                          "to phase 1's; one config file serves both phases (its model keys are checked against the\n"
                          "checkpoint). Checkpoints, signals, --resume and metrics work as in xl-train-phase1.",
                          "  xl-train-phase2 --init p1.h5 --time-budget 10m tokens.h5 -o p2.h5 --metrics p2.jsonl\n"
                          "  xl-train-phase2 -c share/xl/configs/tiny.ini --init p1.h5 --max-steps 4000 tokens.h5 -o p2.h5\n"
                          "  xl-train-phase2 --init p1.h5 --lr 1e-4 --warmup-steps 200 --max-steps 4000 tokens.h5 -o p2.h5\n"
                          "  xl-train-phase2 --init imported.h5 --lr 1e-4 --max-steps 2000 tokens.h5 -o tuned.h5"});
    xl::options::add_training_options(cli, xl::options::Phase::kTwo);
    if (!cli.parse(argc, argv)) return 0;
    return xl::train::run_training(xl::options::training_request(cli, xl::options::Phase::kTwo, argc, argv), argv);
  });
}
