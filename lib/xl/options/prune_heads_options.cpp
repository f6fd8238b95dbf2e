#include "xl/options/prune_heads_options.h"

#include "xl/options/compute_options.h"
#include "xl/options/eval_options.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/parse.h"

namespace xl::options {
namespace po = cli::po;

std::vector<std::string> checkpoint_list(const std::string& text, const std::string& what) {
  const auto parts = parse::list_items(text, what);
  std::vector<std::string> out;
  for (size_t i = 0; i < parts.size();) {
    std::string joined = parts[i];
    size_t j = i;
    while (!io::is_file(joined) && j + 1 < parts.size()) joined += "," + parts[++j];
    if (io::is_file(joined)) {
      out.push_back(joined);
      i = j + 1;
    } else {
      out.push_back(parts[i++]);
    }
  }
  return out;
}

void add_prune_heads_options(cli::Options& cli) {
  cli.add("Study")
      ("checkpoint", po::value<std::string>(), "checkpoint to study (ablate-one: a comma list of seeds of one setting)")
      ("tokens", po::value<std::string>()->default_value("-"), "tokens file (- is stdin)")
      ("mode", po::value<std::string>()->default_value("ablate-one"), "ablate-one, importance or iterative")
      ("compare", po::value<std::string>(), "ablate-one: second checkpoint(s) shown beside the first (a comma list: seeds)")
      ("format", po::value<std::string>(), kRowFormatHelp)
      ("jobs", po::value<int>()->default_value(1), "evaluations run in parallel (one thread each)");
  add_eval_options(cli, "valid", MemLens::kOne);
  cli.add("Importance and pruning")
      ("importance-split", po::value<std::string>()->default_value("train"), "split the importance scores are computed on")
      ("importance-max-tokens", po::value<std::string>()->default_value("50000"), "tokens used for importance scores (0: all)")
      ("normalize-layers", po::bool_switch(), "divide each layer's scores by their L2 norm")
      ("step", cli::real_value(10), "iterative: % of all heads pruned per step (at least one)")
      ("max-fraction", cli::real_value(1.0), "iterative: stop once this share of heads is pruned")
      ("prune-heads", po::value<int64_t>()->default_value(-1), "iterative: prune exactly this many heads in one step")
      ("rescore", po::bool_switch(), "iterative: recompute importance after each step")
      ("plot", po::value<std::string>(), "iterative: draw the curve to FILE.png (gnuplot)");
  cli.positional("checkpoint", 1);
  cli.positional("tokens", 1);
  cli.add_output("a pruned checkpoint (iterative) or the checkpoint with its scores (importance)");
  cli.files({"checkpoint", "compare", "tokens"}, {"plot", "cache"});
  cli.input_list("checkpoint", [](const std::string& v) { return checkpoint_list(v, "CHECKPOINT"); });
  cli.input_list("compare", [](const std::string& v) { return checkpoint_list(v, "--compare"); });
  add_compute_options(cli, {false, true});
}

analysis::HeadStudyRequest head_study_request(const cli::Options& cli) {
  using analysis::HeadStudyMode;
  analysis::HeadStudyRequest r;
  const Placement placement = place(compute_settings(cli));
  r.device = placement.device;
  r.precision = placement.precision;
  XL_CHECK(cli.has("checkpoint"), kExitUsage, "give a CHECKPOINT and a TOKENS file (see xl-prune-heads --help)");
  const std::string mode = cli.get<std::string>("mode");
  if (mode == "ablate-one") r.mode = HeadStudyMode::kAblateOne;
  else if (mode == "importance") r.mode = HeadStudyMode::kImportance;
  else if (mode == "iterative") r.mode = HeadStudyMode::kIterative;
  else cli.fail("mode", "must be ablate-one, importance or iterative");
  r.format = row_format(cli, true);
  if (cli.given("output") && cli.output() != "-") r.output = cli.output();
  r.force = cli.force();
  XL_CHECK(!cli.given("output") || r.mode != HeadStudyMode::kAblateOne, kExitUsage,
           "-o goes with --mode importance or iterative");
  XL_CHECK(!cli.has("plot") || r.mode == HeadStudyMode::kIterative, kExitUsage,
           "--plot goes with --mode iterative (its curve)");
  if (cli.has("plot")) r.plot = cli.get<std::string>("plot");

  const EvalRequest eval = eval_request(cli, MemLens::kOne);
  r.split = eval.split;
  r.eval = eval.settings;
  r.cmem_lens = eval.cmem_lens;
  r.ignore_head_mask = eval.ignore_head_mask;
  r.cache = eval.cache;
  r.tokens = cli.get<std::string>("tokens");
  r.checkpoints = checkpoint_list(cli.get<std::string>("checkpoint"), "CHECKPOINT");
  XL_CHECK(!r.checkpoints.empty(), kExitUsage, "give a CHECKPOINT");
  XL_CHECK(r.checkpoints.size() == 1 || r.mode == HeadStudyMode::kAblateOne, kExitUsage,
           "--mode " << mode << " studies one checkpoint");
  if (cli.has("compare")) r.compare = checkpoint_list(cli.get<std::string>("compare"), "--compare");
  r.jobs = cli.get<int>("jobs");
  r.importance_split = cli.get<std::string>("importance-split");
  r.importance_max_tokens = static_cast<int64_t>(cli.count("importance-max-tokens"));
  r.normalize_layers = cli.get<bool>("normalize-layers");
  r.schedule.step_percent = cli.get<double>("step");
  r.schedule.max_fraction = cli.get<double>("max-fraction");
  r.schedule.exact_heads = cli.get<int64_t>("prune-heads");
  r.schedule.rescore = cli.get<bool>("rescore");
  return r;
}

}  // namespace xl::options
