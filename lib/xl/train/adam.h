// Adam with state kept by parameter name, so checkpoints carry it and a resumed run continues
// exactly. A parameter whose gradient is undefined this step (a layer skipped by Skip-Retain) is
// left alone by default: its weights and moments do not move, since the layer did no work that
// step and its bias correction should not count a step that did not happen. The paper's PyTorch
// 1.5 code kept zero gradients instead (zero_grad() zeroes, it does not free), so Adam's momentum
// still moved skipped layers and counted the step; `zero_missing_grads` reproduces that, from the
// parameter's first real gradient on, as PyTorch does.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "xl/checkpoint/checkpoint.h"

namespace xl::train {

struct AdamOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool zero_missing_grads = false;  // --skipped-layers-in-adam step
};

class Adam {
 public:
  // `state` (as state() lists it, from a checkpoint): the moments and step counts to continue
  // from, taken over rather than copied (a resumed run holds them once), on the parameters' device;
  // 65 naming `file` when it lacks a parameter's or holds one of the wrong shape. Without it the
  // moments start at zero.
  Adam(std::vector<std::pair<std::string, torch::Tensor>> params, AdamOptions opts,
       const checkpoint::TensorList* state = nullptr, const std::string& file = "");
  // One update with learning rate `lr`, every gradient taken times `grad_scale` (clipping's
  // factor, applied in the update's own pass instead of a pass over all gradients before it);
  // returns how many parameters were updated.
  int step(double lr, double grad_scale = 1);
  // The parameters `which` names learn at `factor` times the learning rate step() is given (a
  // Compressive Transformer's compression network at --cmem-lr).
  void scale_lr(const std::function<bool(const std::string&)>& which, double factor);
  // Sets every gradient to undefined (cheaper than zeroing, and marks "no gradient" for skips).
  void clear_grads();
  // Global L2 norm of all gradients (0 when none has one).
  double grad_norm() const;
  checkpoint::TensorList state() const;  // exp_avg.<name>, exp_avg_sq.<name>, step.<name>

 private:
  struct Slot {
    std::string name;
    torch::Tensor param, exp_avg, exp_avg_sq;
    int64_t steps = 0;
    double lr_scale = 1;
  };
  std::vector<Slot> slots_;
  AdamOptions opts_;
};

// The factor that scales gradients of global norm `norm` down to `max_norm` (0: no clipping), as
// torch.nn.utils.clip_grad_norm_ computes it; 1 when they are within it.
double clip_factor(double norm, double max_norm);

}  // namespace xl::train
