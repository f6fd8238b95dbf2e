#include "xl/train/gradient_sync.h"

#include <chrono>

namespace xl::train {

GradientSync::GradientSync(Communicator& comm, std::vector<torch::Tensor> params, size_t bucket_bytes)
    : comm_(comm), params_(std::move(params)), bucket_bytes_(bucket_bytes) {
  if (comm_.single()) return;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].requires_grad())
      // A leaf's hook sees the sum of all its uses' gradients (tied weights too), before autograd
      // adds it to .grad.
      params_[i].register_hook([this, i](const torch::Tensor& grad) { on_grad(i, grad); });
}

void GradientSync::on_grad(size_t index, const torch::Tensor& grad) {
  if (!armed_) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor& before = params_[index].grad();  // earlier accumulation chunks
  filling_.params.push_back(index);
  filling_.grads.push_back(before.defined() ? before + grad : grad.detach());
  filling_bytes_ += static_cast<size_t>(grad.numel()) * grad.element_size();
  if (filling_bytes_ >= bucket_bytes_) launch();
}

void GradientSync::launch() {
  if (filling_.params.empty()) return;
  std::vector<torch::Tensor> flat;
  for (const auto& g : filling_.grads) flat.push_back(g.reshape(-1));
  filling_.flat = torch::cat(flat);
  filling_.pending = comm_.start_all_reduce_sum(filling_.flat, "the gradient all-reduce");
  sent_.push_back(std::move(filling_));
  filling_ = Bucket();
  filling_bytes_ = 0;
}

void GradientSync::finish() {
  if (comm_.single()) return;
  armed_ = false;
  launch();
  const auto t0 = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  for (auto& b : sent_) {
    b.pending->wait();
    b.flat.div_(static_cast<double>(comm_.world()));
    int64_t at = 0;
    for (size_t k = 0; k < b.params.size(); ++k) {
      torch::Tensor& p = params_[b.params[k]];
      p.mutable_grad() = b.flat.narrow(0, at, p.numel()).view_as(p);
      at += p.numel();
    }
  }
  sent_.clear();
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace xl::train
