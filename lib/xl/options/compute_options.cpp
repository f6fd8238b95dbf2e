#include "xl/options/compute_options.h"

#include <algorithm>
#include <cstdlib>

#include "xl/compute/device.h"
#include "xl/compute/parallel.h"
#include "xl/compute/precision.h"
#include "xl/util/error.h"
#include "xl/util/parse.h"
#include "xl/util/resources.h"

namespace xl::options {
namespace po = cli::po;
void add_compute_options(cli::Options& cli, ComputeFlags flags) {
  auto group = cli.add("Compute");
  group("threads", po::value<int>()->default_value(0), "CPU threads (0: one per core, shared by the ranks on this machine)");
  if (flags.seed) group("seed", po::value<uint64_t>()->default_value(1), "seed of every random generator");
  if (flags.device) {
    group("device", po::value<std::string>()->default_value("auto"), "auto (a GPU when there is one), cpu, cuda or cuda:N");
    group("precision", po::value<std::string>()->default_value("auto"),
          "matrix products in fp32, bf16 or fp16 (auto: fp32 on a CPU, bf16 on a GPU that has it)");
  }
  if (flags.training) {
    group("attention-probs", po::value<std::string>()->default_value("auto"),
          "keep (the fastest), recompute (the CPU attention's probabilities computed again in backward "
          "instead of kept: the same results in less memory; base training a quarter less, 6% slower) "
          "or auto (keep while they fit --attention-probs-budget)");
    group("attention-probs-budget", po::value<std::string>()->default_value("auto"),
          (std::string("bytes the attention probabilities one process keeps in a step may take under "
                       "--attention-probs auto (K, M, G; ") + kMemoryBudgetHelp + ")").c_str());
  }
}

Compute compute_settings(const cli::Options& cli) {
  Compute c;
  c.threads = cli.has("threads") ? cli.get<int>("threads") : 0;
  if (c.threads < 0) cli.fail("threads", "must not be negative (0: one per core)");
  if (c.threads == 0) {
    // The cores this process may run on (a batch system's binding narrows them), shared by the
    // data-parallel ranks that torchrun or --nproc-per-node started beside it.
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    const int ranks = std::max(1, local ? std::atoi(local) : 1);
    c.threads = std::max(1, usable_cores() / ranks);
  }
  if (cli.has("seed")) c.seed = cli.get<uint64_t>("seed");
  if (cli.has("device")) c.device = cli.get<std::string>("device");
  if (!compute::is_device_name(c.device)) cli.fail("device", "must be auto, cpu, cuda or cuda:N, not '" + c.device + "'");
  if (cli.has("precision")) c.precision = cli.get<std::string>("precision");
  if (!compute::is_precision_name(c.precision)) cli.fail("precision", "must be auto, fp32, bf16 or fp16, not '" + c.precision + "'");
  if (cli.has("attention-probs")) {
    const std::string probs = cli.get<std::string>("attention-probs");
    if (probs != "auto" && probs != "keep" && probs != "recompute")
      cli.fail("attention-probs", "must be auto, keep or recompute, not '" + probs + "'");
    c.attention_probs = probs;
    c.attention_probs_budget = memory_budget(cli, "attention-probs-budget");
  }
  return c;
}

Placement place(const Compute& c) {
  compute::set_threads(c.threads);
  Placement p;
  p.device = compute::parse_device(c.device);
  p.precision = compute::resolve_precision(c.precision, p.device);
  p.seed = c.seed;
  return p;
}

const char* const kMemoryBudgetHelp = "auto: a quarter of the memory this process may use, at most 4G";

int64_t memory_budget(const cli::Options& cli, const std::string& name) {
  if (cli.get<std::string>(name) != "auto") return static_cast<int64_t>(cli.count(name));
  constexpr int64_t kMost = 4000000000;
  const int64_t usable = usable_memory_bytes();
  return usable > 0 ? std::min(kMost, usable / 4) : kMost;
}

}  // namespace xl::options
