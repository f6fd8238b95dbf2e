// Evaluations and importance passes kept in a file as they finish (--cache of xl-prune-heads and
// xl-eval-longctx): a head study or a memory sweep that a signal, a batch system's time limit or
// SIGKILL stopped goes on where it stopped when it runs again, instead of evaluating everything
// again (a base model's 97 head evaluations take hours on a CPU, iterative pruning with --rescore
// an importance pass a step, a sweep to 3,800 memory slots over enwik8's test split as long).
// Several processes may keep theirs in one file (an array job's tasks, a setting each): each reads,
// cuts and appends whole lines under the file's exclusive flock, so that none reads or cuts a line
// another is writing.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "xl/eval/evaluator.h"
#include "xl/model/transformer_xl.h"

namespace xl::analysis {

struct ImportanceSettings;

class EvalCache {
 public:
  // `path` empty: nothing is kept. Else the evaluations the file holds are read (JSON Lines, one per
  // evaluation; a last line that a kill cut short is dropped) and new ones are appended to it.
  explicit EvalCache(const std::string& path);
  ~EvalCache();
  EvalCache(const EvalCache&) = delete;
  EvalCache& operator=(const EvalCache&) = delete;
  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

  // What an evaluation's result depends on but its head mask: the model's configuration and
  // weights, the tokens and every setting that changes what is computed. The thread count and the
  // key/value cache budget (auto: a share of the machine's memory) change only the rounding, so a
  // study resumed on another node takes what it kept.
  static std::string study_key(const model::TransformerXL& model, const std::vector<int32_t>& ids,
                               const eval::EvalSettings& settings);
  // What importance scores depend on but their head mask (the layer normalisation is applied to
  // the kept scores).
  static std::string importance_key(const model::TransformerXL& model, const std::vector<int32_t>& ids,
                                    const ImportanceSettings& settings);
  // One evaluation or importance pass of the study: the heads its mask removes. No mask, a mask of
  // ones and a mask of ones beside a pruned layer's missing heads remove none: one key, so that
  // xl-eval-longctx's evaluation and xl-prune-heads' unpruned one are kept for each other.
  static std::string key(const std::string& study, const model::ModelConfig& cfg, const torch::Tensor& head_mask);

  // Each written and flushed at once (a failed write is a warning); thread-safe.
  std::optional<eval::EvalResult> find(const std::string& key) const;
  void add(const std::string& key, const eval::EvalResult& result);
  std::optional<torch::Tensor> find_scores(const std::string& key) const;  // [n_layer, n_head] float32
  void add_scores(const std::string& key, const torch::Tensor& scores);

 private:
  size_t load(const std::string& lines);  // whole lines; returns how many; fails with 65 on one not kept
  void append(const nlohmann::json& record);

  std::string path_;
  std::map<std::string, eval::EvalResult> kept_;
  std::map<std::string, torch::Tensor> kept_scores_;
  int fd_ = -1;  // the file, opened to append
  bool failed_ = false;  // a write failed (said once): nothing more is appended
  mutable std::mutex mutex_;
};

}  // namespace xl::analysis
