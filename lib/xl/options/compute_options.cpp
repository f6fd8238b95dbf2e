#include "xl/options/compute_options.h"

#include <algorithm>
#include <thread>

namespace xl::options {
namespace po = cli::po;

void add_compute_options(cli::Options& cli, ComputeFlags flags) {
  auto group = cli.add("Compute");
  group("threads", po::value<int>()->default_value(0), "CPU threads (0: one per core)");
  if (flags.seed) group("seed", po::value<uint64_t>()->default_value(1), "seed of every random generator");
  if (flags.device) group("device", po::value<std::string>()->default_value("auto"), "auto (a GPU when there is one), cpu, cuda or cuda:N");
}

Compute compute_settings(const cli::Options& cli) {
  Compute c;
  c.threads = cli.has("threads") ? cli.get<int>("threads") : 0;
  if (c.threads <= 0) c.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (cli.has("seed")) c.seed = cli.get<uint64_t>("seed");
  if (cli.has("device")) c.device = cli.get<std::string>("device");
  return c;
}

}  // namespace xl::options
