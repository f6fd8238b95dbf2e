// The torch.save reader on the files around a state_dict: PyTorch's legacy format (before 1.6),
// files that are not state_dicts (65 naming the problem), an archive read from disk record by
// record, and what write_torch_state_dict writes read back as it was.
#include <gtest/gtest.h>

#include <sstream>

#include "support/pickle_support.h"
#include "support/test_support.h"
#include "xl/interop/torch_pickle.h"
#include "xl/util/error.h"

using namespace xl::interop;
using torch::Tensor;
using xl::checkpoint::TensorList;
using xl::test::error_code;
using xl::test::Pickle;
using xl::test::raw;
using xl::test::state_dict_bytes;
using xl::test::zip;

TEST(TorchPickle, ReadsTheLegacyFormatOfPyTorchBefore16) {
  // Pickles back to back (magic number, protocol 1001, sys_info, the state_dict, its storage keys),
  // then each storage: its element count (int64) and its bytes.
  auto file = [](int64_t count) {
    std::string out("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15);
    Pickle version;
    version.op(0x80);
    version.op(2);
    version.op('M');
    version.op(1001 & 0xff);
    version.op(1001 >> 8);
    version.op('.');
    Pickle info;
    info.op(0x80);
    info.op(2);
    info.op('}');
    info.str("little_endian");
    info.op(0x88);
    info.op('s');
    info.op('.');
    Pickle sd;  // {"w": 2 x 2 floats of storage "7" (persistent id with view_metadata None)}
    sd.op(0x80);
    sd.op(2);
    sd.op('}');
    sd.str("w");
    sd.global("torch._utils", "_rebuild_tensor_v2");
    sd.op('(');
    sd.op('(');
    sd.str("storage");
    sd.global("torch", "FloatStorage");
    sd.str("7");
    sd.str("cpu");
    sd.int1(4);
    sd.op('N');
    sd.op('t');
    sd.op('Q');
    sd.int1(0);
    sd.ints({2, 2});
    sd.ints({2, 1});
    sd.op(0x89);
    sd.ordered_dict();
    sd.op('t');
    sd.op('R');
    sd.op('s');
    sd.op('.');
    Pickle keys;
    keys.op(0x80);
    keys.op(2);
    keys.op(']');
    keys.str("7");
    keys.op('a');
    keys.op('.');
    std::vector<int64_t> n{count};
    std::vector<float> data{1, 2, 3, 4};
    return out + version.s + info.s + sd.s + keys.s + raw(n) + raw(data);
  };
  TorchFile f = parse_torch_file(file(4), "", "old.pt");
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].first, "w");
  EXPECT_TRUE(torch::equal(f.tensors[0].second, torch::tensor({1.f, 2.f, 3.f, 4.f}).view({2, 2})));
  std::string msg;
  EXPECT_EQ(error_code([&] { parse_torch_file(file(5), "", "old.pt"); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("holds 5 elements"), std::string::npos) << msg;
  std::string cut = file(4);
  EXPECT_EQ(error_code([&] { parse_torch_file(cut.substr(0, cut.size() - 1), "", "old.pt"); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("ends inside storage 7"), std::string::npos) << msg;
}

TEST(TorchPickle, FilesThatAreNotStateDictsFailWith65) {
  std::string msg;
  auto code = [&](const std::string& bytes) { return error_code([&] { parse_torch_file(bytes, "", "x.pt"); }, &msg); };
  EXPECT_EQ(code(""), xl::kExitDataErr);
  EXPECT_EQ(code("hello world, not a zip"), xl::kExitDataErr);
  EXPECT_NE(msg.find("x.pt"), std::string::npos) << msg;
  EXPECT_EQ(code(std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19\x2e", 15)), xl::kExitDataErr);
  EXPECT_NE(msg.find("legacy"), std::string::npos) << msg;
  std::string good = state_dict_bytes({{"a", torch::ones({2})}});
  EXPECT_EQ(code(good.substr(0, good.size() / 2)), xl::kExitDataErr);
  EXPECT_EQ(code(zip({{"other.txt", "x"}})), xl::kExitDataErr);
  EXPECT_NE(msg.find("data.pkl"), std::string::npos) << msg;
  // A pickle of something other than a dict, and a truncated pickle.
  EXPECT_EQ(code(zip({{"data.pkl", std::string("\x80\x02K\x05.", 5)}})), xl::kExitDataErr);
  EXPECT_NE(msg.find("not a state_dict or a module"), std::string::npos) << msg;
  EXPECT_EQ(code(zip({{"data.pkl", std::string("\x80\x02}(X\x01\x00\x00", 8)}})), xl::kExitDataErr);
  // A storage record missing from the archive.
  Pickle p;
  p.op(0x80);
  p.op(2);
  p.op('}');
  p.str("w");
  p.tensor("FloatStorage", "0", 8, 0, {8}, {1});
  p.op('s');
  p.op('.');
  EXPECT_EQ(code(zip({{"data.pkl", p.s}})), xl::kExitDataErr);
  EXPECT_NE(msg.find("data/0"), std::string::npos) << msg;
  // A tensor reaching past its storage.
  std::vector<float> f(4, 1.f);
  EXPECT_EQ(code(zip({{"data.pkl", p.s}, {"data/0", raw(f)}})), xl::kExitDataErr);
}

// An archive on disk is read record by record (not as a copy of its bytes): the same tensors as
// from its bytes; stdin, a directory and a legacy file are not taken for one; and a file cut
// short fails with 65 naming it, read either way.
TEST(TorchPickle, ReadsAnArchiveOnDiskAsItsBytes) {
  xl::test::TempDir dir;
  const TensorList sd = {{"w", torch::randn({3, 4})}, {"b", torch::arange(5, torch::kLong)}};
  const std::string bytes = state_dict_bytes(sd);
  const std::string path = dir.write("sd.pt", bytes);
  EXPECT_TRUE(is_torch_zip_file(path));
  EXPECT_FALSE(is_torch_zip_file("-"));
  EXPECT_FALSE(is_torch_zip_file(dir.path()));
  EXPECT_FALSE(is_torch_zip_file(dir.write("legacy.pt", "\x80\x02\x8a\x0a")));
  const TorchFile from_disk = read_torch_file(path), from_bytes = parse_torch_file(bytes, "", "sd.pt");
  ASSERT_EQ(from_disk.tensors.size(), sd.size());
  ASSERT_EQ(from_bytes.tensors.size(), sd.size());
  for (size_t i = 0; i < sd.size(); ++i) {
    EXPECT_EQ(from_disk.tensors[i].first, sd[i].first);
    EXPECT_TRUE(torch::equal(from_disk.tensors[i].second, sd[i].second)) << sd[i].first;
    EXPECT_TRUE(torch::equal(from_bytes.tensors[i].second, sd[i].second)) << sd[i].first;
  }
  std::string msg;
  for (size_t cut : {bytes.size() - 1, bytes.size() / 2, size_t{30}}) {
    const std::string short_path = dir.write("short.pt", bytes.substr(0, cut));
    EXPECT_EQ(error_code([&] { read_torch_file(short_path); }, &msg), xl::kExitDataErr) << cut;
    EXPECT_NE(msg.find("short.pt"), std::string::npos) << msg;
    EXPECT_EQ(error_code([&] { parse_torch_file(bytes.substr(0, cut), "", "short.pt"); }, &msg), xl::kExitDataErr) << cut;
  }
}

// What write_torch_state_dict writes reads back as it was: each dtype a state_dict holds, a 0-d
// tensor, a view (its offset and strides kept: the whole storage is written), a stride past 2^31
// (pickled as LONG1), and one tensor under two names stored once.
TEST(TorchPickle, WritesEveryTensorAsItIs) {
  const Tensor base = torch::randn({6, 5});
  const Tensor tied = torch::randn({4, 3});
  const Tensor view = base.slice(0, 1, 5).t();
  const Tensor far = torch::randn({3}).as_strided({1, 3}, {int64_t{1} << 33, 1});
  const TensorList sd = {{"float", base},
                         {"view", view},
                         {"bf16", torch::randn({7}).to(torch::kBFloat16)},
                         {"half", torch::randn({2, 2}).to(torch::kHalf)},
                         {"long", torch::arange(70000, torch::kLong)},
                         {"bool", torch::rand({9}) > 0.5},
                         {"scalar", torch::tensor(2.5)},
                         {"far", far},
                         {"tied.a", tied},
                         {"tied.b", tied}};
  const TorchFile back = parse_torch_file(state_dict_bytes(sd), "", "sd.pt");
  ASSERT_EQ(back.tensors.size(), sd.size());
  for (size_t i = 0; i < sd.size(); ++i) {
    const auto& [name, t] = back.tensors[i];
    EXPECT_EQ(name, sd[i].first);
    EXPECT_EQ(t.scalar_type(), sd[i].second.scalar_type()) << name;
    EXPECT_EQ(t.sizes(), sd[i].second.sizes()) << name;
    EXPECT_EQ(t.strides(), sd[i].second.strides()) << name;
    EXPECT_TRUE(torch::equal(t, sd[i].second)) << name;
  }
  EXPECT_EQ(back.tensors[1].second.storage_offset(), 5);
  EXPECT_TRUE(back.tensors[8].second.is_alias_of(back.tensors[9].second));
  EXPECT_FALSE(back.tensors[0].second.is_alias_of(back.tensors[8].second));
}
