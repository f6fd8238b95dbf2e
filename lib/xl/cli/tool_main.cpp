#include "xl/cli/tool_main.h"

#include <sys/prctl.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "xl/util/failure.h"
#include "xl/util/io.h"
#include "xl/util/log.h"
#include "xl/util/signals.h"

namespace xl::cli {

int run_tool(const std::string& name, int argc, char** argv, const std::function<int(int, char**)>& body) {
  log::set_tool_name(name);
  // ps, top, pgrep and killall know a process by this name, which the kernel takes from the file
  // executed: the tools that re-execute themselves through /proc/self/exe (torch_process) were "exe".
  prctl(PR_SET_NAME, name.substr(0, 15).c_str(), 0, 0, 0);
  signals::remove_temps_and_die_on_stop();
  if (const char* pid = std::getenv(signals::kStopWithVariable)) signals::stop_when_process_ends(std::atoi(pid));
  // Errors carry the name as the body leaves it: a training's ranks add "rank N".
  try {
    return body(argc, argv);
  } catch (...) {
    const Failure f = describe_failure(std::current_exception());
    if (!f.line.empty()) std::fprintf(stderr, "%s: %s\n", log::tool_name().c_str(), f.line.c_str());
    return failed(f.code);
  }
}

}  // namespace xl::cli
