// xl-generate's options: the checkpoint, the prompt, how tokens are drawn, and the memory; the
// compute group is shared.
#pragma once
#include "xl/cli/options.h"
#include "xl/eval/generate_text.h"

namespace xl::options {

void add_generate_options(cli::Options& cli);
// Every flag checked (64, or 78 for a settings file's value), the device and precision resolved,
// torch's generator seeded.
eval::TextGenerationRequest text_generation_request(const cli::Options& cli);

}  // namespace xl::options
