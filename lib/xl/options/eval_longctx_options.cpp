#include "xl/options/eval_longctx_options.h"

#include <torch/torch.h>

#include "xl/options/compute_options.h"
#include "xl/options/eval_options.h"
#include "xl/util/error.h"
#include "xl/util/io.h"

namespace xl::options {
namespace po = cli::po;

void add_eval_longctx_options(cli::Options& cli) {
  cli.add("Input")
      ("checkpoint", po::value<std::string>(), "checkpoint (HDF5) to evaluate")
      ("tokens", po::value<std::string>()->default_value("-"), "tokens file (HDF5; - is stdin)");
  add_eval_options(cli, "test", MemLens::kSweep);
  cli.add("Output")
      ("format", po::value<std::string>(), kRowFormatHelp)
      ("per-token", po::value<std::string>(), "write each scored token's loss to FILE (HDF5, one group per setting)");
  cli.positional("checkpoint", 1);
  cli.positional("tokens", 1);
  cli.add_output("the result rows");
  cli.files({"checkpoint", "tokens"}, {"per-token", "cache"});
  add_compute_options(cli);
}

analysis::MemorySweepRequest memory_sweep_request(const cli::Options& cli) {
  analysis::MemorySweepRequest r;
  XL_CHECK(cli.has("checkpoint"), kExitUsage, "give a CHECKPOINT and a TOKENS file (see xl-eval-longctx --help)");
  r.checkpoint = cli.get<std::string>("checkpoint");
  r.tokens = cli.get<std::string>("tokens");
  XL_CHECK(!(io::is_stdio(r.checkpoint) && io::is_stdio(r.tokens)), kExitUsage, "CHECKPOINT and TOKENS cannot both be stdin");
  const EvalRequest eval = eval_request(cli, MemLens::kSweep);
  r.split = eval.split;
  r.settings = eval.settings;
  r.mem_lens = eval.mem_lens;
  r.cmem_lens = eval.cmem_lens;
  r.ignore_head_mask = eval.ignore_head_mask;
  r.cache = eval.cache;
  r.per_token = cli.has("per-token") ? cli.get<std::string>("per-token") : "";
  r.output = cli.output();
  r.force = cli.force();
  r.format = row_format(cli, io::is_stdio(r.output));
  XL_CHECK(!(io::is_stdio(r.per_token) && io::is_stdio(r.output)), kExitUsage,
           "--per-token - and the rows cannot both go to stdout (use -o FILE for the rows)");
  XL_CHECK(r.cache.empty() || r.per_token.empty(), kExitUsage,
           "--cache keeps each setting's loss, not its per-token losses: drop --cache or --per-token");
  const Placement placement = place(compute_settings(cli));
  torch::manual_seed(placement.seed);
  r.device = placement.device;
  r.settings.precision = placement.precision;
  return r;
}

}  // namespace xl::options
