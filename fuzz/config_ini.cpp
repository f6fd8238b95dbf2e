// The INI config reader every tool shares (-c FILE): any bytes are refused cleanly (78, one
// printable line) or give settings of the declared types.
#include "fuzz_support.h"
#include "xl/cli/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = xl::fuzz::input_file(data, size, ".ini");
  xl::fuzz::expect_clean_refusal([&] {
    namespace po = xl::cli::po;
    xl::cli::Options cli({"xl-fuzz", "fuzz target", "", "", ""});
    cli.add("Settings")
        ("n-layer", po::value<int64_t>()->default_value(4), "an integer")
        ("lr", po::value<double>()->default_value(0.1), "a real")
        ("same-length", po::value<bool>()->default_value(false), "a boolean")
        ("skip-schedule", po::value<std::string>()->default_value("none"), "a string")
        ("cutoffs", po::value<std::string>(), "a list");
    cli.parse_settings({path}, {});
    (void)cli.config_text();
  });
  return 0;
}
