// Sinusoid embeddings of relative distances, [sin | cos] concatenated as in Transformer-XL.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace xl::model {

class SinusoidTable {
 public:
  explicit SinusoidTable(int64_t d_model);
  // Embeddings of distances d_max, d_max-1, ..., d_max-count+1 (descending, as the relative shift
  // expects), each clamped to clamp_len when clamp_len > 0: [count, d_model]. Cached per shape.
  torch::Tensor descending(int64_t d_max, int64_t count, int64_t clamp_len, const torch::TensorOptions& opts);
  const torch::Tensor& inv_freq() const { return inv_freq_; }

 private:
  torch::Tensor inv_freq_;  // [d_model/2]: 1 / 10000^(2i/d_model)
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int>, torch::Tensor> cache_;
};

// Holds inv_freq as a buffer so checkpoints carry it under the PyTorch name pos_emb.inv_freq.
class PositionalEmbeddingImpl : public torch::nn::Module {
 public:
  explicit PositionalEmbeddingImpl(const torch::Tensor& inv_freq) {
    register_buffer("inv_freq", inv_freq.to(torch::kFloat32));
  }
};
TORCH_MODULE(PositionalEmbedding);

}  // namespace xl::model
