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

std::string ablation_markdown(const std::vector<LabeledAblation>& models, const eval::Metric& metric) {
  const std::string m = metric.name();
  int64_t nh = 0;
  for (const auto& la : models)
    for (const auto& h : la.result.heads) nh = std::max(nh, h.head + 1);
  std::ostringstream os;
  os << "Change in " << m << " when one head is masked";
  for (size_t i = 0; i < models.size(); ++i)
    os << (i ? "; " : " (") << (models.size() > 1 ? (i == 0 ? "first line: " : "second line: ") : "") << models[i].label
       << ", base " << fmt(metric.of(models[i].result.base_loss), 4);
  os << ")\n\n| layer |";
  for (int64_t h = 0; h < nh; ++h) os << " H" << h + 1 << " |";
  os << " stddev |" << (models.size() > 1 ? " % stddev change |" : "") << "\n|---|";
  for (int64_t h = 0; h <= nh; ++h) os << "---:|";
  if (models.size() > 1) os << "---:|";
  os << "\n";
  std::vector<std::map<int64_t, std::vector<const HeadScore*>>> layers;
  for (const auto& la : models) layers.push_back(by_layer(la.result));
  for (const auto& [l, unused] : layers[0]) {
    double first_sd = 0;
    for (size_t i = 0; i < models.size(); ++i) {
      auto it = layers[i].find(l);
      if (it == layers[i].end()) continue;
      os << "| " << (i == 0 ? "Layer " + std::to_string(l + 1) : "") << " |";
      std::map<int64_t, double> vals;
      for (auto* h : it->second) vals[h->head] = delta_metric(models[i].result, *h, metric);
      for (int64_t h = 0; h < nh; ++h) os << " " << (vals.count(h) ? fmt(vals[h]) : "-") << " |";
      double sd = layer_stddev(models[i].result, it->second, metric);
      os << " " << fmt(sd) << " |";
      if (models.size() > 1) os << " " << (i == 0 ? "" : first_sd > 0 ? fmt(100 * (sd - first_sd) / first_sd, 1) : "-") << " |";
      if (i == 0) first_sd = sd;
      os << "\n";
    }
  }
  return os.str();
}

std::string ablation_tsv(const std::vector<LabeledAblation>& models, const eval::Metric& metric) {
  const std::string m = metric.name();
  std::ostringstream os;
  os << "model\tlayer\thead\tloss\tdelta_" << m << "\n";
  for (const auto& la : models)
    for (const auto& h : la.result.heads)
      os << la.label << '\t' << h.layer << '\t' << h.head << '\t' << h.loss << '\t' << delta_metric(la.result, h, metric) << "\n";
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
