#include "xl/eval/generate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "xl/util/error.h"
#include "xl/util/log.h"

namespace xl::eval {

namespace {

// Falling probability, ties by lower id: a strict order, the same on every platform.
bool more_likely(const double* p, int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); }

// An unsigned key that rises as the value falls (+0 and -0 alike), so that a radix digit of it
// sorts candidates into groups that each come wholly before the next.
uint64_t falling_key(double x) {
  uint64_t bits;
  x += 0.0;  // -0 becomes +0
  std::memcpy(&bits, &x, sizeof bits);
  return bits >> 63 ? bits : ~bits & ~(uint64_t{1} << 63);
}

// Candidates in falling order, sorted only as far as they are asked for: a draw usually stops
// within the first few hundred of a word vocab's 267,735, and sorting them all took longer than
// the model's step. A counting pass groups every id by its key's leading 16 bits; a group is
// split again by its next bits, or sorted when small, only once the walk reaches it. At a high
// temperature, or from an untrained model, draws land deep in a nearly flat distribution, whose
// few large groups the splits keep cheap.
class FallingOrder {
 public:
  FallingOrder(const double* p, int64_t v) : p_(p), ids_(static_cast<size_t>(v)), scratch_(ids_.size()) {
    for (int64_t id = 0; id < v; ++id)
      XL_CHECK(!std::isnan(p[id]), kExitDataErr, "the model's log-probability of token " << id << " is NaN");
    std::iota(scratch_.begin(), scratch_.end(), 0);
    split({0, ids_.size(), 64});
  }
  size_t size() const { return ids_.size(); }
  // The i-th most likely candidate.
  int32_t operator[](size_t i) {
    while (i >= sorted_) sort_next();
    return ids_[i];
  }

 private:
  struct Group {
    size_t begin, end;
    int bits;  // the key's bits below those its ids share
  };
  static constexpr size_t kSortBelow = 64;

  void sort_next() {
    const Group g = pending_.back();
    pending_.pop_back();
    if (g.end - g.begin <= kSortBelow || g.bits == 0) {
      std::sort(ids_.begin() + g.begin, ids_.begin() + g.end,
                [p = p_](int32_t a, int32_t b) { return more_likely(p, a, b); });
      sorted_ = g.end;
    } else {
      std::copy(ids_.begin() + g.begin, ids_.begin() + g.end, scratch_.begin() + g.begin);
      split(g);
    }
  }
  // Distributes scratch_[g] into ids_[g] by the next digit of the key (16 bits for large groups,
  // 8 for small ones) and queues the non-empty groups, the most likely on top.
  void split(const Group& g) {
    const int digit = std::min(g.bits, g.end - g.begin > 16384 ? 16 : 8);
    const int shift = g.bits - digit;
    const uint64_t mask = (uint64_t{1} << digit) - 1;
    auto digit_of = [&](int32_t id) { return static_cast<size_t>((falling_key(p_[id]) >> shift) & mask); };
    std::vector<size_t> start((size_t{1} << digit) + 1, 0);
    for (size_t i = g.begin; i < g.end; ++i) ++start[digit_of(scratch_[i]) + 1];
    start[0] = g.begin;
    for (size_t d = 1; d < start.size(); ++d) start[d] += start[d - 1];
    std::vector<size_t> next(start.begin(), start.end() - 1);
    for (size_t i = g.begin; i < g.end; ++i) ids_[next[digit_of(scratch_[i])]++] = scratch_[i];
    for (size_t d = start.size() - 1; d-- > 0;)
      if (start[d + 1] > start[d]) pending_.push_back({start[d], start[d + 1], shift});
  }

  const double* p_;
  std::vector<int32_t> ids_, scratch_;
  std::vector<Group> pending_;
  size_t sorted_ = 0;
};

}  // namespace

int32_t sample_token(const torch::Tensor& log_probs, const SampleSettings& s, Rng& rng) {
  torch::Tensor lp = log_probs.detach().reshape({-1}).to(torch::kCPU, torch::kDouble).contiguous();
  const int64_t v = lp.numel();
  XL_CHECK(v > 0, kExitSoftware, "empty distribution");
  if (s.excluded >= 0 && s.excluded < v) {  // drawn from the others, their ids above it moved up one
    XL_CHECK(v > 1, kExitUsage, "the only token there is to draw is excluded");
    SampleSettings others = s;
    others.excluded = -1;
    const torch::Tensor rest = torch::cat({lp.narrow(0, 0, s.excluded), lp.narrow(0, s.excluded + 1, v - s.excluded - 1)});
    const int32_t id = sample_token(rest, others, rng);
    return id >= s.excluded ? id + 1 : id;
  }
  const double* p = lp.data_ptr<double>();
  FallingOrder order(p, v);
  const int32_t best = order[0];
  if (s.temperature <= 0 || s.top_k == 1) return best;
  // Softmax of log p / temperature over the top-k candidates (all without k), summed in id order.
  const size_t n_candidates = s.top_k > 0 && s.top_k < v ? static_cast<size_t>(s.top_k) : order.size();
  const double inv_t = 1.0 / s.temperature;
  const double top = p[best] * inv_t;
  std::vector<double> w(static_cast<size_t>(v));
  auto weigh = [&](int32_t id) { w[id] = std::exp(p[id] * inv_t - top); };
  double total = 0;
  if (n_candidates < order.size()) {
    std::vector<int32_t> ids(n_candidates);
    for (size_t i = 0; i < n_candidates; ++i) ids[i] = order[i];
    std::sort(ids.begin(), ids.end());
    for (int32_t id : ids) weigh(id), total += w[id];
  } else {
    at::parallel_for(0, v, 16384, [&](int64_t b, int64_t e) {
      for (int64_t id = b; id < e; ++id) weigh(static_cast<int32_t>(id));
    });
    for (double x : w) total += x;
  }
  // Nucleus: the shortest prefix whose mass reaches top_p.
  size_t n = n_candidates;
  if (s.top_p < 1.0) {
    double cum = 0, kept = 0;
    for (size_t i = 0; i < n_candidates; ++i) {
      const double x = w[order[i]];
      cum += x / total;
      kept += x;
      if (cum >= s.top_p) {
        n = i + 1;
        break;
      }
    }
    total = kept;
  }
  double u = rng.uniform() * total;
  for (size_t i = 0; i < n; ++i) {
    u -= w[order[i]];
    if (u < 0) return order[i];
  }
  return order[n - 1];
}

std::vector<int32_t> prompt_ids(const text::Tokenizer& tokenizer, const text::Vocab& vocab, std::string_view text,
                                const std::string& name) {
  std::vector<int32_t> ids, last_line;
  text::EncodeStats stats, last_stats;
  tokenizer.encode(text, name, &ids, &stats);
  // The model continues what it reads: a prompt of words it does not know reads as <unk>s.
  if (stats.unknown > 0)
    XL_WARN(name << ": " << stats.unknown << " of its " << stats.tokens << " pieces are not in the checkpoint's vocab: the model reads them as <unk>");
  if (vocab.type() != text::VocabType::kWord || ids.empty() || ids.back() != vocab.eos_id()) return ids;
  // The last line's own ids end with the <eos> the segmenter closed it with if it has words.
  tokenizer.encode(text.substr(text.find_last_of("\n\r") + 1), name, &last_line, &last_stats);
  if (!last_line.empty()) ids.pop_back();
  return ids;
}

std::vector<int32_t> generate(model::TransformerXL& model, const std::vector<int32_t>& prompt,
                              const GenerateSettings& s, Rng& rng, const std::function<void(int32_t)>& on_token) {
  XL_CHECK(s.cmem_len == 0 || model->config.compressive(), kExitUsage,
           "--cmem-len " << s.cmem_len << ": the model has no compression network (it was not trained with --cmem-rate)");
  // The settings were checked where they were read (options/generate_options.cpp).
  TORCH_CHECK(!prompt.empty() && s.length >= 0 && s.tgt_len >= 1 && s.mem_len >= 0 && s.sampling.top_k >= 0 &&
                  s.sampling.top_p > 0 && s.sampling.top_p <= 1,
              "generate: unchecked settings");
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
  // No key is more positions back than the prompt and the new tokens: a longer memory changes
  // nothing but the size of its positional keys and buffers (--mem-len 1000000: 7 GB).
  opts.mem_len = std::min<int64_t>(s.mem_len, static_cast<int64_t>(prompt.size()) + s.length);
  opts.cmem_len = s.cmem_len;
  // One stream: each new token projects itself only, not the whole memory again (a compressed
  // memory is made from the memory's inputs, which then stay).
  opts.cache_kv = s.cmem_len == 0;
  model::Memory memory = model->new_memory();
  compute::AutocastScope autocast(s.precision, device);

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
