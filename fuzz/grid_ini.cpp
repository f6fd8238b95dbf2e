// xl-ablate's grid files: any bytes are refused cleanly (78, one printable line) or give a grid.
#include "fuzz_support.h"
#include <filesystem>

#include "xl/ablate/grid.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string& path = xl::fuzz::input_file(data, size, ".ini");
  // Base configs named in grids are found in share/xl/configs as from a build tree's bin/.
  static const std::string exe_dir = (std::filesystem::path(__FILE__).parent_path() / "bin").string();
  xl::fuzz::expect_clean_refusal([&] { (void)xl::ablate::parse_grid(text, path, exe_dir); });
  return 0;
}
