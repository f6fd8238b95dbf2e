// A description of any xl HDF5 file (tokens files, checkpoints) as JSON, for xl-inspect.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "xl/h5/h5.h"

namespace xl::h5 {

// Root attributes, the format's own summary (splits and vocab, or model and training state),
// and every dataset with its shape and type.
nlohmann::json describe(const File& file);
// The same as readable text.
std::string describe_text(const nlohmann::json& description);

}  // namespace xl::h5
