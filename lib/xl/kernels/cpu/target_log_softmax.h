// A language model's loss needs one log-probability per row: log_softmax(logits)[n, target[n]].
// Computing it from each row's log-sum-exp skips the [N, V] log-probabilities that log_softmax
// writes and gather's backward fills (for a word-level softmax over 267,735 words those are the
// largest tensors of a step); the backward writes the logits' gradient in one pass.
#pragma once
#include <torch/torch.h>

namespace xl::kernels {

// [N, V] logits, [N] int64 targets in [0, V) -> [N]: log_softmax(logits, -1)[n, target[n]].
// Float and double CPU tensors run the row kernels; elsewhere log_softmax and gather.
torch::Tensor target_log_softmax(const torch::Tensor& logits, const torch::Tensor& target);

// [N, V] logits -> [N]: log sum_j exp(logits[n, j]), by the same row kernels (no autograd).
torch::Tensor row_log_sum_exp(const torch::Tensor& logits);

// In place, the loss's gradient from its logits z [N, V] (contiguous), their rows' log-sum-exp [N]
// (over every column, these may be a block of them) and the loss's gradient g [N]:
// z[n, j] <- g[n] (exp(z[n, j] - lse[n]) - [j == target[n]]); a target outside [0, V) adds no -g.
void softmax_minus_target_(torch::Tensor& z, const torch::Tensor& lse, const torch::Tensor& target,
                           const torch::Tensor& g);

}  // namespace xl::kernels
