#include "xl/ablate/run_dir.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
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

}  // namespace

void prepare_out_dir(const Grid& grid, const std::string& out) {
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
  pid_t pid = fork();
  XL_CHECK(pid >= 0, kExitSoftware, "cannot start make: " << std::strerror(errno));
  if (pid == 0) {
    signals::default_in_child();
    dup2(2, 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp("make", argv.data());
    std::fprintf(stderr, "xl-ablate: cannot run make: %s\n", std::strerror(errno));
    _exit(kExitUnavailable);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    XL_CHECK(errno == EINTR, kExitSoftware, "waiting for make: " << std::strerror(errno));
  if (int sig = signals::pending()) return 128 + sig;
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
