// What every fuzz target checks besides the sanitizers: a reader refuses bad input only with an
// xl::Error carrying one of the exit codes readers give (65 bad data, 66 no input, 64 usage,
// 78 bad config) and a message that is one printable line of UTF-8; anything else (another exception,
// a crash, a sanitizer report, a huge allocation) is a finding.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "xl/util/utf8.h"
#include "xl/util/error.h"

namespace xl::fuzz {

inline void finding(const std::string& what) {
  std::fprintf(stderr, "FINDING: %s\n", what.c_str());
  std::abort();
}

// Runs `read`; an xl::Error must have a reader's exit code and a one-line, printable message.
template <typename F>
void expect_clean_refusal(F&& read) {
  try {
    read();
  } catch (const Error& e) {
    const int c = e.code();
    if (c != kExitDataErr && c != kExitNoInput && c != kExitUsage && c != kExitConfig)
      finding("exit code " + std::to_string(c) + ": " + e.what());
    const std::string line = e.what();
    for (size_t i = 0; i < line.size();) {
      uint32_t cp = 0;
      const int n = utf8_decode(line, i, &cp);
      if (n == 0 || cp < 0x20 || cp == 0x7f) finding("unprintable bytes in the error line: " + line);
      i += static_cast<size_t>(n);
    }
  }
}

// A file holding the input, for readers that take a path (one per process: libFuzzer may fork).
inline const std::string& input_file(const uint8_t* data, size_t size, const char* suffix) {
  static const std::string path =
      std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/xl-fuzz-" + std::to_string(getpid()) + suffix;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace xl::fuzz
