#include "xl/train/training_run.h"

#include <cmath>
#include <cstdio>

#include "xl/eval/evaluator.h"
#include "xl/util/error.h"
#include "xl/util/resources.h"

namespace xl::train {

bool Trainer::validate() {
  if (valid_ids_.empty()) return false;
  eval::EvalSettings s;
  s.tgt_len = cfg_.effective_eval_tgt_len();
  s.mem_len = cfg_.effective_eval_mem_len();
  s.cmem_len = cfg_.cmem_len;
  s.batch_size = cfg_.eval_batch_size;
  s.max_tokens = cfg_.eval_max_tokens;
  s.precision = precision_;
  s.shard = dist_.rank;
  s.shards = dist_.world;
  // Validation may need more memory than training (longer --eval-mem-len, more streams): when it
  // fails, the ranks learn it with the sums and the trained step is saved before the run ends.
  eval::EvalResult r;
  std::optional<Failure> failure;
  try {
    r = eval::evaluate(model_, valid_ids_, s);
  } catch (...) {
    failure = describe_failure(std::current_exception());
  }
  int first_failed = failure ? dist_.rank : -1;
  if (!dist_.single()) {
    // The sums, then one flag per rank: the lowest rank that failed says why, once.
    torch::Tensor t = torch::zeros({2 + dist_.world}, torch::kDouble);
    t[0] = r.loss_sum;
    t[1] = static_cast<double>(r.tokens);
    if (failure) t[2 + dist_.rank] = 1;
    std::vector<torch::Tensor> sums = {t};
    comm_->all_reduce_sum(sums, "the validation sums");
    auto a = sums[0].accessor<double, 1>();
    r.loss_sum = a[0];
    r.tokens = static_cast<int64_t>(a[1]);
    first_failed = -1;
    for (int k = 0; k < dist_.world && first_failed < 0; ++k)
      if (a[2 + k] > 0) first_failed = k;
  }
  if (first_failed >= 0) stop_after_failed_validation(first_failed == dist_.rank ? failure : std::nullopt);
  const double loss = r.loss();
  const bool improved = !state_.best_loss || loss < *state_.best_loss;
  if (improved) {
    state_.best_loss = loss;
    state_.best_step = state_.step;
  }
  state_.history.emplace_back(state_.step, loss);
  nlohmann::json ev = {{"step", state_.step}, {"loss", loss}, {metric_.name(), metric_.of(loss)}, {"tokens", r.tokens},
                       {"seconds", r.seconds}, {"new_best", improved}, {"best_step", state_.best_step}};
  metrics_.write("valid", ev);
  char line[160];
  std::snprintf(line, sizeof line, "valid step %lld | loss %.4f | %s %.4f", static_cast<long long>(state_.step), loss,
                metric_.name().c_str(), metric_.of(loss));
  progress_.print(std::string(line) + (improved ? " | new best" : " | best at step " + std::to_string(state_.best_step)));
  save(improved);
  // The paper's rule: stop once validation improves by less than min_delta over stop_window steps.
  if (cfg_.stop_window > 0) {
    double best_before = INFINITY;
    bool have = false;
    for (const auto& [step, l] : state_.history)
      if (step <= state_.step - cfg_.stop_window) {
        best_before = std::min(best_before, l);
        have = true;
      }
    if (have && best_before - *state_.best_loss < cfg_.stop_min_delta) return true;
  }
  return false;
}

void Trainer::stop_after_failed_validation(const std::optional<Failure>& failure) {
  const int64_t step = state_.step;
  const std::string where = save_at_stop();
  metrics_.write("done", {{"step", step}, {"reason", "validation failed"}, {"peak_rss_mb", peak_rss_mb()}});
  if (!failure || failure->line.empty()) throw Error(kExitSoftware, "");  // another rank says why
  const std::string hint =
      failure->out_of_memory ? "; a smaller --eval-batch-size, --eval-tgt-len or --eval-mem-len needs less" : "";
  XL_FAIL(failure->code, "validation at step " << step << " failed: " << failure->line << "; training stopped at step "
                                               << step << ", " << where << hint);
}

}  // namespace xl::train
