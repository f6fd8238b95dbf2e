// xl-prune-heads: head studies of a checkpoint: single-head ablation tables (the paper's Table 3),
// Michel et al. importance scores, iterative pruning curves, and physically pruned checkpoints.
#include "xl/analysis/head_study.h"
#include "xl/cli/tool_main.h"
#include "xl/compute/torch_process.h"
#include "xl/options/prune_heads_options.h"

int main(int argc, char** argv) {
  xl::compute::prepare_torch_process();
  return xl::cli::run_tool("xl-prune-heads", argc, argv, [](int argc, char** argv) {
    xl::cli::Options cli({"xl-prune-heads", "Study and prune the attention heads of a checkpoint.", "[OPTIONS] CHECKPOINT TOKENS",
                          "--mode ablate-one masks every head in turn and reports the change in bpc (char level) or\n"
                          "perplexity (word level) against the unpruned model, with each layer's sample standard\n"
                          "deviation; --compare OTHER.h5 puts a second model beside it in the shape of the paper's\n"
                          "Table 3 (% change of the standard deviation). Either side may be a comma list of checkpoints\n"
                          "(seeds of one setting): its lines are then means, with the 95% interval of the deviation.\n"
                          "--mode importance scores heads with Michel et al.'s I_h = E |dL/d mask_h| (dropout off,\n"
                          "memory carried across segments); -o stores the scores in a copy of the checkpoint.\n"
                          "--mode iterative prunes --step % of all heads at a time by importance (--rescore recomputes\n"
                          "it each step), evaluates after each step and prints the curve; -o writes the last step's\n"
                          "model with those heads removed physically. Evaluation options are those of xl-eval-longctx;\n"
                          "--max-tokens bounds the cost of each of the L x H evaluations, and --jobs runs them in\n"
                          "parallel.",
                          "  xl-prune-heads --mode ablate-one --split valid --max-tokens 20000 --format md sch.h5 tokens.h5\n"
                          "  xl-prune-heads --mode ablate-one --compare baseline.h5 --format md sch.h5 tokens.h5\n"
                          "  xl-prune-heads --mode iterative --step 10 --rescore --plot curve.png model.h5 tokens.h5\n"
                          "  xl-prune-heads --mode iterative --prune-heads 8 -o pruned.h5 model.h5 tokens.h5"});
    xl::options::add_prune_heads_options(cli);
    if (!cli.parse(argc, argv)) return 0;
    return xl::analysis::run_head_study(xl::options::head_study_request(cli));
  });
}
