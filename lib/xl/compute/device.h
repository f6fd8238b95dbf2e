// Where a model computes: --device auto|cpu|cuda|cuda:N.
#pragma once
#include <torch/torch.h>

#include <string>

namespace xl::compute {

// "auto" (a GPU when there is one, else the CPU), "cpu", "cuda" or "cuda:N"; 64 on anything else
// and 66 when a GPU is asked for but this build or machine has none. "cuda" and "auto" come back
// with an index, local_rank's GPU (cuda:0 in one process), so that logs, checkpoints and the
// allocator's statistics all name one device.
torch::Device parse_device(const std::string& name, int local_rank = 0);
// Whether parse_device takes `name` on some machine: auto, cpu, cuda or cuda:N.
bool is_device_name(const std::string& name);

// On a GPU, deterministic kernels only, so that a resumed training run computes what the
// uninterrupted one did (with cuBLAS's fixed workspace, set at start-up). Strict: an operation
// with no deterministic kernel stops the run instead of warning, and kernels that have a
// deterministic mode use it (the fused attention's backward: one pass over the keys instead of
// split sums). Nothing on a CPU, whose kernels are deterministic already. XL_DETERMINISTIC=0 in the
// environment leaves them off: a resumed run then matches the uninterrupted one only to rounding,
// and kernels with atomic sums may run (xl's flash attention backward, with XL_KERNELS=own).
// Returns whether the device's kernels are deterministic now (a CPU's always are).
bool use_deterministic_kernels(const torch::Device& device);

}  // namespace xl::compute
