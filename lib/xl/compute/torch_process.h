// Prepares a process that computes with LibTorch: thread pools that do not spin against each
// other, the fastest BLAS kernels the CPU can run, quiet LibTorch logs, cuBLAS's fixed workspace,
// a heap that keeps its pages. Most of it happens before the libraries load (the executable's
// preinit entry, linked with this function); a tool's main() calls it before cli::run_tool.
#pragma once

namespace xl::compute {

void prepare_torch_process();

}  // namespace xl::compute
