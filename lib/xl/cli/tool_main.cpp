#include "xl/cli/tool_main.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"
#include "xl/util/signals.h"

namespace xl::cli {
namespace {

// OpenMP (LibTorch) and OpenBLAS each keep busy-waiting worker threads; on a 2-core machine they
// steal each other's cores. Both read their settings only when they load, so the process sets
// them and re-executes itself once. The same start-up also quiets LibTorch's own log lines (glog
// in Debian's build, c10's in others: a failure is reported once, by xl, in one line) and gives
// cuBLAS the fixed workspace its deterministic mode needs.
void prepare_torch_environment(char** argv) {
  if (std::getenv("XL_RUNTIME_READY")) return;
  setenv("XL_RUNTIME_READY", "1", 1);
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
  setenv("GLOG_minloglevel", "3", 0);
  setenv("TORCH_CPP_LOG_LEVEL", "FATAL", 0);
  setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0);
  execv("/proc/self/exe", argv);  // returns only on failure: carry on untuned
}

}  // namespace

int run_tool(const std::string& name, int argc, char** argv, Runtime runtime,
             const std::function<int(int, char**)>& body) {
  log::set_tool_name(name);
  signals::remove_temps_and_die_on_stop();
  if (runtime == Runtime::kTorch) {
    prepare_torch_environment(argv);
    // Large tensors are allocated and freed every step: keep them in the heap instead of
    // mapping and unmapping (and zeroing) pages each time.
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, 512 * 1024 * 1024);
  }
  try {
    return body(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
    return e.code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: out of memory\n", name.c_str());
    return kExitSoftware;
  } catch (const std::exception& e) {
    // One line: LibTorch's errors (c10::Error) append a backtrace after their message.
    std::string msg = e.what();
    msg = msg.substr(0, msg.find('\n'));
    std::fprintf(stderr, "%s: internal error: %s\n", name.c_str(), msg.c_str());
    return kExitSoftware;
  }
}

}  // namespace xl::cli
