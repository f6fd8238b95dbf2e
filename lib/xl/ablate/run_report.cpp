#include "xl/ablate/run_report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/json_io.h"
#include "xl/util/parse.h"

namespace xl::ablate {

namespace fs = std::filesystem;

namespace {

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (parse::trim(line).empty()) continue;
    try {
      auto j = nlohmann::json::parse(line);
      if (j.is_object()) out.push_back(std::move(j));
    } catch (const nlohmann::json::exception&) {
      // a line still being written
    }
  }
  return out;
}

double number_or(const nlohmann::json& j, const char* key, double fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

struct PhaseState {
  bool started = false, finished = false, stopped = false;
  int64_t step = 0;
};

PhaseState read_phase(const std::string& file, RunReport& r) {
  PhaseState st;
  auto events = read_jsonl(file);
  double elapsed = 0;
  std::vector<CurvePoint> curve, ms;  // ms: each train event's ms_per_batch at its step
  for (const auto& e : events) {
    const std::string ev = e.value("event", "");
    if (e.contains("step") && e["step"].is_number_integer()) st.step = e["step"].get<int64_t>();
    if (e.contains("elapsed") && e["elapsed"].is_number()) elapsed = e["elapsed"].get<double>();
    if (ev == "start") {
      st.started = true;
      st.finished = st.stopped = false;
      if (!r.parameters && e.contains("parameters") && e["parameters"].is_number_integer())
        r.parameters = e["parameters"].get<int64_t>();
      // A run resumed at step S after a kill trains S+1... again: what it logged past S before
      // the kill was lost with the steps, and the steps' new events replace it.
      auto superseded = [&](const CurvePoint& p) { return p.step > st.step; };
      curve.erase(std::remove_if(curve.begin(), curve.end(), superseded), curve.end());
      ms.erase(std::remove_if(ms.begin(), ms.end(), superseded), ms.end());
    } else if (ev == "train") {
      st.finished = st.stopped = false;
      if (e.contains("ms_per_batch") && e["ms_per_batch"].is_number())
        ms.push_back({st.step, e["ms_per_batch"].get<double>()});
    } else if (ev == "valid") {
      for (const char* m : {"bpc", "ppl"})
        if (e.contains(m) && e[m].is_number()) {
          r.metric = m;
          curve.push_back({st.step, e[m].get<double>()});
        }
    } else if (ev == "done") {
      const std::string reason = e.value("reason", "");
      st.stopped = reason.rfind("signal", 0) == 0;
      st.finished = !st.stopped;
      double rss = number_or(e, "peak_rss_mb", -1);
      if (rss >= 0) r.peak_rss_mb = std::max(r.peak_rss_mb.value_or(0.0), rss);
    }
  }
  r.curve.insert(r.curve.end(), curve.begin(), curve.end());
  double ms_sum = 0;
  for (const CurvePoint& p : ms) ms_sum += p.value;
  r.ms_per_batch.push_back(ms.empty() ? std::nullopt : std::optional<double>(ms_sum / static_cast<double>(ms.size())));
  r.steps.push_back(st.step);
  r.wall_s += elapsed;
  return st;
}

std::optional<double> read_eval(const std::string& file, RunReport& r) {
  for (const auto& e : read_jsonl(file))
    for (const char* m : {"bpc", "ppl"})
      if (e.contains(m) && e[m].is_number()) {
        if (r.metric.empty()) r.metric = m;
        double rss = number_or(e, "peak_rss_mb", -1);
        if (rss >= 0) r.peak_rss_mb = std::max(r.peak_rss_mb.value_or(0.0), rss);
        return e[m].get<double>();
      }
  return std::nullopt;
}

}  // namespace

std::string RunReport::key(const std::string& k) const {
  if (k == "phases") return phases;
  if (k == "name") return name;
  auto it = keys.find(k);
  if (it != keys.end()) return it->second;
  return k == "run" ? name : "?";
}

bool AblationReport::seeded() const {
  return std::any_of(runs.begin(), runs.end(), [](const RunReport& r) { return r.seed.has_value(); });
}

std::string AblationReport::metric() const {
  for (const auto& r : runs)
    if (!r.metric.empty()) return r.metric;
  return "bpc";
}

RunReport read_run(const std::string& run_dir) {
  RunReport r;
  r.name = fs::path(run_dir).filename().string();
  if (r.name.empty()) r.name = fs::path(run_dir).parent_path().filename().string();
  const std::string json_path = run_dir + "/run.json";
  bool have_json = false;
  if (io::is_file(json_path)) {
    std::ifstream in(json_path);
    try {
      nlohmann::json j = nlohmann::json::parse(in);
      have_json = true;
      r.name = j.value("name", r.name);
      r.setting = j.value("setting", r.name);
      if (j.contains("seed") && j["seed"].is_number_integer()) r.seed = j["seed"].get<int64_t>();
      r.label = j.value("label", "");
      r.phases = j.value("phases", "p1");
      if (j.contains("section") && j["section"].is_string()) r.keys["run"] = j["section"].get<std::string>();
      if (j.contains("options") && j["options"].is_object())
        for (const auto& [k, v] : j["options"].items())
          if (v.is_string()) r.keys[k] = v.get<std::string>();
      for (const char* list : {"overrides", "axes"})
        if (j.contains(list) && j[list].is_array())
          for (const auto& kv : j[list])
            if (kv.is_array() && kv.size() == 2 && kv[0].is_string() && kv[1].is_string()) r.keys[kv[0]] = kv[1].get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      XL_FAIL(kExitDataErr, json_path << ": not a run description: " << e.what());
    }
  }
  if (r.setting.empty()) r.setting = r.name;
  if (!have_json && io::is_file(run_dir + "/p2.jsonl")) r.phases = "p1+p2";
  r.keys["phases"] = r.phases;
  const int n_phases = r.phases == "p1+p2" ? 2 : 1;
  bool phases_done = true;
  for (int k = 1; k <= n_phases; ++k) {
    PhaseState st = read_phase(run_dir + "/p" + std::to_string(k) + ".jsonl", r);
    if (!phases_done || st.finished) continue;
    phases_done = false;
    if (!st.started) r.status = k == 1 ? "not started" : "phase 2 not started";
    else r.status = "phase " + std::to_string(k) + (st.stopped ? " stopped" : "") + " at step " + std::to_string(st.step);
  }
  r.dev = read_eval(run_dir + "/dev.jsonl", r);
  r.test = read_eval(run_dir + "/test.jsonl", r);
  r.finished = phases_done && r.dev && r.test;
  if (r.finished) r.status = "done";
  else if (phases_done) r.status = "evaluating";
  if (!r.finished && io::is_file(run_dir + "/failed")) {
    std::ifstream in(run_dir + "/failed");
    int code = 0;
    in >> code;
    r.status += " (failed, exit " + std::to_string(code) + ")";
  }
  return r;
}

AblationReport read_report(const std::string& dir) {
  AblationReport rep;
  rep.dir = dir;
  XL_CHECK(io::is_dir(dir), kExitNoInput, dir << ": no such directory");
  auto set_table = [&](const nlohmann::json& j) {
    if (!j.contains("table") || !j["table"].is_object()) return;
    rep.table_rows = j["table"].value("rows", "");
    rep.table_cols = j["table"].value("cols", "");
    rep.table_cell = j["table"].value("cell", "dev");
  };
  const std::string grid_path = dir + "/grid.json";
  if (io::is_file(grid_path)) {
    const nlohmann::json g = read_json_file(grid_path, "a grid description");
    rep.grid_name = g.value("name", "");
    rep.baseline = g.value("baseline", "");
    set_table(g);
    if (g.contains("runs") && g["runs"].is_array())
      for (const auto& n : g["runs"]) {
        const std::string name = n.is_string() ? n.get<std::string>() : n.is_object() ? n.value("name", "") : "";
        if (name.empty()) continue;
        if (io::is_dir(dir + "/" + name)) {
          rep.runs.push_back(read_run(dir + "/" + name));
          continue;
        }
        RunReport r;
        r.name = r.setting = name;
        r.status = "not started";
        if (n.is_object()) {
          r.label = n.value("label", "");
          r.setting = n.value("setting", name);
          if (n.contains("seed") && n["seed"].is_number_integer()) r.seed = n["seed"].get<int64_t>();
          r.phases = n.value("phases", "p1");
          if (n.contains("keys") && n["keys"].is_object())
            for (const auto& [k, v] : n["keys"].items())
              if (v.is_string()) r.keys[k] = v.get<std::string>();
        }
        r.ms_per_batch.assign(r.phases == "p1+p2" ? 2 : 1, std::nullopt);
        rep.runs.push_back(r);
      }
  } else {
    std::vector<std::pair<int64_t, std::string>> found;
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (!entry.is_directory()) continue;
      const std::string p = entry.path().string();
      if (!io::is_file(p + "/run.json") && !io::is_file(p + "/p1.jsonl")) continue;
      int64_t index = INT64_MAX;
      if (io::is_file(p + "/run.json")) {
        try {
          std::ifstream in(p + "/run.json");
          auto j = nlohmann::json::parse(in);
          index = j.value("index", INT64_MAX);
          if (rep.grid_name.empty()) rep.grid_name = j.value("grid", "");
          if (rep.table_rows.empty()) set_table(j);
          if (rep.baseline.empty()) rep.baseline = j.value("baseline", "");
        } catch (const nlohmann::json::exception&) {
        }
      }
      found.emplace_back(index, p);
    }
    std::sort(found.begin(), found.end());
    for (const auto& [i, p] : found) rep.runs.push_back(read_run(p));
  }
  XL_CHECK(!rep.runs.empty(), kExitNoInput, dir << ": no ablation runs here (no grid.json, no RUN/run.json)");
  if (rep.grid_name.empty()) rep.grid_name = fs::path(dir).filename().string();
  return rep;
}

}  // namespace xl::ablate
