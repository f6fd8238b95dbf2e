// A Compressive Transformer's memory (xl/model/memory.h): append_compressing against a FIFO kept
// by hand (whole groups of `rate` leave the memory for the compressed memory, a remainder waits,
// the compressed memory keeps its newest cmem_len), with_compressed's runs, trim, and the
// compressed memory through rows, concat_rows and a checkpoint's tensors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <deque>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "xl/model/compression.h"
#include "xl/model/memory.h"

namespace {

using torch::Tensor;
using xl::model::LayerMemory;
using xl::model::Memory;
using xl::model::MemoryRun;

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

// Stream b's slot for stream position p holds (1000 b + p, -p): every slot says where it came from.
double tag(int64_t b, int64_t p) { return 1000.0 * static_cast<double>(b) + static_cast<double>(p); }

Tensor segment(int64_t B, int64_t position, int64_t len) {
  Tensor x = torch::zeros({B, len, 2}, kF64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < len; ++t) {
      x[b][t][0] = tag(b, position + t);
      x[b][t][1] = -static_cast<double>(position + t);
    }
  return x;
}

// The tensor [B, n, 2] whose slots are those of positions `ps`.
Tensor slots_of(int64_t B, const std::deque<int64_t>& ps) {
  Tensor x = torch::zeros({B, static_cast<int64_t>(ps.size()), 2}, kF64);
  for (int64_t b = 0; b < B; ++b)
    for (size_t i = 0; i < ps.size(); ++i) {
      x[b][static_cast<int64_t>(i)][0] = tag(b, ps[i]);
      x[b][static_cast<int64_t>(i)][1] = -static_cast<double>(ps[i]);
    }
  return x;
}

void expect_slots(const Tensor& got, int64_t B, const std::deque<int64_t>& ps, const std::string& what) {
  if (ps.empty()) {
    EXPECT_TRUE(!got.defined() || got.size(1) == 0) << what;
    return;
  }
  ASSERT_TRUE(got.defined()) << what;
  EXPECT_TRUE(torch::equal(got, slots_of(B, ps))) << what << ": got " << got.select(2, 0) << "\nwant "
                                                  << slots_of(B, ps).select(2, 0);
}

}  // namespace

// Segments of uneven lengths through one layer, each step checked against the FIFO: the memory's
// slots and runs, the compressed memory, the inputs that left and what they were compressed into.
// The compression here keeps each group's first slot, so that a compressed slot names its group.
TEST(CompressedMemory, AppendCompressingIsAFifoOfWholeGroups) {
  const int64_t B = 2;
  const std::vector<int64_t> lengths = {3, 4, 1, 6, 2, 7, 1, 1, 5};
  for (int64_t rate : {1, 2, 3})
    for (int64_t mem_len : {0, 2, 5})
      for (int64_t cmem_len : {0, 1, 3}) {
        const std::string config =
            "rate " + std::to_string(rate) + " mem_len " + std::to_string(mem_len) + " cmem_len " + std::to_string(cmem_len);
        LayerMemory layer;
        std::deque<int64_t> mem, cmem;
        int64_t position = 0;
        for (int64_t len : lengths) {
          const std::string at = config + ", segment at " + std::to_string(position);
          int calls = 0;
          auto first_of_groups = [&](const Tensor& x) {
            ++calls;
            EXPECT_EQ(x.size(1) % rate, 0) << at;
            return x.view({B, x.size(1) / rate, rate, 2}).select(2, 0);
          };
          auto [dropped, made] =
              Memory::append_compressing(&layer, segment(B, position, len), position, mem_len, cmem_len, rate, first_of_groups);
          // The FIFO.
          for (int64_t t = 0; t < len; ++t) mem.push_back(position + t);
          const int64_t leaving = std::max<int64_t>(0, static_cast<int64_t>(mem.size()) - mem_len);
          std::deque<int64_t> out, groups;
          for (int64_t i = 0; i < leaving / rate * rate; ++i) out.push_back(mem.front()), mem.pop_front();
          for (size_t i = 0; i < out.size(); i += static_cast<size_t>(rate)) groups.push_back(out[i]);
          if (cmem_len > 0)
            for (int64_t g : groups) {
              cmem.push_back(g);
              if (static_cast<int64_t>(cmem.size()) > cmem_len) cmem.pop_front();
            }
          position += len;

          EXPECT_EQ(calls, out.empty() ? 0 : 1) << at;
          EXPECT_EQ(dropped.defined(), !out.empty()) << at;
          EXPECT_EQ(made.defined(), !out.empty()) << at;
          if (!out.empty()) {
            expect_slots(dropped, B, out, "dropped, " + at);
            expect_slots(made, B, groups, "made, " + at);
          }
          EXPECT_LE(static_cast<int64_t>(mem.size()), std::max<int64_t>(mem_len, 0) + rate - 1) << at;
          EXPECT_EQ(layer.length(), static_cast<int64_t>(mem.size())) << at;
          expect_slots(layer.hidden, B, mem, "memory, " + at);
          if (mem.empty()) {
            EXPECT_TRUE(layer.runs.empty()) << at;
          } else {
            ASSERT_EQ(layer.runs.size(), 1u) << at;
            EXPECT_EQ(layer.runs[0].start, mem.front()) << at;
            EXPECT_EQ(layer.runs[0].length, static_cast<int64_t>(mem.size())) << at;
          }
          EXPECT_EQ(layer.compressed_length(), static_cast<int64_t>(cmem.size())) << at;
          expect_slots(layer.compressed, B, cmem, "compressed memory, " + at);
        }
      }
}

// The memory holds no graph: the inputs that left come back detached, their compression with its
// graph (for the training losses), the compressed memory without one.
TEST(CompressedMemory, OnlyTheCompressionReturnedKeepsItsGraph) {
  torch::manual_seed(1);
  xl::model::Compression conv("conv", 2, 2);
  conv->to(torch::kFloat64);
  LayerMemory layer;
  const Tensor input = segment(1, 0, 5).requires_grad_();
  auto [dropped, made] = Memory::append_compressing(&layer, input, 0, 1, 4, 2, [&](const Tensor& x) { return conv(x); });
  ASSERT_TRUE(dropped.defined());
  EXPECT_EQ(dropped.size(1), 4);
  EXPECT_FALSE(dropped.requires_grad());
  EXPECT_TRUE(made.requires_grad());
  EXPECT_FALSE(layer.hidden.requires_grad());
  EXPECT_FALSE(layer.compressed.requires_grad());
  // Mean pooling (the convolution's start) of positions 0,1 and 2,3.
  EXPECT_DOUBLE_EQ(layer.compressed[0][0][0].item<double>(), 0.5);
  EXPECT_DOUBLE_EQ(layer.compressed[0][1][0].item<double>(), 2.5);
  expect_slots(layer.hidden, 1, {4}, "memory");
}

// The keys attention reads: the compressed slots as one run just before the memory's oldest slot
// (before the segment when the memory is empty).
TEST(CompressedMemory, WithCompressedPutsTheCompressedSlotsJustBeforeTheMemory) {
  LayerMemory layer;
  layer.hidden = slots_of(2, {10, 11, 12, 20, 21});
  layer.runs = {{10, 3}, {20, 2}};  // a Skip-Retain gap between them
  layer.compressed = slots_of(2, {900, 901, 902});
  const LayerMemory all = layer.with_compressed(22);
  expect_slots(all.hidden, 2, {900, 901, 902, 10, 11, 12, 20, 21}, "keys");
  ASSERT_EQ(all.runs.size(), 3u);
  EXPECT_EQ(all.runs[0].start, 7);
  EXPECT_EQ(all.runs[0].length, 3);
  EXPECT_EQ(all.runs[1].start, 10);
  EXPECT_EQ(all.runs[2].start, 20);
  EXPECT_EQ(all.length(), 8);

  LayerMemory only;  // the memory empty (mem_len 0): just before the segment at 40
  only.compressed = slots_of(2, {900, 901});
  const LayerMemory keys = only.with_compressed(40);
  expect_slots(keys.hidden, 2, {900, 901}, "compressed only");
  ASSERT_EQ(keys.runs.size(), 1u);
  EXPECT_EQ(keys.runs[0].start, 38);
  EXPECT_EQ(keys.runs[0].length, 2);

  LayerMemory plain;  // no compressed memory: itself
  plain.hidden = slots_of(1, {5, 6});
  plain.runs = {{5, 2}};
  const LayerMemory same = plain.with_compressed(7);
  EXPECT_TRUE(same.hidden.is_same(plain.hidden));
  ASSERT_EQ(same.runs.size(), 1u);
  EXPECT_EQ(same.runs[0].start, 5);
}

TEST(CompressedMemory, TrimKeepsTheNewestSlotsOfBoth) {
  auto make = [] {
    Memory m = Memory::empty(2);
    m.position = 5;
    m.layers[0].hidden = slots_of(1, {0, 1, 2, 3, 4});
    m.layers[0].runs = {{0, 5}};
    m.layers[0].compressed = slots_of(1, {100, 101, 102, 103});
    m.layers[1].compressed = slots_of(1, {200, 201});
    return m;
  };
  Memory m = make();
  m.trim(3, 2);
  expect_slots(m.layers[0].hidden, 1, {2, 3, 4}, "trim(3, 2) memory");
  ASSERT_EQ(m.layers[0].runs.size(), 1u);
  EXPECT_EQ(m.layers[0].runs[0].start, 2);
  EXPECT_EQ(m.layers[0].runs[0].length, 3);
  expect_slots(m.layers[0].compressed, 1, {102, 103}, "trim(3, 2) compressed");
  expect_slots(m.layers[1].compressed, 1, {200, 201}, "trim(3, 2) layer 1 compressed");
  EXPECT_EQ(m.batch_size(), 1);

  m = make();
  m.trim(10);  // cmem_len -1: all compressed slots stay
  expect_slots(m.layers[0].hidden, 1, {0, 1, 2, 3, 4}, "trim(10) memory");
  expect_slots(m.layers[0].compressed, 1, {100, 101, 102, 103}, "trim(10) compressed");

  m = make();
  m.trim(0, 1);  // no memory, the compressed memory's newest slot
  EXPECT_FALSE(m.layers[0].hidden.defined());
  EXPECT_TRUE(m.layers[0].runs.empty());
  expect_slots(m.layers[0].compressed, 1, {103}, "trim(0, 1) compressed");
  expect_slots(m.layers[1].compressed, 1, {201}, "trim(0, 1) layer 1 compressed");
  EXPECT_EQ(m.batch_size(), 1);  // from the compressed memory alone

  m = make();
  m.trim(4, 0);  // no compressed memory
  EXPECT_FALSE(m.layers[0].compressed.defined());
  EXPECT_FALSE(m.layers[1].compressed.defined());
  expect_slots(m.layers[0].hidden, 1, {1, 2, 3, 4}, "trim(4, 0) memory");
}

// Memory::append with mem_len 0 (a run without memory) keeps the compressed memory.
TEST(CompressedMemory, AppendWithoutMemoryKeepsTheCompressedMemory) {
  LayerMemory layer;
  layer.hidden = slots_of(1, {0, 1});
  layer.runs = {{0, 2}};
  layer.compressed = slots_of(1, {100});
  Memory::append(&layer, segment(1, 2, 3), 2, 0);
  EXPECT_EQ(layer.length(), 0);
  expect_slots(layer.compressed, 1, {100}, "compressed");
}

// Streams, batch chunks and checkpoints carry the compressed memory with the rest.
TEST(CompressedMemory, RowsConcatAndCheckpointTensorsCarryIt) {
  Memory m = Memory::empty(2);
  m.position = 9;
  m.layers[0].hidden = slots_of(3, {7, 8});
  m.layers[0].runs = {{7, 2}};
  m.layers[0].compressed = slots_of(3, {100, 101});
  m.layers[1].compressed = slots_of(3, {200});  // a layer with a compressed memory alone

  const Memory part = m.rows(1, 3);
  EXPECT_TRUE(torch::equal(part.layers[0].compressed, slots_of(3, {100, 101}).slice(0, 1, 3)));
  EXPECT_TRUE(torch::equal(part.layers[1].compressed, slots_of(3, {200}).slice(0, 1, 3)));
  const Memory joined = Memory::concat_rows({m.rows(0, 1), part});
  EXPECT_TRUE(torch::equal(joined.layers[0].compressed, m.layers[0].compressed));
  EXPECT_TRUE(torch::equal(joined.layers[1].compressed, m.layers[1].compressed));
  EXPECT_TRUE(torch::equal(joined.layers[0].hidden, m.layers[0].hidden));

  xl::checkpoint::TensorList list;
  m.to_tensors(&list);
  EXPECT_TRUE(torch::equal(xl::checkpoint::find_tensor(list, "l0.compressed"), m.layers[0].compressed));
  EXPECT_TRUE(torch::equal(xl::checkpoint::find_tensor(list, "l1.compressed"), m.layers[1].compressed));
  const Memory back = Memory::from_tensors(list, 2, "ckpt");
  EXPECT_EQ(back.position, 9);
  EXPECT_TRUE(torch::equal(back.layers[0].compressed, m.layers[0].compressed));
  EXPECT_TRUE(torch::equal(back.layers[1].compressed, m.layers[1].compressed));
  EXPECT_TRUE(torch::equal(back.layers[0].hidden, m.layers[0].hidden));
  EXPECT_FALSE(back.layers[1].hidden.defined());

  xl::checkpoint::TensorList bad = list;
  for (auto& [name, t] : bad)
    if (name == "l0.compressed") t = t[0];
  std::string what;
  EXPECT_EQ(xl::test::error_code([&] { Memory::from_tensors(bad, 2, "ckpt"); }, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("ckpt"), std::string::npos) << what;
}
