// A softmax output layer's loss, -log softmax(h W^T + b)[n, target[n]], without its [N, V] logits
// ever held whole: the vocabulary goes in blocks of columns, each block's log-sum-exp folded into
// the row's. Its backward computes each block's logits again (one more product) and turns them into
// the gradients of h, W and b at once. For output layers whose logits would not fit: 2,048 rows of
// 267,735 words are 2.2 GB, and training held them twice (the logits and their gradient).
#pragma once
#include <torch/torch.h>

namespace xl::kernels {

// h [N, d], weight [V, d] (a view is fine), bias [V] or undefined, target [N] int64 in [0, V);
// blocks of `cols` columns -> [N]. Differentiable in h, weight and bias.
torch::Tensor blocked_nll(const torch::Tensor& h, const torch::Tensor& weight, const torch::Tensor& bias,
                          const torch::Tensor& target, int64_t cols);

}  // namespace xl::kernels
