#include "xl/analysis/head_report.h"

#include <cstdio>
#include <iomanip>
#include <map>
#include <sstream>

#include "xl/util/error.h"
#include "xl/util/io.h"

namespace xl::analysis {
namespace {

// delta of the reported metric (bpc or ppl) when one head is masked
double delta_metric(const HeadAblation& a, const HeadScore& h, bool char_level) {
  return metric_of(h.loss, char_level) - metric_of(a.base_loss, char_level);
}

std::map<int64_t, std::vector<const HeadScore*>> by_layer(const HeadAblation& a) {
  std::map<int64_t, std::vector<const HeadScore*>> m;
  for (const auto& h : a.heads) m[h.layer].push_back(&h);
  return m;
}

double layer_stddev(const HeadAblation& a, const std::vector<const HeadScore*>& heads, bool char_level) {
  std::vector<double> d;
  for (auto* h : heads) d.push_back(delta_metric(a, *h, char_level));
  return sample_stddev(d);
}

std::string fmt(double v, int prec = 3) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(prec) << v;
  return os.str();
}

}  // namespace

std::vector<nlohmann::json> ablation_rows(const LabeledAblation& la, bool char_level) {
  const auto& a = la.result;
  const std::string m = char_level ? "bpc" : "ppl";
  std::vector<nlohmann::json> rows;
  rows.push_back({{"event", "base"}, {"model", la.label}, {"loss", a.base_loss}, {m, metric_of(a.base_loss, char_level)},
                  {"tokens", a.tokens}, {"seconds", a.seconds}});
  for (const auto& h : a.heads)
    rows.push_back({{"event", "head"}, {"model", la.label}, {"layer", h.layer}, {"head", h.head}, {"loss", h.loss},
                    {"delta_loss", h.delta_loss}, {m, metric_of(h.loss, char_level)},
                    {"delta_" + m, delta_metric(a, h, char_level)}});
  for (const auto& [l, heads] : by_layer(a))
    rows.push_back({{"event", "layer"}, {"model", la.label}, {"layer", l}, {"stddev_" + m, layer_stddev(a, heads, char_level)}});
  return rows;
}

std::string ablation_markdown(const std::vector<LabeledAblation>& models, bool char_level) {
  const std::string m = char_level ? "bpc" : "ppl";
  int64_t nh = 0;
  for (const auto& la : models)
    for (const auto& h : la.result.heads) nh = std::max(nh, h.head + 1);
  std::ostringstream os;
  os << "Change in " << m << " when one head is masked";
  for (size_t i = 0; i < models.size(); ++i)
    os << (i ? "; " : " (") << (models.size() > 1 ? (i == 0 ? "first line: " : "second line: ") : "") << models[i].label
       << ", base " << fmt(metric_of(models[i].result.base_loss, char_level), 4);
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
      for (auto* h : it->second) vals[h->head] = delta_metric(models[i].result, *h, char_level);
      for (int64_t h = 0; h < nh; ++h) os << " " << (vals.count(h) ? fmt(vals[h]) : "-") << " |";
      double sd = layer_stddev(models[i].result, it->second, char_level);
      os << " " << fmt(sd) << " |";
      if (models.size() > 1) os << " " << (i == 0 ? "" : first_sd > 0 ? fmt(100 * (sd - first_sd) / first_sd, 1) : "-") << " |";
      if (i == 0) first_sd = sd;
      os << "\n";
    }
  }
  return os.str();
}

std::string ablation_tsv(const std::vector<LabeledAblation>& models, bool char_level) {
  const std::string m = char_level ? "bpc" : "ppl";
  std::ostringstream os;
  os << "model\tlayer\thead\tloss\tdelta_" << m << "\n";
  for (const auto& la : models)
    for (const auto& h : la.result.heads)
      os << la.label << '\t' << h.layer << '\t' << h.head << '\t' << h.loss << '\t' << delta_metric(la.result, h, char_level) << "\n";
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

void plot_curve(const std::vector<PruningPoint>& curve, bool char_level, const std::string& png) {
  io::AtomicOutput out(png, true, true);
  std::string data = out.temp_path() + ".dat";
  {
    std::FILE* f = std::fopen(data.c_str(), "w");
    XL_CHECK(f, kExitCantCreat, "cannot write " << data);
    for (const auto& p : curve) std::fprintf(f, "%.6f %.6f\n", p.fraction, metric_of(p.loss, char_level));
    std::fclose(f);
  }
  std::string script = "set terminal pngcairo size 800,500; set output '" + out.temp_path() +
                       "'; set xlabel 'fraction of heads pruned'; set ylabel '" + (char_level ? "bpc" : "perplexity") +
                       "'; set grid; plot '" + data + "' using 1:2 with linespoints title 'iterative pruning'";
  std::string cmd = "gnuplot -e \"" + script + "\" 2>/dev/null";
  int rc = std::system(cmd.c_str());
  std::remove(data.c_str());
  XL_CHECK(rc == 0, 69, "--plot: gnuplot failed or is not installed (apt-get install gnuplot-nox)");
  out.commit();
}

}  // namespace xl::analysis
