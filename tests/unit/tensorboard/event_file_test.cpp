// TensorBoard event files (xl/tensorboard/event_file.h) read back by the test's own TFRecord and
// protobuf decoder (tensorboard/event_reader.h): frames and CRCs, the file_version event, scalars
// (tags, steps, float values, wall times) and the SessionLog START that purges a resumed run's
// later steps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "support/test_support.h"
#include "tensorboard/event_reader.h"
#include "xl/tensorboard/event_file.h"

namespace {

namespace tfe = xl::test::tfevents;
using xl::tensorboard::EventFile;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TEST(EventFile, ScalarsAreTfRecordFramedEventProtos) {
  xl::test::TempDir tmp;
  const std::string dir = tmp.file("runs/a");  // created with its parents
  const double before = now_seconds();
  std::string path;
  {
    EventFile f(dir);
    path = f.path();
    f.scalars(0, {{"train/loss", 2.5}, {"train/lr", 1e-4}});
    f.scalars(300, {{"valid/ppl", -7.25}});
    f.scalars(int64_t{1} << 40, {{"x", 3.0}, {"y", 0.1}, {"z", 1e30}});  // a step of six varint bytes
    f.scalars(5, {});                                                  // an empty summary
    EXPECT_TRUE(f.failure().empty());
  }
  const double after = now_seconds();
  ASSERT_TRUE(std::filesystem::is_regular_file(path));
  EXPECT_EQ(std::filesystem::path(path).parent_path(), std::filesystem::path(dir));

  std::vector<tfe::Record> records;
  ASSERT_NO_THROW(records = tfe::read_records(path));
  ASSERT_EQ(records.size(), 5u);
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_TRUE(records[i].length_crc_ok) << "record " << i;
    EXPECT_TRUE(records[i].data_crc_ok) << "record " << i;
  }
  std::vector<tfe::Event> ev;
  for (const auto& r : records) ASSERT_NO_THROW(ev.push_back(tfe::decode_event(r.data)));

  // The file's first event: its version, at step 0, nothing else.
  EXPECT_TRUE(ev[0].has_file_version);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_EQ(ev[0].step, 0);
  EXPECT_FALSE(ev[0].has_summary);
  EXPECT_FALSE(ev[0].has_session_log);

  const std::vector<int64_t> steps = {0, 0, 300, int64_t{1} << 40, 5};
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_TRUE(ev[i].has_wall_time) << i;
    EXPECT_GE(ev[i].wall_time, before - 1) << i;
    EXPECT_LE(ev[i].wall_time, after + 1) << i;
    EXPECT_TRUE(ev[i].has_step) << i;
    EXPECT_EQ(ev[i].step, steps[i]) << i;
  }
  using Values = std::vector<std::pair<std::string, float>>;
  EXPECT_TRUE(ev[1].has_summary);
  EXPECT_FALSE(ev[1].has_file_version);
  EXPECT_EQ(ev[1].values, (Values{{"train/loss", 2.5f}, {"train/lr", static_cast<float>(1e-4)}}));
  EXPECT_EQ(ev[2].values, (Values{{"valid/ppl", -7.25f}}));
  EXPECT_EQ(ev[3].values, (Values{{"x", 3.0f}, {"y", static_cast<float>(0.1)}, {"z", static_cast<float>(1e30)}}));
  EXPECT_TRUE(ev[4].values.empty());
}

// A resumed run's file starts with the version event and a SessionLog START (status 1) at the
// step it starts again at, before its scalars; TensorBoard drops earlier files' events from there.
TEST(EventFile, PurgeFromWritesASessionLogStartAtThatStep) {
  xl::test::TempDir tmp;
  std::string path;
  {
    EventFile f(tmp.path(), 1201);
    path = f.path();
    f.scalars(1201, {{"train/loss", 1.0}});
  }
  std::vector<tfe::Event> ev;
  ASSERT_NO_THROW(ev = tfe::read_events(path));
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_EQ(ev[0].step, 1201);
  EXPECT_TRUE(ev[1].has_session_log);
  EXPECT_EQ(ev[1].session_status, 1);  // START
  EXPECT_EQ(ev[1].step, 1201);
  EXPECT_FALSE(ev[1].has_summary);
  EXPECT_FALSE(ev[1].has_file_version);
  EXPECT_EQ(ev[2].step, 1201);
  EXPECT_EQ(ev[2].values.size(), 1u);

  // purge_from 0 purges too (a new run replacing another's curves): START at step 0.
  xl::test::TempDir tmp0;
  { path = EventFile(tmp0.path(), 0).path(); }
  ASSERT_NO_THROW(ev = tfe::read_events(path));
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[1].session_status, 1);
  EXPECT_EQ(ev[1].step, 0);

  // -1: no SessionLog at all.
  xl::test::TempDir tmp1;
  { path = EventFile(tmp1.path(), -1).path(); }
  ASSERT_NO_THROW(ev = tfe::read_events(path));
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_FALSE(ev[0].has_session_log);
}

// events.out.tfevents.SECONDS.HOST.PID.xl: the prefix TensorBoard looks for, and a name that sorts
// after an earlier writer's.
TEST(EventFile, FileNameFollowsTensorBoardsPattern) {
  xl::test::TempDir tmp;
  const auto before = static_cast<int64_t>(now_seconds());
  const std::string name = std::filesystem::path(EventFile(tmp.path()).path()).filename().string();
  const auto after = static_cast<int64_t>(now_seconds());
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string prefix = "events.out.tfevents.";
  ASSERT_EQ(name.rfind(prefix, 0), 0u) << name;
  const std::string rest = name.substr(prefix.size());
  const size_t dot = rest.find('.');
  ASSERT_NE(dot, std::string::npos);
  const int64_t seconds = std::stoll(rest.substr(0, dot));
  EXPECT_GE(seconds, before);
  EXPECT_LE(seconds, after);
  EXPECT_EQ(rest.substr(dot + 1), std::string(host) + "." + std::to_string(::getpid()) + ".xl");
}

TEST(EventFile, ADirectoryThatCannotBeMadeIs73) {
  xl::test::TempDir tmp;
  const std::string file = tmp.write("plain", "x");
  std::string what;
  EXPECT_EQ(xl::test::error_code([&] { EventFile f(file + "/sub"); }, &what), xl::kExitCantCreat);
  EXPECT_NE(what.find(file), std::string::npos) << what;
}
