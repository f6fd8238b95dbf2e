#include "xl/util/json_io.h"

#include <fstream>

#include "xl/util/error.h"

namespace xl {

nlohmann::json read_json_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  XL_CHECK(in, kExitNoInput, path << ": cannot read " << what);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    XL_FAIL(kExitDataErr, path << ": not " << what << ": " << e.what());
  }
}

}  // namespace xl
