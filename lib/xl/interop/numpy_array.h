// NumPy arrays as a pickle holds them (ndarray.__reduce__: their dtype's type string and byte order,
// their shape, C or Fortran order, and their raw bytes), made into tensors. Transformer-XL's
// TensorFlow code kept its corpora's ids in NumPy arrays, and Hugging Face's corpus.bin holds them so.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace xl::interop {

// What numpy.dtype(type, ...) and its state say: "i8", "f4", "u1", "b1", ...; '<', '>', '|' or '='.
struct NumpyDtype {
  std::string type;
  char byte_order = '=';
};

// The array of `shape` whose elements of `dtype` are `bytes`, in C order or (`fortran`) column
// order, as a contiguous tensor: bools, signed integers and floats as their own dtype; unsigned
// integers wider than a byte widened to a signed type that holds them (LibTorch has none of their
// own; a uint64 past int64's range fails). Fails with 65 naming `file`: another type (objects,
// strings, complex), big-endian elements, bytes that are not the shape's. Where `owner` keeps
// `bytes` alive and they need no reordering or widening, the tensor reads them in place, holding
// `owner` (a corpus's ids are most of the file they come from).
torch::Tensor numpy_array_tensor(const NumpyDtype& dtype, const std::vector<int64_t>& shape, bool fortran,
                                 std::string_view bytes, const std::string& file,
                                 std::shared_ptr<const void> owner = nullptr);

}  // namespace xl::interop
