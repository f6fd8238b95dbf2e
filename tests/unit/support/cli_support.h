// Helpers of the command-line tests (cli/ and options/): a command line as parse() takes it, the
// one line and exit code of a refusal, and LibTorch's thread count kept across a test (an option
// group applies --threads to the whole process).
#pragma once
#include <ATen/Parallel.h>

#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "support/test_support.h"
#include "xl/cli/options.h"
#include "xl/compute/parallel.h"

namespace xl::test {

// argv for `args` (the tool's name first), alive as long as this object.
class Argv {
 public:
  explicit Argv(std::vector<std::string> args) : args_(std::move(args)) {
    for (std::string& a : args_) pointers_.push_back(a.data());
    pointers_.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(args_.size()); }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> pointers_;
};

// cli.parse() of `args` (the tool's name first).
inline bool parse(cli::Options& cli, std::vector<std::string> args) {
  Argv a(std::move(args));
  return cli.parse(a.argc(), a.argv());
}

// What a refusal says: its exit code and its one line (code 0: no refusal).
struct Refusal {
  int code = 0;
  std::string line;
};
inline bool operator==(const Refusal& a, const Refusal& b) { return a.code == b.code && a.line == b.line; }
inline std::ostream& operator<<(std::ostream& os, const Refusal& r) { return os << r.code << " \"" << r.line << "\""; }
inline Refusal refusal(const std::function<void()>& f) {
  Refusal r;
  r.code = error_code(f, &r.line);
  return r;
}

// Restores LibTorch's (and BLAS's) thread count when the test ends.
class ThreadsKept {
 public:
  ~ThreadsKept() { compute::set_threads(threads_); }

 private:
  int threads_ = at::get_num_threads();
};

}  // namespace xl::test
