#include "xl/interop/numpy_array.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "xl/util/error.h"

namespace xl::interop {

torch::Tensor numpy_array_tensor(const NumpyDtype& dtype, const std::vector<int64_t>& shape, bool fortran,
                                 std::string_view bytes, const std::string& file, std::shared_ptr<const void> owner) {
  // The stored type, and the type it becomes where LibTorch lacks it.
  static const std::map<std::string, std::pair<torch::Dtype, torch::Dtype>> types = {
      {"b1", {torch::kBool, torch::kBool}},       {"i1", {torch::kInt8, torch::kInt8}},
      {"u1", {torch::kUInt8, torch::kUInt8}},     {"i2", {torch::kInt16, torch::kInt16}},
      {"u2", {torch::kInt16, torch::kInt32}},     {"i4", {torch::kInt32, torch::kInt32}},
      {"u4", {torch::kInt32, torch::kInt64}},     {"i8", {torch::kInt64, torch::kInt64}},
      {"u8", {torch::kInt64, torch::kInt64}},     {"f2", {torch::kFloat16, torch::kFloat16}},
      {"f4", {torch::kFloat32, torch::kFloat32}}, {"f8", {torch::kFloat64, torch::kFloat64}},
  };
  const auto type = types.find(dtype.type);
  XL_CHECK(type != types.end(), kExitDataErr,
           file << ": holds a NumPy array of dtype '" << dtype.type << "', not of numbers (bool, int, uint, float)");
  const auto [stored, made] = type->second;
  const size_t element = c10::elementSize(stored);
  XL_CHECK(dtype.byte_order != '>' || element == 1, kExitDataErr,
           file << ": holds a NumPy array stored big-endian, which is not supported");
  int64_t numel = 1;
  for (const int64_t n : shape) {
    XL_CHECK(n >= 0 && (n == 0 || numel <= std::numeric_limits<int64_t>::max() / n), kExitDataErr,
             file << ": holds a NumPy array of impossible shape");
    numel *= n;
  }
  XL_CHECK(static_cast<uint64_t>(numel) == bytes.size() / element && bytes.size() % element == 0, kExitDataErr,
           file << ": holds a NumPy array of " << numel << " elements in " << bytes.size() << " bytes, not "
                << numel * static_cast<int64_t>(element));
  // Fortran order is the reversed shape's C order, transposed back.
  std::vector<int64_t> stored_shape = shape;
  if (fortran) std::reverse(stored_shape.begin(), stored_shape.end());
  const bool in_place = owner && !(fortran && shape.size() > 1) && made == stored && dtype.type != "u8" &&
                        reinterpret_cast<uintptr_t>(bytes.data()) % element == 0;
  if (in_place && !bytes.empty())
    return torch::from_blob(const_cast<char*>(bytes.data()), shape, [owner](void*) {},
                            torch::TensorOptions().dtype(stored));
  torch::Tensor t = torch::empty(stored_shape, torch::TensorOptions().dtype(stored));
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  if (fortran && t.dim() > 1) {
    std::vector<int64_t> back(static_cast<size_t>(t.dim()));
    for (int64_t d = 0; d < t.dim(); ++d) back[static_cast<size_t>(d)] = t.dim() - 1 - d;
    t = t.permute(back).contiguous();
  }
  // Unsigned: the signed type of the same width read the bits; widen and add back what wrapped.
  if (dtype.type == "u8")
    XL_CHECK(numel == 0 || t.min().item<int64_t>() >= 0, kExitDataErr,
             file << ": holds a NumPy uint64 array with values past int64's range");
  if (made == stored) return t;
  const int64_t wrap = int64_t{1} << (8 * element);
  torch::Tensor wide = t.to(made);
  return torch::where(wide < 0, wide + wrap, wide);
}

}  // namespace xl::interop
