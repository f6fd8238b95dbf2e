#include "xl/util/signals.h"

#include <poll.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <ctime>
#include <mutex>
#include <thread>

#include "xl/util/io.h"
#include "xl/util/log.h"

namespace xl::signals {
namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_catch{false};  // catch_stop() was called: SIGINT/SIGTERM/SIGHUP set the flag
std::atomic<bool> g_checkpoint{false};  // and SIGUSR1 this one
constexpr int kHandledSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};

// One stop often arrives more than once: Ctrl-C reaches a launcher and its ranks as one process
// group and the launcher passes it on too; timeout(1) and `kill -- -PGID` signal the process and
// its group. Copies this close to the first are the same request; a later one stops at once.
constexpr long long kSameStopNs = 1'000'000'000;
std::atomic<long long> g_first_stop_ns{0};  // when the caught stop signal came (CLOCK_MONOTONIC)

char g_notice[512];  // set_stop_notice's text, written by write(2): safe in a handler
std::atomic<size_t> g_notice_length{0};

long long monotonic_ns() {  // async-signal-safe, unlike std::chrono
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<long long>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

sigset_t handled_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kHandledSignals) sigaddset(&set, sig);
  return set;
}

// Removes the registered temp files, then lets the signal kill the process as it would have.
[[noreturn]] void die(int sig) {
  io::remove_registered_temps();
  std::signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(sig);
  _exit(128 + sig);
}

void on_signal(int sig) {
  if (g_catch.load() && sig == SIGUSR1) {
    g_checkpoint = true;
    return;
  }
  if (g_catch.load()) {
    const long long now = monotonic_ns();
    int none = 0;
    if (g_signal.compare_exchange_strong(none, sig)) {
      g_first_stop_ns = now;
      if (const size_t n = g_notice_length.load()) {
        const ssize_t written = ::write(2, g_notice, n);
        (void)written;  // a notice, nothing to do when stderr is gone
      }
      return;
    }
    const long long first = g_first_stop_ns.load();  // 0: the first is being recorded right now
    if (first == 0 || now - first < kSameStopNs) return;
  }
  die(sig);
}

// The stop signals are blocked in every thread and taken here, by sigwait: a handler would run on
// whichever thread the signal found, and oneDNN 2.x's JIT GEMM kernels point the stack pointer into
// the heap while they run, so the kernel's signal frame landed on the heap (oneDNN issue 4845):
// "corrupted size vs. prev_size" or a segfault in a few percent of SIGTERMs during training.
void wait_for_signals() {
  const sigset_t set = handled_signals();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) == 0) on_signal(sig);
  }
}

void start_waiting() {
  static std::once_flag once;
  std::call_once(once, [] {
    const sigset_t set = handled_signals();
    // Threads inherit the mask: this runs at a tool's start, before OpenMP and oneDNN start theirs.
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread(wait_for_signals).detach();
  });
  // A thread started before this one (none in xl's tools) still gets a handler that does the same.
  for (int sig : kHandledSignals) std::signal(sig, on_signal);
}

}  // namespace

void remove_temps_and_die_on_stop() {
  g_catch = false;
  start_waiting();
}

void catch_stop() {
  g_catch = true;
  start_waiting();
}

void set_stop_notice(const std::string& doing, bool on_new_line) {
  const std::string text = std::string(on_new_line ? "\n" : "") + log::tool_name() + ": " + doing +
                           "; another stop signal a second or more from now stops it at once, unsaved\n";
  g_notice_length = 0;
  const size_t n = std::min(text.size(), sizeof g_notice);
  std::copy(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(n), g_notice);
  g_notice_length = n;
}

int pending() { return g_signal.load(); }

bool take_checkpoint_request() { return g_checkpoint.exchange(false); }

void default_in_child() {
  for (int sig : kHandledSignals) std::signal(sig, SIG_DFL);
  const sigset_t set = handled_signals();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

const char* const kStopWithVariable = "XL_STOP_WITH_PID";

void stop_when_process_ends(int pid) {
  if (pid <= 0) return;
  int fd = -1;
  errno = 0;
#ifdef SYS_pidfd_open
  fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#endif
  const bool gone = fd < 0 && (errno == ESRCH || (kill(pid, 0) != 0 && errno == ESRCH));
  if (gone) {
    kill(getpid(), SIGTERM);
    return;
  }
  std::thread([pid, fd] {
    if (fd >= 0) {
      pollfd p{fd, POLLIN, 0};
      while (poll(&p, 1, -1) < 0 && errno == EINTR) {
      }
    } else {  // a kernel before 5.3
      while (kill(pid, 0) == 0 || errno == EPERM) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (!pending()) kill(getpid(), SIGTERM);
  }).detach();
}

}  // namespace xl::signals
