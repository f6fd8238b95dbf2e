// The safetensors reader, fed files written byte for byte as the format specifies (an 8-byte
// little-endian header length, the JSON header, the data), and files that break its rules, which
// fail with 65 naming the problem.
#include <gtest/gtest.h>

#include <cstring>

#include "xl/interop/safetensors.h"
#include "xl/util/error.h"
#include "support/test_support.h"

using namespace xl::interop;
using torch::Tensor;
using xl::test::error_code;

namespace {

std::string file(const std::string& header, const std::string& data) {
  std::string out;
  for (int k = 0; k < 8; ++k) out += static_cast<char>((static_cast<uint64_t>(header.size()) >> (8 * k)) & 0xff);
  return out + header + data;
}

template <typename T>
std::string raw(std::initializer_list<T> values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(s.data(), values.begin(), s.size());
  return s;
}

// The 16 high bits of a float32: its bf16 (exact for these values).
uint16_t bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);
}

std::string refusal(const std::string& bytes) {
  std::string msg;
  EXPECT_EQ(error_code([&] { parse_safetensors(bytes, "m.safetensors"); }, &msg), xl::kExitDataErr) << msg;
  EXPECT_EQ(msg.rfind("m.safetensors: ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  return msg;
}

}  // namespace

TEST(Safetensors, ReadsEachDtypeShapeAndRangeInByteOrder) {
  // Listed out of byte order, with metadata, a scalar, an empty tensor, and the header padded with
  // spaces as the safetensors library pads it to 8 bytes.
  const std::string f32 = raw<float>({1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f});
  const std::string f16 = raw<uint16_t>({0x3c00, 0xc000});  // 1.0, -2.0
  const std::string b16 = raw<uint16_t>({bf16(0.75f), bf16(-3.0f), bf16(96.0f)});
  const std::string i64 = raw<int64_t>({-7});
  const std::string flags = std::string("\x01\x00\x01", 3);
  const std::string data = f32 + f16 + b16 + i64 + flags;
  auto at = [](size_t a, size_t b) { return "[" + std::to_string(a) + "," + std::to_string(b) + "]"; };
  size_t o1 = f32.size(), o2 = o1 + f16.size(), o3 = o2 + b16.size(), o4 = o3 + i64.size();
  std::string header = "{\"z.mask\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":" + at(o4, o4 + 3) +
                       "},\"__metadata__\":{\"format\":\"pt\"},"
                       "\"b.half\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":" + at(o1, o2) + "},"
                       "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":" + at(0, o1) + "},"
                       "\"c.bf16\":{\"dtype\":\"BF16\",\"shape\":[3,1],\"data_offsets\":" + at(o2, o3) + "},"
                       "\"d.step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":" + at(o3, o4) + "},"
                       "\"e.none\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":" + at(o4, o4) + "}}";
  header += std::string((8 - header.size() % 8) % 8, ' ');
  const std::string bytes = file(header, data);
  ASSERT_TRUE(is_safetensors(bytes));
  const auto tensors = parse_safetensors(bytes, "m.safetensors");
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"a.weight", "b.half", "c.bf16", "d.step", "e.none", "z.mask"}));
  auto get = [&](const std::string& n) { return xl::checkpoint::find_tensor(tensors, n); };
  EXPECT_TRUE(torch::equal(get("a.weight"), torch::tensor({1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f}).view({2, 3})));
  EXPECT_EQ(get("b.half").scalar_type(), torch::kHalf);
  EXPECT_TRUE(torch::equal(get("b.half").to(torch::kFloat), torch::tensor({1.0f, -2.0f})));
  EXPECT_EQ(get("c.bf16").scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(get("c.bf16").to(torch::kFloat), torch::tensor({0.75f, -3.0f, 96.0f}).view({3, 1})));
  EXPECT_EQ(get("d.step").dim(), 0);
  EXPECT_EQ(get("d.step").item<int64_t>(), -7);
  EXPECT_EQ(get("e.none").sizes(), (std::vector<int64_t>{0, 4}));
  EXPECT_TRUE(torch::equal(get("z.mask"), torch::tensor({true, false, true})));
  EXPECT_TRUE(parse_safetensors(file("{}", ""), "empty.safetensors").empty());
}

TEST(Safetensors, RefusesFilesThatBreakTheFormatsRules) {
  const std::string four = raw<float>({1, 2, 3, 4});
  auto one = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return "{\"w\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}}";
  };
  EXPECT_NE(refusal("\x05\0\0").find("shorter than the 8-byte header length"), std::string::npos);
  EXPECT_NE(refusal(file("{}", "").substr(0, 9)).find("a header of 2 bytes in a file of 9"), std::string::npos);
  EXPECT_NE(refusal(file("{\"w\": [", "")).find("not JSON"), std::string::npos);
  EXPECT_NE(refusal(file("[1, 2]", "")).find("not a JSON object"), std::string::npos);
  EXPECT_NE(refusal(file("{\"w\": 3}", "")).find("tensor 'w' is not an object with dtype, shape and data_offsets"),
            std::string::npos);
  EXPECT_NE(refusal(file(one("U16", "[2]", "[0,4]"), four)).find("dtype U16, which xl does not read"), std::string::npos);
  EXPECT_NE(refusal(file(one("F32", "[-1]", "[0,16]"), four)).find("not a list of sizes"), std::string::npos);
  EXPECT_NE(refusal(file(one("F32", "[4294967296,4294967296]", "[0,16]"), four)).find("too large"), std::string::npos);
  EXPECT_NE(refusal(file(one("F32", "[4]", "[0]"), four)).find("is not [begin, end]"), std::string::npos);
  EXPECT_NE(refusal(file(one("F32", "[3]", "[0,16]"), four)).find("hold 16 bytes, its shape [3] needs 12"), std::string::npos);
  EXPECT_NE(refusal(file(one("F32", "[4]", "[16,0]"), four)).find("hold 0 bytes"), std::string::npos);
  EXPECT_NE(refusal(file(one("F32", "[2]", "[8,16]"), four)).find("where a hole begins (expected 0)"), std::string::npos);
  EXPECT_NE(refusal(file(one("F32", "[4]", "[0,16]"), four + "xx")).find("16 bytes of data, the file 18 (trailing bytes)"),
            std::string::npos);
  EXPECT_NE(refusal(file(one("F32", "[4]", "[0,16]"), four.substr(0, 12))).find("(truncated?)"), std::string::npos);
  const std::string overlap = "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
  EXPECT_NE(refusal(file(overlap, four)).find("tensor 'b' starts at byte 8 of the data, where another tensor's bytes run"),
            std::string::npos);
  // A torch.save file never looks like one.
  EXPECT_FALSE(is_safetensors(std::string("PK\x03\x04", 4) + std::string(60, 'x')));
  EXPECT_FALSE(is_safetensors(std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19\x2e", 15)));
}
