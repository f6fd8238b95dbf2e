#include "xl/util/signals.h"

#include <atomic>
#include <csignal>

#include "xl/util/io.h"

namespace xl::signals {
namespace {

std::atomic<int> g_signal{0};

void die(int sig) {
  io::remove_registered_temps();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void flag(int sig) {
  if (g_signal.exchange(sig) != 0) die(sig);  // a second signal stops at once
}

}  // namespace

void remove_temps_and_die_on_stop() {
  std::signal(SIGINT, die);
  std::signal(SIGTERM, die);
  std::signal(SIGHUP, die);
}

void catch_stop() {
  std::signal(SIGINT, flag);
  std::signal(SIGTERM, flag);
}

int pending() { return g_signal.load(); }

}  // namespace xl::signals
