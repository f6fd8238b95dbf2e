// How a tool says the exception that ended it, or the step it failed: one line and a sysexits code.
#pragma once

#include <exception>
#include <functional>
#include <string>

namespace xl {

struct Failure {
  int code = 0;
  std::string line;  // without the tool's name; empty when another process said it
  bool out_of_memory = false;
};

// xl's errors as they are; running out of memory (std::bad_alloc, LibTorch's host and GPU
// allocators) as "out of memory: could not allocate 3.2 GB of host memory", never as an internal
// error; other exceptions (LibTorch's, with a backtrace after the message) as their first line.
Failure describe_failure(const std::exception_ptr& e);

// Has the tool's main call `then(status)` when it fails, after its line is said (the trainers tell
// the other ranks of their job); cli::run_tool calls it through failed().
void after_failure(std::function<void(int)> then);
// Runs what after_failure registered, if anything, and returns `status`.
int failed(int status);

}  // namespace xl
