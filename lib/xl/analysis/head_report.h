// Rendering head studies: JSON Lines rows, Markdown tables in the shape of the paper's Table 3
// (one model, or two side by side with the % change of each layer's standard deviation), TSV,
// and a gnuplot PNG of a pruning curve.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "xl/analysis/head_ablation.h"
#include "xl/analysis/iterative_pruning.h"
#include "xl/eval/metric.h"

namespace xl::analysis {

struct LabeledAblation {
  std::string label;  // the checkpoint's path
  HeadAblation result;
};

// One side of a comparison: one checkpoint, or several (seeds of one setting).
using AblationSide = std::vector<LabeledAblation>;

// Rows: one "base" per model, one "head" per (layer, head), one "layer" (stddev) per layer.
std::vector<nlohmann::json> ablation_rows(const LabeledAblation& a, const eval::Metric& metric);
// With several checkpoints on a side: one "layer_summary" row per side and layer, the layer's
// standard deviation as a mean over the side's checkpoints with its 95% interval, and the %
// change of the second side's mean against the first's.
std::vector<nlohmann::json> layer_summary_rows(const std::vector<AblationSide>& sides, const eval::Metric& metric);
// The paper's Table 3: per layer, each head's change and the layer's standard deviation; one line
// per side (its mean over checkpoints when it has several, the deviation with its interval), and
// with two sides the % change of the deviation.
std::string ablation_markdown(const std::vector<AblationSide>& sides, const eval::Metric& metric);
std::string ablation_tsv(const std::vector<AblationSide>& sides, const eval::Metric& metric);

// Markdown/TSV of an [n_layer, n_head] score table.
std::string matrix_markdown(const torch::Tensor& scores, const std::string& title);
std::string matrix_tsv(const torch::Tensor& scores);

// Draws fraction pruned vs metric with gnuplot; 73 when the PNG cannot be written, 69 without gnuplot.
void plot_curve(const std::vector<PruningPoint>& curve, const eval::Metric& metric, const std::string& png);

}  // namespace xl::analysis
