// CRC-32C and TFRecord's masked CRC against published vectors (RFC 3720, B.4) and a bitwise
// CRC-32C written in the test.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

#include "tensorboard/event_reader.h"
#include "xl/tensorboard/crc32c.h"

namespace {

using xl::tensorboard::crc32c;
using xl::tensorboard::masked_crc32c;

uint32_t crc_of(const std::string& s) { return crc32c(s.data(), s.size()); }

}  // namespace

TEST(Crc32c, PublishedVectors) {
  EXPECT_EQ(crc_of("123456789"), 0xE3069283u);
  EXPECT_EQ(crc_of(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc_of(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string up(32, '\0'), down(32, '\0');
  for (int i = 0; i < 32; ++i) up[i] = static_cast<char>(i), down[i] = static_cast<char>(31 - i);
  EXPECT_EQ(crc_of(up), 0x46DD794Eu);
  EXPECT_EQ(crc_of(down), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

// The test's bitwise CRC agrees with the same vectors, then with xl's on random data of every
// length up to 300 (any table entry a wrong byte would expose).
TEST(Crc32c, AgreesWithABitwiseCrcOnRandomData) {
  using xl::test::tfevents::bitwise_crc32c;
  ASSERT_EQ(bitwise_crc32c("123456789"), 0xE3069283u);
  ASSERT_EQ(bitwise_crc32c(std::string(32, '\0')), 0x8A9136AAu);
  std::mt19937 rng(5);
  for (size_t n = 0; n <= 300; ++n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng() & 0xFF);
    EXPECT_EQ(crc_of(s), bitwise_crc32c(s)) << "length " << n;
  }
}

// masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8, worked out here by hand for "123456789":
// 0xE3069283 >> 15 = 0x1C60D, 0xE3069283 << 17 (mod 2^32) = 0x25060000, | = 0x2507C60D,
// + 0xa282ead8 = 0xC78AB0E5.
TEST(Crc32c, MaskedIsTfRecordsRotateAndOffset) {
  const std::string s = "123456789";
  EXPECT_EQ(masked_crc32c(s.data(), s.size()), 0xC78AB0E5u);
  std::mt19937 rng(9);
  for (int trial = 0; trial < 50; ++trial) {
    std::string d(static_cast<size_t>(trial * 3), '\0');
    for (auto& c : d) c = static_cast<char>(rng() & 0xFF);
    const uint32_t crc = xl::test::tfevents::bitwise_crc32c(d);
    const uint32_t rotated = (crc >> 15) | (crc << 17);
    EXPECT_EQ(masked_crc32c(d.data(), d.size()), static_cast<uint32_t>(rotated + 0xa282ead8u));
  }
}
