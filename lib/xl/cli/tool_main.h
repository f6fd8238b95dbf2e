// Every tool's main(): sets up the process, runs the body, and turns any failure into one line
// on stderr and a sysexits status (never a stack trace or an abort).
#pragma once
#include <functional>
#include <string>

namespace xl::cli {

// Tools that compute with LibTorch call compute::prepare_torch_process() first.
int run_tool(const std::string& name, int argc, char** argv, const std::function<int(int, char**)>& body);

}  // namespace xl::cli
