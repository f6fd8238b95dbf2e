// The main() of every tool that computes with LibTorch: prepares the process for it (thread pools
// that do not spin against each other, the fastest BLAS kernels the CPU can run, quiet LibTorch
// logs, a heap that keeps its pages), then runs the tool as cli::run_tool does.
#pragma once
#include <functional>
#include <string>

namespace xl::model {

int run_torch_tool(const std::string& name, int argc, char** argv, const std::function<int(int, char**)>& body);

}  // namespace xl::model
