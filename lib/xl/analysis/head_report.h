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

// Rows: one "base" per model, one "head" per (layer, head), one "layer" (stddev) per layer.
std::vector<nlohmann::json> ablation_rows(const LabeledAblation& a, const eval::Metric& metric);
std::string ablation_markdown(const std::vector<LabeledAblation>& models, const eval::Metric& metric);
std::string ablation_tsv(const std::vector<LabeledAblation>& models, const eval::Metric& metric);

// Markdown/TSV of an [n_layer, n_head] score table.
std::string matrix_markdown(const torch::Tensor& scores, const std::string& title);
std::string matrix_tsv(const torch::Tensor& scores);

// Draws fraction pruned vs metric with gnuplot; 73 when the PNG cannot be written, 69 without gnuplot.
void plot_curve(const std::vector<PruningPoint>& curve, const eval::Metric& metric, const std::string& png);

}  // namespace xl::analysis
