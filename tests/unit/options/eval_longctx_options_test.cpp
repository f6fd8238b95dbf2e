// xl-eval-longctx's options (options/eval_longctx_options.h): the checkpoint and tokens, the rows
// and the per-token losses, each refusal one line with exit 64.
#include <gtest/gtest.h>

#include "support/cli_support.h"
#include "xl/options/eval_longctx_options.h"

using namespace xl;
using test::Refusal;
using test::refusal;

namespace {

analysis::MemorySweepRequest sweep(std::vector<std::string> args) {
  cli::Options cli(cli::ToolInfo{"xl-eval-longctx", "", "", "", ""});
  options::add_eval_longctx_options(cli);
  args.insert(args.begin(), "xl-eval-longctx");
  EXPECT_TRUE(test::parse(cli, args));
  return options::memory_sweep_request(cli);
}

Refusal refused(std::vector<std::string> args) {
  return refusal([&] { sweep(args); });
}

class EvalLongctxOptions : public testing::Test {
 protected:
  test::ThreadsKept threads_;
  test::TempDir dir_;
};

}  // namespace

TEST_F(EvalLongctxOptions, ASweepAsTheReadmeRunsIt) {
  const std::string rows = dir_.file("rows.jsonl");
  const analysis::MemorySweepRequest r =
      sweep({"--threads", "1", "--device", "cpu", "--tgt-len", "16", "--mem-len", "16,48", "--max-tokens", "400", "--split",
             "valid", "-o", rows, "p2.h5", "tokens.h5"});
  EXPECT_EQ(r.checkpoint, "p2.h5");
  EXPECT_EQ(r.tokens, "tokens.h5");
  EXPECT_EQ(r.split, "valid");
  EXPECT_EQ(r.mem_lens, (std::vector<int64_t>{16, 48}));
  EXPECT_EQ(r.settings.tgt_len, 16);
  EXPECT_EQ(r.settings.max_tokens, 400);
  EXPECT_EQ(r.output, rows);
  EXPECT_FALSE(r.force);
  EXPECT_EQ(r.format, eval::RowFormat::kJsonl);  // rows to a file
  EXPECT_EQ(r.per_token, "");
  EXPECT_EQ(r.cache, "");
  EXPECT_TRUE(r.device.is_cpu());
  EXPECT_EQ(r.settings.precision, compute::Precision::kFp32);

  // The tokens default to stdin.
  const analysis::MemorySweepRequest piped = sweep({"--threads", "1", "--device", "cpu", "--format", "tsv", "p2.h5"});
  EXPECT_EQ(piped.tokens, "-");
  EXPECT_EQ(piped.output, "-");
  EXPECT_EQ(piped.format, eval::RowFormat::kTsv);
  EXPECT_EQ(piped.split, "test");
  const analysis::MemorySweepRequest per_token =
      sweep({"--threads", "1", "--device", "cpu", "--per-token", dir_.file("losses.h5"), "-o", rows, "p2.h5", "t.h5"});
  EXPECT_EQ(per_token.per_token, dir_.file("losses.h5"));
}

TEST_F(EvalLongctxOptions, ContradictionsAreRefusedWithOneLine) {
  EXPECT_EQ(refused({"--threads", "1"}), (Refusal{64, "give a CHECKPOINT and a TOKENS file (see xl-eval-longctx --help)"}));
  EXPECT_EQ(refused({"--threads", "1", "-", "-"}), (Refusal{64, "CHECKPOINT and TOKENS cannot both be stdin"}));
  EXPECT_EQ(refused({"--threads", "1", "--per-token", "-", "p2.h5", "t.h5"}),
            (Refusal{64, "--per-token - and the rows cannot both go to stdout (use -o FILE for the rows)"}));
  EXPECT_EQ(refused({"--threads", "1", "--cache", dir_.file("kept.jsonl"), "--per-token", dir_.file("l.h5"), "-o",
                     dir_.file("rows"), "p2.h5", "t.h5"}),
            (Refusal{64, "--cache keeps each setting's loss, not its per-token losses: drop --cache or --per-token"}));
  EXPECT_EQ(refused({"--threads", "1", "p2.h5", "t.h5", "extra.h5"}),
            (Refusal{64, "unexpected argument 'extra.h5': xl-eval-longctx takes 2 arguments, CHECKPOINT and TOKENS; the "
                         "rest are options (see xl-eval-longctx --help)"}));
  EXPECT_EQ(refused({"--threads", "1", "--device", "cpu", "--precision", "fp16", "p2.h5", "t.h5"}).code, 64);
}

TEST_F(EvalLongctxOptions, NoOutputMayReplaceTheCheckpointTokensOrAnotherOutput) {
  const std::string ckpt = dir_.write("p2.h5", "checkpoint"), tokens = dir_.write("t.h5", "tokens");
  EXPECT_EQ(refused({"--threads", "1", "-f", "-o", tokens, ckpt, tokens}),
            (Refusal{64, "--output is " + tokens + ", which is also TOKENS: writing it would replace what is read (write "
                         "to another file)"}));
  EXPECT_EQ(refused({"--threads", "1", "--per-token", ckpt, ckpt, tokens}),
            (Refusal{64, "--per-token is " + ckpt + ", which is also CHECKPOINT: writing it would replace what is read "
                         "(write to another file)"}));
  const std::string rows = dir_.file("rows");
  EXPECT_EQ(refused({"--threads", "1", "-o", rows, "--per-token", rows, ckpt, tokens}),
            (Refusal{64, "--per-token is " + rows + ", which --output writes too (give each its own file)"}));
}
