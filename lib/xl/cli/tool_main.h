// Every tool's main(): sets up the process, runs the body, and turns any failure into one line
// on stderr and a sysexits status (never a stack trace or an abort).
#pragma once
#include <functional>
#include <string>

namespace xl::cli {

// Tools that compute with LibTorch start through model::run_torch_tool, which prepares the
// process first.
int run_tool(const std::string& name, int argc, char** argv, const std::function<int(int, char**)>& body);
// Has run_tool call `then(status)` when the body fails, after its line is said (the trainers tell
// the other ranks of their job).
void after_failure(std::function<void(int)> then);

}  // namespace xl::cli
