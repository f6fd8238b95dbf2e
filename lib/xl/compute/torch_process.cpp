#include "xl/compute/torch_process.h"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "xl/compute/blas.h"
#include "xl/util/resources.h"

namespace xl::compute {
namespace {

// OpenMP (LibTorch) and OpenBLAS's pthreads build each keep busy-waiting worker threads; on a
// 2-core machine they steal each other's cores, so both are told to wait passively (OpenBLAS's
// OpenMP build, which scripts/setup-deps.sh installs, shares OpenMP's). OpenMP's workers still spin
// briefly (GOMP_SPINCOUNT) before they sleep: a small model runs hundreds of short parallel regions
// a step, and waking a sleeping worker for each was a large share of tiny training's time. The
// spin count is a middle: far fewer spins did not help, and far more slowed the large models by
// spinning against OpenBLAS's own threads (measured: bench/HISTORY.md, "OpenMP's idle workers
// spin"). Both read their settings only when they load, as OpenBLAS reads its kernel choice, so
// the process sets them and re-executes itself once. The same start-up also quiets LibTorch's own
// log lines (glog in Debian's build, c10's in others: a failure is reported once, by xl, in one
// line) and gives cuBLAS the fixed workspace its deterministic mode needs.
void prepare_environment(char** argv) {
  if (std::getenv("XL_RUNTIME_READY")) return;
  setenv("XL_RUNTIME_READY", "1", 1);
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  setenv("GOMP_SPINCOUNT", "20000", 0);
  setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
  setenv("GLOG_minloglevel", "3", 0);
  setenv("TORCH_CPP_LOG_LEVEL", "FATAL", 0);
  setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0);
  choose_blas_kernels_before_exec();
  execv("/proc/self/exe", argv);  // returns only on failure: carry on untuned
}

// Under an address-space limit (ulimit -v, SGE's h_vmem) that leaves too little room beyond the
// libraries mapped here, OpenBLAS's initialiser retries its first buffer for ever and LibTorch's
// abort or crash: one line instead. Debian's LibTorch 1.13 mapped 559 MB here and needed 944 MB
// (900 MiB) to train a tiny model (at 750 MiB it hung, at 800 it aborted, at 875 it crashed).
void check_address_space(char** argv) {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
  constexpr double kRoom = 384e6;  // bytes beyond the mapped libraries that start-up needs
  const double mapped = static_cast<double>(mapped_bytes());
  if (static_cast<double>(limit.rlim_cur) >= mapped + kRoom) return;
  const char* slash = std::strrchr(argv[0], '/');
  std::fprintf(stderr,
               "%s: the address-space limit (ulimit -v, SGE's h_vmem) of %.0f MB is too small to start LibTorch: it "
               "maps %.0f MB and needs about %.0f MB; raise the limit\n",
               slash ? slash + 1 : argv[0], static_cast<double>(limit.rlim_cur) / 1e6, mapped / 1e6,
               (mapped + kRoom) / 1e6);
  _exit(70);  // as out of memory (kExitSoftware)
}

// Run from the executable's preinit array: after the dynamic loader has mapped the libraries, before
// any of their initialisers. Re-executing there costs the loader's few tens of milliseconds, where
// re-executing from main() had run LibTorch's start-up (its operator registrations, about half a
// second here) once for nothing: a tool's --version took 1.2 s, now 0.6 s. libc sets `environ` in
// its own initialiser, after this one: until then the environment is envp.
void prepare_before_libraries(int, char** argv, char** envp) {
  if (!environ) environ = envp;
  check_address_space(argv);
  prepare_environment(argv);
}
__attribute__((section(".preinit_array"), used)) void (*const preinit_entry)(int, char**, char**) =
    &prepare_before_libraries;

}  // namespace

void prepare_torch_process() {
  // Large tensors are allocated and freed every step: keep them in the heap instead of mapping and
  // unmapping (and zeroing) pages each time, and never hand the heap's top back. A word-level step
  // (wt103 shape) frees more than 512 MB at once: a 512 MB trim threshold returned it to the system
  // and faulted it back in, 130k page faults and a tenth of every step. The peak RSS is the same.
  // -1 turns trimming off (mallopt(3)); the largest threshold an int can give, 2 GiB, still handed
  // back the top of a 7 GB heap (Transformer-XL's wt103 recipe, div_val 1): 160k-650k faults a step.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);
}

}  // namespace xl::compute
