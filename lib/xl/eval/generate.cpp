#include "xl/eval/generate.h"

#include <cmath>
#include <numeric>

#include "xl/util/error.h"

namespace xl::eval {

int32_t sample_token(const torch::Tensor& log_probs, const SampleSettings& s, Rng& rng) {
  torch::Tensor lp = log_probs.detach().reshape({-1}).to(torch::kCPU, torch::kDouble).contiguous();
  const int64_t v = lp.numel();
  XL_CHECK(v > 0, kExitSoftware, "empty distribution");
  const double* p = lp.data_ptr<double>();
  // Candidates by falling probability, ties by id (a stable order on every platform).
  std::vector<int32_t> ids(static_cast<size_t>(v));
  std::iota(ids.begin(), ids.end(), 0);
  auto better = [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); };
  const bool greedy = s.temperature <= 0 || s.top_k == 1;
  int64_t keep = greedy ? 1 : (s.top_k > 0 ? std::min(s.top_k, v) : v);
  if (keep < v) {
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), better);
    ids.resize(static_cast<size_t>(keep));
  } else {
    std::sort(ids.begin(), ids.end(), better);
  }
  if (keep == 1) return ids[0];
  // Softmax of log p / temperature over the candidates.
  const double inv_t = 1.0 / s.temperature;
  const double top = p[ids[0]] * inv_t;
  std::vector<double> w(ids.size());
  double total = 0;
  for (size_t i = 0; i < ids.size(); ++i) total += w[i] = std::exp(p[ids[i]] * inv_t - top);
  // Nucleus: the shortest prefix whose mass reaches top_p.
  size_t n = ids.size();
  if (s.top_p < 1.0) {
    double cum = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      cum += w[i] / total;
      if (cum >= s.top_p) {
        n = i + 1;
        break;
      }
    }
    total = 0;
    for (size_t i = 0; i < n; ++i) total += w[i];
  }
  double u = rng.uniform() * total;
  for (size_t i = 0; i < n; ++i) {
    u -= w[i];
    if (u < 0) return ids[i];
  }
  return ids[n - 1];
}

std::vector<int32_t> prompt_ids(const text::Tokenizer& tokenizer, const text::Vocab& vocab, std::string_view text,
                                const std::string& name) {
  std::vector<int32_t> ids, last_line;
  text::EncodeStats stats;
  tokenizer.encode(text, name, &ids, &stats);
  if (vocab.type() != text::VocabType::kWord || ids.empty() || ids.back() != vocab.eos_id()) return ids;
  // The last line's own ids end with the <eos> the segmenter closed it with if it has words.
  tokenizer.encode(text.substr(text.rfind('\n') + 1), name, &last_line, &stats);
  if (!last_line.empty()) ids.pop_back();
  return ids;
}

std::vector<int32_t> generate(model::TransformerXL& model, const std::vector<int32_t>& prompt,
                              const GenerateSettings& s, Rng& rng, const std::function<void(int32_t)>& on_token) {
  XL_CHECK(!prompt.empty(), kExitUsage, "generation needs a prompt of at least one token");
  XL_CHECK(s.length >= 0, kExitUsage, "--length must not be negative");
  XL_CHECK(s.tgt_len >= 1, kExitUsage, "--tgt-len must be at least 1");
  XL_CHECK(s.mem_len >= 0, kExitUsage, "--mem-len must not be negative");
  XL_CHECK(s.sampling.top_k >= 0, kExitUsage, "--top-k must not be negative");
  XL_CHECK(s.sampling.top_p > 0 && s.sampling.top_p <= 1, kExitUsage, "--top-p must be in (0, 1]");
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  struct Restore {
    model::TransformerXL& m;
    bool training, same_length;
    ~Restore() {
      m->train(training);
      m->config.same_length = same_length;
    }
  } restore{model, was_training, model->config.same_length};
  // same_length needs a memory: with none, each query would see no key at all.
  if (s.mem_len == 0) model->config.same_length = false;

  const torch::Device device = model->parameters().front().device();
  const int64_t n_token = model->config.n_token;
  for (int32_t id : prompt)
    XL_CHECK(id >= 0 && id < n_token, kExitDataErr, "token id " << id << " is out of range for the model's " << n_token);
  model::ForwardOptions opts;
  opts.mem_len = s.mem_len;
  opts.cache_kv = true;  // one stream: each new token projects itself only, not the whole memory again
  model::Memory memory = model->new_memory();
  model::AutocastScope autocast(s.precision, device);

  // The prompt in segments; the last position's hidden state predicts the first new token.
  auto all = torch::tensor(std::vector<int64_t>(prompt.begin(), prompt.end()), torch::kLong).view({1, -1}).to(device);
  torch::Tensor last;
  const int64_t n = all.size(1);
  for (int64_t pos = 0; pos < n; pos += s.tgt_len) {
    const int64_t t = std::min(s.tgt_len, n - pos);
    torch::Tensor h = model->hidden(all.narrow(1, pos, t), memory, opts);
    last = h.select(1, t - 1);  // [1, d_model]
  }
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(s.length));
  torch::Tensor step = torch::empty({1, 1}, torch::TensorOptions().dtype(torch::kLong).device(device));
  for (int64_t i = 0; i < s.length; ++i) {
    int32_t id = sample_token(model->log_probs(last), s.sampling, rng);
    out.push_back(id);
    if (on_token) on_token(id);
    if (i + 1 == s.length) break;
    step.fill_(static_cast<int64_t>(id));
    last = model->hidden(step, memory, opts).select(1, 0);
  }
  return out;
}

}  // namespace xl::eval
