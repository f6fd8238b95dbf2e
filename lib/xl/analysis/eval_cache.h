// Evaluations of a head study kept in a file as they finish (xl-prune-heads --cache): a study that
// a signal, a batch system's time limit or SIGKILL stopped goes on where it stopped when it runs
// again, instead of evaluating every head again (a base model's 97 evaluations take hours on a CPU).
#pragma once
#include <cstdint>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "xl/eval/evaluator.h"
#include "xl/model/transformer_xl.h"

namespace xl::analysis {

class EvalCache {
 public:
  // `path` empty: nothing is kept. Else the evaluations the file holds are read (JSON Lines, one per
  // evaluation; a last line that a kill cut short is dropped) and new ones are appended to it.
  explicit EvalCache(const std::string& path);
  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

  // What an evaluation's result depends on but its head mask: the model's configuration and
  // weights, the tokens and every setting that changes what is computed. The thread count and the
  // key/value cache budget (auto: a share of the machine's memory) change only the rounding, so a
  // study resumed on another node takes what it kept.
  static std::string study_key(const model::TransformerXL& model, const std::vector<int32_t>& ids,
                               const eval::EvalSettings& settings);
  // One evaluation of the study: its head mask (undefined: all heads).
  static std::string key(const std::string& study, const torch::Tensor& head_mask);

  std::optional<eval::EvalResult> find(const std::string& key) const;
  void add(const std::string& key, const eval::EvalResult& result);  // written and flushed at once; thread-safe

 private:
  std::string path_;
  std::map<std::string, eval::EvalResult> kept_;
  std::ofstream out_;
  mutable std::mutex mutex_;
};

}  // namespace xl::analysis
