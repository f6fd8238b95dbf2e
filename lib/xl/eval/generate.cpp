#include "xl/eval/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "xl/util/error.h"

namespace xl::eval {

namespace {

// Falling probability, ties by lower id: a strict order, the same on every platform.
bool more_likely(const double* p, int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); }

// Candidates in that order, sorted only as far as they are asked for: a draw usually stops within
// the first few hundred of a word vocab's 267,735, and sorting them all took longer than the
// model's step.
class FallingOrder {
 public:
  FallingOrder(std::vector<int32_t> ids, const double* p) : ids_(std::move(ids)), p_(p) {}
  size_t size() const { return ids_.size(); }
  // The i-th most likely candidate.
  int32_t operator[](size_t i) {
    while (i >= sorted_) sort_next_block();
    return ids_[i];
  }

 private:
  // The next block's candidates to the front of the rest, in order; each block twice the last.
  void sort_next_block() {
    auto better = [p = p_](int32_t a, int32_t b) { return more_likely(p, a, b); };
    const size_t end = std::min(ids_.size(), sorted_ + block_);
    if (end < ids_.size()) std::nth_element(ids_.begin() + sorted_, ids_.begin() + end, ids_.end(), better);
    std::sort(ids_.begin() + sorted_, ids_.begin() + end, better);
    sorted_ = end;
    block_ *= 2;
  }
  std::vector<int32_t> ids_;
  const double* p_;
  size_t sorted_ = 0, block_ = 256;
};

}  // namespace

int32_t sample_token(const torch::Tensor& log_probs, const SampleSettings& s, Rng& rng) {
  torch::Tensor lp = log_probs.detach().reshape({-1}).to(torch::kCPU, torch::kDouble).contiguous();
  const int64_t v = lp.numel();
  XL_CHECK(v > 0, kExitSoftware, "empty distribution");
  const double* p = lp.data_ptr<double>();
  auto better = [p](int32_t a, int32_t b) { return more_likely(p, a, b); };
  int32_t best = 0;
  for (int32_t id = 1; id < v; ++id)
    if (better(id, best)) best = id;
  if (s.temperature <= 0 || s.top_k == 1) return best;
  // The top-k candidates (all without k), in id order for the sum.
  std::vector<int32_t> ids(static_cast<size_t>(v));
  std::iota(ids.begin(), ids.end(), 0);
  if (s.top_k > 0 && s.top_k < v) {
    std::nth_element(ids.begin(), ids.begin() + s.top_k, ids.end(), better);
    ids.resize(static_cast<size_t>(s.top_k));
    std::sort(ids.begin(), ids.end());
  }
  // Softmax of log p / temperature over the candidates.
  const double inv_t = 1.0 / s.temperature;
  const double top = p[best] * inv_t;
  auto weight = [&](int32_t id) { return std::exp(p[id] * inv_t - top); };
  double total = 0;
  for (int32_t id : ids) total += weight(id);
  FallingOrder order(std::move(ids), p);
  // Nucleus: the shortest prefix whose mass reaches top_p.
  size_t n = order.size();
  if (s.top_p < 1.0) {
    double cum = 0, kept = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      const double w = weight(order[i]);
      cum += w / total;
      kept += w;
      if (cum >= s.top_p) {
        n = i + 1;
        break;
      }
    }
    total = kept;
  }
  double u = rng.uniform() * total;
  for (size_t i = 0; i < n; ++i) {
    u -= weight(order[i]);
    if (u < 0) return order[i];
  }
  return order[n - 1];
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
