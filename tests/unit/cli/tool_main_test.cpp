// Every tool's main (cli/tool_main.h): the body's status is the tool's; a failure of any kind is
// one line on stderr, "TOOL: what", and its sysexits status, never a stack trace or an abort. Each
// case runs in a child process (run_tool installs the tool's signal handlers).
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>

#include "xl/cli/tool_main.h"
#include "xl/util/error.h"

using namespace xl;

namespace {

int run(const std::function<int(int, char**)>& body) {
  char name[] = "xl-x", arg[] = "in.txt";
  char* argv[] = {name, arg, nullptr};
  return cli::run_tool("xl-x", 2, argv, body);
}

}  // namespace

TEST(ToolMainDeathTest, TheBodysStatusIsTheToolsAndItSeesTheCommandLine) {
  EXPECT_EXIT(std::exit(run([](int argc, char** argv) { return argc == 2 && std::string(argv[1]) == "in.txt" ? 3 : 1; })),
              testing::ExitedWithCode(3), "");
}

TEST(ToolMainDeathTest, AnErrorIsOneLineNamingTheToolWithItsExitCode) {
  EXPECT_EXIT(std::exit(run([](int, char**) -> int { throw Error(kExitDataErr, "in.txt: not a tokens file"); })),
              testing::ExitedWithCode(65), "^xl-x: in.txt: not a tokens file\n$");
  // A message that quotes input stays one printable line.
  EXPECT_EXIT(std::exit(run([](int, char**) -> int { throw Error(kExitUsage, "bad\nname"); })),
              testing::ExitedWithCode(64), "^xl-x: bad\\\\x0aname\n$");
}

TEST(ToolMainDeathTest, AnotherProcessesErrorEndsTheToolSilently) {
  EXPECT_EXIT(std::exit(run([](int, char**) -> int { throw Error(kExitUnavailable, ""); })), testing::ExitedWithCode(69),
              "^$");
}

TEST(ToolMainDeathTest, ForeignExceptionsAreInternalErrorsAndRunningOutOfMemoryIsSaidAsSuch) {
  EXPECT_EXIT(std::exit(run([](int, char**) -> int { throw std::runtime_error("index 7 out of range\n  frame #0"); })),
              testing::ExitedWithCode(70), "^xl-x: internal error: index 7 out of range\n$");
  EXPECT_EXIT(std::exit(run([](int, char**) -> int { throw std::bad_alloc(); })), testing::ExitedWithCode(70),
              "^xl-x: out of memory\n$");
  EXPECT_EXIT(std::exit(run([](int, char**) -> int { throw 42; })), testing::ExitedWithCode(70),
              "^xl-x: internal error: an exception of unknown type\n$");
}
