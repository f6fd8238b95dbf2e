// CRC-32C (Castagnoli), the checksum TFRecord frames carry, and its masked form.
#pragma once
#include <cstddef>
#include <cstdint>

namespace xl::tensorboard {

uint32_t crc32c(const void* data, size_t n);
// TFRecord's mask: a CRC rotated and offset, so that a CRC of data holding CRCs stays well spread.
inline uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

}  // namespace xl::tensorboard
