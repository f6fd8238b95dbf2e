// Every tool's main(): sets up the process, runs the body, and turns any failure into one line
// on stderr and a sysexits status (never a stack trace or an abort).
#pragma once
#include <functional>
#include <string>

namespace xl::cli {

enum class Runtime {
  kPlain,  // no tensor work
  kTorch,  // LibTorch compute: thread pools set up so they do not spin against each other
};

int run_tool(const std::string& name, int argc, char** argv, Runtime runtime,
             const std::function<int(int, char**)>& body);

}  // namespace xl::cli
