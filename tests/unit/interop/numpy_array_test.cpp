// NumPy arrays inside pickles, read as tensors: test vectors that NumPy 1.24 itself pickled (its
// ndarray.__reduce__ for protocol 2, with bytes as _codecs.encode(str, "latin1"), and protocol 5's
// _frombuffer), and numpy_array_tensor's own refusals.
#include <gtest/gtest.h>

#include "xl/interop/numpy_array.h"
#include "xl/interop/torch_pickle.h"
#include "xl/util/error.h"
#include "support/test_support.h"

using namespace xl::interop;
using xl::test::error_code;

namespace {

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

const torch::Tensor& tensor(const TorchFile& f, const std::string& name) {
  for (const auto& [n, t] : f.tensors)
    if (n == name) return t;
  throw std::runtime_error("no tensor " + name);
}

}  // namespace

TEST(NumpyArray, ReadsWhatNumpyPicklesUnderProtocol2) {
  // pickle.dumps({"f": np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32, order="F"),
  //               "u": np.array([0, 200, 65535], dtype=np.uint16), "big": np.arange(3)}, protocol=2)
  const std::string p = from_hex(
      "80027d7100285801000000667101636e756d70792e636f72652e6d756c746961727261790a5f7265636f6e7374727563740a71"
      "02636e756d70790a6e6461727261790a71034b00857104635f636f646563730a656e636f64650a710558010000006271065806"
      "0000006c6174696e31710786710852710987710a52710b284b014b024b0386710c636e756d70790a64747970650a710d580200"
      "00006934710e898887710f527110284b0358010000003c71114e4e4e4affffffff4affffffff4b007471126288680558180000"
      "0001000000040000000200000005000000030000000600000071136807867114527115747116625801000000757117680268"
      "034b00857118680987711952711a284b014b0385711b680d58020000007532711c898887711d52711e284b0368114e4e4e4a"
      "ffffffff4affffffff4b0074711f6289680558090000000000c38800c3bfc3bf712068078671215271227471236258030000"
      "006269677124680268034b008571256809877126527127284b014b03857128680d580200000069387129898887712a52712b"
      "284b0368114e4e4e4affffffff4affffffff4b0074712c62896805581800000000000000000000000100000000000000020000"
      "0000000000712d680786712e52712f74713062752e");
  const TorchFile f = parse_torch_file(p, "", "arrays.pkl");
  ASSERT_EQ(f.tensors.size(), 3u);
  const torch::Tensor& a = tensor(f, "f");  // column order in the bytes, rows in the tensor
  EXPECT_EQ(a.scalar_type(), torch::kInt32);
  EXPECT_TRUE(torch::equal(a, torch::tensor({1, 2, 3, 4, 5, 6}, torch::kInt32).view({2, 3})));
  EXPECT_TRUE(a.is_contiguous());
  const torch::Tensor& u = tensor(f, "u");  // uint16 widened: 65535 stays 65535
  EXPECT_EQ(u.scalar_type(), torch::kInt32);
  EXPECT_TRUE(torch::equal(u, torch::tensor({0, 200, 65535}, torch::kInt32)));
  EXPECT_TRUE(torch::equal(tensor(f, "big"), torch::arange(3, torch::kInt64)));
}

TEST(NumpyArray, ReadsWhatNumpyPicklesUnderProtocol5) {
  // pickle.dumps({"w": np.array([[1.5, -2.0], [0.25, 8.0]], dtype=np.float32)}, protocol=5)
  const std::string p = from_hex(
      "8005958c000000000000007d948c0177948c126e756d70792e636f72652e6e756d65726963948c0b5f66726f6d62756666657294"
      "9394289610000000000000000000c03f000000c00000803e00000041948c056e756d7079948c0564747970659493948c0266349489"
      "8887945294284b038c013c944e4e4e4affffffff4affffffff4b007494624b024b0286948c01439474945294732e");
  const TorchFile f = parse_torch_file(p, "", "w.pkl");
  EXPECT_TRUE(torch::equal(tensor(f, "w"), torch::tensor({1.5f, -2.0f, 0.25f, 8.0f}).view({2, 2})));
}

TEST(NumpyArray, ArraysOfObjectsFailWith65) {
  // pickle.dumps({"o": np.array([1, "a"], dtype=object)}, protocol=2)
  const std::string p = from_hex(
      "80027d710058010000006f7101636e756d70792e636f72652e6d756c746961727261790a5f7265636f6e7374727563740a7102636e"
      "756d70790a6e6461727261790a71034b00857104635f636f646563730a656e636f64650a7105580100000062710658060000006c61"
      "74696e31710786710852710987710a52710b284b014b0285710c636e756d70790a64747970650a710d58020000004f38710e898887"
      "710f527110284b0358010000007c71114e4e4e4affffffff4affffffff4b3f74711262895d7113284b015801000000617114657471"
      "1562732e");
  std::string what;
  EXPECT_EQ(error_code([&] { parse_torch_file(p, "", "o.pkl"); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("o.pkl: holds a NumPy array of dtype 'O8'"), std::string::npos) << what;
}

TEST(NumpyArray, RefusesWhatItCannotReadAsTheBytesSay) {
  const std::string six(6, '\0');
  std::string what;
  auto refuses = [&](const NumpyDtype& d, std::vector<int64_t> shape, const std::string& bytes, const std::string& says) {
    what.clear();
    EXPECT_EQ(error_code([&] { numpy_array_tensor(d, shape, false, bytes, "x.bin"); }, &what), xl::kExitDataErr) << says;
    EXPECT_NE(what.find(says), std::string::npos) << what;
  };
  refuses({"i2", '>'}, {3}, six, "big-endian");
  refuses({"i2", '<'}, {4}, six, "4 elements in 6 bytes, not 8");
  refuses({"i4", '<'}, {3}, six, "3 elements in 6 bytes, not 12");
  refuses({"U3", '<'}, {1}, std::string(12, 'a'), "dtype 'U3'");
  refuses({"u8", '<'}, {1}, std::string(8, '\xff'), "past int64's range");
  // A single byte has no order; u4's top bit comes back as a value, not a sign.
  EXPECT_TRUE(torch::equal(numpy_array_tensor({"u1", '|'}, {2}, false, std::string("\x01\xfe", 2), "x.bin"),
                           torch::tensor({1, 254}, torch::kUInt8)));
  EXPECT_EQ(numpy_array_tensor({"u4", '<'}, {1}, false, std::string(4, '\xff'), "x.bin").item<int64_t>(), 4294967295LL);
  EXPECT_EQ(numpy_array_tensor({"i8", '<'}, {0, 3}, false, "", "x.bin").sizes(), torch::IntArrayRef({0, 3}));
}
