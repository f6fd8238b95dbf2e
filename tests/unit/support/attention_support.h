// Helpers of the attention tests that compute attention by hand: Transformer-XL's sinusoid, the
// stream positions of a memory's runs, and gradients checked by central differences.
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "xl/model/memory.h"

namespace xl::test {

// The sinusoidal embedding of distance d (dim entries: sines, then cosines), in double.
inline torch::Tensor sinusoid(int64_t d, int64_t dim) {
  auto out = torch::zeros({dim}, torch::kFloat64);
  for (int64_t k = 0; k < dim / 2; ++k) {
    double inv = 1.0 / std::pow(10000.0, 2.0 * k / static_cast<double>(dim));
    out[k] = std::sin(d * inv);
    out[k + dim / 2] = std::cos(d * inv);
  }
  return out;
}

// Stream positions of every key: the memory's runs, then the t tokens of the segment at `position`.
inline std::vector<int64_t> positions_of(const std::vector<xl::model::MemoryRun>& runs, int64_t position, int64_t t) {
  std::vector<int64_t> pos;
  for (const auto& r : runs)
    for (int64_t k = 0; k < r.length; ++k) pos.push_back(r.start + k);
  for (int64_t k = 0; k < t; ++k) pos.push_back(position + k);
  return pos;
}

// Checks the gradients of `objective` with respect to `wrt` against directional derivatives by
// central differences (double precision: eps 1e-6, agreement to 1e-6) and returns them.
inline std::vector<torch::Tensor> expect_directional_derivatives(const std::function<torch::Tensor()>& objective,
                                                                 const std::vector<torch::Tensor>& wrt,
                                                                 const std::string& label = "") {
  auto grads = torch::autograd::grad({objective()}, wrt);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < wrt.size(); ++i) {
    auto dir = torch::randn_like(wrt[i]);
    const double eps = 1e-6;
    auto w = wrt[i];
    w.add_(dir, eps);
    const double up = objective().item<double>();
    w.add_(dir, -2 * eps);
    const double down = objective().item<double>();
    w.add_(dir, eps);
    EXPECT_NEAR((up - down) / (2 * eps), (grads[i] * dir).sum().item<double>(), 1e-6) << label << " tensor " << i;
  }
  return grads;
}

}  // namespace xl::test
