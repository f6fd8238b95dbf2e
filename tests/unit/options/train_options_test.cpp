// The training group (options/train_options.h) of xl-train-phase1 and xl-train-phase2: a real
// command line, the documented defaults, the settings given recorded with where they came from,
// and the one-line refusals of flags that contradict each other.
#include <gtest/gtest.h>

#include <set>

#include "support/cli_support.h"
#include "xl/options/train_options.h"

using namespace xl;
using options::Phase;
using test::Refusal;
using test::refusal;

namespace {

std::string tool_name(Phase phase) { return phase == Phase::kOne ? "xl-train-phase1" : "xl-train-phase2"; }

train::TrainRequest request(std::vector<std::string> args, Phase phase = Phase::kOne) {
  cli::Options cli(cli::ToolInfo{tool_name(phase), "", "", "", ""});
  options::add_training_options(cli, phase);
  args.insert(args.begin(), tool_name(phase));
  test::Argv argv(args);
  EXPECT_TRUE(cli.parse(argv.argc(), argv.argv()));
  return options::training_request(cli, phase, argv.argc(), argv.argv());
}

Refusal refused(std::vector<std::string> args, Phase phase = Phase::kOne) {
  return refusal([&] { request(args, phase); });
}

class TrainOptions : public testing::Test {
 protected:
  test::ThreadsKept threads_;
  test::TempDir dir_;
};

}  // namespace

TEST_F(TrainOptions, Phase1TakesARealCommandLineAndDefaultsTheRest) {
  const train::TrainRequest r = request({"--threads", "1", "tokens.h5", "-o", "run.h5"});
  EXPECT_EQ(r.tool, "xl-train-phase1");
  EXPECT_EQ(r.command_line, "xl-train-phase1 --threads 1 tokens.h5 -o run.h5");
  EXPECT_EQ(r.tokens, "tokens.h5");
  EXPECT_EQ(r.output, "run.h5");
  EXPECT_FALSE(r.force);
  EXPECT_FALSE(r.resume);
  EXPECT_TRUE(r.init.empty());
  EXPECT_TRUE(r.given.empty());
  EXPECT_TRUE(r.model_given.empty());
  EXPECT_EQ(r.metrics, "");
  EXPECT_EQ(r.tensorboard, "");
  EXPECT_EQ(r.progress, "auto");
  EXPECT_EQ(r.device, "auto");
  EXPECT_EQ(r.nproc_per_node, 1);
  EXPECT_EQ(r.dist_backend, "auto");
  EXPECT_DOUBLE_EQ(r.dist_timeout, 300);
  const train::TrainConfig& t = r.train;
  EXPECT_EQ(t.phase, "phase1");
  EXPECT_EQ(t.train_split, "train");
  EXPECT_EQ(t.valid_split, "valid");
  EXPECT_EQ(t.tgt_len, 128);
  EXPECT_EQ(t.mem_len, 128);
  EXPECT_EQ(t.batch_size, 16);
  EXPECT_EQ(t.batch_chunk, 1);
  EXPECT_DOUBLE_EQ(t.lr, 2.5e-4);
  EXPECT_EQ(t.lr_schedule, "cosine");
  EXPECT_DOUBLE_EQ(t.clip, 0.25);
  EXPECT_EQ(t.skip_schedule, "linear");
  EXPECT_DOUBLE_EQ(t.skip_p, 0.1);
  EXPECT_DOUBLE_EQ(t.sch_beta, 0.1);
  EXPECT_EQ(t.max_steps, 0);
  EXPECT_EQ(t.max_tokens, 0);
  EXPECT_DOUBLE_EQ(t.time_budget, 0);
  EXPECT_EQ(t.eval_interval, 500);
  EXPECT_EQ(t.log_interval, 50);
  EXPECT_EQ(t.on_save_error, "stop");
  EXPECT_EQ(t.seed, 1u);
  EXPECT_EQ(t.precision, "auto");
  EXPECT_EQ(r.model.n_layer, 4);
}

TEST_F(TrainOptions, SettingsGivenAreRecordedWithWhereTheyCameFromAndTheCommandLineWins) {
  const std::string ini = dir_.write("t.ini", "lr = 0.001\nmem-len = 64\nn-layer = 2\nmax-steps = 5\n");
  const train::TrainRequest r = request({"--threads", "1", "-c", ini, "--max-steps", "10", "--time-budget", "1h30m",
                                         "--max-tokens", "2M", "--seed", "7", "--precision", "bf16", "--sch-beta", "0"});
  EXPECT_DOUBLE_EQ(r.train.lr, 0.001);
  EXPECT_EQ(r.train.mem_len, 64);
  EXPECT_EQ(r.train.max_steps, 10);
  EXPECT_DOUBLE_EQ(r.train.time_budget, 5400);
  EXPECT_EQ(r.train.max_tokens, 2000000);
  EXPECT_EQ(r.train.seed, 7u);
  EXPECT_EQ(r.train.precision, "bf16");
  EXPECT_DOUBLE_EQ(r.train.sch_beta, 0);
  EXPECT_EQ(r.given, (std::set<std::string>{"lr", "mem_len", "max_steps", "time_budget", "max_tokens", "seed", "precision",
                                            "sch_beta"}));
  EXPECT_EQ(r.model_given, (std::set<std::string>{"n_layer"}));
  EXPECT_EQ(r.model.n_layer, 2);
  EXPECT_EQ(r.origins.name("lr"), ini + ": lr");
  EXPECT_EQ(r.origins.name("max-steps"), "--max-steps");
  // A setting checked later names its origin: the file's value is a config error.
  train::TrainConfig bad = r.train;
  bad.lr = -1;
  EXPECT_EQ(refusal([&] { bad.validate(r.origins); }), (Refusal{78, ini + ": lr must be positive"}));
}

TEST_F(TrainOptions, StartOrResumeRefusesTheFlagsItReplaces) {
  const std::string run = dir_.file("run.h5");
  EXPECT_EQ(refused({"--threads", "1", "--start-or-resume", "--resume", "-o", run}),
            (Refusal{64, "--start-or-resume resumes when -o exists already: drop --resume"}));
  EXPECT_EQ(refused({"--threads", "1", "--start-or-resume", "-f", "-o", run}),
            (Refusal{64, "--start-or-resume continues what -f would overwrite: drop -f"}));
  EXPECT_EQ(refused({"--threads", "1", "--start-or-resume"}),
            (Refusal{64, "--start-or-resume needs -o FILE, the run's checkpoint"}));
  EXPECT_FALSE(request({"--threads", "1", "--start-or-resume", "-o", run}).resume);
  dir_.write("run.h5", "a checkpoint");
  const train::TrainRequest again = request({"--threads", "1", "--start-or-resume", "-o", run});
  EXPECT_TRUE(again.resume);
  EXPECT_TRUE(again.start_or_resume);
}

TEST_F(TrainOptions, DataParallelSettingsAreChecked) {
  const train::TrainRequest r =
      request({"--threads", "1", "--nproc-per-node", "4", "--dist-backend", "gloo", "--dist-timeout", "2m"});
  EXPECT_EQ(r.nproc_per_node, 4);
  EXPECT_EQ(r.dist_backend, "gloo");
  EXPECT_DOUBLE_EQ(r.dist_timeout, 120);
  EXPECT_EQ(refused({"--threads", "1", "--nproc-per-node", "0"}), (Refusal{64, "--nproc-per-node must be at least 1"}));
  EXPECT_EQ(refused({"--threads", "1", "--dist-backend", "mpi"}),
            (Refusal{64, "--dist-backend must be auto, gloo or nccl, not 'mpi'"}));
  EXPECT_EQ(refused({"--threads", "1", "--dist-timeout", "0"}), (Refusal{64, "--dist-timeout must be positive"}));
  EXPECT_EQ(refused({"--threads", "1", "--dist-timeout", "soon"}),
            (Refusal{64, "--dist-timeout: not a duration: 'soon' (use e.g. 90s, 15m, 2h, 1h30m)"}));
}

TEST_F(TrainOptions, Phase2StartsFromACheckpointAndMakesNoNewModelChoices) {
  const train::TrainRequest r = request({"--threads", "1", "--init", "p1.h5", "--lr", "1e-3", "tokens.h5", "-o", "p2.h5"},
                                        Phase::kTwo);
  EXPECT_EQ(r.train.phase, "phase2");
  EXPECT_EQ(r.init, "p1.h5");
  EXPECT_FALSE(r.reset_optimizer);
  EXPECT_EQ(r.train.schedule_from, "phase");
  EXPECT_EQ(r.given, (std::set<std::string>{"lr"}));
  EXPECT_TRUE(r.model_given.empty());
  EXPECT_EQ(request({"--threads", "1", "--init", "p1.h5", "--reset-optimizer", "--schedule-from", "run"}, Phase::kTwo)
                .train.schedule_from,
            "run");
  EXPECT_EQ(refused({"--threads", "1", "tokens.h5"}, Phase::kTwo), (Refusal{64, "phase 2 needs --init PHASE1.h5 (or --resume)"}));
  EXPECT_TRUE(request({"--threads", "1", "--resume", "-o", "p2.h5"}, Phase::kTwo).resume);
  EXPECT_EQ(refused({"--threads", "1", "--init", "p1.h5", "--cmem-rate", "2"}, Phase::kTwo).line.rfind(
                "unrecognised option '--cmem-rate'", 0),
            0u);
  EXPECT_EQ(refused({"--threads", "1", "--init", "p1.h5"}, Phase::kOne).line.rfind("unrecognised option '--init'", 0), 0u);
}

TEST_F(TrainOptions, AnOutputMayNotReplaceTheTokensOrTheBestCheckpoint) {
  const std::string tokens = dir_.write("tokens.h5", "tokens");
  EXPECT_EQ(refused({"--threads", "1", tokens, "-o", tokens}),
            (Refusal{64, "--output is " + tokens + ", which is also TOKENS: writing it would replace what is read (write "
                         "to another file)"}));
  const std::string run = dir_.file("run.h5"), best = dir_.file("run.best.h5");
  EXPECT_EQ(refused({"--threads", "1", tokens, "-o", run, "--metrics", best}),
            (Refusal{64, "--metrics is " + best + ", which --output (the best checkpoint) writes too (give each its own "
                         "file)"}));
  EXPECT_EQ(refused({"--threads", "1", "--lr", "nan"}), (Refusal{64, "--lr must be a finite number, not nan"}));
}

TEST_F(TrainOptions, AGridsOverridesAreCheckedAsPhase1ChecksThemNamingWhereTheyWereWritten) {
  const std::string base = dir_.write("base.ini", "lr = 0.01\nn-layer = 3\n");
  const options::Phase1Settings s = options::phase1_settings(base, {{"n-layer", "2"}, {"cutoffs", "100,300"}}, "g.ini:3");
  EXPECT_DOUBLE_EQ(s.train.lr, 0.01);
  EXPECT_EQ(s.model.n_layer, 2);
  EXPECT_EQ(s.model.cutoffs, (std::vector<int64_t>{100, 300}));
  EXPECT_GE(s.model.n_token, 302);  // a vocab the cutoffs fit
  bool listed = false;
  for (const auto& [key, value] : s.settings) listed |= key == "n-layer" && value == "2";
  EXPECT_TRUE(listed);

  EXPECT_EQ(refusal([] { options::phase1_settings("", {{"lr", "-1"}}, "g.ini: [axes]"); }),
            (Refusal{78, "g.ini: [axes]: lr must be positive"}));
  EXPECT_EQ(refusal([] { options::phase1_settings("", {{"ff", "off"}}, "g.ini:4"); }),
            (Refusal{78, "g.ini:4: ff can be off only with persistent-mem > 0 (the persistent vectors replace it)"}));
  EXPECT_EQ(refusal([] { options::phase1_settings("", {{"n-layer", "two"}}, "g.ini:5"); }),
            (Refusal{78, "g.ini:5: the argument ('two') for option 'n-layer' is invalid"}));
  EXPECT_EQ(refusal([&] { options::phase1_settings(base, {{"skip-p", "2"}}); }), (Refusal{64, "--skip-p must be in [0, 1]"}));
}
