// The ranks' agreements through the rendezvous store, with threads as ranks over one in-process
// store: a set-up that fails on some rank fails on all, each distinct error said once; a difference
// in settings is said by rank 0 alone, naming the first key in the order the ranks wrote them.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "xl/train/group_communicator.h"
#include "xl/train/heartbeat.h"
#include "xl/util/error.h"

namespace xl::train {
namespace {

// What a rank's call ended with: its exit code and message, "" for a silent one; code 0 when it
// returned, -1 for an exception other than xl::Error (its what() as the message).
struct Ending {
  int code = 0;
  std::string message;
};

// Runs `call(rank)` on threads as the ranks `ranks` of a job of `world` over `store` (the ranks
// not listed never run), with `silence` for a rank's heartbeat to stand still.
std::vector<Ending> as_ranks(int world, const std::vector<int>& ranks, const c10::intrusive_ptr<c10d::Store>& store,
                             std::chrono::milliseconds silence,
                             const std::function<void(int, const DistConfig&, c10d::Store&)>& call) {
  std::vector<Ending> endings(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r : ranks)
    threads.emplace_back([&, r] {
      DistConfig config;
      config.rank = r;
      config.world = world;
      config.timeout = std::chrono::seconds(120);
      config.silence = silence;
      Ending& e = endings[static_cast<size_t>(r)];
      try {
        call(r, config, *store);
      } catch (const Error& err) {
        e = {err.code(), err.what()};
      } catch (const std::exception& err) {
        e = {-1, err.what()};
      }
    });
  for (auto& t : threads) t.join();
  return endings;
}

std::vector<Ending> as_ranks(int world, const std::function<void(int, const DistConfig&, c10d::Store&)>& call) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  store->setTimeout(std::chrono::seconds(20));
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(r);
  return as_ranks(world, ranks, store, std::chrono::seconds(30), call);
}

// A set-up step that fails on rank r with code and message fails[r] (code 0: it succeeds).
std::vector<Ending> set_up_with(const std::vector<Ending>& fails) {
  return as_ranks(static_cast<int>(fails.size()), [&](int r, const DistConfig& config, c10d::Store& store) {
    set_up_through_store(store, config, "setting up", [&] {
      const Ending& f = fails[static_cast<size_t>(r)];
      if (f.code == -1) throw std::runtime_error(f.message);
      if (f.code != 0) throw Error(f.code, f.message);
    }, 0);
  });
}

void expect_ending(const Ending& got, int code, const std::string& message, int rank) {
  EXPECT_EQ(got.code, code) << "rank " << rank;
  EXPECT_EQ(got.message, message) << "rank " << rank;
}

TEST(SetUpTogether, EveryRankSucceedsAndNoneThrows) {
  const auto e = set_up_with({{}, {}, {}});
  for (int r = 0; r < 3; ++r) expect_ending(e[static_cast<size_t>(r)], 0, "", r);
}

TEST(SetUpTogether, AProblemEveryRankFindsIsSaidByRankZeroAlone) {
  const Ending split{65, "tokens.h5: no split 'nosuch'"};
  const auto e = set_up_with({split, split, split});
  expect_ending(e[0], 65, split.message, 0);
  expect_ending(e[1], 65, "", 1);
  expect_ending(e[2], 65, "", 2);
}

TEST(SetUpTogether, ARankThatFailsAloneSaysItAndTheOthersEndSilentlyWithItsCode) {
  const auto e = set_up_with({{}, {73, "out.h5: already exists"}, {}});
  expect_ending(e[0], 73, "", 0);
  expect_ending(e[1], 73, "out.h5: already exists", 1);
  expect_ending(e[2], 73, "", 2);
}

TEST(SetUpTogether, DifferentProblemsAreEachSaidAndTheLowestFailingRanksCodeEndsTheRest) {
  const auto e = set_up_with({{}, {66, "a.h5: No such file"}, {65, "b.h5: not an HDF5 file"}, {66, "a.h5: No such file"}});
  expect_ending(e[0], 66, "", 0);
  expect_ending(e[1], 66, "a.h5: No such file", 1);
  expect_ending(e[2], 65, "b.h5: not an HDF5 file", 2);
  expect_ending(e[3], 66, "", 3);
}

TEST(SetUpTogether, OtherExceptionsPassAsTheyAreAndEndTheOthersWithSoftwareError) {
  const auto e = set_up_with({{}, {-1, "CUDA out of memory"}, {-1, "CUDA out of memory"}});
  expect_ending(e[0], kExitSoftware, "", 0);
  // Never taken for another rank's words: each says its own.
  expect_ending(e[1], -1, "CUDA out of memory", 1);
  expect_ending(e[2], -1, "CUDA out of memory", 2);
}

TEST(SetUpTogether, ARankOfThisMachineThatDiesBeforeItAnswersEndsTheWaitWithinSecondsNotAtTheTimeout) {
  const pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  auto store = c10::make_intrusive<c10d::HashStore>();
  const auto set = [&](const std::string& key, const std::string& v) {
    store->set(key, std::vector<uint8_t>(v.begin(), v.end()));
  };
  set(store_prefix() + "pid/0", std::to_string(getpid()) + " " + host);
  set(store_prefix() + "pid/1", std::to_string(dead) + " " + host);
  DistConfig config;
  config.world = 2;
  config.timeout = std::chrono::seconds(120);
  store->setTimeout(config.timeout);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    set_up_through_store(*store, config, "setting up the run", [] {}, 0);
    FAIL() << "rank 0 went on without rank 1";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitUnavailable);
    EXPECT_NE(std::string(e.what()).find("setting up the run failed: rank 1 (pid " + std::to_string(dead) + ") is gone"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10);
}

// Rank r, as it says where it runs when it connects; on another machine for a host other than ours.
void place_rank(c10d::Store& store, int r, long pid, const std::string& host) {
  const std::string v = std::to_string(pid) + " " + host;
  store.set(store_prefix() + "pid/" + std::to_string(r), std::vector<uint8_t>(v.begin(), v.end()));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(SetUpTogether, ARankElsewhereWhoseHeartbeatStoppedEndsTheWaitAfterTheSilenceNotAtTheTimeout) {
  // Rank 1 runs on another machine: no pid to look up. It beat, then its machine went away.
  auto store = c10::make_intrusive<c10d::HashStore>();
  place_rank(*store, 1, 4242, "node7.example");
  store->add(heartbeat_key(1), 5);
  const auto t0 = std::chrono::steady_clock::now();
  const auto e = as_ranks(2, {0}, store, std::chrono::seconds(2), [](int, const DistConfig& config, c10d::Store& s) {
    set_up_through_store(s, config, "setting up the run", [] {}, 0);
  });
  expect_ending(e[0], kExitUnavailable,
                "setting up the run failed: rank 1 (pid 4242 on node7.example) has not been heard from for 2 s", 0);
  EXPECT_LT(seconds_since(t0), 10);  // the timeout is 120 s
}

TEST(SetUpTogether, TheLostRankIsNamedByTheLowestOtherRankAloneAndTheRestEndWithoutAWord) {
  for (int lost : {1, 0}) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    place_rank(*store, lost, 4242, "node7.example");
    store->add(heartbeat_key(lost), 1);
    const std::vector<int> live = lost == 1 ? std::vector<int>{0, 2, 3} : std::vector<int>{1, 2, 3};
    const auto t0 = std::chrono::steady_clock::now();
    const auto e = as_ranks(4, live, store, std::chrono::seconds(1), [](int, const DistConfig& config, c10d::Store& s) {
      set_up_through_store(s, config, "setting up the run", [] {}, 0);
    });
    const std::string line = "setting up the run failed: rank " + std::to_string(lost) +
                             " (pid 4242 on node7.example) has not been heard from for 1 s";
    expect_ending(e[static_cast<size_t>(live[0])], kExitUnavailable, line, live[0]);
    expect_ending(e[static_cast<size_t>(live[1])], kExitUnavailable, "", live[1]);
    expect_ending(e[static_cast<size_t>(live[2])], kExitUnavailable, "", live[2]);
    // The others read the verdict, not their own 5 s fallback.
    EXPECT_LT(seconds_since(t0), 4.5) << "rank " << lost << " lost";
  }
}

TEST(SetUpTogether, ARankThatHearsNoVerdictFromTheLowestOtherRankSaysTheLostRankItselfAfter5s) {
  // Rank 0, which would name the lost rank 1, answered and then went quiet (descheduled, stopped):
  // rank 2 must not wait the timeout on a verdict that does not come.
  auto store = c10::make_intrusive<c10d::HashStore>();
  place_rank(*store, 1, 4242, "node7.example");
  store->add(heartbeat_key(1), 1);
  const std::string key = store_prefix() + "set_up/0/";
  store->set(key + "0", std::vector<uint8_t>{});  // rank 0's outcome: success
  const auto t0 = std::chrono::steady_clock::now();
  const auto e = as_ranks(3, {2}, store, std::chrono::seconds(1), [](int, const DistConfig& config, c10d::Store& s) {
    set_up_through_store(s, config, "setting up the run", [] {}, 0);
  });
  expect_ending(e[2], kExitUnavailable, "setting up the run failed: rank 1 (pid 4242 on node7.example) has not been heard from for 1 s", 2);
  const double took = seconds_since(t0);
  EXPECT_GE(took, 5.5);  // the silence, then 5 s for a verdict
  EXPECT_LT(took, 10);   // the timeout is 120 s
}

TEST(SetUpTogether, ASlowRankThatKeepsBeatingIsWaitedForPastTheSilence) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  place_rank(*store, 1, 4242, "node7.example");
  const auto e = as_ranks(2, {0, 1}, store, std::chrono::seconds(1), [&](int r, const DistConfig& config, c10d::Store& s) {
    std::unique_ptr<Heartbeat> beat;
    if (r == 1) beat = std::make_unique<Heartbeat>(store, 1, std::chrono::milliseconds(100));
    set_up_through_store(s, config, "setting up the run", [&] {
      if (r == 1) std::this_thread::sleep_for(std::chrono::seconds(3));  // loading its data
    }, 0);
  });
  expect_ending(e[0], 0, "", 0);
  expect_ending(e[1], 0, "", 1);
}

TEST(LostRank, ARankWhoseHeartbeatStandsStillIsNamedAsStoppedAndOneThatBeatsIsNot) {
  // Rank 1 is alive (this process's pid) but stopped or hung: its heartbeat stands still.
  auto store = c10::make_intrusive<c10d::HashStore>();
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  place_rank(*store, 1, getpid(), host);
  place_rank(*store, 2, 4242, "node7.example");
  store->add(heartbeat_key(1), 3);
  DistConfig config;
  config.world = 3;
  {
    Heartbeat beats(store, 2, std::chrono::milliseconds(200));  // rank 2 answers
    const LostRank lost = lost_rank(*store, config);
    EXPECT_EQ(lost.words, "rank 1 (pid " + std::to_string(getpid()) + ") has stopped answering: its heartbeat stood still for 3 s");
    EXPECT_FALSE(lost.gone);  // said by the rank, not left to a launcher
  }
  // Both beat: nothing to name.
  Heartbeat one(store, 1, std::chrono::milliseconds(200)), two(store, 2, std::chrono::milliseconds(200));
  EXPECT_EQ(lost_rank(*store, config).words, "another rank is gone or stalled");
}

TEST(AwaitRanks, ARankThatFailedBeforeItJoinedIsNamedAtOnceByTheLowestRankThatDidNot) {
  for (int failed : {1, 0}) {
    auto store = c10::make_intrusive<c10d::HashStore>();
    std::vector<int> live;
    for (int r = 0; r < 3; ++r)
      if (r != failed) live.push_back(r);
    const auto t0 = std::chrono::steady_clock::now();
    std::thread failing([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the others are waiting
      post_failure(*store, failed, 66);
    });
    const auto e = as_ranks(3, live, store, std::chrono::seconds(30), [](int r, const DistConfig& config, c10d::Store& s) {
      place_rank(s, r, 1000 + r, "node" + std::to_string(r) + ".example");  // as connect does
      await_ranks(s, config);
    });
    failing.join();
    expect_ending(e[static_cast<size_t>(live[0])], kExitUnavailable,
                  "setting up the run failed: rank " + std::to_string(failed) + " (pid " + std::to_string(getpid()) +
                      ") failed before it joined the others (exit 66; its own error line says why)",
                  live[0]);
    expect_ending(e[static_cast<size_t>(live[1])], kExitUnavailable, "", live[1]);
    EXPECT_LT(seconds_since(t0), 5) << "rank " << failed << " failed";  // the timeout is 120 s
    EXPECT_EQ(store->add(store_prefix() + "failed_read", 0), 2);  // what a failed rank 0 waits for
  }
}

TEST(AwaitRanks, ReturnsWhenEveryRankHasArrivedAndNamesOneThatNeverDoesAtTheTimeout) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const auto e = as_ranks(2, {0, 1}, store, std::chrono::seconds(30), [](int r, const DistConfig& config, c10d::Store& s) {
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(500));  // slow to start
    place_rank(s, r, 1000 + r, "node.example");
    await_ranks(s, config);
  });
  expect_ending(e[0], 0, "", 0);
  expect_ending(e[1], 0, "", 1);

  auto empty = c10::make_intrusive<c10d::HashStore>();
  place_rank(*empty, 0, 1000, "node.example");
  DistConfig config;
  config.world = 3;
  config.timeout = std::chrono::milliseconds(300);
  try {
    await_ranks(*empty, config);
    ADD_FAILURE() << "await_ranks returned without rank 1";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), kExitUnavailable);
    EXPECT_EQ(std::string(err.what()),
              "setting up the run failed: rank 1 never reached the rendezvous within --dist-timeout (it did not start, or "
              "failed before it connected)");
  }
}

TEST(BeatWatch, CountsOnlyTheTimeItLookedSoAJobStoppedAsAWholeTakesNoRankForSilent) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  store->add(heartbeat_key(1), 7);
  BeatWatch watch(*store, 1);
  EXPECT_EQ(watch.silent_for().count(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(2600));  // stopped (Ctrl-Z), or descheduled
  const double silent = std::chrono::duration<double>(watch.silent_for()).count();
  EXPECT_GE(silent, 1.9);
  EXPECT_LE(silent, 2.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_GE(std::chrono::duration<double>(watch.silent_for()).count(), 2.2);
  store->add(heartbeat_key(1), 1);  // it beats again
  EXPECT_EQ(watch.silent_for().count(), 0);
}

TEST(CheckSame, RankZeroNamesTheFirstDifferingKeyInTheRanksOrderAndTheOthersAreSilent) {
  // Another vocab changes the tokens too: the vocab, written first, is the one named, though a
  // sorted object would put train_sha256 before it.
  const auto e = as_ranks(3, [](int r, const DistConfig& config, c10d::Store& store) {
    const std::string vocab = r == 2 ? "bbb" : "aaa", sha = r == 2 ? "222" : "111";
    check_same_through_store(store, config, "tokens",
                             "{\"vocab_sha256\":\"" + vocab + "\",\"train_tokens\":9,\"train_sha256\":\"" + sha + "\"}", 0);
  });
  expect_ending(e[0], kExitConfig,
                "rank 2's tokens differ from rank 0's: vocab_sha256 = \"bbb\" against rank 0's \"aaa\" (every rank "
                "must be started with the same settings and files)",
                0);
  expect_ending(e[1], kExitConfig, "", 1);
  expect_ending(e[2], kExitConfig, "", 2);
}

}  // namespace
}  // namespace xl::train
