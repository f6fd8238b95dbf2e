#include "xl/ablate/tables.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "xl/util/error.h"
#include "xl/util/gnuplot.h"
#include "xl/util/json_io.h"
#include "xl/util/parse.h"
#include "xl/util/stats.h"

namespace xl::ablate {
namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

int digits_of(const std::string& metric) { return metric == "ppl" ? 2 : 3; }

std::string metric_text(const std::optional<double>& v, const std::string& metric) {
  return v ? fixed(*v, digits_of(metric)) : "-";
}

// "3.012 ± 0.041" (95% interval), or the mean alone for one value; "-" for none.
std::string interval_text(const stats::MeanInterval& m, const std::string& metric, bool signed_value = false) {
  if (m.n == 0) return "-";
  std::string mean = fixed(m.mean, digits_of(metric) + (signed_value ? 1 : 0));
  if (signed_value && m.mean >= 0) mean = "+" + mean;
  return m.n < 2 ? mean : mean + " ± " + fixed(m.half_width, digits_of(metric) + (signed_value ? 1 : 0));
}

nlohmann::json interval_json(const stats::MeanInterval& m) {
  if (m.n == 0) return nullptr;
  nlohmann::json j = {{"n", m.n}, {"mean", m.mean}, {"sd", m.sd}};
  if (m.n >= 2) j["ci95"] = {m.mean - m.half_width, m.mean + m.half_width};
  return j;
}

std::string ms_text(const RunReport& r) {
  std::string s;
  for (size_t i = 0; i < r.ms_per_batch.size(); ++i)
    s += (i ? ", " : "") + (r.ms_per_batch[i] ? std::to_string(static_cast<int64_t>(std::lround(*r.ms_per_batch[i]))) : "-");
  return s.empty() ? "-" : s;
}

bool any_label(const AblationReport& rep) {
  return std::any_of(rep.runs.begin(), rep.runs.end(), [](const RunReport& r) { return !r.label.empty(); });
}

// A table as the renderers see it: a title, columns (right-aligned or not) and rows of text.
struct Table {
  std::string title;
  std::vector<std::pair<std::string, bool>> columns;
  std::vector<std::vector<std::string>> rows;
  std::string note;
};

Table runs_table(const AblationReport& rep) {
  const std::string m = rep.metric();
  const bool label = any_label(rep);
  Table t;
  t.columns = {{"run", false}};
  if (label) t.columns.push_back({"label", false});
  for (auto c : {std::pair<std::string, bool>{"phases", false}, {"dev " + m, true}, {"test " + m, true}, {"parameters", true},
                 {"ms/batch", true}, {"wall time", true}, {"peak RSS MB", true}, {"status", false}})
    t.columns.push_back(c);
  int finished = 0;
  for (const auto& r : rep.runs) {
    finished += r.finished;
    std::vector<std::string> c = {r.name};
    if (label) c.push_back(r.label);
    c.insert(c.end(), {r.phases, metric_text(r.dev, m), metric_text(r.test, m),
                       r.parameters ? std::to_string(*r.parameters) : "-", ms_text(r),
                       r.wall_s > 0 ? parse::format_hms(r.wall_s) : "-",
                       r.peak_rss_mb ? std::to_string(static_cast<int64_t>(std::lround(*r.peak_rss_mb))) : "-", r.status});
    t.rows.push_back(c);
  }
  t.note = std::to_string(finished) + " of " + std::to_string(rep.runs.size()) +
           " runs finished. ms/batch: mean time per training batch of each phase (phase 1, phase 2); wall time: "
           "training, all phases.";
  return t;
}

// The finished runs' results per setting, in order of first appearance.
struct Setting {
  std::string name, label, phases;
  std::map<int64_t, double> dev, test;  // by seed
  stats::MeanInterval dev_mean() const { return stats::mean_ci95(values(dev)); }
  stats::MeanInterval test_mean() const { return stats::mean_ci95(values(test)); }
  static std::vector<double> values(const std::map<int64_t, double>& by_seed) {
    std::vector<double> v;
    for (const auto& [seed, x] : by_seed) v.push_back(x);
    return v;
  }
};

std::vector<Setting> settings(const AblationReport& rep) {
  std::vector<Setting> out;
  for (const auto& r : rep.runs) {
    auto it = std::find_if(out.begin(), out.end(), [&](const Setting& s) { return s.name == r.setting; });
    if (it == out.end()) {
      out.push_back({r.setting, r.label, r.phases, {}, {}});
      it = out.end() - 1;
    }
    if (!r.finished) continue;
    const int64_t seed = r.seed.value_or(0);
    if (r.dev) it->dev[seed] = *r.dev;
    if (r.test) it->test[seed] = *r.test;
  }
  return out;
}

// Setting minus baseline, seed by seed, over the seeds both have.
stats::MeanInterval paired(const std::map<int64_t, double>& a, const std::map<int64_t, double>& base) {
  std::vector<double> d;
  for (const auto& [seed, x] : a) {
    auto it = base.find(seed);
    if (it != base.end()) d.push_back(x - it->second);
  }
  return stats::mean_ci95(d);
}

const Setting* find_setting(const std::vector<Setting>& all, const std::string& name) {
  for (const auto& s : all)
    if (s.name == name) return &s;
  return nullptr;
}

Table means_table(const AblationReport& rep, const std::vector<Setting>& all) {
  const std::string m = rep.metric();
  Table t;
  t.title = "Means over seeds, with 95% confidence intervals (t distribution)";
  t.columns = {{"setting", false}, {"label", false}, {"phases", false}, {"seeds", true}, {"dev " + m, true}, {"test " + m, true}};
  for (const auto& s : all)
    t.rows.push_back({s.name, s.label, s.phases, std::to_string(s.dev.size()), interval_text(s.dev_mean(), m),
                      interval_text(s.test_mean(), m)});
  return t;
}

Table paired_table(const AblationReport& rep, const std::vector<Setting>& all, const Setting& base) {
  const std::string m = rep.metric();
  Table t;
  t.title = "Paired differences against " + base.name + " (setting minus baseline, seed by seed; 95% intervals)";
  t.columns = {{"setting", false}, {"label", false}, {"pairs", true}, {"dev " + m + " diff", true}, {"test " + m + " diff", true}};
  for (const auto& s : all) {
    if (&s == &base) continue;
    const auto dev = paired(s.dev, base.dev), test = paired(s.test, base.test);
    t.rows.push_back({s.name, s.label, std::to_string(dev.n), interval_text(dev, m, true), interval_text(test, m, true)});
  }
  t.note = "A difference whose interval excludes 0 is unlikely to come from the seeds alone.";
  return t;
}

// Rows and columns of the pivot in order of first appearance; each cell the mean (and interval)
// of its finished runs' values.
Table pivot_table(const AblationReport& rep) {
  const std::string m = rep.metric();
  std::vector<std::string> rows, cols;
  std::map<std::pair<std::string, std::string>, std::vector<double>> cell;
  for (const auto& r : rep.runs) {
    const std::string rv = r.key(rep.table_rows), cv = r.key(rep.table_cols);
    if (std::find(rows.begin(), rows.end(), rv) == rows.end()) rows.push_back(rv);
    if (std::find(cols.begin(), cols.end(), cv) == cols.end()) cols.push_back(cv);
    const auto& v = rep.table_cell == "test" ? r.test : r.dev;
    auto& values = cell[{rv, cv}];
    if (v && r.finished) values.push_back(*v);
  }
  Table t;
  t.title = rep.table_cell + " " + m + ": " + rep.table_rows + " (rows) by " + rep.table_cols + " (columns)" +
            (rep.seeded() ? ", means over seeds" : "");
  t.columns = {{rep.table_rows + " \\ " + rep.table_cols, false}};
  for (const auto& c : cols) t.columns.push_back({c, true});
  for (const auto& rv : rows) {
    std::vector<std::string> row = {rv};
    for (const auto& cv : cols) row.push_back(interval_text(stats::mean_ci95(cell[{rv, cv}]), m));
    t.rows.push_back(row);
  }
  return t;
}

// Every table of the report: runs, pivot, and with seeds the means and paired differences.
std::vector<Table> tables(const AblationReport& rep) {
  std::vector<Table> out = {runs_table(rep)};
  out.front().title = rep.grid_name;
  if (!rep.table_rows.empty()) out.push_back(pivot_table(rep));
  if (rep.seeded()) {
    const auto all = settings(rep);
    out.push_back(means_table(rep, all));
    if (const Setting* base = find_setting(all, rep.baseline)) out.push_back(paired_table(rep, all, *base));
  }
  return out;
}

std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? '/' : c;
  return out;
}

std::string tsv_cell(std::string s) {
  for (auto& ch : s)
    if (ch == '\t' || ch == '\n') ch = ' ';
  return s;
}

}  // namespace

std::string report_markdown(const AblationReport& rep) {
  std::ostringstream os;
  bool first = true;
  for (const auto& t : tables(rep)) {
    os << (first ? "## " : "\n### ") << t.title << "\n\n|";
    first = false;
    for (const auto& [title, right] : t.columns) os << " " << md_cell(title) << " |";
    os << "\n|";
    for (const auto& [title, right] : t.columns) os << (right ? "---:|" : "---|");
    os << "\n";
    for (const auto& row : t.rows) {
      os << "|";
      for (const auto& c : row) os << " " << md_cell(c) << " |";
      os << "\n";
    }
    if (!t.note.empty()) os << "\n" << t.note << "\n";
  }
  return os.str();
}

std::string report_tsv(const AblationReport& rep) {
  std::ostringstream os;
  bool first = true;
  for (const auto& t : tables(rep)) {
    if (!first) os << "\n";
    first = false;
    for (size_t i = 0; i < t.columns.size(); ++i) os << (i ? "\t" : "") << tsv_cell(t.columns[i].first);
    os << "\n";
    for (const auto& row : t.rows) {
      for (size_t i = 0; i < row.size(); ++i) os << (i ? "\t" : "") << tsv_cell(row[i]);
      os << "\n";
    }
  }
  return os.str();
}

std::string report_jsonl(const AblationReport& rep) {
  std::ostringstream os;
  auto opt = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  const std::string metric = rep.metric();
  for (const auto& r : rep.runs) {
    nlohmann::json ms = nlohmann::json::array();
    for (const auto& m : r.ms_per_batch) ms.push_back(opt(m));
    nlohmann::json j = {{"row", "run"}, {"grid", rep.grid_name}, {"run", r.name}, {"setting", r.setting},
                        {"phases", r.phases}, {"finished", r.finished}, {"status", r.status},
                        {"metric", r.metric.empty() ? metric : r.metric}, {"dev", opt(r.dev)}, {"test", opt(r.test)},
                        {"parameters", opt(r.parameters)}, {"ms_per_batch", ms}, {"steps", r.steps},
                        {"wall_s", r.wall_s}, {"peak_rss_mb", opt(r.peak_rss_mb)}};
    if (r.seed) j["seed"] = *r.seed;
    if (!r.label.empty()) j["label"] = r.label;
    if (!rep.table_rows.empty()) j["keys"] = {{rep.table_rows, r.key(rep.table_rows)}, {rep.table_cols, r.key(rep.table_cols)}};
    os << json_line(j) << "\n";
  }
  if (rep.seeded()) {
    const auto all = settings(rep);
    for (const auto& s : all)
      os << json_line({{"row", "setting"}, {"grid", rep.grid_name}, {"setting", s.name}, {"label", s.label},
                       {"metric", metric}, {"dev", interval_json(s.dev_mean())}, {"test", interval_json(s.test_mean())}})
         << "\n";
    if (const Setting* base = find_setting(all, rep.baseline))
      for (const auto& s : all)
        if (&s != base)
          os << json_line({{"row", "paired"}, {"grid", rep.grid_name}, {"setting", s.name}, {"baseline", base->name},
                           {"metric", metric}, {"dev_diff", interval_json(paired(s.dev, base->dev))},
                           {"test_diff", interval_json(paired(s.test, base->test))}})
             << "\n";
  }
  return os.str();
}

void plot_validation(const AblationReport& rep, const std::string& png) {
  std::ostringstream data, plot;
  int block = 0;
  for (const auto& r : rep.runs) {
    if (r.curve.empty()) continue;
    for (const auto& p : r.curve) data << p.step << " " << p.value << "\n";
    data << "\n\n";
    std::string title = r.label.empty() ? r.name : r.label + " (" + r.name + ")";
    std::replace(title.begin(), title.end(), '\'', '"');
    plot << (block ? ", " : "plot ") << "DATA index " << block << " using 1:2 with linespoints title '" << title << "'";
    ++block;
  }
  XL_CHECK(block > 0, kExitDataErr, "--plot: no run in " << rep.dir << " has validation points yet");
  plot_png(png, data.str(),
           "set title '" + rep.grid_name + ": validation during training'\nset xlabel 'step'\nset ylabel 'valid " +
               (rep.metric() == "ppl" ? "perplexity" : "bpc") +
               // The legend under the plot, one run a line: beside it, five long labels took half the
               // width and the step labels ran into each other.
               "'\nset grid\nset key outside below left Left reverse maxcols 1\n" + plot.str(),
           1000, 600 + 24 * block);
}

}  // namespace xl::ablate
