// xl-train-phase1: Skip-Retain training (layers skipped with p_skip keep their old memory) with SCH attention.
#include "xl/cli/tool_main.h"
#include "xl/compute/torch_process.h"
#include "xl/options/train_options.h"
#include "xl/train/distributed.h"
#include "xl/train/trainer.h"

int main(int argc, char** argv) {
  xl::compute::prepare_torch_process();
  return xl::cli::run_tool("xl-train-phase1", argc, argv, [](int argc, char** argv) {
    xl::train::start_as_rank();  // before a bad flag can end it
    xl::cli::Options cli({"xl-train-phase1", "Train a Transformer-XL with Skip-Retain (phase 1) and stochastic cross-head attention.",
                          "[OPTIONS] [TOKENS] -o CHECKPOINT",
                          "Phase 1 of the Skip Cross-head Transformer-XL: at every step each layer is skipped with\n"
                          "its schedule's probability; a skipped layer passes its input through and keeps its old\n"
                          "memory, so later segments attend to a longer context. With --sch-beta each attention layer\n"
                          "permutes its heads' keys, values and positional keys with that probability. TOKENS (a file\n"
                          "or - for a pipe) comes from xl-tokenize. Settings come from INI files (-c, repeatable) and\n"
                          "flags. The checkpoint (-o) is written atomically at every validation (and --save-every),\n"
                          "the best one beside it as NAME.best.h5 (stdout or a FIFO gets the final one alone);\n"
                          "SIGINT/SIGTERM/SIGHUP save and exit 128+N, SIGUSR1 saves and trains on; --resume continues\n"
                          "bit for bit. Metrics go to --metrics as JSON Lines, progress to stderr.",
                          "  xl-tokenize --mode byte --split 0.9,0.05,0.05 enwik8 | xl-train-phase1 -c share/xl/configs/tiny.ini -o p1.h5\n"
                          "  xl-train-phase1 -c tiny.ini --skip-schedule linear --sch-beta 0.1 --time-budget 10m tokens.h5 -o p1.h5 --metrics p1.jsonl\n"
                          "  xl-train-phase1 --resume tokens.h5 -o p1.h5 --max-steps 20000"});
    xl::options::add_training_options(cli, xl::options::Phase::kOne);
    if (!cli.parse(argc, argv)) return 0;
    return xl::train::run_training(xl::options::training_request(cli, xl::options::Phase::kOne, argc, argv), argv);
  });
}
