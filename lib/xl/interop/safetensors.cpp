#include "xl/interop/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "xl/util/error.h"
#include "xl/util/json_io.h"

namespace xl::interop {
namespace {

// The safetensors library refuses headers over 100 MB; so does xl (a bad length is not a malloc).
constexpr uint64_t kMaxHeader = 100'000'000;

uint64_t header_length(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  return n;
}

struct DType {
  torch::ScalarType type;
  size_t size;
};

const std::map<std::string, DType>& dtypes() {
  static const std::map<std::string, DType> m = {
      {"F64", {torch::kFloat64, 8}}, {"F32", {torch::kFloat32, 4}}, {"F16", {torch::kFloat16, 2}},
      {"BF16", {torch::kBFloat16, 2}}, {"I64", {torch::kInt64, 8}}, {"I32", {torch::kInt32, 4}},
      {"I16", {torch::kInt16, 2}}, {"I8", {torch::kInt8, 1}}, {"U8", {torch::kUInt8, 1}},
      {"BOOL", {torch::kBool, 1}}};
  return m;
}

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

Entry entry(const std::string& name, const nlohmann::json& j, const std::string& display) {
  const std::string where = display + ": tensor '" + name + "'";
  XL_CHECK(j.is_object() && j.contains("dtype") && j.contains("shape") && j.contains("data_offsets"), kExitDataErr,
           where << " is not an object with dtype, shape and data_offsets");
  const nlohmann::json &dtype = j.at("dtype"), &shape = j.at("shape"), &offsets = j.at("data_offsets");
  XL_CHECK(dtype.is_string(), kExitDataErr, where << ": dtype " << json_line(dtype) << " is not a string");
  const auto known = dtypes().find(dtype.get<std::string>());
  XL_CHECK(known != dtypes().end(), kExitDataErr,
           where << " has dtype " << dtype.get<std::string>() << ", which xl does not read (floats, signed integers, U8, BOOL)");
  Entry e{name, known->second, {}, 0, 0};
  XL_CHECK(shape.is_array(), kExitDataErr, where << ": shape " << json_line(shape) << " is not a list");
  uint64_t count = 1;
  for (const auto& d : shape) {
    XL_CHECK(d.is_number_unsigned(), kExitDataErr, where << ": shape " << json_line(shape) << " is not a list of sizes");
    const uint64_t size = d.get<uint64_t>();
    XL_CHECK(size <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                 (size == 0 || count <= std::numeric_limits<uint64_t>::max() / e.dtype.size / size),
             kExitDataErr, where << ": shape " << json_line(shape) << " is too large");
    count *= size;
    e.shape.push_back(static_cast<int64_t>(size));
  }
  XL_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
           kExitDataErr, where << ": data_offsets " << json_line(offsets) << " is not [begin, end]");
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  XL_CHECK(e.begin <= e.end && e.end - e.begin == count * e.dtype.size, kExitDataErr,
           where << ": data_offsets " << json_line(offsets) << " hold " << (e.begin <= e.end ? e.end - e.begin : 0)
                 << " bytes, its shape " << json_line(shape) << " needs " << count * e.dtype.size);
  return e;
}

}  // namespace

bool is_safetensors(const std::string& bytes) {
  if (bytes.size() < 10) return false;
  const uint64_t n = header_length(bytes);
  return n >= 2 && n <= kMaxHeader && n <= bytes.size() - 8 && bytes[8] == '{';
}

checkpoint::TensorList parse_safetensors(const std::string& bytes, const std::string& display) {
  XL_CHECK(bytes.size() >= 8, kExitDataErr, display << ": not a safetensors file (shorter than the 8-byte header length)");
  const uint64_t n = header_length(bytes);
  XL_CHECK(n <= kMaxHeader && n <= bytes.size() - 8, kExitDataErr,
           display << ": not a safetensors file (a header of " << n << " bytes in a file of " << bytes.size() << ")");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  } catch (const nlohmann::json::exception& e) {
    XL_FAIL(kExitDataErr, display << ": not a safetensors file (its header is not JSON: " << e.what() << ")");
  }
  XL_CHECK(header.is_object(), kExitDataErr, display << ": not a safetensors file (its header is not a JSON object)");
  std::vector<Entry> entries;
  for (const auto& [name, j] : header.items())
    if (name != "__metadata__") entries.push_back(entry(name, j, display));
  // The format's rule: the ranges tile the data exactly, in some order (no overlap, no hole).
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t data_size = bytes.size() - 8 - n;
  uint64_t at = 0;
  for (const Entry& e : entries) {
    XL_CHECK(e.begin == at, kExitDataErr,
             display << ": tensor '" << e.name << "' starts at byte " << e.begin << " of the data, where "
                     << (e.begin < at ? "another tensor's bytes run (overlap)" : "a hole begins") << " (expected " << at << ")");
    at = e.end;
  }
  XL_CHECK(at == data_size, kExitDataErr,
           display << ": the tensors hold " << at << " bytes of data, the file " << data_size
                   << (at > data_size ? " (truncated?)" : " (trailing bytes)"));
  const char* data = bytes.data() + 8 + n;
  checkpoint::TensorList out;
  for (const Entry& e : entries) {
    const bool is_bool = e.dtype.type == torch::kBool;
    torch::Tensor t = torch::empty(e.shape, is_bool ? torch::kUInt8 : e.dtype.type);
    if (e.end > e.begin) std::memcpy(t.data_ptr(), data + e.begin, e.end - e.begin);
    out.emplace_back(e.name, is_bool ? t.ne(0) : t);
  }
  return out;
}

}  // namespace xl::interop
