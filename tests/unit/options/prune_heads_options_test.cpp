// xl-prune-heads' options (options/prune_heads_options.h): which study of which checkpoints,
// its defaults, the flags that belong to one mode refused in another, and checkpoint lists whose
// file names hold commas (xl-ablate's seeded runs).
#include <gtest/gtest.h>

#include "support/cli_support.h"
#include "xl/options/prune_heads_options.h"

using namespace xl;
using analysis::HeadStudyMode;
using test::Refusal;
using test::refusal;

namespace {

analysis::HeadStudyRequest study(std::vector<std::string> args) {
  cli::Options cli(cli::ToolInfo{"xl-prune-heads", "", "", "", ""});
  options::add_prune_heads_options(cli);
  args.insert(args.begin(), {"xl-prune-heads", "--threads", "1", "--device", "cpu"});
  EXPECT_TRUE(test::parse(cli, args));
  return options::head_study_request(cli);
}

Refusal refused(std::vector<std::string> args) {
  return refusal([&] { study(args); });
}

class PruneHeadsOptions : public testing::Test {
 protected:
  test::ThreadsKept threads_;
  test::TempDir dir_;
};

}  // namespace

TEST_F(PruneHeadsOptions, DefaultsAblateEachHeadOnTheValidSplit) {
  const analysis::HeadStudyRequest r = study({"--format", "jsonl", "p2.h5", "tokens.h5"});
  EXPECT_EQ(r.mode, HeadStudyMode::kAblateOne);
  EXPECT_EQ(r.checkpoints, (std::vector<std::string>{"p2.h5"}));
  EXPECT_TRUE(r.compare.empty());
  EXPECT_EQ(r.tokens, "tokens.h5");
  EXPECT_EQ(r.split, "valid");
  EXPECT_EQ(r.eval.tgt_len, 128);
  EXPECT_EQ(r.eval.mem_len, 256);
  EXPECT_EQ(r.format, eval::RowFormat::kJsonl);
  EXPECT_EQ(r.jobs, 1);
  EXPECT_EQ(r.importance_split, "train");
  EXPECT_EQ(r.importance_max_tokens, 50000);
  EXPECT_FALSE(r.normalize_layers);
  EXPECT_DOUBLE_EQ(r.schedule.step_percent, 10);
  EXPECT_DOUBLE_EQ(r.schedule.max_fraction, 1);
  EXPECT_EQ(r.schedule.exact_heads, -1);
  EXPECT_FALSE(r.schedule.rescore);
  EXPECT_EQ(r.output, "");
  EXPECT_EQ(r.plot, "");
  EXPECT_TRUE(r.device.is_cpu());
  EXPECT_EQ(r.precision, compute::Precision::kFp32);
}

TEST_F(PruneHeadsOptions, IterativePruningAsTheReadmeRunsIt) {
  const std::string out = dir_.file("pruned.h5");
  const analysis::HeadStudyRequest r =
      study({"--tgt-len", "16", "--batch-size", "2", "--max-tokens", "200", "--importance-max-tokens", "200", "--mode",
             "iterative", "--prune-heads", "1", "--rescore", "--step", "25", "--max-fraction", "0.5", "--normalize-layers",
             "--plot", dir_.file("curve"), "--jobs", "3", "p2.h5", "tokens.h5", "-o", out});
  EXPECT_EQ(r.mode, HeadStudyMode::kIterative);
  EXPECT_EQ(r.output, out);
  EXPECT_EQ(r.plot, dir_.file("curve"));
  EXPECT_EQ(r.eval.tgt_len, 16);
  EXPECT_EQ(r.eval.batch_size, 2);
  EXPECT_EQ(r.eval.max_tokens, 200);
  EXPECT_EQ(r.importance_max_tokens, 200);
  EXPECT_EQ(r.schedule.exact_heads, 1);
  EXPECT_TRUE(r.schedule.rescore);
  EXPECT_DOUBLE_EQ(r.schedule.step_percent, 25);
  EXPECT_DOUBLE_EQ(r.schedule.max_fraction, 0.5);
  EXPECT_TRUE(r.normalize_layers);
  EXPECT_EQ(r.jobs, 3);
  EXPECT_EQ(study({"--mode", "importance", "p2.h5", "t.h5"}).mode, HeadStudyMode::kImportance);
  // -o - is the rows' stdout, not a checkpoint.
  EXPECT_EQ(study({"--mode", "importance", "-o", "-", "p2.h5", "t.h5"}).output, "");
}

TEST_F(PruneHeadsOptions, FlagsOfAnotherModeAreRefusedWithOneLine) {
  EXPECT_EQ(refused({}), (Refusal{64, "give a CHECKPOINT and a TOKENS file (see xl-prune-heads --help)"}));
  EXPECT_EQ(refused({"--mode", "prune", "p2.h5", "t.h5"}), (Refusal{64, "--mode must be ablate-one, importance or iterative"}));
  EXPECT_EQ(refused({"-o", dir_.file("x.h5"), "p2.h5", "t.h5"}), (Refusal{64, "-o goes with --mode importance or iterative"}));
  EXPECT_EQ(refused({"--mode", "importance", "--plot", dir_.file("c"), "p2.h5", "t.h5"}),
            (Refusal{64, "--plot goes with --mode iterative (its curve)"}));
  EXPECT_EQ(refused({"--mode", "importance", "a.h5,b.h5", "t.h5"}), (Refusal{64, "--mode importance studies one checkpoint"}));
  EXPECT_EQ(refused({"--mem-len", "16,32", "p2.h5", "t.h5"}),
            (Refusal{64, "--mem-len: xl-prune-heads evaluates at one memory length"}));
  // A study draws no random numbers: there is no --seed.
  EXPECT_EQ(refused({"--seed", "2", "p2.h5", "t.h5"}).line.rfind("unrecognised option '--seed'", 0), 0u);
  const std::string ini = dir_.write("p.ini", "mode = all\n");
  EXPECT_EQ(refused({"-c", ini, "p2.h5", "t.h5"}), (Refusal{78, ini + ": mode must be ablate-one, importance or iterative"}));
}

TEST_F(PruneHeadsOptions, CheckpointListsKeepTheCommasOfFileNames) {
  const std::string smgk = dir_.write("smgk,seed=1.h5", "c"), p1 = dir_.write("pers,seed=1.h5", "c"),
                    p2 = dir_.write("pers,seed=2.h5", "c");
  EXPECT_EQ(options::checkpoint_list(smgk, "CHECKPOINT"), (std::vector<std::string>{smgk}));
  EXPECT_EQ(options::checkpoint_list(p1 + "," + p2, "--compare"), (std::vector<std::string>{p1, p2}));
  EXPECT_EQ(options::checkpoint_list("a.h5, b.h5", "--compare"), (std::vector<std::string>{"a.h5", "b.h5"}));
  EXPECT_EQ(refusal([] { options::checkpoint_list("a.h5,,b.h5", "--compare"); }),
            (Refusal{64, "--compare: empty item in 'a.h5,,b.h5'"}));

  const analysis::HeadStudyRequest r = study({smgk, "t.h5", "--compare", p1 + "," + p2});
  EXPECT_EQ(r.checkpoints, (std::vector<std::string>{smgk}));
  EXPECT_EQ(r.compare, (std::vector<std::string>{p1, p2}));
  // An output may not be one of the listed checkpoints.
  EXPECT_EQ(refused({"--mode", "importance", smgk, "t.h5", "-o", p2, "--compare", p1 + "," + p2}),
            (Refusal{64, "--output is " + p2 + ", which is also --compare: writing it would replace what is read (write "
                         "to another file)"}));
}
