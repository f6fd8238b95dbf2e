// The small parsers every tool uses, reading whole inputs, the statistics of repeated runs, and how
// the stop signals arrive.
#include <gtest/gtest.h>

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <thread>

#include <boost/iostreams/copy.hpp>
#include <boost/iostreams/filter/gzip.hpp>
#include <boost/iostreams/filtering_stream.hpp>

#include "support/test_support.h"
#include "xl/util/byte_blocks.h"
#include "xl/util/error.h"
#include "xl/util/failure.h"
#include "xl/util/io.h"
#include "xl/util/parse.h"
#include "xl/util/resources.h"
#include "xl/util/setting_origins.h"
#include "xl/util/signals.h"
#include "xl/util/spelling.h"
#include "xl/util/stats.h"

using namespace xl;

TEST(Parse, ListsCountsDurationsAndBooleans) {
  EXPECT_EQ(parse::int_list("20000, 40000,200000", "--cutoffs"), (std::vector<int64_t>{20000, 40000, 200000}));
  EXPECT_TRUE(parse::int_list("", "--cutoffs").empty());
  EXPECT_THROW(parse::int_list("1,x", "--cutoffs"), Error);
  EXPECT_THROW(parse::int_list("64,,128", "--mem-len"), Error);
  EXPECT_THROW(parse::int_list("64,", "--mem-len"), Error);
  EXPECT_EQ(parse::split_list(" a, b,,c, "), (std::vector<std::string>{"a", "b", "", "c", ""}));
  EXPECT_TRUE(parse::split_list(" ").empty());
  EXPECT_EQ(parse::list_items(" a , b", "--x"), (std::vector<std::string>{"a", "b"}));
  EXPECT_THROW(parse::list_items(",a", "--x"), Error);
  EXPECT_TRUE(parse::ends_with("mem_transformer.MemTransformerLM", ".MemTransformerLM"));
  EXPECT_TRUE(parse::ends_with("x.h5", "x.h5"));
  EXPECT_FALSE(parse::ends_with("h5", ".h5"));
  EXPECT_FALSE(parse::ends_with("x.h5.tmp", ".h5"));
  EXPECT_EQ(parse::count("90M", "x"), 90000000u);
  EXPECT_EQ(parse::count("64K", "x"), 64000u);
  EXPECT_EQ(parse::count("1.5k", "x"), 1500u);
  EXPECT_THROW(parse::count("5T", "x"), Error);
  EXPECT_THROW(parse::count("-1", "x"), Error);
  EXPECT_DOUBLE_EQ(parse::duration("15m", "x"), 900);
  EXPECT_DOUBLE_EQ(parse::duration("2h", "x"), 7200);
  EXPECT_DOUBLE_EQ(parse::duration("90", "x"), 90);
  EXPECT_THROW(parse::duration("soon", "x"), Error);
  EXPECT_DOUBLE_EQ(parse::duration("1h30m", "x"), 5400);
  EXPECT_DOUBLE_EQ(parse::duration("0.5s", "x"), 0.5);
  EXPECT_DOUBLE_EQ(parse::duration("1d2h3m4s", "x"), 86400 + 7200 + 180 + 4);
  for (const char* bad : {"", "1h30", "-1m", "1m-5s", " 5m", "5 m", "5ms", "inf", "1h+2m", "nan"})
    EXPECT_THROW(parse::duration(bad, "x"), Error) << "'" << bad << "'";
  // What progress lines print reads back.
  for (double seconds : {42.0, 75.0, 3720.0, 198000.0})
    EXPECT_DOUBLE_EQ(parse::duration(parse::format_duration(seconds), "x"), seconds) << parse::format_duration(seconds);
  EXPECT_TRUE(parse::boolean("True", "x"));
  EXPECT_FALSE(parse::boolean("off", "x"));
  try {
    parse::boolean("maybe", "--tie-projs");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitUsage);
    EXPECT_NE(std::string(e.what()).find("--tie-projs"), std::string::npos);
  }
}

TEST(Parse, DurationsPrintForProgressAndTables) {
  EXPECT_EQ(parse::format_duration(42), "42s");
  EXPECT_EQ(parse::format_duration(75), "1m15s");
  EXPECT_EQ(parse::format_duration(3720), "1h02m");
  EXPECT_EQ(parse::format_hms(0), "0:00:00");
  EXPECT_EQ(parse::format_hms(3723.4), "1:02:03");
  EXPECT_EQ(parse::format_hms(94 * 3600 + 26 * 60), "94:26:00");
}

TEST(SettingOrigins, AnErrorNamesWhereTheValueCameFromWithItsExitCode) {
  SettingOrigins o("p1.h5");
  o.given("lr", "");
  o.given("n_layer", "tiny.ini");
  EXPECT_EQ(o.name("lr"), "--lr");
  EXPECT_EQ(o.exit_code("lr"), kExitUsage);
  EXPECT_EQ(o.name("n-layer"), "tiny.ini: n-layer");  // either spelling, written as the INI key
  EXPECT_EQ(o.exit_code("n_layer"), kExitConfig);
  EXPECT_EQ(o.name("d_model"), "p1.h5: d_model");  // the rest as the caller spells it
  EXPECT_EQ(o.exit_code("d_model"), kExitConfig);
  EXPECT_TRUE(o.on_command_line("lr"));
  EXPECT_FALSE(o.on_command_line("n-layer"));
  EXPECT_EQ(o.with_rest("settings").name("d-model"), "settings: d-model");
  EXPECT_EQ(o.with_rest("settings").name("lr"), "--lr");
  try {
    o.fail("n_layer", "must be at least 1");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "tiny.ini: n-layer must be at least 1");
    EXPECT_EQ(e.code(), kExitConfig);
  }
}

TEST(Spelling, EditDistanceAndTheNearestName) {
  using xl::spelling::edit_distance;
  using xl::spelling::nearest;
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);  // two substitutions and an insertion
  EXPECT_EQ(edit_distance("n-layers", "n-layer"), 1u);
  EXPECT_EQ(edit_distance("flaw", "lawn"), 2u);
  const std::vector<std::string> flags = {"n-layer", "n-head", "d-model", "mem-len", "tgt-len", "ff", "json"};
  EXPECT_EQ(nearest("n-layers", flags), "n-layer");
  EXPECT_EQ(nearest("memlen", flags), "mem-len");
  EXPECT_EQ(nearest("jsn", flags), "json");
  EXPECT_EQ(nearest("tgt-len", flags), "tgt-len");                   // the name itself
  EXPECT_EQ(nearest("no-such-option", flags), "");                  // near nothing
  EXPECT_EQ(nearest("fx", flags), "");                              // too short to guess
  EXPECT_EQ(nearest("d-mdl", flags), "");                           // two edits in five characters
  EXPECT_EQ(nearest("n-lay", flags), "n-layer");                    // a shortened name: the one it starts
  EXPECT_EQ(nearest("d-mo", flags), "d-model");
  EXPECT_EQ(nearest("n-l", flags), "n-layer");
  EXPECT_EQ(nearest("n-", flags), "");                              // too short
  EXPECT_EQ(nearest("mem", {"mem-len", "mem-budget"}), "");         // the start of two
}

// Writes of every size, across and onto the blocks' edges, come back as one string in order.
TEST(Io, ByteBlocksJoinWritesOfAnySizeInOrder) {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += static_cast<char>('a' + (i * 7 + i / 26) % 26);
  for (size_t block : {size_t{1}, size_t{7}, size_t{64}, size_t{1000}, size_t{10000}}) {
    io::ByteBlocks blocks(block);
    size_t at = 0;
    for (size_t n = 0; at < text.size(); n = (n * 5 + 3) % 211) {  // 0, 3, 18, 93, ... bytes
      const size_t take = std::min(n, text.size() - at);
      EXPECT_EQ(blocks.write(text.data() + at, static_cast<std::streamsize>(take)), static_cast<std::streamsize>(take));
      at += take;
    }
    EXPECT_EQ(blocks.take(), text) << "blocks of " << block;
    EXPECT_EQ(blocks.take(), "");
  }
}

// The readers of pipes, FIFOs (`<(zcat ...)`) and compressed files put more than two of the
// default blocks back together, and decompress from a file and from a pipe alike. Numbered lines
// make any block out of place or cut short show.
TEST(Io, InputsOfUnknownLengthArriveWholeAndInOrder) {
  std::string text;
  for (size_t line = 0; text.size() < (size_t{64} << 20) * 2 + 12345; ++line) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%09zu\n", line);
    text += buf;
  }
  std::ostringstream gz;
  {
    boost::iostreams::filtering_ostream out;
    out.push(boost::iostreams::gzip_compressor(boost::iostreams::gzip_params(1)));
    out.push(gz);
    out << text;
  }
  test::TempDir dir;
  int fifos = 0;
  auto through_fifo = [&](const std::string& bytes, std::string (*read)(const std::string&)) {
    const std::string fifo = dir.file("fifo" + std::to_string(fifos++));
    EXPECT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::thread writer([&] {
      std::FILE* f = std::fopen(fifo.c_str(), "wb");
      for (size_t at = 0; f && at < bytes.size(); at += 1000003)
        std::fwrite(bytes.data() + at, 1, std::min<size_t>(1000003, bytes.size() - at), f);
      if (f) std::fclose(f);
    });
    std::string got = read(fifo);
    writer.join();
    return got;
  };
  auto expect_text = [&](const std::string& got, const char* how) {
    EXPECT_EQ(got.size(), text.size()) << how;
    EXPECT_TRUE(got == text) << how;
  };
  auto read_text = [](const std::string& path) { return io::read_text(path); };
  expect_text(through_fifo(text, io::read_raw), "read_raw, a FIFO");
  expect_text(through_fifo(text, read_text), "read_text, a FIFO");
  expect_text(through_fifo(gz.str(), read_text), "read_text, gzip through a FIFO");
  expect_text(io::read_text(dir.write("text.gz", gz.str())), "read_text, a gzip file");
}

TEST(Stats, StudentQuantilesAndIntervals) {
  // Published two-sided 95% critical values.
  EXPECT_NEAR(stats::t_quantile(0.975, 1), 12.7062, 1e-3);
  EXPECT_NEAR(stats::t_quantile(0.975, 2), 4.3027, 1e-3);
  EXPECT_NEAR(stats::t_quantile(0.975, 4), 2.7764, 1e-3);
  EXPECT_NEAR(stats::t_quantile(0.975, 10), 2.2281, 1e-3);
  EXPECT_NEAR(stats::t_quantile(0.975, 30), 2.0423, 1e-3);
  EXPECT_NEAR(stats::t_quantile(0.995, 5), 4.0321, 1e-3);
  // Three values: mean 2, sd 1, half width t(0.975, 2) / sqrt(3).
  auto m = stats::mean_ci95({1.0, 2.0, 3.0});
  EXPECT_EQ(m.n, 3);
  EXPECT_DOUBLE_EQ(m.mean, 2.0);
  EXPECT_DOUBLE_EQ(m.sd, 1.0);
  EXPECT_NEAR(m.half_width, 4.3027 / std::sqrt(3.0), 1e-3);
  EXPECT_EQ(stats::mean_ci95({5.0}).half_width, 0.0);
  EXPECT_EQ(stats::mean_ci95({}).n, 0);
}

TEST(Error, MessagesAreOnePrintableLine) {
  // Quoted input of any bytes: controls and broken UTF-8 are escaped, text in any script is kept.
  EXPECT_EQ(xl::printable_line("a\nb\tc\x7f"), "a\\x0ab\\x09c\\x7f");
  EXPECT_EQ(xl::printable_line("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(xl::printable_line("x\xff\xc3"), "x\\xff\\xc3");
  EXPECT_EQ(xl::printable_line("\xe0\x80\x80|\xed\xa0\x80|\xf4\x90\x80\x80"),
            "\\xe0\\x80\\x80|\\xed\\xa0\\x80|\\xf4\\x90\\x80\\x80");
  const xl::Error e(xl::kExitDataErr, "f.tsv:1: unknown vocab type 'char\x01\xfe'");
  EXPECT_STREQ(e.what(), "f.tsv:1: unknown vocab type 'char\\x01\\xfe'");
}

Failure described(const std::function<void()>& throwing) {
  try {
    throwing();
  } catch (...) {
    return describe_failure(std::current_exception());
  }
  ADD_FAILURE() << "nothing was thrown";
  return {};
}

TEST(Error, RunningOutOfMemoryIsSaidAsSuchNotAsAnInternalError) {
  // LibTorch's host allocator asked for 2^50 floats: its own words, whatever its version.
  const Failure host = described([] { (void)torch::empty({int64_t{1} << 50}); });
  EXPECT_TRUE(host.out_of_memory);
  EXPECT_EQ(host.code, kExitSoftware);
  EXPECT_EQ(host.line, "out of memory: could not allocate 4503599.6 GB of host memory");
  // The GPU allocator's, as LibTorch 1.13 and 2.x word it (this machine has no GPU).
  for (const char* words :
       {"CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.15 GiB total capacity; 61.83 GiB already "
        "allocated; 16.39 GiB free; 62.05 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory "
        "try setting max_split_size_mb to avoid fragmentation.",
        "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 16.39 GiB "
        "is free. Of the allocated memory 61.83 GiB is allocated by PyTorch"}) {
    const Failure gpu = described([&] { throw std::runtime_error(words); });
    EXPECT_TRUE(gpu.out_of_memory) << words;
    EXPECT_EQ(gpu.line, "out of memory: could not allocate 20.00 GiB on GPU 0");
  }
  const Failure plain = described([] { throw std::bad_alloc(); });
  EXPECT_TRUE(plain.out_of_memory);
  EXPECT_EQ(plain.line, "out of memory");
  // Any other LibTorch error is an internal one, its first line without the backtrace after it.
  const Failure shape = described([] { (void)torch::ones({2}).view({3}); });
  EXPECT_FALSE(shape.out_of_memory);
  EXPECT_EQ(shape.line.rfind("internal error: shape '[3]' is invalid for input of size 2", 0), 0u) << shape.line;
  EXPECT_EQ(shape.line.find('\n'), std::string::npos);
  // xl's errors keep their code and words; an empty one stays unsaid.
  const Failure data = described([] { throw Error(kExitDataErr, "t.h5: no split 'valid'"); });
  EXPECT_EQ(data.code, kExitDataErr);
  EXPECT_EQ(data.line, "t.h5: no split 'valid'");
  EXPECT_FALSE(data.out_of_memory);
  EXPECT_EQ(described([] { throw Error(kExitIoErr, ""); }).line, "");
}

TEST(Resources, WhatIsLeftOfAnAddressSpaceLimitBoundsTheUsableMemory) {
  ASSERT_GT(usable_memory_bytes(), 0);
  // In a child: its limit set 1 GB beyond what it has mapped (ulimit -v, SGE's h_vmem).
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    long pages = 0;
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    if (!f || std::fscanf(f, "%ld", &pages) != 1) _exit(3);
    const rlim_t limit = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + 1000000000;
    const rlimit r{limit, limit};
    if (setrlimit(RLIMIT_AS, &r) != 0) _exit(3);
    const int64_t usable = usable_memory_bytes();
    _exit(usable > 900000000 && usable <= 1000000000 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "usable memory not within the 1 GB left of the limit (3: no limit set)";
}

// A stop signal never runs a handler on a computing thread (oneDNN 2.x's JIT GEMM kernels point
// the stack pointer into the heap, where a signal frame would land): it is blocked in the threads
// started after catch_stop() and taken by a thread of its own, which sets the flag.
TEST(Signals, StopSignalsAreBlockedInComputeThreadsAndStillSetTheFlag) {
  xl::signals::catch_stop();
  sigset_t worker_mask;
  std::thread([&] { pthread_sigmask(SIG_BLOCK, nullptr, &worker_mask); }).join();
  EXPECT_EQ(sigismember(&worker_mask, SIGTERM), 1);
  EXPECT_EQ(sigismember(&worker_mask, SIGINT), 1);
  ASSERT_EQ(xl::signals::pending(), 0);
  kill(getpid(), SIGTERM);
  for (int i = 0; i < 200 && xl::signals::pending() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(xl::signals::pending(), SIGTERM);
}

// SIGUSR1 asks a training for a checkpoint: taken once, and the run is not stopped by it.
TEST(Signals, Usr1AsksACatchingProcessForACheckpointAndDoesNotStopIt) {
  xl::signals::catch_stop();
  ASSERT_FALSE(xl::signals::take_checkpoint_request());
  // The stop flag is the process's: a stop test run before this one in the same process set it.
  const int stop_before = xl::signals::pending();
  kill(getpid(), SIGUSR1);
  bool asked = false;
  for (int i = 0; i < 200 && !asked; ++i) {
    asked = xl::signals::take_checkpoint_request();
    if (!asked) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(asked);
  EXPECT_FALSE(xl::signals::take_checkpoint_request());  // once per signal
  EXPECT_EQ(xl::signals::pending(), stop_before);
}

// One stop often comes twice: Ctrl-C reaches a launcher and its ranks as a process group and the
// launcher passes it on; timeout(1) signals the process and then its group. The copy killed the
// ranks unsaved (4 of 4 Ctrl-Cs to a 2-rank training). A stop a second or more later still kills.
TEST(Signals, CopiesOfAStopWithinASecondAreOneRequestALaterOneKillsAtOnce) {
  xl::signals::catch_stop();
  kill(getpid(), SIGTERM);
  for (int i = 0; i < 200 && xl::signals::pending() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(xl::signals::pending(), SIGTERM);
  kill(getpid(), SIGTERM);  // had this process die before the fix
  kill(getpid(), SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(xl::signals::pending(), SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(900));
  const pid_t child = fork();  // the next stop would kill this test: a child takes it
  ASSERT_GE(child, 0);
  if (child == 0) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);  // no sigwait thread here: the handler takes it
    kill(getpid(), SIGINT);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << "status " << status;
}

// Whether replacing one path (by rename) replaces what the other names: one directory entry
// however spelt, but never two hard links (the latest checkpoint and the best one often are).
TEST(Io, SameFileIsOneDirectoryEntryHoweverSpeltNotTwoHardLinks) {
  xl::test::TempDir dir;
  const std::string file = dir.write("a.txt", "x"), hard = dir.file("hard.txt"), soft = dir.file("soft.txt"),
                    sub = dir.file("sub"), via_dir = dir.file("dirlink");
  ASSERT_EQ(link(file.c_str(), hard.c_str()), 0);
  ASSERT_EQ(symlink("a.txt", soft.c_str()), 0);
  ASSERT_EQ(mkdir(sub.c_str(), 0700), 0);
  ASSERT_EQ(symlink(dir.path().c_str(), via_dir.c_str()), 0);
  EXPECT_TRUE(io::same_file(file, dir.path() + "/sub/../a.txt"));
  EXPECT_TRUE(io::same_file(file, soft));
  EXPECT_TRUE(io::same_file(file, via_dir + "/a.txt"));
  EXPECT_TRUE(io::same_file(dir.file("new.h5"), via_dir + "/new.h5"));  // neither exists yet
  EXPECT_FALSE(io::same_file(file, hard));
  EXPECT_FALSE(io::same_file(file, dir.file("new.h5")));
  EXPECT_FALSE(io::same_file("/dev/null", "/dev/null"));
  EXPECT_FALSE(io::same_file("-", "-"));
}

// The best checkpoint as a second name of the latest: outputs are replaced by rename, never
// written in place, so replacing the latest later leaves the best one as it was.
TEST(Io, LinkAsGivesASecondNameThatKeepsItsBytesWhenTheFirstIsReplaced) {
  xl::test::TempDir dir;
  const std::string latest = dir.write("r.h5", "step 1"), best = dir.file("r.best.h5");
  ASSERT_TRUE(io::link_as(latest, best));
  struct stat a {}, b {};
  ASSERT_EQ(stat(latest.c_str(), &a), 0);
  ASSERT_EQ(stat(best.c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_TRUE(io::link_as(latest, best));  // already that file: rename does nothing, no temp is left
  {
    io::AtomicOutput out(latest, true, false);
    out.stream() << "step 2";
    out.commit();
  }
  EXPECT_EQ(io::read_raw(best), "step 1");
  EXPECT_EQ(io::read_raw(latest), "step 2");
  EXPECT_FALSE(io::link_as(dir.file("missing.h5"), best));
  EXPECT_EQ(io::read_raw(best), "step 1");
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

// A FIFO whose reader quits after a byte, with SIGPIPE ignored (as the trainers do when -o is a
// stream): the copy stopped at the failed write and commit() reported success for a cut file.
TEST(Io, AnOutputWrittenThroughToAFifoWhoseReaderQuitsIsAWriteError) {
  xl::test::TempDir dir;
  const std::string fifo = dir.file("p");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const auto old = std::signal(SIGPIPE, SIG_IGN);
  std::thread reader([&] {
    std::FILE* f = std::fopen(fifo.c_str(), "rb");
    if (f) std::fgetc(f), std::fclose(f);
  });
  int code = 0;
  std::string message;
  try {
    io::AtomicOutput out(fifo, false, true);
    out.stream() << std::string(4 << 20, 'x');
    out.commit();
  } catch (const Error& e) {
    code = e.code();
    message = e.what();
  }
  reader.join();
  std::signal(SIGPIPE, old);
  EXPECT_EQ(code, kExitIoErr);
  EXPECT_EQ(message, fifo + ": write error: Broken pipe");
}

// Outputs written through rather than replaced: a rename over /dev/stdout (a link to
// /proc/self/fd/1) replaced the link; a regular file, or a link to one, is replaced as usual.
TEST(Io, StreamsAreDevicesFifosAndDescriptorsHoweverNamed) {
  xl::test::TempDir dir;
  const std::string file = dir.write("f.h5", "x"), fifo = dir.file("p"), to_fd = dir.file("out"),
                    chain = dir.file("chain"), to_file = dir.file("to_file");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(symlink("/proc/self/fd/1", to_fd.c_str()), 0);
  ASSERT_EQ(symlink("out", chain.c_str()), 0);
  ASSERT_EQ(symlink("f.h5", to_file.c_str()), 0);
  EXPECT_TRUE(io::is_stream("-"));
  EXPECT_TRUE(io::is_stream("/dev/null"));
  EXPECT_TRUE(io::is_stream(fifo));
  EXPECT_TRUE(io::is_stream(to_fd));
  EXPECT_TRUE(io::is_stream(chain));
  EXPECT_FALSE(io::is_stream(file));
  EXPECT_FALSE(io::is_stream(to_file));
  EXPECT_FALSE(io::is_stream(dir.path() + "/missing.h5"));
}
