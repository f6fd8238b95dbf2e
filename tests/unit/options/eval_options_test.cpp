// The evaluation group (options/eval_options.h) shared by xl-eval-longctx (a sweep of memory
// lengths) and xl-prune-heads (one length): defaults, lists, refusals, and the rows' format.
#include <gtest/gtest.h>

#include "support/cli_support.h"
#include "xl/options/eval_options.h"

using namespace xl;
using options::MemLens;
using test::Refusal;
using test::refusal;

namespace {

struct Tool {
  cli::Options cli;
  Tool(const std::string& name, const std::string& split, MemLens lens) : cli(cli::ToolInfo{name, "", "", "", ""}) {
    options::add_eval_options(cli, split, lens);
    cli.add("Output")("format", cli::po::value<std::string>(), options::kRowFormatHelp);
  }
};

options::EvalRequest sweep(std::vector<std::string> args) {
  Tool tool("xl-eval-longctx", "test", MemLens::kSweep);
  args.insert(args.begin(), "xl-eval-longctx");
  EXPECT_TRUE(test::parse(tool.cli, args));
  return options::eval_request(tool.cli, MemLens::kSweep);
}

options::EvalRequest one(std::vector<std::string> args) {
  Tool tool("xl-prune-heads", "valid", MemLens::kOne);
  args.insert(args.begin(), "xl-prune-heads");
  EXPECT_TRUE(test::parse(tool.cli, args));
  return options::eval_request(tool.cli, MemLens::kOne);
}

eval::RowFormat format(std::vector<std::string> args, bool rows_to_stdout) {
  Tool tool("xl-eval-longctx", "test", MemLens::kSweep);
  args.insert(args.begin(), "xl-eval-longctx");
  EXPECT_TRUE(test::parse(tool.cli, args));
  return options::row_format(tool.cli, rows_to_stdout);
}

}  // namespace

TEST(EvalOptions, DefaultsScoreTheWholeSplitWithTwiceTheSegmentAsMemory) {
  const options::EvalRequest r = sweep({});
  EXPECT_EQ(r.split, "test");
  EXPECT_EQ(r.settings.tgt_len, 128);
  EXPECT_EQ(r.mem_lens, (std::vector<int64_t>{256}));
  EXPECT_EQ(r.settings.mem_len, 256);
  EXPECT_TRUE(r.cmem_lens.empty());
  EXPECT_EQ(r.settings.batch_size, 10);
  EXPECT_EQ(r.settings.max_tokens, 0);
  EXPECT_FALSE(r.settings.warmup);
  EXPECT_FALSE(r.settings.clamp_len.has_value());  // the model's own
  EXPECT_FALSE(r.settings.same_length.has_value());
  EXPECT_FALSE(r.ignore_head_mask);
  EXPECT_EQ(r.cache, "");
  EXPECT_GT(r.settings.kv_cache_bytes, 0);
  EXPECT_LE(r.settings.kv_cache_bytes, 4000000000);
  EXPECT_EQ(one({}).split, "valid");
  EXPECT_EQ(sweep({"--tgt-len", "64"}).mem_lens, (std::vector<int64_t>{128}));

  const options::EvalRequest given = sweep({"--tgt-len", "16", "--batch-size", "2", "--clamp-len", "0", "--same-length",
                                            "false", "--warmup", "--max-tokens", "50K", "--kv-cache-budget", "0",
                                            "--ignore-head-mask", "--cache", "kept.jsonl", "--split", "valid"});
  EXPECT_EQ(given.split, "valid");
  EXPECT_EQ(given.settings.tgt_len, 16);
  EXPECT_EQ(given.mem_lens, (std::vector<int64_t>{32}));
  EXPECT_EQ(given.settings.batch_size, 2);
  EXPECT_EQ(given.settings.clamp_len, std::optional<int64_t>(0));
  EXPECT_EQ(given.settings.same_length, std::optional<bool>(false));
  EXPECT_TRUE(given.settings.warmup);
  EXPECT_EQ(given.settings.max_tokens, 50000);
  EXPECT_EQ(given.settings.kv_cache_bytes, 0);
  EXPECT_TRUE(given.ignore_head_mask);
  EXPECT_EQ(given.cache, "kept.jsonl");
}

TEST(EvalOptions, ASweepTakesAListOfLengthsEachOnceAndOneEvaluationOnlyOne) {
  const options::EvalRequest r = sweep({"--mem-len", "0, 64,1K", "--cmem-len", "8,16"});
  EXPECT_EQ(r.mem_lens, (std::vector<int64_t>{0, 64, 1000}));
  EXPECT_EQ(r.settings.mem_len, 0);
  EXPECT_EQ(r.cmem_lens, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(refusal([] { sweep({"--mem-len", "64,128,64"}); }), (Refusal{64, "--mem-len: 64 is given twice"}));
  EXPECT_EQ(refusal([] { sweep({"--mem-len", "64,,128"}); }), (Refusal{64, "--mem-len: empty item in '64,,128'"}));
  EXPECT_EQ(refusal([] { sweep({"--mem-len", ""}); }), (Refusal{64, "--mem-len: no value"}));
  EXPECT_EQ(refusal([] { sweep({"--cmem-len", "x"}); }), (Refusal{64, "--cmem-len: not a number: 'x'"}));

  EXPECT_EQ(one({"--mem-len", "48"}).mem_lens, (std::vector<int64_t>{48}));
  EXPECT_EQ(refusal([] { one({"--mem-len", "16,32"}); }),
            (Refusal{64, "--mem-len: xl-prune-heads evaluates at one memory length"}));
  EXPECT_EQ(refusal([] { one({"--cmem-len", "4,8"}); }),
            (Refusal{64, "--cmem-len: xl-prune-heads evaluates at one memory length"}));
}

TEST(EvalOptions, BadValuesAreRefusedWithOneLineNamingTheFlagOrTheFile) {
  EXPECT_EQ(refusal([] { sweep({"--tgt-len", "0"}); }), (Refusal{64, "--tgt-len must be at least 1"}));
  EXPECT_EQ(refusal([] { sweep({"--batch-size", "0"}); }), (Refusal{64, "--batch-size must be at least 1"}));
  EXPECT_EQ(refusal([] { sweep({"--clamp-len", "-1"}); }), (Refusal{64, "--clamp-len must be 0 (off) or positive"}));
  EXPECT_EQ(refusal([] { sweep({"--cache", "-"}); }), (Refusal{64, "--cache must be a file: it is read, then appended to"}));
  EXPECT_EQ(refusal([] { sweep({"--cache", "/dev/null"}); }).code, 64);
  EXPECT_EQ(refusal([] { sweep({"--max-tokens", "-5"}); }), (Refusal{64, "--max-tokens: must not be negative: '-5'"}));
  EXPECT_EQ(refusal([] { sweep({"--same-length", "maybe"}); }).code, 64);
  test::TempDir dir;
  const std::string ini = dir.write("e.ini", "tgt-len = 0\n");
  EXPECT_EQ(refusal([&] { sweep({"-c", ini}); }), (Refusal{78, ini + ": tgt-len must be at least 1"}));
  const std::string lens = dir.write("lens.ini", "mem-len = 16,16\n");
  EXPECT_EQ(refusal([&] { sweep({"-c", lens}); }), (Refusal{78, lens + ": mem-len: 16 is given twice"}));
}

TEST(EvalOptions, RowsAreJsonLinesForProgramsUnlessAFormatIsGiven) {
  EXPECT_EQ(format({}, false), eval::RowFormat::kJsonl);
  EXPECT_EQ(format({"--format", "jsonl"}, true), eval::RowFormat::kJsonl);
  EXPECT_EQ(format({"--format", "md"}, false), eval::RowFormat::kMarkdown);
  EXPECT_EQ(format({"--format", "tsv"}, true), eval::RowFormat::kTsv);
  EXPECT_EQ(refusal([] { format({"--format", "csv"}, true); }), (Refusal{64, "--format must be jsonl, md or tsv, not 'csv'"}));
}
