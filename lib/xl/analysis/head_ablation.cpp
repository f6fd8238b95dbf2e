#include "xl/analysis/head_ablation.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <optional>
#include <thread>

#include "xl/compute/parallel.h"
#include "xl/util/error.h"

namespace xl::analysis {



HeadAblation ablate_each_head(const ModelFactory& make_model, const std::vector<int32_t>& ids,
                              const eval::EvalSettings& settings, int jobs, const AblationProgress& progress,
                              EvalCache* cache) {
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
  auto mask_of = [&](size_t i) {
    torch::Tensor mask = base_mask.clone();
    if (work[i].first >= 0) mask[work[i].first][work[i].second] = 0;
    return mask;
  };
  std::vector<std::optional<eval::EvalResult>> results(work.size());
  std::vector<std::string> keys(work.size());
  if (cache && cache->enabled()) {
    const std::string study = EvalCache::study_key(first, ids, settings);
    for (size_t i = 0; i < work.size(); ++i) {
      keys[i] = EvalCache::key(study, cfg, mask_of(i));
      if ((results[i] = cache->find(keys[i]))) ++out.kept;
    }
  }
  std::vector<size_t> todo;
  for (size_t i = 0; i < work.size(); ++i)
    if (!results[i]) todo.push_back(i);
  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{out.kept};
  std::atomic<int> stopped_by{0};
  std::mutex progress_mutex;
  const int workers = std::max(1, std::min<int>(jobs, static_cast<int>(todo.size())));
  if (workers > 1) compute::set_threads(1);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(workers));
  auto worker = [&](int w, model::TransformerXL model) {
    try {
      for (size_t k; !stopped_by && (k = next++) < todo.size();) {
        const size_t i = todo[k];
        eval::EvalSettings s = settings;
        s.head_mask = mask_of(i).to(model->parameters().front().options());
        eval::EvalResult r = eval::evaluate(model, ids, s);
        if (r.stopped_by) {
          stopped_by = r.stopped_by;
          break;
        }
        if (cache) cache->add(keys[i], r);
        results[i] = r;
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
  out.evaluations = static_cast<int64_t>(work.size());
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if ((out.stopped_by = stopped_by)) {
    out.finished = done;
    return out;
  }
  out.base_loss = results[0]->loss();
  out.tokens = results[0]->tokens;
  for (size_t i = 1; i < work.size(); ++i)
    out.heads.push_back({work[i].first, work[i].second, results[i]->loss(), results[i]->loss() - out.base_loss});
  return out;
}

}  // namespace xl::analysis
