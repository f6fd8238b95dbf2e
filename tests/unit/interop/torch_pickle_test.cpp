// The torch.save reader, fed zips written byte for byte as torch.save writes a state_dict (an
// OrderedDict with _metadata, views sharing storage, memo references), a pickled module, other
// pickled objects and a plain pickle of protocol 4. (Legacy files, files that are not state_dicts,
// archives on disk and the writer: torch_pickle_files_test.cpp.)
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
