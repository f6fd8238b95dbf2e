// The all-reduce of a step's gradients, started while the backward pass still runs: when autograd
// has computed a parameter's gradient it joins a bucket, and each full bucket (about 25 MB) is
// summed over the ranks in the background; finish() sends the last bucket, waits for all of them
// and leaves each parameter's .grad the mean over the ranks. Buckets fill in the order autograd
// produces gradients, which is the same on every rank: same model, same skipped layers, same SCH
// permutations. A parameter without a gradient this step (a skipped layer) takes no part.
#pragma once
#include <torch/torch.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "xl/train/distributed.h"

namespace xl::train {

class GradientSync {
 public:
  GradientSync(Communicator& comm, std::vector<torch::Tensor> params, size_t bucket_bytes = size_t{25} << 20);
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Call before the backward pass that completes a step's gradients (the last accumulation chunk).
  void arm() { armed_ = true; }
  // Call after it: every gradient is the mean over the ranks when it returns.
  void finish();
  // Seconds finish() waited for the all-reduce over all steps so far (its share of the step).
  double wait_seconds() const { return wait_seconds_; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    std::vector<torch::Tensor> grads;  // the full gradient of each (earlier chunks included)
    torch::Tensor flat;
    std::unique_ptr<Communicator::Pending> pending;
  };
  void on_grad(size_t index, const torch::Tensor& grad);
  void launch();

  Communicator& comm_;
  std::vector<torch::Tensor> params_;
  size_t bucket_bytes_;
  bool armed_ = false;
  Bucket filling_;
  size_t filling_bytes_ = 0;
  std::vector<Bucket> sent_;
  double wait_seconds_ = 0;
};

}  // namespace xl::train
