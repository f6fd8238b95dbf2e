// The compute group (options/compute_options.h): --threads, --seed, --device, --precision and
// --attention-probs(-budget), their defaults, their one-line refusals, and where a tool computes.
#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "support/cli_support.h"
#include "xl/options/compute_options.h"

using namespace xl;
using test::Refusal;
using test::refusal;

namespace {

struct Tool {
  cli::Options cli{cli::ToolInfo{"xl-train-phase1", "", "", "", ""}};
  explicit Tool(options::ComputeFlags flags) { options::add_compute_options(cli, flags); }
};

options::ComputeFlags training() {
  options::ComputeFlags f;
  f.training = true;
  return f;
}

options::Compute settings(std::vector<std::string> args, options::ComputeFlags flags = training()) {
  Tool tool(flags);
  args.insert(args.begin(), "xl-train-phase1");
  EXPECT_TRUE(test::parse(tool.cli, args));
  return options::compute_settings(tool.cli);
}

Refusal refused(std::vector<std::string> args, options::ComputeFlags flags = training()) {
  return refusal([&] { settings(args, flags); });
}

int cores_this_process_may_use() {
  cpu_set_t set;
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  return CPU_COUNT(&set);
}

// Sets an environment variable for the test's length.
class EnvSet {
 public:
  EnvSet(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~EnvSet() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class ComputeOptions : public testing::Test {
  test::ThreadsKept threads_;
};

}  // namespace

TEST_F(ComputeOptions, DefaultsAreEveryCoreSeedOneAndAutomaticPlacement) {
  const int cores = cores_this_process_may_use();
  {
    EnvSet one("LOCAL_WORLD_SIZE", "1");
    const options::Compute c = settings({});
    EXPECT_EQ(c.threads, cores);
    EXPECT_EQ(c.seed, 1u);
    EXPECT_EQ(c.device, "auto");
    EXPECT_EQ(c.precision, "auto");
    EXPECT_EQ(c.attention_probs, "auto");
    // auto: a quarter of the memory this process may use, at most 4 GB.
    EXPECT_GT(c.attention_probs_budget, 0);
    EXPECT_LE(c.attention_probs_budget, 4000000000);
  }
  {
    // The ranks torchrun starts on one machine share its cores.
    EnvSet two("LOCAL_WORLD_SIZE", "2");
    EXPECT_EQ(settings({}).threads, std::max(1, cores / 2));
  }
  const options::Compute given = settings({"--threads", "3", "--seed", "42", "--device", "cpu", "--precision", "bf16",
                                           "--attention-probs", "recompute", "--attention-probs-budget", "64M"});
  EXPECT_EQ(given.threads, 3);
  EXPECT_EQ(given.seed, 42u);
  EXPECT_EQ(given.device, "cpu");
  EXPECT_EQ(given.precision, "bf16");
  EXPECT_EQ(given.attention_probs, "recompute");
  EXPECT_EQ(given.attention_probs_budget, 64000000);
  EXPECT_EQ(settings({"--device", "cuda:1"}).device, "cuda:1");
}

TEST_F(ComputeOptions, BadValuesAreRefusedWithOneLineNamingTheFlag) {
  EXPECT_EQ(refused({"--threads", "-1"}), (Refusal{64, "--threads must not be negative (0: one per core)"}));
  EXPECT_EQ(refused({"--device", "gpu"}), (Refusal{64, "--device must be auto, cpu, cuda or cuda:N, not 'gpu'"}));
  EXPECT_EQ(refused({"--device", "cuda:01"}), (Refusal{64, "--device must be auto, cpu, cuda or cuda:N, not 'cuda:01'"}));
  EXPECT_EQ(refused({"--precision", "fp64"}), (Refusal{64, "--precision must be auto, fp32, bf16 or fp16, not 'fp64'"}));
  EXPECT_EQ(refused({"--attention-probs", "sometimes"}),
            (Refusal{64, "--attention-probs must be auto, keep or recompute, not 'sometimes'"}));
  EXPECT_EQ(refused({"--attention-probs-budget", "1T"}),
            (Refusal{64, "--attention-probs-budget: bad size suffix in '1T' (use K, M or G)"}));
  EXPECT_EQ(refused({"--seed", "one"}),
            (Refusal{64, "the argument ('one') for option '--seed' is invalid (see xl-train-phase1 --help)"}));

  test::TempDir dir;
  const std::string ini = dir.write("c.ini", "device = gpu\n");
  EXPECT_EQ(refused({"-c", ini}), (Refusal{78, ini + ": device must be auto, cpu, cuda or cuda:N, not 'gpu'"}));
}

TEST_F(ComputeOptions, ToolsThatComputeOnTheCpuOnlyOrDrawNothingOfferNeitherFlag) {
  options::ComputeFlags cpu_only;
  cpu_only.seed = false;
  cpu_only.device = false;
  const options::Compute c = settings({"--threads", "2"}, cpu_only);
  EXPECT_EQ(c.threads, 2);
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.precision, "fp32");
  EXPECT_EQ(c.seed, 1u);
  EXPECT_EQ(refused({"--device", "cpu"}, cpu_only).code, 64);
  EXPECT_EQ(refused({"--device", "cpu"}, cpu_only).line.rfind("unrecognised option '--device'", 0), 0u);
  EXPECT_EQ(refused({"--seed", "2"}, cpu_only).line.rfind("unrecognised option '--seed'", 0), 0u);
  // --attention-probs belongs to the trainers.
  EXPECT_EQ(refused({"--attention-probs", "keep"}, options::ComputeFlags{}).code, 64);
}

TEST_F(ComputeOptions, APlacementAppliesTheThreadsAndRefusesWhatTheMachineCannotDo) {
  const options::Placement p = options::place(settings({"--threads", "2", "--device", "cpu", "--seed", "9"}));
  EXPECT_EQ(at::get_num_threads(), 2);
  EXPECT_TRUE(p.device.is_cpu());
  EXPECT_EQ(p.precision, compute::Precision::kFp32);  // auto on a CPU
  EXPECT_EQ(p.seed, 9u);
  EXPECT_EQ(options::place(settings({"--threads", "1", "--device", "cpu", "--precision", "bf16"})).precision,
            compute::Precision::kBf16);
  EXPECT_EQ(refusal([] { options::place(settings({"--threads", "1", "--device", "cpu", "--precision", "fp16"})); }),
            (Refusal{64, "--precision fp16 needs a GPU (LibTorch's CPU autocast computes in bf16 only); use --precision "
                         "bf16"}));
  if (!torch::cuda::is_available()) {
    EXPECT_TRUE(options::place(settings({"--threads", "1"})).device.is_cpu());
    const Refusal no_gpu = refusal([] { options::place(settings({"--threads", "1", "--device", "cuda"})); });
    EXPECT_EQ(no_gpu.code, 66);
    EXPECT_EQ(no_gpu.line.rfind("--device cuda: ", 0), 0u) << no_gpu.line;
  }
}

TEST_F(ComputeOptions, AMemoryBudgetIsASizeOrAQuarterOfTheUsableMemoryAtMost4G) {
  Tool tool(training());
  ASSERT_TRUE(test::parse(tool.cli, {"xl-train-phase1", "--attention-probs-budget", "1.5G"}));
  EXPECT_EQ(options::memory_budget(tool.cli, "attention-probs-budget"), 1500000000);
  Tool defaulted(training());
  ASSERT_TRUE(test::parse(defaulted.cli, {"xl-train-phase1"}));
  const int64_t automatic = options::memory_budget(defaulted.cli, "attention-probs-budget");
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  EXPECT_GT(automatic, 0);
  EXPECT_LE(automatic, std::min<int64_t>(4000000000, int64_t{pages} * page / 4));
}
