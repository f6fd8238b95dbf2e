// Errors carry a sysexits(3) code; a tool's main turns them into one line on stderr and that exit status.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace xl {

enum ExitCode : int {
  kExitOk = 0,
  kExitUsage = 64,      // bad command line
  kExitDataErr = 65,    // bad input data: wrong format, vocab mismatch
  kExitNoInput = 66,    // input missing or unreadable
  kExitUnavailable = 69,  // a service or program is missing (gnuplot, make, a peer process)
  kExitSoftware = 70,   // internal error
  kExitCantCreat = 73,  // cannot create an output
  kExitIoErr = 74,      // I/O failure
  kExitConfig = 78,     // bad configuration
};

// `text` as one printable line: control bytes, DEL and bytes outside well-formed UTF-8 become
// \xNN (messages quote input, and input may be anything).
std::string printable_line(const std::string& text);

// An empty message ends the tool with the code and no line: another process said it (one rank
// of several that found the same problem).
class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& message) : std::runtime_error(printable_line(message)), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

}  // namespace xl

// XL_FAIL(code, "file: " << x << " is bad") throws xl::Error with a streamed message.
#define XL_FAIL(code, msg)                                 \
  do {                                                     \
    std::ostringstream xl_fail_os_;                        \
    xl_fail_os_ << msg;                                    \
    throw ::xl::Error((code), xl_fail_os_.str());          \
  } while (0)

#define XL_CHECK(cond, code, msg) \
  do {                            \
    if (!(cond)) XL_FAIL(code, msg); \
  } while (0)
