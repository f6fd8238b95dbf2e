#include "xl/train/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <set>
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

int exit_code(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

// Stdin copied whole into an unnamed file in the temp directory (gone when the last rank closes it):
// returns its descriptor.
int spool_stdin() {
  const char* env = std::getenv("TMPDIR");
  const std::string dir = env && *env ? env : "/tmp";
  const int fd = open(dir.c_str(), O_TMPFILE | O_RDWR, 0600);
  XL_CHECK(fd >= 0, kExitCantCreat,
           dir << ": cannot make a temp file to hand <stdin> to every rank: " << std::strerror(errno)
               << " (set TMPDIR, or give the input as a file)");
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t got = read(0, buf.data(), buf.size());
    if (got < 0 && errno == EINTR) continue;
    XL_CHECK(got >= 0, kExitIoErr, "<stdin>: read error: " << std::strerror(errno));
    if (got == 0) break;
    for (ssize_t done = 0; done < got;) {
      const ssize_t put = write(fd, buf.data() + done, static_cast<size_t>(got - done));
      if (put < 0 && errno == EINTR) continue;
      XL_CHECK(put > 0, kExitIoErr, dir << ": cannot copy <stdin> for the ranks: " << std::strerror(errno));
      done += put;
    }
  }
  return fd;
}

const char* const kSpooledStdinVariable = "XL_LAUNCHER_STDIN";

}  // namespace

const char* const kLauncherVariable = "XL_LAUNCHER_PID";

bool started_by_launcher() { return std::getenv(kLauncherVariable) != nullptr; }

void stop_with_launcher() {
  const char* pid = std::getenv(kLauncherVariable);
  if (!pid) return;
  const int launcher = std::atoi(pid);
  signals::stop_when_process_ends(launcher);
  // No longer its child: it ended before it was watched (and its pid may be another's by now).
  if (getppid() != launcher) kill(getpid(), SIGTERM);
}

bool stdin_spooled_by_launcher() { return started_by_launcher() && std::getenv(kSpooledStdinVariable) != nullptr; }

int launch_local_ranks(char** argv, int nproc, bool spool) {
  const std::string port = std::to_string(free_port()), launcher = std::to_string(getpid());
  const int spooled = spool ? spool_stdin() : -1;
  // Each rank opens the copy again, for a read position of its own.
  const std::string spooled_path = "/proc/self/fd/" + std::to_string(spooled);
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
      if (spooled >= 0) {
        const int own = open(spooled_path.c_str(), O_RDONLY);
        if (own < 0 || dup2(own, 0) < 0) {
          std::fprintf(stderr, "%s: rank %d cannot read the copy of <stdin>: %s\n", log::tool_name().c_str(), r,
                       std::strerror(errno));
          _exit(kExitIoErr);
        }
        close(own);
        close(spooled);
        setenv(kSpooledStdinVariable, "1", 1);
      }
      signals::default_in_child();
      execv("/proc/self/exe", argv);
      std::fprintf(stderr, "%s: cannot start rank %d: %s\n", log::tool_name().c_str(), r, std::strerror(errno));
      _exit(kExitUnavailable);
    }
    pids.push_back(pid);
  }
  if (spooled >= 0) close(spooled);
  signals::catch_stop();
  int result = 0, running = nproc;
  bool stopping = false, forwarded = false;
  std::set<int> sent;  // the signals this process sent the ranks
  auto signal_all = [&](int sig) {
    sent.insert(sig);
    for (pid_t p : pids)
      if (p > 0) kill(p, sig);
  };
  using Clock = std::chrono::steady_clock;
  // After a rank fails the others end on their own at their next collective (within a step); those
  // that have not by then are stopped (SIGTERM: they save if they can), then killed.
  constexpr auto kGrace = std::chrono::seconds(5), kTermToKill = std::chrono::seconds(20);
  auto term_at = Clock::time_point::max(), kill_at = Clock::time_point::max();
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
      if (code == 0) continue;
      // A rank that exits has said why (an xl tool's error is a line); one killed by a signal has
      // not. The other ranks leave a rank that is gone to this line (69 without a word), so the
      // job's status is a failing rank's own.
      const bool sent_here = WIFSIGNALED(status) && sent.count(WTERMSIG(status));
      if (WIFSIGNALED(status) && !sent_here)
        std::fprintf(stderr, "%s: rank %d died of signal %d (%s)%s\n", log::tool_name().c_str(), rank,
                     WTERMSIG(status), strsignal(WTERMSIG(status)), stopping || forwarded ? "" : "; stopping the other ranks");
      if (result == 0 || (result == kExitUnavailable && code != kExitUnavailable && !sent_here)) result = code;
      if (!stopping && !forwarded) {
        stopping = true;
        term_at = Clock::now() + kGrace;
        kill_at = term_at + kTermToKill;
      }
      continue;
    }
    if (signals::take_checkpoint_request()) signal_all(SIGUSR1);  // each rank asks for a checkpoint
    if (const int sig = signals::pending(); sig && !forwarded) {
      forwarded = true;  // the ranks save and exit 128+N themselves
      signal_all(sig);
      if (result == 0) result = 128 + sig;
    }
    if (Clock::now() > term_at) {
      signal_all(SIGTERM);
      term_at = Clock::time_point::max();
    }
    if (Clock::now() > kill_at) {
      for (int r = 0; r < nproc; ++r)  // stopped (SIGSTOP), or stuck outside a collective
        if (pids[static_cast<size_t>(r)] > 0)
          std::fprintf(stderr, "%s: rank %d did not end within %lld s of SIGTERM: killed\n", log::tool_name().c_str(), r,
                       static_cast<long long>(kTermToKill.count()));
      signal_all(SIGKILL);
      kill_at = Clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return result;
}

}  // namespace xl::train
