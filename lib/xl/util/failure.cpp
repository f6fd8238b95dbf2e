#include "xl/util/failure.h"

#include <cstdio>
#include <new>
#include <regex>
#include <utility>

#include "xl/util/error.h"

namespace xl {
namespace {

std::string gigabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, bytes >= 1e9 ? "%.1f GB" : "%.0f MB", bytes >= 1e9 ? bytes / 1e9 : bytes / 1e6);
  return text;
}

// LibTorch 1.13 to 2.x: "DefaultCPUAllocator: can't allocate memory: you tried to allocate
// 3200000000 bytes" (later "not enough memory"), "CUDA out of memory. Tried to allocate 20.00 GiB
// (GPU 0; ...)" or "... GiB. GPU 0 has a total capacity of ...". Empty when `message` is not one.
std::string out_of_memory_line(const std::string& message) {
  std::smatch m;
  if (std::regex_search(message, m, std::regex("DefaultCPUAllocator: [^:]*: you tried to allocate ([0-9]+) bytes")))
    return "out of memory: could not allocate " + gigabytes(std::stod(m[1])) + " of host memory";
  if (message.find("out of memory") == std::string::npos) return "";
  std::string line = "out of memory";
  if (std::regex_search(message, m, std::regex("[Tt]ried to allocate ([0-9.]+ [KMGT]?i?B)"))) {
    line += ": could not allocate " + m[1].str();
    if (std::regex_search(message, m, std::regex("GPU ([0-9]+)"))) line += " on GPU " + m[1].str();
  }
  return line;
}

}  // namespace

Failure describe_failure(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& x) {
    return {x.code(), x.what()};
  } catch (const std::bad_alloc&) {
    return {kExitSoftware, "out of memory", true};
  } catch (const std::exception& x) {
    const std::string message = x.what();
    if (std::string oom = out_of_memory_line(message); !oom.empty()) return {kExitSoftware, oom, true};
    return {kExitSoftware, "internal error: " + message.substr(0, message.find('\n'))};
  } catch (...) {
    return {kExitSoftware, "internal error: an exception of unknown type"};
  }
}

namespace {
std::function<void(int)>& failure_hook() {
  static std::function<void(int)> then;
  return then;
}
}  // namespace

void after_failure(std::function<void(int)> then) { failure_hook() = std::move(then); }

int failed(int status) {
  if (failure_hook()) failure_hook()(status);
  return status;
}

}  // namespace xl
