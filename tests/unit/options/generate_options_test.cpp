// xl-generate's options (options/generate_options.h): the checkpoint and prompt, how tokens are
// drawn, the memory; defaults, refusals with one line each, and torch's generator seeded.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "support/cli_support.h"
#include "xl/options/generate_options.h"

using namespace xl;
using test::Refusal;
using test::refusal;

namespace {

eval::TextGenerationRequest generation(std::vector<std::string> args) {
  cli::Options cli(cli::ToolInfo{"xl-generate", "", "", "", ""});
  options::add_generate_options(cli);
  args.insert(args.begin(), {"xl-generate", "--threads", "1"});
  EXPECT_TRUE(test::parse(cli, args));
  return options::text_generation_request(cli);
}

Refusal refused(std::vector<std::string> args) {
  return refusal([&] { generation(args); });
}

class GenerateOptions : public testing::Test {
  test::ThreadsKept threads_;
};

}  // namespace

TEST_F(GenerateOptions, DefaultsDraw200TokensFromTheWholeDistributionWith512OfMemory) {
  const eval::TextGenerationRequest r = generation({"model.h5", "--device", "cpu"});
  EXPECT_EQ(r.checkpoint, "model.h5");
  EXPECT_FALSE(r.prompt.has_value());
  EXPECT_FALSE(r.prompt_file.has_value());
  EXPECT_FALSE(r.pretokenize.has_value());  // what the vocab records
  EXPECT_FALSE(r.cmem_len.has_value());     // as trained
  EXPECT_EQ(r.settings.length, 200);
  EXPECT_EQ(r.settings.tgt_len, 128);
  EXPECT_EQ(r.settings.mem_len, 512);
  EXPECT_DOUBLE_EQ(r.settings.sampling.temperature, 1);
  EXPECT_EQ(r.settings.sampling.top_k, 0);
  EXPECT_DOUBLE_EQ(r.settings.sampling.top_p, 1);
  EXPECT_FALSE(r.echo);
  EXPECT_FALSE(r.no_unk);
  EXPECT_FALSE(r.allow_invalid_utf8);
  EXPECT_EQ(r.seed, 1u);
  EXPECT_TRUE(r.device.is_cpu());
  EXPECT_EQ(r.settings.precision, compute::Precision::kFp32);
}

TEST_F(GenerateOptions, AUsersChoicesAreTakenAndTorchsGeneratorIsSeeded) {
  const eval::TextGenerationRequest r =
      generation({"model.h5", "--prompt", "The cat", "-n", "50", "--temperature", "0.7", "--top-k", "40", "--top-p", "0.9",
                  "--no-unk", "--echo", "--allow-invalid-utf8", "--seed", "7", "--mem-len", "64", "--tgt-len", "32",
                  "--cmem-len", "8", "--pretokenize", "moses", "--device", "cpu", "--precision", "bf16"});
  const torch::Tensor drawn = torch::rand({4});
  EXPECT_EQ(r.prompt, std::optional<std::string>("The cat"));
  EXPECT_EQ(r.settings.length, 50);
  EXPECT_DOUBLE_EQ(r.settings.sampling.temperature, 0.7);
  EXPECT_EQ(r.settings.sampling.top_k, 40);
  EXPECT_DOUBLE_EQ(r.settings.sampling.top_p, 0.9);
  EXPECT_TRUE(r.no_unk);
  EXPECT_TRUE(r.echo);
  EXPECT_TRUE(r.allow_invalid_utf8);
  EXPECT_EQ(r.seed, 7u);
  EXPECT_EQ(r.settings.mem_len, 64);
  EXPECT_EQ(r.settings.tgt_len, 32);
  EXPECT_EQ(r.cmem_len, std::optional<int64_t>(8));
  EXPECT_EQ(r.pretokenize, std::optional<std::string>("moses"));
  EXPECT_EQ(r.settings.precision, compute::Precision::kBf16);
  torch::manual_seed(7);
  EXPECT_TRUE(torch::equal(drawn, torch::rand({4}))) << "the request seeds torch with --seed";

  EXPECT_EQ(generation({"model.h5", "--prompt-file", "-"}).prompt_file, std::optional<std::string>("-"));
  EXPECT_DOUBLE_EQ(generation({"model.h5", "--temperature", "0"}).settings.sampling.temperature, 0);  // greedy
  testing::internal::CaptureStderr();
  EXPECT_EQ(generation({"model.h5", "--mem-len", "0"}).settings.mem_len, 0);
  const std::string warned = testing::internal::GetCapturedStderr();
  EXPECT_NE(warned.find("--mem-len 0: each drawn token sees no earlier one"), std::string::npos) << warned;
}

TEST_F(GenerateOptions, BadSettingsAreRefusedWithOneLine) {
  EXPECT_EQ(refused({}), (Refusal{64, "give a CHECKPOINT (see xl-generate --help)"}));
  EXPECT_EQ(refused({"m.h5", "--prompt", "a", "--prompt-file", "p.txt"}), (Refusal{64, "give --prompt or --prompt-file, not both"}));
  EXPECT_EQ(refused({"-", "--prompt-file", "-"}), (Refusal{64, "CHECKPOINT and --prompt-file cannot both be stdin"}));
  EXPECT_EQ(refused({"m.h5", "-n", "-1"}), (Refusal{64, "--length must not be negative"}));
  EXPECT_EQ(refused({"m.h5", "--tgt-len", "0"}), (Refusal{64, "--tgt-len must be at least 1"}));
  EXPECT_EQ(refused({"m.h5", "--mem-len", "-1"}), (Refusal{64, "--mem-len must not be negative"}));
  EXPECT_EQ(refused({"m.h5", "--temperature", "-0.5"}), (Refusal{64, "--temperature must not be negative"}));
  EXPECT_EQ(refused({"m.h5", "--temperature", "inf"}), (Refusal{64, "--temperature must be a finite number, not inf"}));
  EXPECT_EQ(refused({"m.h5", "--top-k", "-1"}), (Refusal{64, "--top-k must not be negative"}));
  EXPECT_EQ(refused({"m.h5", "--top-p", "0"}), (Refusal{64, "--top-p must be in (0, 1]"}));
  EXPECT_EQ(refused({"m.h5", "--top-p", "1.5"}), (Refusal{64, "--top-p must be in (0, 1]"}));
  EXPECT_EQ(refused({"m.h5", "--cmem-len", "-1"}), (Refusal{64, "--cmem-len must not be negative"}));
  EXPECT_EQ(refused({"m.h5", "--device", "tpu"}), (Refusal{64, "--device must be auto, cpu, cuda or cuda:N, not 'tpu'"}));
  test::TempDir dir;
  const std::string ini = dir.write("g.ini", "top-p = 2\n");
  EXPECT_EQ(refused({"m.h5", "-c", ini}), (Refusal{78, ini + ": top-p must be in (0, 1]"}));
}
