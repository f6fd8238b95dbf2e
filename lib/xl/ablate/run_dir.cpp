#include "xl/ablate/run_dir.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "xl/ablate/makefile_plan.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/json_io.h"
#include "xl/util/log.h"
#include "xl/util/signals.h"

namespace xl::ablate {

namespace fs = std::filesystem;

namespace {

void write_file(const std::string& path, const std::string& text) {
  io::AtomicOutput out(path, true, false);
  out.stream() << text;
  out.commit();
}

// SIGUSR1 asks a training for a checkpoint, but kills make, a recipe's shell or an evaluation:
// it goes to the trainings in process group `group` alone, found by name in /proc.
void ask_trainings_for_checkpoints(pid_t group) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;
    // "PID (COMM) STATE PPID PGRP ...": COMM may hold spaces and parentheses; it ends at the last ')'.
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    const std::string comm = stat.substr(open + 1, close - open - 1);
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    long ppid = 0, pgrp = 0;
    if (!(rest >> state >> ppid >> pgrp) || pgrp != group) continue;
    if (comm == "xl-train-phase1" || comm == "xl-train-phase2") kill(static_cast<pid_t>(std::stol(name)), SIGUSR1);
  }
}

}  // namespace

void prepare_out_dir(const Grid& grid, const std::string& out) {
  const auto refuse = [&](const std::string& file, const std::string& what) {
    XL_FAIL(kExitCantCreat, (fs::path(out) / file).string() << ": " << what << " that xl-ablate did not write, and would replace; give --out "
                                << "a directory of the grid's own");
  };
  if (std::ifstream in(out + "/Makefile"); in) {
    std::string first;
    std::getline(in, first);
    if (first.rfind(kMakefileMark, 0) != 0) refuse("Makefile", "a Makefile");
  }
  if (fs::exists(out + "/grid.json")) {
    bool ours = false;
    try {
      const nlohmann::json j = read_json_file(out + "/grid.json", "a grid description");
      ours = j.is_object() && j.contains("grid_file") && j.contains("runs");
    } catch (const std::exception&) {
    }
    if (!ours) refuse("grid.json", "a file");
  }
  std::error_code ec;
  fs::create_directories(out, ec);
  XL_CHECK(!ec, kExitCantCreat, out << ": cannot create directory: " << ec.message());
  for (const auto& run : grid.runs) {
    const std::string dir = out + "/" + run.name, path = dir + "/run.json";
    const nlohmann::json want = run_json(grid, run);
    if (fs::exists(path)) {
      const nlohmann::json have = read_json_file(path, "a run description");
      XL_CHECK(same_training(have, want), kExitConfig,
               path << ": " << grid.path << " now gives run " << run.name
                    << " other settings than it was started with; remove " << dir << " to train it again");
      continue;
    }
    fs::create_directories(dir, ec);
    XL_CHECK(!ec, kExitCantCreat, dir << ": cannot create directory: " << ec.message());
    write_file(path, json_line(want) + "\n");
  }
  write_file(out + "/grid.json", json_line(grid_json(grid)) + "\n");
}

int run_make(const std::string& makefile, int jobs) {
  std::vector<std::string> args = {"make", "--no-print-directory", "-f", makefile, "-j" + std::to_string(jobs)};
  XL_INFO("running " << args[0] << " " << args[2] << " " << args[3] << " " << args[4]);
  signals::catch_stop();
  // A SIGKILLed xl-ablate cannot pass a signal on: the tools make starts watch it instead, and
  // stop (the trainings save) once it has gone, so make starts nothing more.
  setenv(signals::kStopWithVariable, std::to_string(getpid()).c_str(), 1);
  pid_t pid = fork();
  XL_CHECK(pid >= 0, kExitSoftware, "cannot start make: " << std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    signals::default_in_child();
    dup2(2, 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp("make", argv.data());
    std::fprintf(stderr, "xl-ablate: cannot run make: %s\n", std::strerror(errno));
    _exit(kExitUnavailable);
  }
  // make and everything it starts form a process group of their own, which a stop signal that
  // reached xl-ablate alone (kill, timeout, a batch system) is passed on to: the trainings save
  // their checkpoints and make starts nothing more. (make itself would not pass SIGINT on.)
  setpgid(pid, pid);
  int status = 0, forwarded = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    XL_CHECK(done == 0 || errno == EINTR, kExitSoftware, "waiting for make: " << std::strerror(errno));
    if (const int sig = signals::pending(); sig && !forwarded) {
      forwarded = sig;
      kill(-pid, sig);
    }
    if (signals::take_checkpoint_request() && !forwarded) ask_trainings_for_checkpoints(pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (forwarded) {
    // make ends before the trainings have saved (their recipe shells die of the signal at once):
    // waiting until the group is gone (a minute at most) means a stopped xl-ablate leaves every
    // checkpoint written.
    for (int i = 0; i < 600 && kill(-pid, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return 128 + forwarded;
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

std::pair<int, std::string> failed_run(const Grid& grid, const std::string& out) {
  for (const auto& run : grid.runs) {
    std::ifstream in(out + "/" + run.name + "/failed");
    int code = 0;
    if (in >> code && code > 0 && code < 126) return {code, run.name};
  }
  return {0, ""};
}

}  // namespace xl::ablate
