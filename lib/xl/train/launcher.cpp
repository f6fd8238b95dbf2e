#include "xl/train/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "xl/util/error.h"
#include "xl/util/log.h"
#include "xl/util/signals.h"

namespace xl::train {
namespace {

// A port the kernel says is free now (a race with other programs is possible, and then the
// rendezvous fails with one line).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  XL_CHECK(fd >= 0, kExitUnavailable, "cannot open a socket to find a free port: " << std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  XL_CHECK(ok, kExitUnavailable, "cannot find a free port on 127.0.0.1: " << std::strerror(errno));
  return ntohs(a.sin_port);
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) return "died of signal " + std::to_string(WTERMSIG(status));
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

int exit_code(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

}  // namespace

const char* const kLauncherVariable = "XL_LAUNCHER_PID";

bool started_by_launcher() { return std::getenv(kLauncherVariable) != nullptr; }

int launch_local_ranks(char** argv, int nproc) {
  const std::string port = std::to_string(free_port()), launcher = std::to_string(getpid());
  std::vector<pid_t> pids;
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = fork();
    XL_CHECK(pid >= 0, kExitUnavailable, "cannot start rank " << r << ": " << std::strerror(errno));
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      setenv(kLauncherVariable, launcher.c_str(), 1);
      signals::default_in_child();
      execv("/proc/self/exe", argv);
      std::fprintf(stderr, "%s: cannot start rank %d: %s\n", log::tool_name().c_str(), r, std::strerror(errno));
      _exit(kExitUnavailable);
    }
    pids.push_back(pid);
  }
  signals::catch_stop();
  int result = 0, running = nproc;
  bool stopping = false, forwarded = false;
  auto stop_all = [&](int sig) {
    for (pid_t p : pids)
      if (p > 0) kill(p, sig);
  };
  auto deadline = std::chrono::steady_clock::time_point::max();
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      --running;
      int rank = 0;
      for (int r = 0; r < nproc; ++r)
        if (pids[static_cast<size_t>(r)] == pid) {
          rank = r;
          pids[static_cast<size_t>(r)] = -1;
        }
      const int code = exit_code(status);
      if (code != 0 && result == 0) {
        result = code;
        if (!stopping && !forwarded) {
          std::fprintf(stderr, "%s: rank %d %s; stopping the other ranks\n", log::tool_name().c_str(), rank,
                       describe(status).c_str());
          stopping = true;
          stop_all(SIGTERM);
          deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        }
      }
      continue;
    }
    if (const int sig = signals::pending(); sig && !forwarded) {
      forwarded = true;  // the ranks save and exit 128+N themselves
      stop_all(sig);
      if (result == 0) result = 128 + sig;
    }
    if (std::chrono::steady_clock::now() > deadline) stop_all(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return result;
}

}  // namespace xl::train
