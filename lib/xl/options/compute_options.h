// --threads, --seed, --device, --precision and --attention-probs(-budget): how and where a tool computes,
// defined once for every tool.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "xl/cli/options.h"
#include "xl/compute/precision.h"

namespace xl::options {

struct ComputeFlags {
  bool seed = true;    // the tool draws random numbers
  bool device = true;  // the tool can compute on a GPU, in mixed precision (--device, --precision)
  bool training = false;  // the tool trains (--attention-probs)
};

void add_compute_options(cli::Options& cli, ComputeFlags flags = {});

struct Compute {
  int threads = 1;          // resolved: 0 became the number of cores
  uint64_t seed = 1;
  std::string device = "cpu";     // as given: auto, cpu, cuda, cuda:N
  std::string precision = "fp32";  // as given: auto, fp32, bf16, fp16
  std::string attention_probs = "auto";      // --attention-probs: auto, keep or recompute
  int64_t attention_probs_budget = 4000000000;  // --attention-probs-budget, bytes
};
Compute compute_settings(const cli::Options& cli);

// Where a tool that computes on one device computes, resolved once: its thread count applied, its
// device found (66 when a GPU is asked for and there is none) and its precision for that device.
struct Placement {
  torch::Device device = torch::kCPU;
  compute::Precision precision = compute::Precision::kFp32;
  uint64_t seed = 1;
};
Placement place(const Compute& c);

// A memory budget option (--attention-probs-budget, --kv-cache-budget) in bytes: a size with K/M/G,
// or auto, a quarter of the memory this process may use (its cgroup's limit where lower than the
// machine's), at most 4 GB, so that a laptop or a small Slurm allocation is not filled by default.
int64_t memory_budget(const cli::Options& cli, const std::string& name);
extern const char* const kMemoryBudgetHelp;  // "auto: a quarter of ..."

}  // namespace xl::options
