// xl-eval-longctx: loss and bpc/ppl of a checkpoint on a token split, for one or more memory lengths.
#include "xl/analysis/memory_sweep.h"
#include "xl/cli/tool_main.h"
#include "xl/compute/torch_process.h"
#include "xl/options/eval_longctx_options.h"

int main(int argc, char** argv) {
  xl::compute::prepare_torch_process();
  return xl::cli::run_tool("xl-eval-longctx", argc, argv, [](int argc, char** argv) {
    xl::cli::Options cli(
        {"xl-eval-longctx", "Evaluate a checkpoint on a token split over memory lengths (loss, bpc/ppl, speed).",
         "[OPTIONS] CHECKPOINT TOKENS",
         "Cuts the split into --batch-size parallel streams that cover every token, feeds them in segments\n"
         "of --tgt-len with the memory carried across segments, and prints one row per --mem-len value\n"
         "(a comma list is a sweep): the token-weighted loss in nats, bpc (byte and char vocabs) or ppl\n"
         "(word vocabs), scored tokens, tokens/s of the scored segments and the peak memory.\n"
         "Memory starts empty and every token with a prediction is scored (N - B of N tokens in B\n"
         "streams), the last partial segment included; --warmup instead scores only segments whose\n"
         "memory is full (NVIDIA's convention). The checkpoint's vocab must be the tokens file's.\n"
         "TOKENS may be - (stdin). The checkpoint's head mask, when it has one, is applied.",
         "  xl-eval-longctx p2.h5 enwik8.h5\n"
         "  xl-eval-longctx --tgt-len 80 --mem-len 2100 --clamp-len 820 --same-length true p2.h5 enwik8.h5\n"
         "  xl-eval-longctx --mem-len 0,512,1600,3800 --format md p2.h5 enwik8.h5\n"
         "  xl-eval-longctx --split valid --max-tokens 100K --per-token nll.h5 p2.h5 enwik8.h5"});
    xl::options::add_eval_longctx_options(cli);
    if (!cli.parse(argc, argv)) return 0;
    return xl::analysis::run_memory_sweep(xl::options::memory_sweep_request(cli));
  });
}
