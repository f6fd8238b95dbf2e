// xl-prune-heads: head studies of a checkpoint: single-head ablation tables (the paper's Table 3),
// Michel et al. importance scores, iterative pruning curves, and physically pruned checkpoints.
#include <chrono>
#include <iostream>

#include "xl/analysis/head_ablation.h"
#include "xl/analysis/head_importance.h"
#include "xl/analysis/head_report.h"
#include "xl/analysis/iterative_pruning.h"
#include "xl/checkpoint/checkpoint.h"
#include "xl/cli/options.h"
#include "xl/cli/tool_main.h"
#include "xl/compute/device.h"
#include "xl/compute/parallel.h"
#include "xl/compute/torch_process.h"
#include "xl/eval/metric.h"
#include "xl/h5/tokens_file.h"
#include "xl/model/head_pruning.h"
#include "xl/model/model_io.h"
#include "xl/options/compute_options.h"
#include "xl/options/eval_options.h"
#include "xl/util/error.h"
#include "xl/util/gnuplot.h"
#include "xl/util/io.h"
#include "xl/util/json_io.h"
#include "xl/util/log.h"
#include "xl/util/parse.h"
#include "xl/util/signals.h"

namespace po = xl::cli::po;
using namespace xl;

namespace {

struct Study {
  checkpoint::Checkpoint ckpt;
  std::string path;
  torch::Device device = torch::kCPU;
  model::TransformerXL make() const {
    auto m = model::model_from_checkpoint(ckpt, path);
    m->to(device);
    return m;
  }
};

void emit(const std::vector<nlohmann::json>& rows) {
  for (const auto& r : rows) std::cout << json_line(r) << "\n";
}

}  // namespace

// A comma list of checkpoints, where a path may hold commas itself (xl-ablate names seeded runs
// "NAME,seed=N"): pieces are joined while they name no file and joined they do.
std::vector<std::string> checkpoint_list(const std::string& text, const std::string& what) {
  const auto parts = xl::parse::list_items(text, what);
  std::vector<std::string> out;
  for (size_t i = 0; i < parts.size();) {
    std::string joined = parts[i];
    size_t j = i;
    while (!xl::io::is_file(joined) && j + 1 < parts.size()) joined += "," + parts[++j];
    if (xl::io::is_file(joined)) {
      out.push_back(joined);
      i = j + 1;
    } else {
      out.push_back(parts[i++]);
    }
  }
  return out;
}

int main(int argc, char** argv) {
  xl::compute::prepare_torch_process();
  return xl::cli::run_tool("xl-prune-heads", argc, argv, [](int argc, char** argv) {
    cli::Options cli({"xl-prune-heads", "Study and prune the attention heads of a checkpoint.", "[OPTIONS] CHECKPOINT TOKENS",
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
    cli.add("Study")
        ("checkpoint", po::value<std::string>(), "checkpoint to study (ablate-one: a comma list of seeds of one setting)")
        ("tokens", po::value<std::string>()->default_value("-"), "tokens file (- is stdin)")
        ("mode", po::value<std::string>()->default_value("ablate-one"), "ablate-one, importance or iterative")
        ("compare", po::value<std::string>(), "ablate-one: second checkpoint(s) shown beside the first (a comma list: seeds)")
        ("format", po::value<std::string>()->default_value("jsonl"), "jsonl, md (Markdown tables) or tsv")
        ("jobs", po::value<int>()->default_value(1), "evaluations run in parallel (one thread each)");
    options::add_eval_options(cli, "valid", options::MemLens::kOne);
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
    options::add_compute_options(cli, {false, true});
    if (!cli.parse(argc, argv)) return 0;
    const auto compute = options::compute_settings(cli);
    xl::compute::set_threads(compute.threads);
    const torch::Device device = xl::compute::parse_device(compute.device);
    XL_CHECK(cli.has("checkpoint"), kExitUsage, "give a CHECKPOINT and a TOKENS file (see xl-prune-heads --help)");
    const std::string mode = cli.get<std::string>("mode"), format = cli.get<std::string>("format");
    if (mode != "ablate-one" && mode != "importance" && mode != "iterative")
      cli.fail("mode", "must be ablate-one, importance or iterative");
    if (format != "jsonl" && format != "md" && format != "tsv") cli.fail("format", "must be jsonl, md or tsv");
    const bool write_output = cli.given("output") && cli.output() != "-";
    XL_CHECK(!cli.given("output") || mode != "ablate-one", kExitUsage, "-o goes with --mode importance or iterative");
    std::unique_ptr<io::AtomicOutput> guard;  // an unwritable output fails now, not after the study
    if (write_output) guard = std::make_unique<io::AtomicOutput>(cli.output(), cli.force(), true);
    XL_CHECK(!cli.has("plot") || mode == "iterative", kExitUsage, "--plot goes with --mode iterative (its curve)");
    if (cli.has("plot")) check_plot(cli.get<std::string>("plot"));  // now, not after the study

    const auto request = options::eval_request(cli, options::MemLens::kOne);
    auto tokens = h5::TokensFile::open(cli.get<std::string>("tokens"));
    const eval::Metric metric(tokens.vocab().type());
    const auto paths = checkpoint_list(cli.get<std::string>("checkpoint"), "CHECKPOINT");
    XL_CHECK(!paths.empty(), kExitUsage, "give a CHECKPOINT");
    XL_CHECK(paths.size() == 1 || mode == "ablate-one", kExitUsage, "--mode " << mode << " studies one checkpoint");
    // The optimizer's moments, generators and memories (twice the weights) only go on into an output.
    const checkpoint::ExpectedVocab vocab{tokens.vocab().sha256(), tokens.name()};
    Study study{checkpoint::load(paths.front(), vocab, write_output), paths.front(), device};
    auto ids = tokens.read_split(request.split, "--split picks another", eval::kMinEvalTokens);
    eval::EvalSettings es = request.settings;
    es.precision = xl::compute::resolve_precision(compute.precision, device);
    // Every evaluation of the study would score nothing, and its table would be empty.
    XL_CHECK(eval::scores_any(study.make(), static_cast<int64_t>(ids.size()), es), kExitUsage,
             "--warmup --mem-len " << es.mem_len << ": no segment of the " << request.split
                                   << " split starts with a full memory, so nothing would be scored (give a shorter "
                                      "--mem-len, or drop --warmup)");
    auto head_mask = [&](const checkpoint::Checkpoint& c) {
      return request.ignore_head_mask ? torch::Tensor() : model::head_mask_of(c);
    };
    es.head_mask = head_mask(study.ckpt);

    analysis::EvalCache cache(request.cache);
    // A stop (Ctrl-C, a batch system's limit) ends the evaluation or importance pass under way
    // after its segment; the finished ones stay in --cache.
    signals::catch_stop();
    if (log::level() != log::Level::kQuiet)
      signals::set_stop_notice(cache.enabled() ? "stopping after this segment; finished evaluations are kept in " + cache.path()
                                               : "stopping after this segment");
    es.stop_on_signal = true;
    auto stopped = [&](int sig, const std::string& finished) {
      XL_INFO("stopped by signal " << sig << " after " << finished << "; "
                                   << (cache.enabled() ? "they are kept in " + cache.path() + ": the same command goes on from them"
                                                       : std::string("--cache FILE keeps finished evaluations for the next run")));
      return 128 + sig;
    };

    if (mode == "ablate-one") {
      // Each side: one checkpoint, or a comma list of them (seeds of one setting).
      std::vector<std::vector<std::string>> side_paths = {paths};
      if (cli.has("compare")) side_paths.push_back(checkpoint_list(cli.get<std::string>("compare"), "--compare"));
      std::vector<analysis::AblationSide> sides;
      for (size_t side = 0; side < side_paths.size(); ++side) {
        sides.emplace_back();
        for (size_t k = 0; k < side_paths[side].size(); ++k) {
          const std::string& path = side_paths[side][k];
          const Study st{side == 0 && k == 0 ? study.ckpt : checkpoint::load(path, vocab, false), path, device};
          eval::EvalSettings s = es;
          s.head_mask = head_mask(st.ckpt);
          const auto t0 = std::chrono::steady_clock::now();
          auto next_line = t0 + std::chrono::seconds(15);
          int64_t first_done = -1;  // evaluations done when this run's first one finished
          auto progress = [&](int64_t done, int64_t total) {
            const auto now = std::chrono::steady_clock::now();
            if (first_done < 0) first_done = done - 1;
            if (now < next_line || done == total) return;
            next_line = now + std::chrono::seconds(15);
            const double each = std::chrono::duration<double>(now - t0).count() / static_cast<double>(done - first_done);
            XL_INFO(st.path << ": " << done << " of " << total << " evaluations, about "
                            << parse::format_duration(each * static_cast<double>(total - done)) << " left");
          };
          auto result = analysis::ablate_each_head([&] { return st.make(); }, ids, s, cli.get<int>("jobs"), progress, &cache);
          if (const int sig = result.stopped_by)
            return stopped(sig, std::to_string(result.finished) + " of " + std::to_string(result.evaluations) +
                                    " evaluations of " + st.path);
          XL_INFO(st.path << ": " << result.heads.size() << " heads ablated in " << static_cast<int>(result.seconds) << " s"
                          << (result.kept ? " (" + std::to_string(result.kept) + " of " +
                                                std::to_string(result.evaluations) + " evaluations kept in " +
                                                cache.path() + ")"
                                          : std::string()));
          sides.back().push_back({st.path, result});
        }
      }
      const bool several = sides.front().size() > 1 || sides.back().size() > 1;
      if (format == "md") std::cout << analysis::ablation_markdown(sides, metric);
      else if (format == "tsv") std::cout << analysis::ablation_tsv(sides, metric);
      else {
        for (const auto& side : sides)
          for (const auto& r : side) emit(analysis::ablation_rows(r, metric));
        if (several) emit(analysis::layer_summary_rows(sides, metric));
      }
      std::cout.flush();
      return 0;
    }

    auto model = study.make();
    analysis::ImportanceSettings is;
    is.tgt_len = es.tgt_len;
    is.mem_len = es.mem_len;
    is.batch_size = es.batch_size;
    is.max_tokens = static_cast<int64_t>(cli.count("importance-max-tokens"));
    is.normalize_layers = cli.get<bool>("normalize-layers");
    is.head_mask = es.head_mask;
    is.precision = es.precision;
    is.stop_on_signal = true;
    const std::string score_split = cli.get<std::string>("importance-split");
    auto score_ids = score_split == request.split
                         ? ids
                         : tokens.read_split(score_split, "--importance-split picks another", eval::kMinEvalTokens);

    if (mode == "importance") {
      const analysis::Importance importance = analysis::head_importance(model, score_ids, is, &cache);
      if (const int sig = importance.stopped_by) {
        XL_INFO("stopped by signal " << sig << " before the importance pass of " << study.path << " finished");
        return 128 + sig;
      }
      if (importance.kept) XL_INFO(study.path << ": importance scores kept in " << cache.path());
      const torch::Tensor& scores = importance.scores;
      if (format == "md") std::cout << analysis::matrix_markdown(scores, "Head importance (Michel et al.) of " + study.path);
      else if (format == "tsv") std::cout << analysis::matrix_tsv(scores);
      else
        for (int64_t l = 0; l < scores.size(0); ++l)
          for (int64_t h = 0; h < model->config.heads_in_layer(l); ++h)
            std::cout << json_line(nlohmann::json{{"event", "importance"}, {"layer", l}, {"head", h}, {"score", scores[l][h].item<double>()}}) << "\n";
      std::cout.flush();
      if (write_output) {
        guard.reset();
        checkpoint::Checkpoint out = study.ckpt;
        out.analysis.erase(std::remove_if(out.analysis.begin(), out.analysis.end(), [](const auto& p) { return p.first == "head_importance"; }),
                           out.analysis.end());
        out.analysis.emplace_back("head_importance", scores);
        checkpoint::save(cli.output(), out, cli.force());
      }
      return 0;
    }

    analysis::PruningSchedule sched;
    sched.step_percent = cli.get<double>("step");
    sched.max_fraction = cli.get<double>("max-fraction");
    sched.exact_heads = cli.get<int64_t>("prune-heads");
    sched.rescore = cli.get<bool>("rescore");
    auto result = analysis::prune_iteratively(model, ids, es, score_ids, is, sched, [&](const analysis::PruningPoint& p) {
      nlohmann::json row = {{"event", "prune"}, {"fraction", p.fraction}, {"pruned", p.pruned}, {"loss", p.loss},
                            {metric.name(), metric.of(p.loss)}};
      if (format == "jsonl") std::cout << json_line(row) << std::endl;
      XL_INFO(p.pruned << " heads pruned (" << static_cast<int>(100 * p.fraction + 0.5) << "%): " << metric.name() << " "
                       << metric.of(p.loss));
    }, &cache);
    const std::string passes = std::to_string(result.evaluations) + (result.evaluations == 1 ? " evaluation" : " evaluations") +
                               " and " + std::to_string(result.scorings) +
                               (result.scorings == 1 ? " importance pass" : " importance passes");
    if (const int sig = result.stopped_by) {
      if (result.evaluations + result.scorings > 0) return stopped(sig, passes + " of " + study.path);
      XL_INFO("stopped by signal " << sig << " before the first importance pass of " << study.path << " finished");
      return 128 + sig;
    }
    if (result.kept)
      XL_INFO(study.path << ": " << result.kept << " of its " << result.evaluations + result.scorings << " passes (" << passes
                         << ") kept in " << cache.path());
    if (format == "md") {
      std::cout << "| fraction pruned | heads pruned | " << metric.name() << " |\n|---:|---:|---:|\n";
      for (const auto& p : result.curve)
        std::cout << "| " << p.fraction << " | " << p.pruned << " | " << metric.of(p.loss) << " |\n";
    } else if (format == "tsv") {
      std::cout << "fraction\tpruned\t" << metric.name() << "\n";
      for (const auto& p : result.curve) std::cout << p.fraction << '\t' << p.pruned << '\t' << metric.of(p.loss) << "\n";
    }
    std::cout.flush();
    if (write_output) {
      guard.reset();
      auto pruned = model::remove_heads(model, result.keep);
      // How much faster the smaller model evaluates than the masked one.
      eval::EvalSettings masked = es;
      masked.head_mask = model::keep_to_head_mask(model->config, result.keep, torch::kFloat32);
      eval::EvalSettings plain = es;
      plain.head_mask = torch::Tensor();
      auto t_masked = eval::evaluate(model, ids, masked), t_pruned = eval::evaluate(pruned, ids, plain);
      if (const int sig = t_masked.stopped_by ? t_masked.stopped_by : t_pruned.stopped_by)
        return stopped(sig, passes + " of " + study.path + ", before " + cli.output() + " was written");
      nlohmann::json row = {{"event", "pruned"}, {"path", cli.output()}, {"heads_left", model::kept_head_counts(model->config, result.keep)},
                            {"loss_masked", t_masked.loss()}, {"loss_pruned", t_pruned.loss()},
                            {"seconds_masked", t_masked.seconds}, {"seconds_pruned", t_pruned.seconds},
                            {"speedup", t_masked.seconds / std::max(1e-9, t_pruned.seconds)},
                            {"parameters", pruned->parameter_count()}};
      if (format == "jsonl") std::cout << json_line(row) << std::endl;
      XL_INFO("pruned model: " << pruned->parameter_count() << " parameters, evaluates " << t_masked.seconds / std::max(1e-9, t_pruned.seconds)
                               << "x as fast as the masked one (loss " << t_pruned.loss() << " vs " << t_masked.loss() << ")");
      checkpoint::Checkpoint out = study.ckpt;
      out.phase = "pruned";
      out.model_config = pruned->config.to_json();
      out.model = model::model_tensors(pruned);
      out.optimizer.clear();
      out.memory.clear();
      out.analysis.clear();
      out.analysis.emplace_back("head_importance", result.importance);
      checkpoint::save(cli.output(), out, cli.force());
    }
    // The plot last: one that fails (69) leaves the pruned checkpoint written.
    if (cli.has("plot")) analysis::plot_curve(result.curve, metric, cli.get<std::string>("plot"));
    return 0;
  });
}
