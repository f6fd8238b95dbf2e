#include "xl/analysis/head_study.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>

#include "xl/analysis/eval_cache.h"
#include "xl/analysis/head_ablation.h"
#include "xl/analysis/head_importance.h"
#include "xl/analysis/head_report.h"
#include "xl/checkpoint/checkpoint.h"
#include "xl/compute/parallel.h"
#include "xl/eval/metric.h"
#include "xl/h5/tokens_file.h"
#include "xl/model/head_pruning.h"
#include "xl/model/model_io.h"
#include "xl/util/error.h"
#include "xl/util/gnuplot.h"
#include "xl/util/io.h"
#include "xl/util/json_io.h"
#include "xl/util/log.h"
#include "xl/util/parse.h"
#include "xl/util/signals.h"

namespace xl::analysis {
namespace {

void emit(const std::vector<nlohmann::json>& rows) {
  for (const auto& r : rows) std::cout << json_line(r) << "\n";
}

// What every study shares: the tokens, the first checkpoint and its evaluation settings, the
// cache of finished evaluations, and the output, claimed before the study so that an unwritable
// one fails now.
class Study {
 public:
  explicit Study(const HeadStudyRequest& r)
      : r_(r), guard_(claim_output(r)), tokens_(open_tokens(r)), metric_(tokens_.vocab().type()),
        vocab_{tokens_.vocab().sha256(), tokens_.name()},
        // The optimizer's moments, generators and memories (twice the weights) only go on into an output.
        ckpt_(checkpoint::load(r.checkpoints.front(), vocab_, !r.output.empty())),
        ids_(tokens_.read_split(r.split, "--split picks another", eval::kMinEvalTokens)), es_(settings()),
        cache_(r.cache) {
    // A stop (Ctrl-C, a batch system's limit) ends the evaluation or importance pass under way
    // after its segment; the finished ones stay in --cache.
    signals::catch_stop();
    if (log::level() != log::Level::kQuiet)
      signals::set_stop_notice(cache_.enabled() ? "stopping after this segment; finished evaluations are kept in " + cache_.path()
                                                : "stopping after this segment");
    es_.stop_on_signal = true;
  }

  int ablate_one();
  int importance();
  int iterative();

 private:
  static std::unique_ptr<io::AtomicOutput> claim_output(const HeadStudyRequest& r) {
    std::unique_ptr<io::AtomicOutput> guard;
    if (!r.output.empty()) guard = std::make_unique<io::AtomicOutput>(r.output, r.force, true);
    if (!r.plot.empty()) check_plot(r.plot);  // now, not after the study
    return guard;
  }
  static h5::TokensFile open_tokens(const HeadStudyRequest& r) { return h5::TokensFile::open(r.tokens); }
  eval::EvalSettings settings() const {
    eval::EvalSettings es = r_.eval;
    es.precision = r_.precision;
    es.cmem_len = r_.cmem_lens.empty() ? eval::trained_cmem_len(ckpt_) : r_.cmem_lens.front();
    // Every evaluation of the study would score nothing, and its table would be empty.
    XL_CHECK(eval::scores_any(make(ckpt_), static_cast<int64_t>(ids_.size()), es), kExitUsage,
             "--warmup --mem-len " << es.mem_len << ": no segment of the " << r_.split
                                   << " split starts with a full memory, so nothing would be scored (give a shorter "
                                      "--mem-len, or drop --warmup)");
    es.head_mask = head_mask(ckpt_);
    return es;
  }

  model::TransformerXL make(const checkpoint::Checkpoint& c, const std::string& path) const {
    auto m = model::model_from_checkpoint(c, path);
    m->to(r_.device);
    return m;
  }
  model::TransformerXL make(const checkpoint::Checkpoint& c) const { return make(c, r_.checkpoints.front()); }
  torch::Tensor head_mask(const checkpoint::Checkpoint& c) const {
    return r_.ignore_head_mask ? torch::Tensor() : model::head_mask_of(c);
  }
  int stopped(int sig, const std::string& finished) const {
    XL_INFO("stopped by signal " << sig << " after " << finished << "; "
                                 << (cache_.enabled() ? "they are kept in " + cache_.path() + ": the same command goes on from them"
                                                      : std::string("--cache FILE keeps finished evaluations for the next run")));
    return 128 + sig;
  }
  LabeledAblation ablate_checkpoint(const checkpoint::Checkpoint& c, const std::string& path, int* stopped_by);
  ImportanceSettings importance_settings() const;
  std::vector<int32_t> score_ids() const {
    return r_.importance_split == r_.split
               ? ids_
               : tokens_.read_split(r_.importance_split, "--importance-split picks another", eval::kMinEvalTokens);
  }
  void save(checkpoint::Checkpoint out) {
    guard_.reset();
    checkpoint::save(r_.output, out, r_.force);
  }
  int write_pruned(model::TransformerXL& model, const IterativePruning& result, const std::string& passes);

  const HeadStudyRequest& r_;
  std::unique_ptr<io::AtomicOutput> guard_;
  h5::TokensFile tokens_;
  eval::Metric metric_;
  checkpoint::ExpectedVocab vocab_;
  checkpoint::Checkpoint ckpt_;
  std::vector<int32_t> ids_;
  eval::EvalSettings es_;
  EvalCache cache_;
};

// One checkpoint's ablation of every head, with a progress line every 15 s.
LabeledAblation Study::ablate_checkpoint(const checkpoint::Checkpoint& c, const std::string& path, int* stopped_by) {
  eval::EvalSettings s = es_;
  s.head_mask = head_mask(c);
  const auto t0 = std::chrono::steady_clock::now();
  auto next_line = t0 + std::chrono::seconds(15);
  int64_t first_done = -1;  // evaluations done when this run's first one finished
  auto progress = [&](int64_t done, int64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (first_done < 0) first_done = done - 1;
    if (now < next_line || done == total) return;
    next_line = now + std::chrono::seconds(15);
    const double each = std::chrono::duration<double>(now - t0).count() / static_cast<double>(done - first_done);
    XL_INFO(path << ": " << done << " of " << total << " evaluations, about "
                 << parse::format_duration(each * static_cast<double>(total - done)) << " left");
  };
  auto result = ablate_each_head([&] { return make(c, path); }, ids_, s, r_.jobs, progress, &cache_);
  if (const int sig = result.stopped_by) {
    *stopped_by = stopped(sig, std::to_string(result.finished) + " of " + std::to_string(result.evaluations) +
                                   " evaluations of " + path);
    return {};
  }
  XL_INFO(path << ": " << result.heads.size() << " heads ablated in " << static_cast<int>(result.seconds) << " s"
               << (result.kept ? " (" + std::to_string(result.kept) + " of " + std::to_string(result.evaluations) +
                                     " evaluations kept in " + cache_.path() + ")"
                               : std::string()));
  return {path, result};
}

int Study::ablate_one() {
  // Each side: one checkpoint, or a comma list of them (seeds of one setting).
  std::vector<std::vector<std::string>> side_paths = {r_.checkpoints};
  if (!r_.compare.empty()) side_paths.push_back(r_.compare);
  std::vector<AblationSide> sides;
  for (size_t side = 0; side < side_paths.size(); ++side) {
    sides.emplace_back();
    for (size_t k = 0; k < side_paths[side].size(); ++k) {
      const std::string& path = side_paths[side][k];
      const checkpoint::Checkpoint c = side == 0 && k == 0 ? ckpt_ : checkpoint::load(path, vocab_, false);
      int sig = 0;
      sides.back().push_back(ablate_checkpoint(c, path, &sig));
      if (sig) return sig;
    }
  }
  const bool several = sides.front().size() > 1 || sides.back().size() > 1;
  if (r_.format == eval::RowFormat::kMarkdown) std::cout << ablation_markdown(sides, metric_);
  else if (r_.format == eval::RowFormat::kTsv) std::cout << ablation_tsv(sides, metric_);
  else {
    for (const auto& side : sides)
      for (const auto& a : side) emit(ablation_rows(a, metric_));
    if (several) emit(layer_summary_rows(sides, metric_));
  }
  std::cout.flush();
  return 0;
}

ImportanceSettings Study::importance_settings() const {
  ImportanceSettings is;
  is.tgt_len = es_.tgt_len;
  is.mem_len = es_.mem_len;
  is.cmem_len = es_.cmem_len;
  is.batch_size = es_.batch_size;
  is.max_tokens = r_.importance_max_tokens;
  is.normalize_layers = r_.normalize_layers;
  is.head_mask = es_.head_mask;
  is.precision = es_.precision;
  is.stop_on_signal = true;
  return is;
}

int Study::importance() {
  auto model = make(ckpt_);
  const std::vector<int32_t> scored = score_ids();
  const Importance importance = head_importance(model, scored, importance_settings(), &cache_);
  const std::string& path = r_.checkpoints.front();
  if (const int sig = importance.stopped_by) {
    XL_INFO("stopped by signal " << sig << " before the importance pass of " << path << " finished");
    return 128 + sig;
  }
  if (importance.kept) XL_INFO(path << ": importance scores kept in " << cache_.path());
  const torch::Tensor& scores = importance.scores;
  if (r_.format == eval::RowFormat::kMarkdown) std::cout << matrix_markdown(scores, "Head importance (Michel et al.) of " + path);
  else if (r_.format == eval::RowFormat::kTsv) std::cout << matrix_tsv(scores);
  else
    for (int64_t l = 0; l < scores.size(0); ++l)
      for (int64_t h = 0; h < model->config.heads_in_layer(l); ++h)
        std::cout << json_line(nlohmann::json{{"event", "importance"}, {"layer", l}, {"head", h}, {"score", scores[l][h].item<double>()}})
                  << "\n";
  std::cout.flush();
  if (!r_.output.empty()) {
    checkpoint::Checkpoint out = ckpt_;
    out.analysis.erase(std::remove_if(out.analysis.begin(), out.analysis.end(),
                                      [](const auto& p) { return p.first == "head_importance"; }),
                       out.analysis.end());
    out.analysis.emplace_back("head_importance", scores);
    save(std::move(out));
  }
  return 0;
}

void print_curve(const std::vector<PruningPoint>& curve, const eval::Metric& metric, eval::RowFormat format) {
  if (format == eval::RowFormat::kMarkdown) {
    std::cout << "| fraction pruned | heads pruned | " << metric.name() << " |\n|---:|---:|---:|\n";
    for (const auto& p : curve) std::cout << "| " << p.fraction << " | " << p.pruned << " | " << metric.of(p.loss) << " |\n";
  } else if (format == eval::RowFormat::kTsv) {
    std::cout << "fraction\tpruned\t" << metric.name() << "\n";
    for (const auto& p : curve) std::cout << p.fraction << '\t' << p.pruned << '\t' << metric.of(p.loss) << "\n";
  }
  std::cout.flush();
}

int Study::iterative() {
  auto model = make(ckpt_);
  const std::vector<int32_t> scored = score_ids();
  auto result = prune_iteratively(model, ids_, es_, scored, importance_settings(), r_.schedule, [&](const PruningPoint& p) {
    nlohmann::json row = {{"event", "prune"}, {"fraction", p.fraction}, {"pruned", p.pruned}, {"loss", p.loss},
                          {metric_.name(), metric_.of(p.loss)}};
    if (r_.format == eval::RowFormat::kJsonl) std::cout << json_line(row) << std::endl;
    XL_INFO(p.pruned << " heads pruned (" << static_cast<int>(100 * p.fraction + 0.5) << "%): " << metric_.name() << " "
                     << metric_.of(p.loss));
  }, &cache_);
  const std::string& path = r_.checkpoints.front();
  const std::string passes = std::to_string(result.evaluations) + (result.evaluations == 1 ? " evaluation" : " evaluations") +
                             " and " + std::to_string(result.scorings) +
                             (result.scorings == 1 ? " importance pass" : " importance passes");
  if (const int sig = result.stopped_by) {
    if (result.evaluations + result.scorings > 0) return stopped(sig, passes + " of " + path);
    XL_INFO("stopped by signal " << sig << " before the first importance pass of " << path << " finished");
    return 128 + sig;
  }
  if (result.kept)
    XL_INFO(path << ": " << result.kept << " of its " << result.evaluations + result.scorings << " passes (" << passes
                 << ") kept in " << cache_.path());
  print_curve(result.curve, metric_, r_.format);
  if (!r_.output.empty())
    if (const int sig = write_pruned(model, result, passes)) return sig;
  // The plot last: one that fails (69) leaves the pruned checkpoint written.
  if (!r_.plot.empty()) plot_curve(result.curve, metric_, r_.plot);
  return 0;
}

// The last step's model with its pruned heads removed, and how much faster it evaluates than the
// masked one.
int Study::write_pruned(model::TransformerXL& model, const IterativePruning& result, const std::string& passes) {
  auto pruned = model::remove_heads(model, result.keep);
  eval::EvalSettings masked = es_;
  masked.head_mask = model::keep_to_head_mask(model->config, result.keep, torch::kFloat32);
  eval::EvalSettings plain = es_;
  plain.head_mask = torch::Tensor();
  auto t_masked = eval::evaluate(model, ids_, masked), t_pruned = eval::evaluate(pruned, ids_, plain);
  if (const int sig = t_masked.stopped_by ? t_masked.stopped_by : t_pruned.stopped_by)
    return stopped(sig, passes + " of " + r_.checkpoints.front() + ", before " + r_.output + " was written");
  const double speedup = t_masked.seconds / std::max(1e-9, t_pruned.seconds);
  nlohmann::json row = {{"event", "pruned"}, {"path", r_.output}, {"heads_left", model::kept_head_counts(model->config, result.keep)},
                        {"loss_masked", t_masked.loss()}, {"loss_pruned", t_pruned.loss()},
                        {"seconds_masked", t_masked.seconds}, {"seconds_pruned", t_pruned.seconds},
                        {"speedup", speedup}, {"parameters", pruned->parameter_count()}};
  if (r_.format == eval::RowFormat::kJsonl) std::cout << json_line(row) << std::endl;
  XL_INFO("pruned model: " << pruned->parameter_count() << " parameters, evaluates " << speedup
                           << "x as fast as the masked one (loss " << t_pruned.loss() << " vs " << t_masked.loss() << ")");
  checkpoint::Checkpoint out = ckpt_;
  out.phase = "pruned";
  out.model_config = pruned->config.to_json();
  out.model = model::model_tensors(pruned);
  out.optimizer.clear();
  out.memory.clear();
  out.analysis.clear();
  out.analysis.emplace_back("head_importance", result.importance);
  save(std::move(out));
  return 0;
}

}  // namespace

int run_head_study(const HeadStudyRequest& request) {
  Study study(request);
  switch (request.mode) {
    case HeadStudyMode::kAblateOne: return study.ablate_one();
    case HeadStudyMode::kImportance: return study.importance();
    case HeadStudyMode::kIterative: return study.iterative();
  }
  return 0;
}

}  // namespace xl::analysis
