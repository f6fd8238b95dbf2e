// The torch.save reader, fed zips written byte for byte as torch.save writes a state_dict (an
// OrderedDict with _metadata, views sharing storage, memo references), and files that are not
// state_dicts, which fail with 65 naming the problem.
#include <gtest/gtest.h>

#include <sstream>

#include <caffe2/serialize/inline_container.h>

#include "xl/interop/torch_pickle.h"
#include "xl/util/error.h"
#include "test_support.h"

using namespace xl::interop;
using torch::Tensor;
using xl::checkpoint::TensorList;
using xl::test::error_code;

namespace {

// The bytes write_torch_state_dict writes.
std::string state_dict_bytes(const xl::checkpoint::TensorList& sd) {
  std::ostringstream os;
  xl::interop::write_torch_state_dict(sd, os);
  return os.str();
}

// Emits pickle opcodes (protocol 2, as torch.save).
struct Pickle {
  std::string s;
  void op(uint8_t c) { s += static_cast<char>(c); }
  void u32(uint32_t v) {
    for (int k = 0; k < 4; ++k) s += static_cast<char>((v >> (8 * k)) & 0xff);
  }
  void str(const std::string& x) {
    op('X');
    u32(static_cast<uint32_t>(x.size()));
    s += x;
  }
  void global(const std::string& module, const std::string& name) { s += "c" + module + "\n" + name + "\n"; }
  void int1(uint8_t v) {
    op('K');
    op(v);
  }
  void put(uint8_t k) {
    op('q');
    op(k);
  }
  void get(uint8_t k) {
    op('h');
    op(k);
  }
  void ints(const std::vector<uint8_t>& v) {
    op('(');
    for (auto x : v) int1(x);
    op('t');
  }
  // {key: value, ...}: `items` pushes the keys and values in turn.
  template <typename F>
  void dict(F items) {
    op('}');
    op('(');
    items();
    op('u');
  }
  void str_list(const std::vector<std::string>& v) {
    op(']');
    op('(');
    for (const auto& x : v) str(x);
    op('e');
  }
  void ordered_dict() {
    global("collections", "OrderedDict");
    op(')');
    op('R');
  }
  // torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())
  void tensor(const std::string& storage_type, const std::string& key, uint8_t numel, uint8_t offset,
              const std::vector<uint8_t>& size, const std::vector<uint8_t>& stride) {
    global("torch._utils", "_rebuild_tensor_v2");
    op('(');
    op('(');
    str("storage");
    global("torch", storage_type);
    str(key);
    str("cpu");
    int1(numel);
    op('t');
    op('Q');
    int1(offset);
    ints(size);
    ints(stride);
    op(0x89);
    ordered_dict();
    op('t');
    op('R');
  }
};

std::string zip(const std::vector<std::pair<std::string, std::string>>& records) {
  std::string out;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, size_t n) {
      out.append(static_cast<const char*>(p), n);
      return n;
    });
    for (const auto& [name, bytes] : records) writer.writeRecord(name, bytes.data(), bytes.size());
    writer.writeEndOfFile();
  }
  return out;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace

TEST(TorchPickle, ReadsAnOrderedDictStateDictAsTorchSaveWritesIt) {
  Pickle p;
  p.op(0x80);
  p.op(2);
  p.ordered_dict();
  p.put(0);
  p.op('(');
  p.str("a");  // [2, 3] float at offset 1 of storage 0
  p.tensor("FloatStorage", "0", 8, 1, {2, 3}, {3, 1});
  p.put(1);
  p.str("t");  // transposed view of storage 0: [3, 2] with strides (1, 3)
  p.tensor("FloatStorage", "0", 8, 1, {3, 2}, {1, 3});
  p.str("tied");  // the same object again (memo)
  p.get(1);
  p.str("d");
  p.tensor("DoubleStorage", "1", 2, 0, {2}, {1});
  p.str("h");
  p.tensor("HalfStorage", "2", 1, 0, {}, {});
  p.op('u');
  // The state_dict's _metadata attribute: {'_metadata': OrderedDict([('', {'version': 1})])}, BUILD.
  p.op('}');
  p.str("_metadata");
  p.ordered_dict();
  p.op('(');
  p.str("");
  p.op('}');
  p.str("version");
  p.int1(1);
  p.op('s');
  p.op('u');
  p.op('s');
  p.op('b');
  p.op('.');

  std::vector<float> f{0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<double> d{0.25, -1.5};
  std::vector<uint16_t> h{0x3c00};  // 1.0 in half precision
  std::string file = zip({{"data.pkl", p.s}, {"data/0", raw(f)}, {"data/1", raw(d)}, {"data/2", raw(h)}});

  TensorList sd = parse_torch_file(file, "", "sd.pt").tensors;
  ASSERT_EQ(sd.size(), 5u);
  EXPECT_EQ(sd[0].first, "a");
  EXPECT_TRUE(torch::equal(sd[0].second, torch::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}).view({2, 3})));
  EXPECT_EQ(sd[1].first, "t");
  EXPECT_TRUE(torch::equal(sd[1].second, sd[0].second.t()));
  EXPECT_EQ(sd[2].first, "tied");
  EXPECT_TRUE(torch::equal(sd[2].second, sd[0].second));
  EXPECT_EQ(sd[3].second.scalar_type(), torch::kFloat64);
  EXPECT_TRUE(torch::equal(sd[3].second, torch::tensor({0.25, -1.5}, torch::kFloat64)));
  EXPECT_EQ(sd[4].second.scalar_type(), torch::kFloat16);
  EXPECT_EQ(sd[4].second.dim(), 0);
  EXPECT_EQ(sd[4].second.item<float>(), 1.f);

  // The same state_dict under a key of a checkpoint dict.
  Pickle outer;
  outer.op(0x80);
  outer.op(2);
  outer.op('}');
  outer.op('(');
  outer.str("epoch");
  outer.int1(3);
  outer.str("model_state");
  outer.op('}');
  outer.str("w");
  outer.tensor("FloatStorage", "0", 8, 0, {8}, {1});
  outer.op('s');
  outer.op('u');
  outer.op('.');
  std::string ckpt = zip({{"data.pkl", outer.s}, {"data/0", raw(f)}});
  TensorList inner = parse_torch_file(ckpt, "model_state", "ck.pt").tensors;
  ASSERT_EQ(inner.size(), 1u);
  EXPECT_TRUE(torch::equal(inner[0].second, torch::arange(8, torch::kFloat)));
  std::string msg;
  EXPECT_EQ(error_code([&] { parse_torch_file(ckpt, "", "ck.pt"); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("--key"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model_state"), std::string::npos) << msg;
  EXPECT_EQ(error_code([&] { parse_torch_file(ckpt, "state_dict", "ck.pt"); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("state_dict"), std::string::npos) << msg;
}

namespace {

// A pickled nn.Module as torch.save(model, f) writes it (protocol 2): NEWOBJ of its class, then
// BUILD with its __dict__, whose items `items` writes.
template <typename Items>
void module(Pickle& p, const std::string& module_name, const std::string& cls, uint8_t memo, Items items) {
  p.global(module_name, cls);
  p.op(')');
  p.op(0x81);  // NEWOBJ
  p.put(memo);
  p.op('}');
  p.op('(');
  p.str("training");
  p.op(0x88);
  items();
  p.op('u');
  p.op('b');  // BUILD
}

}  // namespace

TEST(TorchPickle, ReadsAPickledModuleAsItsStateDictNamesIt) {
  // MemTransformerLM-like: a parameter, a persistent and a non-persistent buffer, plain attributes,
  // a submodule whose weight is the root's parameter (tied: a memo reference) and a None submodule.
  auto build = [](bool cyclic) {
    Pickle p;
    p.op(0x80);
    p.op(2);
    module(p, "mem_transformer", "MemTransformerLM", 0, [&] {
      p.str("_parameters");
      p.ordered_dict();
      p.op('(');
      p.str("r_w_bias");
      p.global("torch._utils", "_rebuild_parameter");
      p.op('(');
      p.tensor("FloatStorage", "0", 8, 0, {2, 3}, {3, 1});
      p.op(0x88);
      p.ordered_dict();
      p.op('t');
      p.op('R');
      p.put(1);
      p.str("absent");
      p.op('N');
      p.op('u');
      p.str("_buffers");
      p.ordered_dict();
      p.op('(');
      p.str("inv_freq");
      p.tensor("FloatStorage", "0", 8, 6, {2}, {1});
      p.str("cache");
      p.tensor("FloatStorage", "0", 8, 0, {8}, {1});
      p.op('u');
      p.str("_non_persistent_buffers_set");
      p.global("builtins", "set");
      p.op('(');
      p.op(']');
      p.op('(');
      p.str("cache");
      p.op('e');
      p.op('t');
      p.op('R');
      p.str("same_length");
      p.op(0x88);
      p.str("clamp_len");
      p.int1(5);
      p.str("cutoffs");
      p.op(']');
      p.op('(');
      p.int1(2);
      p.int1(4);
      p.op('e');
      p.str("_modules");
      p.ordered_dict();
      p.op('(');
      p.str("emb");
      module(p, "torch.nn.modules.linear", "Linear", 2, [&] {
        p.str("_parameters");
        p.ordered_dict();
        p.op('(');
        p.str("weight");
        p.get(1);
        p.op('u');
        p.str("_buffers");
        p.ordered_dict();
        p.str("_modules");
        p.ordered_dict();
        if (cyclic) {  // the root again, as its own grandchild
          p.op('(');
          p.str("loop");
          p.get(0);
          p.op('u');
        }
        p.str("in_features");
        p.int1(3);
      });
      p.str("none");
      p.op('N');
      p.op('u');
    });
    p.op('.');
    std::vector<float> f{0, 1, 2, 3, 4, 5, 6, 7};
    return zip({{"data.pkl", p.s}, {"data/0", raw(f)}});
  };
  TorchFile m = parse_torch_file(build(false), "", "model.pt");
  ASSERT_EQ(m.tensors.size(), 3u);
  EXPECT_EQ(m.tensors[0].first, "r_w_bias");
  EXPECT_TRUE(torch::equal(m.tensors[0].second, torch::arange(6, torch::kFloat).view({2, 3})));
  EXPECT_EQ(m.tensors[1].first, "inv_freq");
  EXPECT_TRUE(torch::equal(m.tensors[1].second, torch::tensor({6.f, 7.f})));
  EXPECT_EQ(m.tensors[2].first, "emb.weight");
  EXPECT_TRUE(m.tensors[2].second.is_same(m.tensors[0].second));
  EXPECT_EQ(m.classes.at(""), "mem_transformer.MemTransformerLM");
  EXPECT_EQ(m.classes.at("emb"), "torch.nn.modules.linear.Linear");
  EXPECT_EQ(m.classes.size(), 2u);
  EXPECT_EQ(m.attributes.at("same_length"), true);
  EXPECT_EQ(m.attributes.at("clamp_len"), 5);
  EXPECT_EQ(m.attributes.at("cutoffs"), nlohmann::json({2, 4}));
  EXPECT_EQ(m.attributes.at("emb.in_features"), 3);
  EXPECT_FALSE(m.attributes.count("training"));
  std::string msg;
  EXPECT_EQ(error_code([&] { parse_torch_file(build(true), "", "model.pt"); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("64 deep"), std::string::npos) << msg;
}

TEST(TorchPickle, ReadsAnyOtherPickledObjectByAttribute) {
  // data_utils.py's corpus cache: a Corpus holding a Vocab (symbols, a Counter) and split tensors.
  auto object = [](Pickle& p, const std::string& module_name, const std::string& cls, auto items) {
    p.global(module_name, cls);
    p.op(')');
    p.op(0x81);
    p.dict(items);
    p.op('b');
  };
  Pickle p;
  p.op(0x80);
  p.op(2);
  object(p, "data_utils", "Corpus", [&] {
    p.str("dataset");
    p.str("ptb");
    p.str("vocab");
    object(p, "vocabulary", "Vocab", [&] {
      p.str("idx2sym");
      p.str_list({"<eos>", "the"});
      p.str("counter");
      p.global("collections", "Counter");
      p.dict([&] {
        p.str("the");
        p.int1(7);
      });
      p.op(0x85);  // TUPLE1
      p.op('R');
    });
    p.str("train");
    p.tensor("LongStorage", "0", 3, 0, {3}, {1});
  });
  p.op('.');
  std::vector<int64_t> ids{1, 0, 1};
  TorchFile f = parse_torch_file(zip({{"data.pkl", p.s}, {"data/0", raw(ids)}}), "", "cache.pt");
  EXPECT_EQ(f.classes.at(""), "data_utils.Corpus");
  EXPECT_EQ(f.classes.at("vocab"), "vocabulary.Vocab");
  EXPECT_EQ(f.attributes.at("dataset"), "ptb");
  EXPECT_EQ(f.attributes.at("vocab.idx2sym"), nlohmann::json({"<eos>", "the"}));
  EXPECT_EQ(f.attributes.at("vocab.counter"), nlohmann::json({{"the", 7}}));
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].first, "train");
  EXPECT_TRUE(torch::equal(f.tensors[0].second, torch::tensor({1, 0, 1}, torch::kInt64)));
}

TEST(TorchPickle, ReadsADictWithoutTensorsAsAnObjectsAttributes) {
  // Hugging Face's vocab.bin: torch.save(vocab.__dict__), plain values and None.
  auto dict = [](Pickle& p, auto items) {
    p.op(0x80);
    p.op(2);
    p.dict(items);
    p.op('.');
  };
  Pickle p;
  dict(p, [&] {
    p.str("idx2sym");
    p.str_list({"<eos>", "the"});
    p.str("max_size");
    p.op('N');
    p.str("eos_idx");
    p.int1(7);
    p.str("eos_idx");  // set again: the last value counts
    p.int1(0);
  });
  TorchFile f = parse_torch_file(zip({{"data.pkl", p.s}}), "", "vocab.bin");
  EXPECT_EQ(f.classes.at(""), "dict");
  EXPECT_EQ(f.attributes.at("idx2sym"), nlohmann::json({"<eos>", "the"}));
  EXPECT_EQ(f.attributes.at("eos_idx"), 0);
  EXPECT_TRUE(f.tensors.empty());
  // A dict with a tensor is a state_dict still: its other entries are named, not taken as attributes.
  Pickle q;
  dict(q, [&] {
    q.str("w");
    q.tensor("FloatStorage", "0", 2, 0, {2}, {1});
    q.str("epoch");
    q.int1(3);
  });
  std::string msg;
  std::vector<float> w{1.f, 2.f};
  EXPECT_EQ(error_code([&] { parse_torch_file(zip({{"data.pkl", q.s}, {"data/0", raw(w)}}), "", "sd.pt"); }, &msg), xl::kExitDataErr);
  EXPECT_NE(msg.find("entry 'epoch' is an int, not a tensor"), std::string::npos) << msg;
}

TEST(TorchPickle, ReadsAPlainPickleOfProtocol4WithSetsAndKeywordObjects) {
  // pickle.dump(tokenizer.__dict__, f, protocol=4): a set, a frozenset, bytes, an object made with
  // keyword arguments (NEWOBJ_EX), in frames.
  Pickle p;
  p.op(0x80);
  p.op(4);
  p.op(0x95);  // FRAME of 8 length bytes (not checked)
  p.s += std::string(8, '\0');
  p.dict([&] {
    p.str("idx2sym");
    p.str_list({"<eos>", "a"});
    p.str("prefixes");
    p.op(0x8f);  // EMPTY_SET
    p.op('(');
    p.str("Mr");
    p.str("Dr");
    p.op(0x90);  // ADDITEMS
    p.str("never_split");
    p.op('(');
    p.str("<unk>");
    p.op(0x91);  // FROZENSET
    p.str("blob");
    p.op(0x96);  // BYTEARRAY8
    p.s += std::string("\x02\0\0\0\0\0\0\0ab", 10);
    p.str("moses");
    p.global("sacremoses", "MosesTokenizer");
    p.op(')');
    p.op('}');
    p.op(0x92);  // NEWOBJ_EX
    p.dict([&] {
      p.str("lang");
      p.str("en");
    });
    p.op('b');
  });
  p.op('.');
  TorchFile f = parse_torch_file(p.s, "", "vocab.pkl");
  EXPECT_EQ(f.classes.at(""), "dict");
  EXPECT_EQ(f.classes.at("moses"), "sacremoses.MosesTokenizer");
  EXPECT_EQ(f.attributes.at("idx2sym"), nlohmann::json({"<eos>", "a"}));
  EXPECT_EQ(f.attributes.at("prefixes"), nlohmann::json({"Mr", "Dr"}));
  EXPECT_EQ(f.attributes.at("never_split"), nlohmann::json({"<unk>"}));
  EXPECT_EQ(f.attributes.at("moses.lang"), "en");
}

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
