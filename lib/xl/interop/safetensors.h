// Hugging Face's safetensors files, which transformers' save_pretrained writes (model.safetensors)
// by default since 4.35: an 8-byte little-endian header length, a JSON header giving each tensor's
// dtype, shape and byte range, then the bytes. Read without Python; nothing in them is executed.
#pragma once
#include <string>

#include "xl/checkpoint/tensor_list.h"

namespace xl::interop {

// Whether a file's bytes begin as a safetensors file does (a header length that fits them, then
// '{'); a torch.save file never does.
bool is_safetensors(const std::string& bytes);

// The tensors of a file's bytes, on the CPU in their stored dtype, in byte order. Fails with 65
// and one line naming the file (`display`): a header that runs past the end or is not a JSON object
// of tensors, a dtype xl does not read (unsigned 16-64 bit, 8-bit floats), byte ranges that do not
// match their shapes, overlap, leave holes or miss the end (the format forbids all three).
checkpoint::TensorList parse_safetensors(const std::string& bytes, const std::string& display);

}  // namespace xl::interop
