// MetricsLog's TensorBoard side: which numbers of a metrics event become scalars and under which
// tags (read back from the event file by the test's own decoder, tensorboard/event_reader.h), and
// tensorboard_purge_step's choice of the step a run's curves start again at.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "tensorboard/event_reader.h"
#include "xl/train/metrics.h"

namespace {

namespace tfe = xl::test::tfevents;
using nlohmann::json;
using xl::train::MetricsLog;
using xl::train::tensorboard_purge_step;

// The single event file in `dir`.
std::string event_file_in(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path().string());
  EXPECT_EQ(files.size(), 1u);
  return files.empty() ? "" : files[0];
}

using Scalars = std::map<std::string, float>;

Scalars as_map(const tfe::Event& e) {
  Scalars out;
  for (const auto& [tag, value] : e.values) EXPECT_TRUE(out.emplace(tag, value).second) << "tag twice: " << tag;
  return out;
}

}  // namespace

// Numbers are EVENT/FIELD; an array's numbers EVENT/FIELD/I (I its index in the array, so the
// non-numbers skipped leave gaps); strings, booleans, nulls, objects and nested arrays are no
// scalars; "step" is the event's step, not a scalar.
TEST(MetricsTensorBoard, NumbersOfAnEventBecomeTaggedScalars) {
  xl::test::TempDir tmp;
  std::string path;
  {
    MetricsLog log;  // no JSON Lines file: TensorBoard only
    log.add_tensorboard(tmp.path(), -1);
    log.write("train", json::parse(R"({"step": 40, "loss": 2.75, "lr": 0.00025, "tokens": 123456, "delta": -3,
        "heads": [0.5, "x", 2, true, null, [1, 2], -1.5], "name": "abc", "flag": true, "none": null,
        "obj": {"a": 1}, "empty": []})"));
    log.write("valid", json::parse(R"({"step": 50, "ppl": 33.5, "bpc": [1.25]})"));
    EXPECT_TRUE(log.failure().empty());
    path = event_file_in(tmp.path());
  }
  std::vector<tfe::Event> ev;
  ASSERT_NO_THROW(ev = tfe::read_events(path));
  ASSERT_EQ(ev.size(), 3u);  // version, train, valid
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_FALSE(ev[0].has_session_log);
  EXPECT_EQ(ev[1].step, 40);
  EXPECT_EQ(as_map(ev[1]), (Scalars{{"train/loss", 2.75f},
                                    {"train/lr", static_cast<float>(0.00025)},
                                    {"train/tokens", 123456.0f},
                                    {"train/delta", -3.0f},
                                    {"train/heads/0", 0.5f},
                                    {"train/heads/2", 2.0f},
                                    {"train/heads/6", -1.5f}}));
  EXPECT_EQ(ev[2].step, 50);
  EXPECT_EQ(as_map(ev[2]), (Scalars{{"valid/ppl", 33.5f}, {"valid/bpc/0", 1.25f}}));
}

// Only train and valid events with a step reach TensorBoard; the JSON Lines log gets them all.
TEST(MetricsTensorBoard, OnlyTrainAndValidEventsWithAStep) {
  xl::test::TempDir tmp;
  const std::string jsonl = tmp.file("metrics.jsonl"), dir = tmp.file("tb");
  std::string path;
  {
    MetricsLog log(jsonl, "xl-train", false, false);
    log.add_tensorboard(dir, -1);
    log.write("checkpoint", {{"step", 10}, {"loss", 1.0}});
    log.write("done", {{"step", 11}, {"loss", 1.0}});
    log.write("train", {{"loss", 1.0}});  // no step
    log.write("train", {{"step", 12}, {"loss", 0.5}});
    EXPECT_TRUE(log.failure().empty());
    path = event_file_in(dir);
  }
  std::vector<tfe::Event> ev;
  ASSERT_NO_THROW(ev = tfe::read_events(path));
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].step, 12);
  EXPECT_EQ(as_map(ev[1]), (Scalars{{"train/loss", 0.5f}}));

  std::ifstream in(jsonl);
  std::vector<std::string> events;
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    EXPECT_EQ(j["tool"], "xl-train");
    events.push_back(j["event"].get<std::string>());
  }
  EXPECT_EQ(events, (std::vector<std::string>{"checkpoint", "done", "train", "train"}));
}

// add_tensorboard's purge_from reaches the file: a SessionLog START at that step.
TEST(MetricsTensorBoard, PurgeStepReachesTheEventFile) {
  xl::test::TempDir tmp;
  std::string path;
  {
    MetricsLog log;
    log.add_tensorboard(tmp.path(), 801);
    log.write("train", {{"step", 801}, {"loss", 1.0}});
    path = event_file_in(tmp.path());
  }
  std::vector<tfe::Event> ev;
  ASSERT_NO_THROW(ev = tfe::read_events(path));
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_TRUE(ev[1].has_session_log);
  EXPECT_EQ(ev[1].session_status, 1);
  EXPECT_EQ(ev[1].step, 801);
  EXPECT_EQ(ev[2].step, 801);
}

// A run that continues (--resume, a later phase) or starts past step 0: the step after its start,
// whatever the directory holds.
TEST(TensorBoardPurgeStep, AContinuingRunStartsAfterItsStartStep) {
  xl::test::TempDir tmp;
  const std::string missing = tmp.file("none");
  EXPECT_EQ(tensorboard_purge_step(missing, 0, true, false), 1);
  EXPECT_EQ(tensorboard_purge_step(missing, 500, true, false), 501);
  EXPECT_EQ(tensorboard_purge_step(missing, 500, false, false), 501);
  tmp.write("events.out.tfevents.1.host.2.xl", "");
  EXPECT_EQ(tensorboard_purge_step(tmp.path(), 500, true, false), 501);
  EXPECT_EQ(tensorboard_purge_step(tmp.path(), 7, false, false), 8);
  EXPECT_EQ(tensorboard_purge_step(tmp.path(), 0, true, false), 1);
}

// A new run (step 0, not continuing): -1 where no events are (a missing directory, an empty one,
// one whose files only contain the prefix elsewhere in their names).
TEST(TensorBoardPurgeStep, ANewRunInADirectoryWithoutEventsPurgesNothing) {
  xl::test::TempDir tmp;
  EXPECT_EQ(tensorboard_purge_step(tmp.file("none"), 0, false, false), -1);
  EXPECT_EQ(tensorboard_purge_step(tmp.path(), 0, false, false), -1);
  tmp.write("notes.txt", "x");
  tmp.write("old.events.out.tfevents.1.host.2.xl", "");
  EXPECT_EQ(tensorboard_purge_step(tmp.path(), 0, false, false), -1);
  EXPECT_EQ(tensorboard_purge_step(tmp.path(), 0, false, true), -1);
}

// A new run where another's events are: 0 with may_replace (-f), else 73 naming the directory.
TEST(TensorBoardPurgeStep, ANewRunOverAnotherRunsEventsNeedsReplace) {
  xl::test::TempDir tmp;
  tmp.write("notes.txt", "x");
  tmp.write("events.out.tfevents.1700000000.host.42.xl", "");
  EXPECT_EQ(tensorboard_purge_step(tmp.path(), 0, false, true), 0);
  std::string what;
  EXPECT_EQ(xl::test::error_code([&] { tensorboard_purge_step(tmp.path(), 0, false, false); }, &what),
            xl::kExitCantCreat);
  EXPECT_NE(what.find(tmp.path()), std::string::npos) << what;
  EXPECT_NE(what.find("-f"), std::string::npos) << what;
}
