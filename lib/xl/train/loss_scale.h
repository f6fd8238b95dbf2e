// Dynamic loss scaling for fp16 training (as torch.cuda.amp.GradScaler does it): the loss is
// multiplied by the scale before backward so that small gradients survive fp16's range, and the
// gradients are divided by it before clipping. A step whose gradients overflowed (inf or NaN) is
// skipped, its data consumed, and the scale halved; after `growth_interval` good steps in a row
// the scale doubles. The state goes into the checkpoint's run state, so a resumed run continues it.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace xl::train {

class LossScaler {
 public:
  explicit LossScaler(double scale = 65536.0, int64_t good_steps = 0, int64_t growth_interval = 2000)
      : scale_(scale), good_steps_(good_steps), growth_interval_(growth_interval) {}
  double scale() const { return scale_; }
  int64_t good_steps() const { return good_steps_; }
  // Divides the defined gradients by the scale; false when any of them is not finite.
  bool unscale(const std::vector<torch::Tensor>& params) const;
  // After a step: shrink on overflow, grow after growth_interval good steps.
  void update(bool finite);

 private:
  double scale_;
  int64_t good_steps_, growth_interval_;
};

}  // namespace xl::train
