#include "xl/analysis/head_ablation.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "xl/model/kernels/parallel.h"
#include "xl/util/error.h"

namespace xl::analysis {



HeadAblation ablate_each_head(const ModelFactory& make_model, const std::vector<int32_t>& ids,
                              const eval::EvalSettings& settings, int jobs, const AblationProgress& progress) {
  auto t0 = std::chrono::steady_clock::now();
  model::TransformerXL first = make_model();
  const auto& cfg = first->config;
  torch::Tensor base_mask = settings.head_mask.defined()
                                ? settings.head_mask.to(torch::kFloat32).clone()
                                : torch::ones({cfg.n_layer, cfg.n_head});
  for (int64_t l = 0; l < cfg.n_layer; ++l)
    if (cfg.heads_in_layer(l) < cfg.n_head) base_mask[l].slice(0, cfg.heads_in_layer(l)).zero_();
  HeadAblation out;
  // The work list: the unpruned model first, then every head that is not masked already.
  std::vector<std::pair<int64_t, int64_t>> work{{-1, -1}};
  for (int64_t l = 0; l < cfg.n_layer; ++l)
    for (int64_t h = 0; h < cfg.heads_in_layer(l); ++h)
      if (base_mask[l][h].item<float>() != 0) work.emplace_back(l, h);
  std::vector<eval::EvalResult> results(work.size());
  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{0};
  std::mutex progress_mutex;
  const int workers = std::max(1, std::min<int>(jobs, static_cast<int>(work.size())));
  if (workers > 1) xl::model::set_threads(1);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(workers));
  auto worker = [&](int w, model::TransformerXL model) {
    try {
      for (size_t i; (i = next++) < work.size();) {
        eval::EvalSettings s = settings;
        torch::Tensor mask = base_mask.clone();
        if (work[i].first >= 0) mask[work[i].first][work[i].second] = 0;
        s.head_mask = mask.to(model->parameters().front().options());
        results[i] = eval::evaluate(model, ids, s);
        int64_t d = ++done;
        if (progress) {
          std::lock_guard<std::mutex> lock(progress_mutex);
          progress(d, static_cast<int64_t>(work.size()));
        }
      }
    } catch (...) {
      errors[static_cast<size_t>(w)] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < workers; ++w) threads.emplace_back(worker, w, make_model());
  worker(0, first);
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  out.base_loss = results[0].loss();
  out.tokens = results[0].tokens;
  for (size_t i = 1; i < work.size(); ++i)
    out.heads.push_back({work[i].first, work[i].second, results[i].loss(), results[i].loss() - out.base_loss});
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace xl::analysis
