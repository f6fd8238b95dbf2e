// Ablation grids: expansion (axes product, explicit runs, naming), budget splitting, the Makefile,
// and reports read back from hand-written run directories.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "xl/ablate/grid.h"
#include "xl/ablate/makefile_plan.h"
#include "xl/ablate/run_report.h"
#include "xl/ablate/tables.h"
#include "xl/util/error.h"
#include "support/test_support.h"

using namespace xl;
namespace fs = std::filesystem;

namespace {

using xl::test::TempDir;

const std::string kTiny = std::string(XL_SOURCE_DIR) + "/share/xl/configs/tiny.ini";

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

ablate::Grid parse(const std::string& body, const std::string& path = "/tmp/grid.ini") {
  return ablate::parse_grid("[grid]\nname = g\nbase-config = " + kTiny + "\n" + body, path);
}

std::vector<std::string> names(const ablate::Grid& g) {
  std::vector<std::string> out;
  for (const auto& r : g.runs) out.push_back(r.name);
  return out;
}

// Runs `f`, expecting an xl::Error with `code` whose message contains every `parts`.
template <typename F>
void expect_error(F f, int code, std::vector<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// The run directories of a grid of four runs as xl-ablate leaves them in `d`: one finished, one
// finished after a resume, one stopped in phase 1 with its last line half-written, one not started.
void write_report_runs(const std::string& d) {
  auto g = parse("p1-steps = 10\np2-steps = 5\ntable-rows = run\ntable-cols = phases\n"
                 "[run base]\nlabel = Transformer-XL\n[run skip]\n[axes]\nphases = p1,p1+p2\n");
  ASSERT_EQ(g.runs.size(), 4u);
  write(d + "/grid.json", ablate::grid_json(g).dump());
  for (const auto& r : g.runs) write(d + "/" + r.name + "/run.json", ablate::run_json(g, r).dump());
  // base,phases=p1: finished.
  write(d + "/base,phases=p1/p1.jsonl",
        R"({"event":"start","step":0,"parameters":1234}
{"event":"train","step":5,"ms_per_batch":100.0,"elapsed":1.0}
{"event":"valid","step":5,"bpc":3.5}
{"event":"train","step":10,"ms_per_batch":120.0,"elapsed":2.0}
{"event":"valid","step":10,"bpc":3.0}
{"event":"done","step":10,"reason":"reached --max-steps 10","elapsed":2.5,"peak_rss_mb":300.0}
)");
  write(d + "/base,phases=p1/dev.jsonl", R"({"tokens":100,"loss":2.0,"bpc":2.885,"peak_rss_mb":350.0})" "\n");
  write(d + "/base,phases=p1/test.jsonl", R"({"tokens":100,"loss":2.1,"bpc":3.03,"peak_rss_mb":340.0})" "\n");
  // base,phases=p1+p2: finished, interrupted and resumed once in phase 1.
  write(d + "/base,phases=p1+p2/p1.jsonl",
        R"({"event":"start","step":0,"parameters":1234}
{"event":"train","step":4,"ms_per_batch":100.0,"elapsed":1.0}
{"event":"done","step":4,"reason":"signal 2","peak_rss_mb":310.0}
{"event":"start","step":4,"parameters":1234,"resumed":true}
{"event":"train","step":10,"ms_per_batch":110.0,"elapsed":3.0}
{"event":"valid","step":10,"bpc":3.2}
{"event":"done","step":10,"reason":"reached --max-steps 10","elapsed":3.5,"peak_rss_mb":320.0}
)");
  write(d + "/base,phases=p1+p2/p2.jsonl",
        R"({"event":"start","step":10,"parameters":1234}
{"event":"train","step":15,"ms_per_batch":130.0,"elapsed":0.5}
{"event":"valid","step":15,"bpc":2.9}
{"event":"done","step":15,"reason":"reached --max-steps 15","elapsed":1.0,"peak_rss_mb":330.0}
)");
  write(d + "/base,phases=p1+p2/dev.jsonl", R"({"bpc":2.5,"peak_rss_mb":300.0})" "\n");
  write(d + "/base,phases=p1+p2/test.jsonl", R"({"bpc":2.6})" "\n");
  // skip,phases=p1: stopped in phase 1 (its last line half-written).
  write(d + "/skip,phases=p1/p1.jsonl",
        R"({"event":"start","step":0,"parameters":1234}
{"event":"train","step":4,"ms_per_batch":90.0,"elapsed":0.4}
{"event":"tra)");
  // skip,phases=p1+p2: not started (no directory at all).
  fs::remove_all(d + "/skip,phases=p1+p2");
}

}  // namespace

TEST(Ablation, AxesExpandToTheirProductLastAxisFastest) {
  auto g = parse("p1-steps = 10\np2-steps = 5\n[axes]\nsch-beta = 0, 0.1 ,0.2\nphases = p1, p1+p2\n");
  ASSERT_EQ(g.runs.size(), 6u);
  EXPECT_EQ(names(g), (std::vector<std::string>{"sch-beta=0,phases=p1", "sch-beta=0,phases=p1+p2", "sch-beta=0.1,phases=p1",
                                                "sch-beta=0.1,phases=p1+p2", "sch-beta=0.2,phases=p1", "sch-beta=0.2,phases=p1+p2"}));
  for (size_t i = 0; i < g.runs.size(); ++i) EXPECT_EQ(g.runs[i].index, static_cast<int>(i));
  EXPECT_EQ(g.runs[3].phases, ablate::Phases::kP1P2);
  EXPECT_EQ(g.runs[3].value_of("sch-beta"), "0.1");
  EXPECT_EQ(g.runs[3].options.at("sch-beta"), "0.1");
  EXPECT_EQ(g.runs[3].options.at("n-layer"), "4");  // from tiny.ini
  EXPECT_EQ(g.runs[3].value_of("phases"), "p1+p2");
  // phases is not an option: it never reaches the trainer's command line.
  for (const auto& [k, v] : g.runs[3].overrides) EXPECT_NE(k, "phases");

  auto g3 = parse("[axes]\nn-head = 2,4\nd-head = 8,16,32\nsch-beta = 0,0.1\n");
  EXPECT_EQ(g3.runs.size(), 12u);
  EXPECT_EQ(g3.runs[0].name, "n-head=2,d-head=8,sch-beta=0");
  EXPECT_EQ(g3.runs[1].name, "n-head=2,d-head=8,sch-beta=0.1");
  EXPECT_EQ(g3.runs[11].name, "n-head=4,d-head=32,sch-beta=0.1");
}

TEST(Ablation, ExplicitRunsInFileOrderCrossedWithTheAxesTheyDoNotSet) {
  auto g = parse(
      "p1-steps = 10\np2-steps = 5\n"
      "[common]\nsch-beta = 0\n"
      "[run baseline]\nlabel = Transformer-XL\nskip-schedule = none\nphases = p1\n"
      "[run linear]\nskip-schedule = linear\n"
      "[run sch]\nsch-beta = 0.1\nskip-schedule = none\n"
      "[axes]\nphases = p1, p1+p2\nsch-beta = 0, 0.2\n");
  // baseline pins phases: only sch-beta varies; sch pins sch-beta: only phases varies.
  EXPECT_EQ(names(g), (std::vector<std::string>{"baseline,sch-beta=0", "baseline,sch-beta=0.2", "linear,phases=p1,sch-beta=0",
                                                "linear,phases=p1,sch-beta=0.2", "linear,phases=p1+p2,sch-beta=0",
                                                "linear,phases=p1+p2,sch-beta=0.2", "sch,phases=p1", "sch,phases=p1+p2"}));
  EXPECT_EQ(g.runs[0].label, "Transformer-XL");
  EXPECT_EQ(g.runs[0].section, "baseline");
  EXPECT_EQ(g.runs[0].value_of("run"), "baseline");
  EXPECT_EQ(g.runs[0].phases, ablate::Phases::kP1);
  EXPECT_EQ(g.runs[1].value_of("sch-beta"), "0.2");  // the axis wins over [common]
  EXPECT_EQ(g.runs[6].value_of("sch-beta"), "0.1");
  EXPECT_EQ(g.runs[6].options.at("skip-schedule"), "none");

  auto only = parse("[run a]\nn-head = 2\nd-head = 8\n[run b]\nphases = p1\n");
  EXPECT_EQ(names(only), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(only.runs[0].options.at("n-head"), "2");
  EXPECT_EQ(only.runs[1].options.at("n-head"), "4");
  EXPECT_EQ(only.runs[0].value_of("run"), "a");
}

TEST(Ablation, RunNamesAreSanitizedAndUnique) {
  EXPECT_EQ(ablate::sanitize_run_name("sch-beta=0.1,phases=p1+p2"), "sch-beta=0.1,phases=p1+p2");
  EXPECT_EQ(ablate::sanitize_run_name("a b/c:d$e"), "a_b_c_d_e");
  EXPECT_EQ(ablate::sanitize_run_name("heads 4 (TXL)"), "heads_4__TXL_");
  EXPECT_EQ(ablate::sanitize_run_name(""), "run");
  EXPECT_EQ(ablate::sanitize_run_name(".."), "run..");
  EXPECT_EQ(ablate::sanitize_run_name(".hidden"), "_hidden");
  EXPECT_EQ(ablate::sanitize_run_name("-x"), "_x");
  auto g = parse("[run a/b]\n[run c d]\n");
  EXPECT_EQ(names(g), (std::vector<std::string>{"a_b", "c_d"}));
  expect_error([] { parse("[run a/b]\n[run a:b]\n"); }, kExitConfig, {"/tmp/grid.ini", "a_b"});
}

TEST(Ablation, BudgetsAreEqualPerRunWhateverThePhases) {
  ablate::GridBudget steps;
  steps.p1_steps = 800;
  steps.p2_steps = 200;
  auto one = ablate::split_budget(steps, ablate::Phases::kP1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(*one[0].max_steps, 1000);
  EXPECT_FALSE(one[0].time_budget);
  auto two = ablate::split_budget(steps, ablate::Phases::kP1P2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(*two[0].max_steps, 800);
  EXPECT_EQ(*two[1].max_steps, 200);  // each phase's own budget: the trainers count from its start
  EXPECT_FALSE(two[1].time_budget);

  ablate::GridBudget time;
  time.p1_time = 120;
  time.p2_time = 60;
  one = ablate::split_budget(time, ablate::Phases::kP1);
  EXPECT_DOUBLE_EQ(*one[0].time_budget, 180);
  EXPECT_FALSE(one[0].max_steps);
  two = ablate::split_budget(time, ablate::Phases::kP1P2);
  EXPECT_DOUBLE_EQ(*two[0].time_budget, 120);
  EXPECT_DOUBLE_EQ(*two[1].time_budget, 60);  // each phase's own wall time
  EXPECT_FALSE(two[1].max_steps);

  auto g = parse("p1-time = 2m\np2-time = 1m\n[axes]\nphases = p1,p1+p2\n");
  EXPECT_DOUBLE_EQ(*g.runs[0].budgets[0].time_budget, 180);
  EXPECT_DOUBLE_EQ(*g.runs[1].budgets[1].time_budget, 60);
  auto k = parse("p1-steps = 4K\np2-steps = 1K\n[axes]\nphases = p1\n");
  EXPECT_EQ(*k.runs[0].budgets[0].max_steps, 5000);
}

TEST(Ablation, EvaluationDefaultsToTheRunsValidationSettings) {
  auto g = parse("[axes]\ntgt-len = 64,128\n");
  EXPECT_EQ(g.runs[0].eval.tgt_len, 128);  // tiny.ini's eval-tgt-len
  EXPECT_EQ(g.runs[0].eval.mem_len, 256);  // tiny.ini's eval-mem-len
  auto e = parse("eval-tgt-len = 32\neval-mem-len = 96\neval-max-tokens = 10K\neval-batch-size = 4\n[axes]\nsch-beta = 0\n");
  EXPECT_EQ(e.runs[0].eval.tgt_len, 32);
  EXPECT_EQ(e.runs[0].eval.mem_len, 96);
  EXPECT_EQ(e.runs[0].eval.max_tokens, "10K");
  EXPECT_EQ(e.runs[0].eval.batch_size, 4);
  // Values may start with '-': -1 is the trainers' "derive it" for eval-mem-len.
  auto neg = parse("[axes]\neval-mem-len = -1\n");
  EXPECT_EQ(neg.runs[0].options.at("eval-mem-len"), "-1");
  EXPECT_EQ(neg.runs[0].eval.mem_len, 128 + 128 - 128);  // tiny.ini: mem-len + tgt-len - eval-tgt-len
}

TEST(Ablation, BadGridsAreConfigErrorsNamingTheFileAndLine) {
  expect_error([] { parse("[axes]\nn-heads = 2,4\n"); }, kExitConfig, {"/tmp/grid.ini:5", "n-heads", "xl-train-phase1"});
  expect_error([] { parse("colour = blue\n[axes]\nsch-beta = 0\n"); }, kExitConfig, {"/tmp/grid.ini:4", "colour"});
  expect_error([] { parse("[axes]\nmax-steps = 5\n"); }, kExitConfig, {"/tmp/grid.ini:5", "p1-steps"});
  expect_error([] { parse("[axes]\nphases = p2\n"); }, kExitConfig, {"/tmp/grid.ini:5", "p1+p2"});
  expect_error([] { parse("[axes]\nn-head = two\n"); }, kExitConfig, {"/tmp/grid.ini", "n-head"});
  expect_error([] { parse("[axes]\nsch-beta = 0,0\n"); }, kExitConfig, {"/tmp/grid.ini:5", "twice"});
  expect_error([] { parse("[run a]\nphases = p1+p2\n"); }, kExitConfig, {"/tmp/grid.ini", "phase-2 budget"});
  expect_error([] { parse(""); }, kExitConfig, {"/tmp/grid.ini", "no runs"});
  expect_error([] { parse("[extra]\n"); }, kExitConfig, {"/tmp/grid.ini:4", "extra"});
  expect_error([] { parse("table-rows = n-head\n[axes]\nsch-beta = 0\n"); }, kExitConfig, {"table-cols"});
  expect_error([] { ablate::parse_grid("[grid]\nbase-config = nope\n[axes]\nsch-beta = 0\n", "/tmp/g.ini"); }, kExitConfig,
               {"/tmp/g.ini:2", "nope"});
  expect_error([] { ablate::load_grid("/nonexistent/grid.ini"); }, kExitNoInput, {"/nonexistent/grid.ini"});
}

TEST(Ablation, BaseConfigNamesAreFoundBesideTheGrids) {
  // share/xl/grids/x.ini finds "tiny" in share/xl/configs.
  auto g = ablate::parse_grid("[grid]\nbase-config = tiny\n[axes]\nsch-beta = 0\n",
                                std::string(XL_SOURCE_DIR) + "/share/xl/grids/x.ini");
  EXPECT_EQ(fs::path(g.base_config).filename(), "tiny.ini");
  EXPECT_TRUE(fs::exists(g.base_config));
  EXPECT_EQ(g.name, "x");  // the file's stem without a name key
}

TEST(Ablation, TheShippedGridsExpandToThePapersRuns) {
  const std::string dir = std::string(XL_SOURCE_DIR) + "/share/xl/grids/";
  for (const std::string suffix : {"", "-tiny"}) {
    auto t5 = ablate::load_grid(dir + "table5" + suffix + ".ini");
    EXPECT_EQ(t5.runs.size(), 5u);
    EXPECT_EQ(t5.runs[4].phases, ablate::Phases::kP1P2);
    EXPECT_EQ(t5.runs[4].options.at("sch-beta"), "0.1");
    EXPECT_EQ(t5.runs[0].options.at("skip-schedule"), "none");
    auto t6 = ablate::load_grid(dir + "table6" + suffix + ".ini");
    EXPECT_EQ(t6.runs.size(), 5u);
    auto t79 = ablate::load_grid(dir + "table7-9" + suffix + ".ini");
    EXPECT_EQ(t79.runs.size(), 13u);
    auto t10 = ablate::load_grid(dir + "table10" + suffix + ".ini");
    ASSERT_EQ(t10.runs.size(), 8u);
    EXPECT_EQ(t10.table_rows, "n-head");
    for (const auto& r : t10.runs)
      EXPECT_EQ(std::stoi(r.options.at("n-head")) * std::stoi(r.options.at("d-head")), std::stoi(r.options.at("d-model")));
  }
  auto paper = ablate::load_grid(dir + "table5.ini");
  EXPECT_EQ(paper.runs[0].options.at("n-layer"), "8");
  EXPECT_EQ(paper.runs[0].options.at("batch-size"), "50");
  EXPECT_EQ(*paper.runs[0].budgets[0].max_steps, 600000);
  EXPECT_EQ(paper.runs[0].eval.mem_len, 640);
}

TEST(Ablation, MakefileHasOneTargetChainPerRunAndResumes) {
  auto g = parse("p1-steps = 10\np2-steps = 5\n[axes]\nsch-beta = 0,0.1\nphases = p1,p1+p2\n");
  ablate::MakefileSettings s;
  s.bin_dir = "/opt/xl/bin";
  s.out_dir = "/tmp/out";
  s.tokens = "/data/tokens.h5";
  s.threads = 2;
  std::string mk = ablate::makefile_text(g, s);
  EXPECT_NE(mk.find("SHELL := bash\n"), std::string::npos);
  EXPECT_NE(mk.find(".SHELLFLAGS := -euo pipefail -c\n"), std::string::npos);
  EXPECT_NE(mk.find(".DELETE_ON_ERROR:\n"), std::string::npos);
  EXPECT_NE(mk.find("BIN := /opt/xl/bin\n"), std::string::npos);
  EXPECT_NE(mk.find("TOKENS := /data/tokens.h5\n"), std::string::npos);
  EXPECT_NE(mk.find("THREADS ?= 2\n"), std::string::npos);
  EXPECT_EQ(count(mk, "/done.stamp: "), 4u);
  EXPECT_EQ(count(mk, "/p1.stamp: "), 4u);
  EXPECT_EQ(count(mk, "/p2.stamp: "), 2u);
  EXPECT_EQ(count(mk, "/dev.jsonl: "), 4u);
  EXPECT_EQ(count(mk, "/test.jsonl: "), 4u);
  EXPECT_EQ(count(mk, "/run.json:\n"), 4u);
  EXPECT_NE(mk.find("R1 := $(OUT)/sch-beta=0,phases=p1+p2\n"), std::string::npos);
  // `all` is the first rule and wants every run's done.stamp.
  auto all = mk.find("\nall:");
  ASSERT_NE(all, std::string::npos);
  EXPECT_LT(all, mk.find("/run.json:"));
  EXPECT_NE(mk.find("all: $(R0)/done.stamp $(R1)/done.stamp $(R2)/done.stamp $(R3)/done.stamp\n"), std::string::npos);
  // Resume when the checkpoint exists, else a fresh run that may overwrite leftovers.
  EXPECT_NE(mk.find("if [ -f $(R1)/p1.h5 ]; then m=--resume;"), std::string::npos);
  EXPECT_NE(mk.find("else m=-f;"), std::string::npos);
  EXPECT_NE(mk.find("if [ -f $(R1)/p2.h5 ]; then m=--resume;"), std::string::npos);
  EXPECT_NE(mk.find("else m=\"-f --init $(R1)/p1.h5\";"), std::string::npos);
  EXPECT_NE(mk.find("$(BIN)/xl-train-phase1 -c $(CONFIG)"), std::string::npos);
  // Budgets: the phase-1-only run trains all 15 steps in phase 1, the other 10 then 5 more.
  EXPECT_NE(mk.find("--sch-beta='0' --max-steps 15 --threads"), std::string::npos);
  EXPECT_NE(mk.find("--sch-beta='0' --max-steps 10 --threads"), std::string::npos);
  EXPECT_NE(mk.find("xl-train-phase2 --max-steps 5 --threads"), std::string::npos);
  // The evaluation of a two-phase run uses phase 2's best checkpoint.
  EXPECT_NE(mk.find("ck=$(R1)/p2.best.h5; [ -f $$ck ] || ck=$(R1)/p2.h5"), std::string::npos);
  EXPECT_NE(mk.find("ck=$(R0)/p1.best.h5"), std::string::npos);
  EXPECT_NE(mk.find("--split valid"), std::string::npos);
  EXPECT_NE(mk.find("--split test"), std::string::npos);

  s.tokens_text = "/data/corpus.txt";
  mk = ablate::makefile_text(g, s);
  EXPECT_NE(mk.find("TOKENS := $(OUT)/tokens.h5\n"), std::string::npos);
  EXPECT_NE(mk.find("$(TOKENS): /data/corpus.txt\n"), std::string::npos);
  EXPECT_NE(mk.find("xl-tokenize --mode byte --split 0.9,0.05,0.05"), std::string::npos);

  s.out_dir = "/tmp/with space";
  expect_error([&] { ablate::makefile_text(g, s); }, kExitUsage, {"--out", "with space"});
}

TEST(Ablation, MakefileRunsUnderMake) {
  // The generated text is a valid Makefile: make -n lists the commands of every run.
  if (std::system("make --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no make";
  TempDir tmp;
  // (No '=' in these names: make takes a goal such as a=b on its command line for an assignment.)
  auto g = parse("p1-steps = 10\np2-steps = 5\n[run a'b]\nlabel = it's\n[run c]\nphases = p1+p2\n");
  ablate::MakefileSettings s;
  s.bin_dir = "/opt/xl/bin";
  s.out_dir = tmp.path() + "/out";
  s.tokens = tmp.path() + "/tokens.h5";
  write(s.tokens, "");
  write(tmp.path() + "/Makefile", ablate::makefile_text(g, s));
  std::string cmd = "make -n -f " + tmp.path() + "/Makefile > " + tmp.path() + "/plan 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(tmp.path() + "/plan");
  std::string plan((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(count(plan, "xl-train-phase1"), 2u) << plan;
  EXPECT_EQ(count(plan, "xl-train-phase2"), 1u) << plan;
  EXPECT_EQ(count(plan, "xl-eval-longctx"), 4u) << plan;
}

TEST(Ablation, ReportReadsFinishedAndUnfinishedRuns) {
  TempDir tmp;
  const std::string d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(write_report_runs(d));
  auto rep = ablate::read_report(d);
  ASSERT_EQ(rep.runs.size(), 4u);
  EXPECT_EQ(rep.grid_name, "g");
  EXPECT_EQ(rep.metric(), "bpc");
  const auto& a = rep.runs[0];
  EXPECT_EQ(a.name, "base,phases=p1");
  EXPECT_TRUE(a.finished);
  EXPECT_EQ(a.status, "done");
  EXPECT_EQ(a.label, "Transformer-XL");
  EXPECT_DOUBLE_EQ(*a.dev, 2.885);
  EXPECT_DOUBLE_EQ(*a.test, 3.03);
  EXPECT_EQ(*a.parameters, 1234);
  ASSERT_EQ(a.ms_per_batch.size(), 1u);
  EXPECT_DOUBLE_EQ(*a.ms_per_batch[0], 110.0);
  EXPECT_DOUBLE_EQ(a.wall_s, 2.5);
  EXPECT_DOUBLE_EQ(*a.peak_rss_mb, 350.0);
  ASSERT_EQ(a.curve.size(), 2u);
  EXPECT_EQ(a.curve[1].step, 10);
  const auto& b = rep.runs[1];
  EXPECT_TRUE(b.finished);
  ASSERT_EQ(b.ms_per_batch.size(), 2u);
  EXPECT_DOUBLE_EQ(*b.ms_per_batch[0], 105.0);
  EXPECT_DOUBLE_EQ(*b.ms_per_batch[1], 130.0);
  EXPECT_DOUBLE_EQ(b.wall_s, 4.5);
  EXPECT_EQ(b.steps, (std::vector<int64_t>{10, 15}));
  EXPECT_EQ(b.curve.size(), 2u);
  const auto& c = rep.runs[2];
  EXPECT_FALSE(c.finished);
  EXPECT_EQ(c.status, "phase 1 at step 4");
  EXPECT_FALSE(c.dev);
  const auto& e = rep.runs[3];
  EXPECT_FALSE(e.finished);
  EXPECT_EQ(e.status, "not started");
}

// The report of those runs as Markdown (with the pivot of runs by phases), TSV and JSON Lines.
TEST(Ablation, ReportPrintsFinishedAndUnfinishedRunsAsTables) {
  TempDir tmp;
  const std::string d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(write_report_runs(d));
  auto rep = ablate::read_report(d);
  std::string md = ablate::report_markdown(rep);
  EXPECT_NE(md.find("| base,phases=p1 | Transformer-XL | p1 | 2.885 | 3.030 | 1234 | 110 | 0:00:03 | 350 | done |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| base,phases=p1+p2 | Transformer-XL | p1+p2 | 2.500 | 2.600 | 1234 | 105, 130 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| skip,phases=p1 |  | p1 | - | - | 1234 | 90 |"), std::string::npos) << md;
  EXPECT_NE(md.find("not started"), std::string::npos);
  EXPECT_NE(md.find("2 of 4 runs finished"), std::string::npos);
  // The pivot: runs on rows, phases in columns, dev bpc in cells.
  EXPECT_NE(md.find("| run \\ phases | p1 | p1+p2 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| base | 2.885 | 2.500 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| skip | - | - |"), std::string::npos) << md;

  std::string tsv = ablate::report_tsv(rep);
  EXPECT_EQ(tsv.substr(0, tsv.find('\n')),
            "run\tlabel\tphases\tdev bpc\ttest bpc\tparameters\tms/batch\twall time\tpeak RSS MB\tstatus");
  EXPECT_NE(tsv.find("base,phases=p1+p2\tTransformer-XL\tp1+p2\t2.500\t2.600\t1234\t105, 130\t"), std::string::npos) << tsv;

  std::string jl = ablate::report_jsonl(rep);
  std::istringstream lines(jl);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(lines, line)) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[1]["dev"], 2.5);
  EXPECT_EQ(rows[1]["ms_per_batch"], nlohmann::json({105.0, 130.0}));
  EXPECT_EQ(rows[1]["run"], "base,phases=p1+p2");
  EXPECT_EQ(rows[1]["keys"]["run"], "base");  // the pivot's keys
  EXPECT_EQ(rows[1]["keys"]["phases"], "p1+p2");
  EXPECT_EQ(rows[2]["finished"], false);
  EXPECT_TRUE(rows[3]["dev"].is_null());
}

// Without grid.json the runs are found by their run.json; word-level runs report perplexity.
TEST(Ablation, ReportFindsRunsWithoutTheirGridAndWordLevelRuns) {
  TempDir tmp;
  const std::string d = tmp.path();
  ASSERT_NO_FATAL_FAILURE(write_report_runs(d));
  // Without grid.json every RUN/run.json is found, in grid order.
  fs::remove(d + "/grid.json");
  auto scanned = ablate::read_report(d);
  ASSERT_EQ(scanned.runs.size(), 3u);
  EXPECT_EQ(scanned.runs[0].name, "base,phases=p1");
  EXPECT_EQ(scanned.runs[2].name, "skip,phases=p1");
  EXPECT_EQ(scanned.table_rows, "run");

  // Word-level runs report perplexity; a run without run.json guesses its phases.
  write(d + "/w/words/p1.jsonl", R"({"event":"start","parameters":9}
{"event":"done","step":3,"reason":"reached --max-steps 3","elapsed":1.0}
)");
  write(d + "/w/words/p2.jsonl", R"({"event":"start","parameters":9}
{"event":"valid","step":4,"ppl":300.5}
{"event":"done","step":4,"reason":"used the --time-budget of 1s","elapsed":1.0}
)");
  write(d + "/w/words/dev.jsonl", R"({"ppl":250.25})" "\n");
  write(d + "/w/words/test.jsonl", R"({"ppl":260.75})" "\n");
  auto w = ablate::read_report(d + "/w");
  ASSERT_EQ(w.runs.size(), 1u);
  EXPECT_EQ(w.runs[0].phases, "p1+p2");
  EXPECT_TRUE(w.runs[0].finished);
  EXPECT_EQ(w.metric(), "ppl");
  EXPECT_NE(ablate::report_markdown(w).find("| words | p1+p2 | 250.25 | 260.75 | 9 | -, - | 0:00:02 |"), std::string::npos)
      << ablate::report_markdown(w);

  expect_error([&] { ablate::read_report(d + "/w/words/none"); }, kExitNoInput, {"none"});
  fs::create_directories(d + "/empty");
  expect_error([&] { ablate::read_report(d + "/empty"); }, kExitNoInput, {"empty"});
}



TEST(Ablation, ReportTakesAResumedRunsEventsOverThoseItsKillLost) {
  TempDir tmp;
  const std::string d = tmp.path();
  auto g = parse("p1-steps = 12\n[run base]\n");
  ASSERT_EQ(g.runs.size(), 1u);
  write(d + "/grid.json", ablate::grid_json(g).dump());
  const std::string run = d + "/" + g.runs[0].name;
  write(run + "/run.json", ablate::run_json(g, g.runs[0]).dump());
  // SIGKILLed after step 8's validation, before its checkpoint: resumed from step 4's, it trains
  // steps 5-8 again, and their new events are the run's.
  write(run + "/p1.jsonl",
        R"({"event":"start","step":0,"parameters":99}
{"event":"train","step":4,"ms_per_batch":100.0,"elapsed":1.0}
{"event":"valid","step":4,"bpc":4.0}
{"event":"checkpoint","step":4}
{"event":"train","step":8,"ms_per_batch":500.0,"elapsed":2.0}
{"event":"valid","step":8,"bpc":3.9}
{"event":"start","step":4,"parameters":99,"resumed":true}
{"event":"train","step":8,"ms_per_batch":110.0,"elapsed":2.1}
{"event":"valid","step":8,"bpc":3.5}
{"event":"train","step":12,"ms_per_batch":120.0,"elapsed":3.0}
{"event":"valid","step":12,"bpc":3.0}
{"event":"done","step":12,"reason":"reached --max-steps 12","elapsed":3.2,"peak_rss_mb":300.0}
)");
  const auto rep = ablate::read_report(d);
  ASSERT_EQ(rep.runs.size(), 1u);
  const auto& r = rep.runs[0];
  ASSERT_EQ(r.curve.size(), 3u);
  EXPECT_EQ(r.curve[0].step, 4);
  EXPECT_EQ(r.curve[1].step, 8);
  EXPECT_DOUBLE_EQ(r.curve[1].value, 3.5);
  EXPECT_EQ(r.curve[2].step, 12);
  ASSERT_EQ(r.ms_per_batch.size(), 1u);
  EXPECT_DOUBLE_EQ(*r.ms_per_batch[0], 110.0);  // (100 + 110 + 120) / 3
  EXPECT_DOUBLE_EQ(r.wall_s, 3.2);
}

TEST(Ablation, SeedsRepeatEachSettingAndTablesShowMeansAndPairedDifferences) {
  auto g = parse("p1-steps = 10\nseeds = 1, 2, 3\nbaseline = base\n[run base]\nsch-beta = 0\n[run sch]\nsch-beta = 0.1\n");
  EXPECT_EQ(names(g), (std::vector<std::string>{"base,seed=1", "base,seed=2", "base,seed=3", "sch,seed=1", "sch,seed=2", "sch,seed=3"}));
  EXPECT_EQ(g.baseline, "base");
  EXPECT_EQ(g.runs[4].setting, "sch");
  EXPECT_EQ(g.runs[4].seed, 2);
  EXPECT_EQ(g.runs[4].options.at("seed"), "2");
  EXPECT_EQ(g.runs[4].overrides.back(), (std::pair<std::string, std::string>{"seed", "2"}));
  expect_error([] { parse("seeds = 1\n[axes]\nseed = 4,5\n"); }, kExitConfig, {"seeds = 1,2,3"});
  expect_error([] { parse("seeds = 1,1\n[run a]\n"); }, kExitConfig, {"twice"});
  expect_error([] { parse("baseline = nope\n[run a]\n"); }, kExitConfig, {"baseline", "nope"});

  TempDir tmp;
  const std::string d = tmp.path();
  write(d + "/grid.json", ablate::grid_json(g).dump());
  // dev bpc per seed: base 3.0, 3.2, 3.1; sch 2.9, 3.0, 3.2 (the last seed still running for test).
  const double base_dev[] = {3.0, 3.2, 3.1}, sch_dev[] = {2.9, 3.0, 3.2};
  for (const auto& r : g.runs) {
    const std::string dir = d + "/" + r.name;
    write(dir + "/run.json", ablate::run_json(g, r).dump());
    write(dir + "/p1.jsonl", R"({"event":"start","step":0,"parameters":10}
{"event":"done","step":10,"reason":"reached --max-steps 10","elapsed":1.0}
)");
    const double dev = (r.setting == "base" ? base_dev : sch_dev)[r.seed - 1];
    write(dir + "/dev.jsonl", "{\"bpc\":" + std::to_string(dev) + "}\n");
    write(dir + "/test.jsonl", "{\"bpc\":" + std::to_string(dev + 0.1) + "}\n");
  }
  auto rep = ablate::read_report(d);
  ASSERT_TRUE(rep.seeded());
  EXPECT_EQ(rep.baseline, "base");
  EXPECT_EQ(rep.runs[3].setting, "sch");
  EXPECT_EQ(*rep.runs[3].seed, 1);
  const std::string md = ablate::report_markdown(rep);
  // Means: base 3.100, sd 0.1, half width t(0.975, 2) 0.1 / sqrt 3 = 0.248; sch 3.033, sd 0.153, 0.379.
  EXPECT_NE(md.find("| base |  | p1 | 3 | 3.100 ± 0.248 | 3.200 ± 0.248 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| sch |  | p1 | 3 | 3.033 ± 0.379 | 3.133 ± 0.379 |"), std::string::npos) << md;
  // Paired by seed: -0.1, -0.2, +0.1: mean -0.0667, sd 0.1528, half width 0.3795.
  EXPECT_NE(md.find("| sch |  | 3 | -0.0667 ± 0.3795 | -0.0667 ± 0.3795 |"), std::string::npos) << md;
  std::istringstream lines(ablate::report_jsonl(rep));
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(lines, line)) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 6u + 2u + 1u);
  EXPECT_EQ(rows[6]["row"], "setting");
  EXPECT_NEAR(rows[6]["dev"]["mean"].get<double>(), 3.1, 1e-9);
  EXPECT_EQ(rows[8]["row"], "paired");
  EXPECT_NEAR(rows[8]["dev_diff"]["ci95"][0].get<double>(), -0.0667 - 0.3795, 1e-3);
  // An unfinished seed leaves its setting's means and pairs.
  fs::remove(d + "/sch,seed=3/test.jsonl");
  const std::string partial = ablate::report_markdown(ablate::read_report(d));
  EXPECT_NE(partial.find("| sch |  | p1 | 2 | 2.950 ± 0.635 |"), std::string::npos) << partial;
}
