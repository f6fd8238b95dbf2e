// The attention probabilities of relative attention:
//   p = softmax(scale * (AC + shift(BD)) masked),
// where BD holds, per block of keys, the positional scores of each query against a descending
// table of distances, and shift(BD)[n, i, j] = BD[n, i, j + T - 1 - i] (Transformer-XL's relative
// shift) is read in place instead of through padded copies (the CPU kernel, one autograd step) or
// gathered (any device). The general path: the blocked one (chunked_attention) covers float32 on
// CPUs without attention dropout.
#pragma once
#include <torch/torch.h>

#include <vector>

namespace xl::kernels {

// A contiguous block of keys [col, col+len) whose positional scores come from one table of P
// distances (P = len for a block that ends with the current segment, T + len - 1 otherwise).
struct KeyBlock {
  int64_t col = 0;
  int64_t len = 0;
  int64_t d_max = 0;   // distance of table entry 0
  int64_t table = 0;   // P: entries in the table
};

// KeyBlocks as a flat list of integers and back: how autograd functions keep them for backward.
std::vector<int64_t> pack_key_blocks(const std::vector<KeyBlock>& blocks);
std::vector<KeyBlock> unpack_key_blocks(const std::vector<int64_t>& packed);

// ac: [N, T, K]; bds[b]: [N, T, blocks[b].table]; mask: [T, K] bool (true = masked) or undefined.
// Returns the probabilities in ac's dtype, computed in float32 or float64. A fused CPU kernel
// runs on CPU tensors; elsewhere (or with the generic path forced) tensor ops do the same: the
// relative shift is a strided view of each block's table, and the softmax runs in float32 at
// least. Taken by value: a caller that moves its scores in lets them go before the softmax.
torch::Tensor relative_attention_probs(torch::Tensor ac, std::vector<torch::Tensor> bds,
                                       const std::vector<KeyBlock>& blocks, const torch::Tensor& mask,
                                       double scale);

// shift(BD) alone, as the additive bias of a fused attention kernel: [N, T, K] in `dtype`, -inf
// where `mask` is true.
torch::Tensor relative_positional_bias(std::vector<torch::Tensor> bds, const std::vector<KeyBlock>& blocks,
                                       const torch::Tensor& mask, at::ScalarType dtype);

}  // namespace xl::kernels
