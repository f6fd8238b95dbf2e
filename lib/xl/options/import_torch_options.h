// xl-import-torch's options: the input, its vocab, where the tensors are in it, the direction
// (--export, --corpus) and the model flags, read off the tensors when left out and checked when
// given.
#pragma once
#include "xl/cli/options.h"
#include "xl/interop/torch_import.h"

namespace xl::options {

void add_import_torch_options(cli::Options& cli);
// Every flag checked (64: a flag that does not apply to the direction is named).
interop::TorchImportRequest torch_import_request(const cli::Options& cli, int argc, char** argv);

}  // namespace xl::options
