#include "xl/eval/evaluator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "xl/util/error.h"
#include "xl/util/signals.h"

namespace xl::eval {

int64_t trained_cmem_len(const checkpoint::Checkpoint& ckpt) {
  const nlohmann::json& t = ckpt.train_config;
  return t.is_object() && t.contains("cmem_len") && t["cmem_len"].is_number_integer() ? t["cmem_len"].get<int64_t>() : 0;
}

double EvalResult::loss() const {
  return tokens > 0 ? loss_sum / static_cast<double>(tokens) : std::numeric_limits<double>::quiet_NaN();
}

bool effective_same_length(const model::TransformerXL& model, const EvalSettings& s) {
  const bool on = s.same_length.value_or(model->config.same_length);
  return on && s.mem_len > 0;
}

int64_t effective_clamp_len(const model::TransformerXL& model, const EvalSettings& s) {
  return s.clamp_len.value_or(model->config.clamp_len);
}

int64_t stream_count(int64_t n, int64_t batch_size) {
  return std::max<int64_t>(1, std::min<int64_t>(batch_size, n / 2));
}

namespace {

// The length of the longest of b contiguous streams over n tokens (lengths n / b or n / b + 1).
int64_t longest_stream(int64_t n, int64_t b) { return n / b + (n % b > 0 ? 1 : 0); }

}  // namespace

bool scores_any(const model::TransformerXL& model, int64_t n, const EvalSettings& s) {
  if (!s.warmup || s.mem_len == 0 || n < 2 || s.tgt_len < 1) return true;
  const int64_t steps = longest_stream(n, stream_count(n, s.batch_size)) - 1;
  // A segment starting at position p has min(p, full) memory rows in each layer.
  const std::vector<int64_t> full = model->memory_lengths(std::min(s.mem_len, steps));
  const int64_t need = *std::max_element(full.begin(), full.end());
  const int64_t first = (need + s.tgt_len - 1) / s.tgt_len * s.tgt_len;  // the first segment start past it
  return first < steps;
}

namespace {

// Puts the model in evaluation state and restores its training flag and the overridden config
// entries when the evaluation ends (also on an exception).
class ModelStateGuard {
 public:
  explicit ModelStateGuard(model::TransformerXL& m)
      : model_(m), training_(m->is_training()), clamp_len_(m->config.clamp_len), same_length_(m->config.same_length) {}
  ~ModelStateGuard() {
    model_->config.clamp_len = clamp_len_;
    model_->config.same_length = same_length_;
    model_->train(training_);
  }
  ModelStateGuard(const ModelStateGuard&) = delete;
  ModelStateGuard& operator=(const ModelStateGuard&) = delete;

 private:
  model::TransformerXL& model_;
  bool training_;
  int64_t clamp_len_;
  bool same_length_;
};

void check_settings(const model::TransformerXL& model, const EvalSettings& s) {
  XL_CHECK(s.tgt_len >= 1, kExitUsage, "tgt_len must be at least 1, not " << s.tgt_len);
  XL_CHECK(s.mem_len >= 0, kExitUsage, "mem_len must not be negative, not " << s.mem_len);
  XL_CHECK(s.cmem_len == 0 || model->config.compressive(), kExitUsage,
           "--cmem-len " << s.cmem_len << ": the model has no compression network (it was not trained with --cmem-rate)");
  XL_CHECK(s.batch_size >= 1, kExitUsage, "batch size must be at least 1, not " << s.batch_size);
  XL_CHECK(s.clamp_len.value_or(0) >= 0, kExitUsage, "clamp_len must be 0 (off) or positive, not " << *s.clamp_len);
  XL_CHECK(s.max_tokens >= 0, kExitUsage, "max_tokens must not be negative, not " << s.max_tokens);
  XL_CHECK(s.shards >= 1 && s.shard >= 0 && s.shard < s.shards, kExitSoftware, "bad evaluation shard " << s.shard << "/" << s.shards);
  if (s.head_mask.defined()) {
    const auto& c = model->config;
    XL_CHECK(s.head_mask.dim() == 2 && s.head_mask.size(0) == c.n_layer && s.head_mask.size(1) >= c.n_head, kExitDataErr,
             "head mask has shape " << s.head_mask.sizes() << ", the model needs [" << c.n_layer << ", " << c.n_head << "]");
  }
}

}  // namespace

int64_t kv_cache_bytes(const model::TransformerXL& model, int64_t streams, int64_t mem_len, int64_t tgt_len,
                       compute::Precision precision) {
  const auto& c = model->config;
  int64_t width = 0;  // keys (MGK: all of a mixture's) and values of every head of every layer
  const int64_t parts = c.attention == "mgk" ? 1 + c.mgk_keys : 2;
  for (int64_t l = 0; l < c.n_layer; ++l) width += parts * c.heads_in_layer(l) * c.d_head;
  // fp32 runs keep the parameters' dtype, and so do bf16 runs whose products the CPU's kernels take
  // (fp32 results); autocast's tensor ops keep bf16 or fp16.
  const torch::Tensor param = model->parameters().front();
  const bool params_dtype = precision == compute::Precision::kFp32 || compute::cpu_kernels_run_bf16(precision, param.device());
  const int64_t element = params_dtype ? static_cast<int64_t>(param.element_size()) : 2;
  return streams * model::row_window_capacity(mem_len, tgt_len) * width * element;
}

EvalResult evaluate(model::TransformerXL& model, const std::vector<int32_t>& ids, const EvalSettings& s,
                    const PerTokenSink& sink) {
  return evaluate(model, ids, s, sink, nullptr);
}

EvalResult evaluate(model::TransformerXL& model, const std::vector<int32_t>& ids, const EvalSettings& s,
                    const PerTokenSink& sink, const ProgressFn& progress) {
  check_settings(model, s);
  const int64_t n = static_cast<int64_t>(ids.size());
  XL_CHECK(n >= kMinEvalTokens, kExitDataErr,
           "cannot evaluate " << n << " token" << (n == 1 ? "" : "s") << ": at least " << kMinEvalTokens << " are needed");
  const auto [lo, hi] = std::minmax_element(ids.begin(), ids.end());
  XL_CHECK(*lo >= 0 && *hi < model->config.n_token, kExitDataErr,
           "token id " << (*lo < 0 ? *lo : *hi) << " is out of range for the model's vocab of " << model->config.n_token);

  torch::NoGradGuard no_grad;  // not InferenceMode: tables the model caches here are reused in training
  ModelStateGuard restore(model);
  model->eval();
  model->config.clamp_len = effective_clamp_len(model, s);
  model->config.same_length = effective_same_length(model, s);

  const auto params = model->parameters();
  XL_CHECK(!params.empty(), kExitSoftware, "the model has no parameters");
  const torch::Device device = params.front().device();
  const torch::ScalarType dtype = params.front().scalar_type();

  // Streams: contiguous, lengths base or base+1, together covering all n tokens.
  const int64_t b = stream_count(n, s.batch_size);
  const int64_t base = n / b, extra = n % b;
  const int64_t longest = longest_stream(n, b);
  std::vector<int64_t> start(static_cast<size_t>(b)), length(static_cast<size_t>(b));
  torch::Tensor data = torch::zeros({b, longest}, torch::kLong);  // padded with 0 past a stream's end
  {
    auto acc = data.accessor<int64_t, 2>();
    int64_t at = 0;
    for (int64_t i = 0; i < b; ++i) {
      start[static_cast<size_t>(i)] = at;
      const int64_t len = base + (i < extra ? 1 : 0);
      length[static_cast<size_t>(i)] = len;
      for (int64_t j = 0; j < len; ++j) acc[i][j] = ids[static_cast<size_t>(at + j)];
      at += len;
    }
  }
  // A data-parallel shard keeps its rows of streams.
  const int64_t first = b * s.shard / s.shards, last = b * (s.shard + 1) / s.shards;
  if (first == last) return EvalResult();  // more shards than streams
  data = data.slice(0, first, last).to(device);

  const int64_t steps = longest - 1;  // input positions of the longest stream
  // No key is `steps` or more positions back from its query: a longer memory changes nothing, but
  // its positional keys and buffers would be sized for it (--mem-len 1000000 on a 375-token
  // split: 6 GB and 11 s).
  const int64_t mem_len = std::min(s.mem_len, steps);
  model::ForwardOptions opts;
  opts.mem_len = mem_len;
  opts.cmem_len = s.cmem_len;
  if (s.head_mask.defined()) opts.head_mask = s.head_mask.to(device, dtype);
  // A compressed memory is made from the memory's inputs: those stay.
  opts.cache_kv = mem_len > 0 && s.cmem_len == 0 &&
                  kv_cache_bytes(model, last - first, mem_len, s.tgt_len, s.precision) <= s.kv_cache_bytes;
  model::Memory memory = model->new_memory();

  EvalResult result;
  result.kv_cached = opts.cache_kv;
  // A full memory, per layer (adaptive span keeps only what its heads reach).
  const std::vector<int64_t> full = model->memory_lengths(mem_len);
  const int64_t total = n - b;
  int64_t consumed = 0, all_scored = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto scoring_t0 = t0;
  for (int64_t pos = 0; pos < steps; pos += s.tgt_len) {
    if (s.stop_on_signal && (result.stopped_by = signals::pending())) break;
    if (result.tokens == 0) scoring_t0 = std::chrono::steady_clock::now();
    const int64_t t = std::min(s.tgt_len, steps - pos);
    bool scored = true;
    if (s.warmup && s.mem_len > 0)
      for (size_t l = 0; l < memory.layers.size(); ++l) scored = scored && memory.layers[l].length() == full[l];
    torch::Tensor input = data.narrow(1, pos, t).contiguous();
    torch::Tensor target = data.narrow(1, pos + 1, t).contiguous();
    torch::Tensor nll;
    {
      compute::AutocastScope autocast(s.precision, device);
      nll = model->forward(input, target, memory, opts);
    }
    torch::Tensor host = nll.to(torch::kCPU, torch::kDouble).contiguous();
    const double* v = host.data_ptr<double>();
    for (int64_t i = first; i < last; ++i) {
      // Positions past the stream's last prediction are padding.
      const int64_t valid = std::max<int64_t>(0, std::min(t, length[static_cast<size_t>(i)] - 1 - pos));
      consumed += valid;
      if (!scored) continue;
      const double* row = v + (i - first) * t;
      double sum = 0;
      for (int64_t j = 0; j < valid; ++j) sum += row[j];
      result.loss_sum += sum;
      result.tokens += valid;
      if (sink)
        for (int64_t j = 0; j < valid; ++j)
          sink(i, start[static_cast<size_t>(i)] + pos + j + 1, static_cast<float>(row[j]));
    }
    if (progress) progress(result.tokens, consumed, total);
    // --max-tokens counts the tokens of all streams, so that data-parallel shards stop together.
    if (scored)
      for (int64_t i = 0; i < b; ++i) all_scored += std::max<int64_t>(0, std::min(t, length[static_cast<size_t>(i)] - 1 - pos));
    if (s.max_tokens > 0 && all_scored >= s.max_tokens) break;
  }
  const auto t1 = std::chrono::steady_clock::now();
  result.seconds = std::chrono::duration<double>(t1 - t0).count();
  result.scoring_seconds = std::chrono::duration<double>(t1 - scoring_t0).count();
  return result;
}

}  // namespace xl::eval
