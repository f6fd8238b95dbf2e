#include "xl/analysis/head_report.h"

#include <iomanip>
#include <map>
#include <sstream>

#include "xl/util/error.h"
#include "xl/util/gnuplot.h"
#include "xl/util/stats.h"

namespace xl::analysis {
namespace {

// delta of the reported metric (bpc or ppl) when one head is masked
double delta_metric(const HeadAblation& a, const HeadScore& h, const eval::Metric& metric) {
  return metric.of(h.loss) - metric.of(a.base_loss);
}

std::map<int64_t, std::vector<const HeadScore*>> by_layer(const HeadAblation& a) {
  std::map<int64_t, std::vector<const HeadScore*>> m;
  for (const auto& h : a.heads) m[h.layer].push_back(&h);
  return m;
}

double layer_stddev(const HeadAblation& a, const std::vector<const HeadScore*>& heads, const eval::Metric& metric) {
  std::vector<double> d;
  for (auto* h : heads) d.push_back(delta_metric(a, *h, metric));
  return stats::sample_stddev(d);  // n - 1: the convention that reproduces the paper's Table 3
}

std::string fmt(double v, int prec = 3) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(prec) << v;
  return os.str();
}

}  // namespace

std::vector<nlohmann::json> ablation_rows(const LabeledAblation& la, const eval::Metric& metric) {
  const auto& a = la.result;
  const std::string m = metric.name();
  std::vector<nlohmann::json> rows;
  rows.push_back({{"event", "base"}, {"model", la.label}, {"loss", a.base_loss}, {m, metric.of(a.base_loss)},
                  {"tokens", a.tokens}, {"seconds", a.seconds}});
  for (const auto& h : a.heads)
    rows.push_back({{"event", "head"}, {"model", la.label}, {"layer", h.layer}, {"head", h.head}, {"loss", h.loss},
                    {"delta_loss", h.delta_loss}, {m, metric.of(h.loss)},
                    {"delta_" + m, delta_metric(a, h, metric)}});
  for (const auto& [l, heads] : by_layer(a))
    rows.push_back({{"event", "layer"}, {"model", la.label}, {"layer", l}, {"stddev_" + m, layer_stddev(a, heads, metric)}});
  return rows;
}

namespace {

// A side's per-layer figures: each head's change (mean over the checkpoints) and the layer's
// standard deviations, one per checkpoint.
struct LayerFigures {
  std::map<int64_t, double> head_mean;
  std::vector<double> stddevs;
};

std::map<int64_t, LayerFigures> layer_figures(const AblationSide& side, const eval::Metric& metric) {
  std::map<int64_t, LayerFigures> out;
  std::map<int64_t, std::map<int64_t, std::vector<double>>> deltas;
  for (const auto& la : side)
    for (const auto& [l, heads] : by_layer(la.result)) {
      out[l].stddevs.push_back(layer_stddev(la.result, heads, metric));
      for (auto* h : heads) deltas[l][h->head].push_back(delta_metric(la.result, *h, metric));
    }
  for (const auto& [l, by_head] : deltas)
    for (const auto& [h, v] : by_head) out[l].head_mean[h] = stats::mean(v);
  return out;
}

std::string side_label(const AblationSide& side) {
  std::string s;
  for (size_t i = 0; i < side.size(); ++i) s += (i ? ", " : "") + side[i].label;
  return s;
}

}  // namespace

std::vector<nlohmann::json> layer_summary_rows(const std::vector<AblationSide>& sides, const eval::Metric& metric) {
  std::vector<nlohmann::json> rows;
  std::map<int64_t, double> first_mean;
  for (size_t i = 0; i < sides.size(); ++i)
    for (const auto& [l, f] : layer_figures(sides[i], metric)) {
      const auto m = stats::mean_ci95(f.stddevs);
      nlohmann::json row = {{"event", "layer_summary"}, {"side", i}, {"models", side_label(sides[i])}, {"layer", l},
                            {"checkpoints", m.n}, {"stddev_" + metric.name() + "_mean", m.mean}};
      if (m.n >= 2) row["ci95"] = {m.mean - m.half_width, m.mean + m.half_width};
      if (i == 0) first_mean[l] = m.mean;
      else if (first_mean.count(l) && first_mean[l] > 0) row["stddev_change_pct"] = 100 * (m.mean - first_mean[l]) / first_mean[l];
      rows.push_back(row);
    }
  return rows;
}

std::string ablation_markdown(const std::vector<AblationSide>& sides, const eval::Metric& metric) {
  const std::string m = metric.name();
  int64_t nh = 0;
  bool several = false;
  for (const auto& side : sides) {
    several = several || side.size() > 1;
    for (const auto& la : side)
      for (const auto& h : la.result.heads) nh = std::max(nh, h.head + 1);
  }
  std::ostringstream os;
  os << "Change in " << m << " when one head is masked" << (several ? " (mean over each side's checkpoints)" : "");
  for (size_t i = 0; i < sides.size(); ++i) {
    std::vector<double> base;
    for (const auto& la : sides[i]) base.push_back(metric.of(la.result.base_loss));
    os << (i ? "; " : " (") << (sides.size() > 1 ? (i == 0 ? "first line: " : "second line: ") : "") << side_label(sides[i])
       << ", base " << fmt(stats::mean(base), 4);
  }
  os << ")\n\n| layer |";
  for (int64_t h = 0; h < nh; ++h) os << " H" << h + 1 << " |";
  os << " stddev" << (several ? " (95% interval)" : "") << " |" << (sides.size() > 1 ? " % stddev change |" : "") << "\n|---|";
  for (int64_t h = 0; h <= nh; ++h) os << "---:|";
  if (sides.size() > 1) os << "---:|";
  os << "\n";
  std::vector<std::map<int64_t, LayerFigures>> figures;
  for (const auto& side : sides) figures.push_back(layer_figures(side, metric));
  for (const auto& [l, unused] : figures[0]) {
    double first_sd = 0;
    for (size_t i = 0; i < sides.size(); ++i) {
      auto it = figures[i].find(l);
      if (it == figures[i].end()) continue;
      os << "| " << (i == 0 ? "Layer " + std::to_string(l + 1) : "") << " |";
      for (int64_t h = 0; h < nh; ++h) {
        auto v = it->second.head_mean.find(h);
        os << " " << (v != it->second.head_mean.end() ? fmt(v->second) : "-") << " |";
      }
      const auto sd = stats::mean_ci95(it->second.stddevs);
      os << " " << fmt(sd.mean) << (sd.n >= 2 ? " ± " + fmt(sd.half_width) : "") << " |";
      if (sides.size() > 1) os << " " << (i == 0 ? "" : first_sd > 0 ? fmt(100 * (sd.mean - first_sd) / first_sd, 1) : "-") << " |";
      if (i == 0) first_sd = sd.mean;
      os << "\n";
    }
  }
  return os.str();
}

std::string ablation_tsv(const std::vector<AblationSide>& sides, const eval::Metric& metric) {
  const std::string m = metric.name();
  std::ostringstream os;
  os << "side\tmodel\tlayer\thead\tloss\tdelta_" << m << "\n";
  for (size_t i = 0; i < sides.size(); ++i)
    for (const auto& la : sides[i])
      for (const auto& h : la.result.heads)
        os << i << '\t' << la.label << '\t' << h.layer << '\t' << h.head << '\t' << h.loss << '\t'
           << delta_metric(la.result, h, metric) << "\n";
  return os.str();
}

std::string matrix_markdown(const torch::Tensor& scores, const std::string& title) {
  std::ostringstream os;
  os << title << "\n\n| layer |";
  for (int64_t h = 0; h < scores.size(1); ++h) os << " H" << h + 1 << " |";
  os << "\n|---|";
  for (int64_t h = 0; h < scores.size(1); ++h) os << "---:|";
  os << "\n";
  for (int64_t l = 0; l < scores.size(0); ++l) {
    os << "| " << l + 1 << " |";
    for (int64_t h = 0; h < scores.size(1); ++h) os << " " << fmt(scores[l][h].item<double>(), 4) << " |";
    os << "\n";
  }
  return os.str();
}

std::string matrix_tsv(const torch::Tensor& scores) {
  std::ostringstream os;
  for (int64_t l = 0; l < scores.size(0); ++l) {
    for (int64_t h = 0; h < scores.size(1); ++h) os << (h ? "\t" : "") << scores[l][h].item<double>();
    os << "\n";
  }
  return os.str();
}

void plot_curve(const std::vector<PruningPoint>& curve, const eval::Metric& metric, const std::string& png) {
  std::ostringstream data;
  data << std::setprecision(9);
  for (const auto& p : curve) data << p.fraction << " " << metric.of(p.loss) << "\n";
  plot_png(png, data.str(),
           "set xlabel 'fraction of heads pruned'; set ylabel '" + metric.label() +
               "'; set grid; plot DATA using 1:2 with linespoints title 'iterative pruning'");
}

}  // namespace xl::analysis
