#include "xl/model/memory.h"

#include <algorithm>

#include "xl/util/error.h"

namespace xl::model {

int64_t LayerMemory::length() const { return hidden.defined() ? hidden.size(1) : kv.length(); }

int64_t LayerMemory::gap(int64_t position) const {
  if (runs.empty()) return 0;
  return position - (runs.back().start + runs.back().length);
}

Memory Memory::empty(int64_t n_layer) {
  Memory m;
  m.layers.resize(static_cast<size_t>(n_layer));
  return m;
}

void Memory::reset() {
  for (auto& l : layers) l = LayerMemory();
  position = 0;
}

LayerMemory LayerMemory::with_compressed(int64_t position) const {
  const int64_t c = compressed_length();
  if (c == 0) return *this;
  LayerMemory all;
  all.hidden = hidden.defined() ? torch::cat({compressed, hidden}, 1) : compressed;
  const int64_t anchor = runs.empty() ? position : runs.front().start;
  all.runs.push_back({anchor - c, c});
  all.runs.insert(all.runs.end(), runs.begin(), runs.end());
  return all;
}

int64_t Memory::batch_size() const {
  for (const auto& l : layers) {
    if (l.hidden.defined()) return l.hidden.size(0);
    if (l.compressed.defined()) return l.compressed.size(0);
    if (!l.kv.empty()) return l.kv.rows().size(0);
  }
  return 0;
}

namespace {

// Drops the `drop` oldest slots from a layer's runs.
void drop_runs(std::vector<MemoryRun>* runs, int64_t drop) {
  while (drop > 0 && !runs->empty()) {
    const int64_t take = std::min(drop, runs->front().length);
    runs->front().start += take;
    runs->front().length -= take;
    drop -= take;
    if (runs->front().length == 0) runs->erase(runs->begin());
  }
}

}  // namespace

void Memory::append(LayerMemory* layer, const torch::Tensor& input, int64_t position, int64_t mem_len,
                    const RowWindow& kv_all) {
  torch::NoGradGuard no_grad;
  const int64_t seg = input.size(1), old = layer->length();
  if (mem_len <= 0) {  // careful: slicing [-0:] would keep everything
    const torch::Tensor compressed = layer->compressed;
    *layer = LayerMemory();
    layer->compressed = compressed;
    return;
  }
  const int64_t drop = std::max<int64_t>(0, old + seg - mem_len);
  if (!kv_all.empty()) {
    XL_CHECK(kv_all.length() == old + seg && kv_all.rows().size(0) == input.size(0), kExitSoftware,
             "kept projections of " << kv_all.length() << " slots for a memory of " << old + seg);
    layer->kv = kv_all.newest(old + seg - drop);
    layer->hidden = torch::Tensor();
  } else {
    XL_CHECK(layer->kv.empty() || old == 0, kExitSoftware, "a memory that keeps only projections got no projections");
    // Only the kept slots are copied, once: the newest old ones and the segment's (the memory never
    // shares storage with the layer's input).
    const torch::Tensor in = input.detach();
    layer->hidden = drop >= old ? in.slice(1, drop - old).clone(at::MemoryFormat::Contiguous)
                                : torch::cat({layer->hidden.slice(1, drop), in}, 1);
    layer->kv = RowWindow();
    if (layer->hidden.size(1) == 0) layer->hidden = torch::Tensor();
  }
  auto& runs = layer->runs;
  if (!runs.empty() && runs.back().start + runs.back().length == position) runs.back().length += seg;
  else runs.push_back({position, seg});
  drop_runs(&runs, drop);
}

std::pair<torch::Tensor, torch::Tensor> Memory::append_compressing(
    LayerMemory* layer, const torch::Tensor& input, int64_t position, int64_t mem_len, int64_t cmem_len, int64_t rate,
    const std::function<torch::Tensor(const torch::Tensor&)>& compress) {
  const int64_t old = layer->length(), seg = input.size(1);
  const int64_t leaving = std::max<int64_t>(0, old + seg - std::max<int64_t>(mem_len, 0));
  const int64_t whole = leaving / rate * rate;
  XL_CHECK(old == 0 || layer->hidden.defined(), kExitSoftware, "a compressed memory needs the memory's inputs, not its projections");
  torch::Tensor dropped;
  if (whole > 0) {
    const torch::Tensor in = input.detach();
    dropped = whole <= old ? layer->hidden.slice(1, 0, whole)
                           : (old > 0 ? torch::cat({layer->hidden, in.slice(1, 0, whole - old)}, 1) : in.slice(1, 0, whole));
    dropped = dropped.contiguous();
  }
  append(layer, input, position, old + seg - whole);
  if (whole == 0) return {};
  const torch::Tensor made = compress(dropped);
  if (cmem_len > 0) {
    torch::NoGradGuard no_grad;
    const torch::Tensor all = layer->compressed.defined() ? torch::cat({layer->compressed, made.detach()}, 1) : made.detach();
    const int64_t keep = std::min<int64_t>(all.size(1), cmem_len);
    layer->compressed = all.slice(1, all.size(1) - keep).contiguous();
  }
  return {dropped, made};
}

void Memory::trim(int64_t mem_len, int64_t cmem_len) {
  for (auto& l : layers) {
    if (cmem_len == 0) l.compressed = torch::Tensor();
    else if (cmem_len > 0 && l.compressed_length() > cmem_len)
      l.compressed = l.compressed.slice(1, l.compressed_length() - cmem_len).contiguous();
    if (mem_len <= 0) {
      const torch::Tensor compressed = l.compressed;
      l = LayerMemory();
      l.compressed = compressed;
    } else if (l.length() > mem_len) {
      const int64_t drop = l.length() - mem_len;
      if (l.hidden.defined()) l.hidden = l.hidden.slice(1, drop).contiguous();
      l.kv = l.kv.newest(mem_len);
      drop_runs(&l.runs, drop);
    }
  }
}

void Memory::to(const torch::Device& device) {
  for (auto& l : layers) {
    if (l.hidden.defined()) l.hidden = l.hidden.to(device);
    if (l.compressed.defined()) l.compressed = l.compressed.to(device);
    if (!l.kv.empty() && l.kv.rows().device() != device) l.kv = RowWindow::of(l.kv.rows().to(device));
  }
}

double Memory::mean_gap() const {
  if (layers.empty()) return 0;
  double sum = 0;
  for (const auto& l : layers) sum += static_cast<double>(l.gap(position));
  return sum / static_cast<double>(layers.size());
}

Memory Memory::rows(int64_t begin, int64_t end) const {
  Memory m = *this;
  for (auto& l : m.layers) {
    if (l.hidden.defined()) l.hidden = l.hidden.slice(0, begin, end);
    if (l.compressed.defined()) l.compressed = l.compressed.slice(0, begin, end);
    l.kv = l.kv.streams(begin, end);
  }
  return m;
}

Memory Memory::concat_rows(const std::vector<Memory>& parts) {
  Memory m = parts.at(0);
  for (size_t l = 0; l < m.layers.size(); ++l) {
    std::vector<torch::Tensor> h, kv, c;
    for (const auto& p : parts) {
      if (p.layers[l].hidden.defined()) h.push_back(p.layers[l].hidden);
      if (!p.layers[l].kv.empty()) kv.push_back(p.layers[l].kv.rows());
      if (p.layers[l].compressed.defined()) c.push_back(p.layers[l].compressed);
    }
    TORCH_CHECK((h.empty() || h.size() == parts.size()) && (kv.empty() || kv.size() == parts.size()) &&
                    (c.empty() || c.size() == parts.size()),
                "layer ", l, "'s memories differ in what they keep");
    m.layers[l].hidden = h.empty() ? torch::Tensor() : torch::cat(h, 0);
    m.layers[l].compressed = c.empty() ? torch::Tensor() : torch::cat(c, 0);
    m.layers[l].kv = kv.empty() ? RowWindow() : RowWindow::of(torch::cat(kv, 0));
  }
  return m;
}

namespace {

// One memory from the entries named PREFIX*.
Memory memory_from(const checkpoint::TensorList& list, const std::string& prefix, int64_t n_layer,
                   const std::string& file) {
  Memory m = Memory::empty(n_layer);
  auto bad = [&](const std::string& what) { XL_FAIL(kExitDataErr, file << ": malformed memory " << prefix << what); };
  auto pos = checkpoint::find_tensor(list, prefix + "position");
  if (!pos.defined()) return m;
  if (pos.numel() != 1 || pos.scalar_type() != torch::kLong) bad("position");
  m.position = pos.item<int64_t>();
  for (int64_t l = 0; l < n_layer; ++l) {
    const std::string lp = prefix + "l" + std::to_string(l) + ".";
    auto hidden = checkpoint::find_tensor(list, lp + "hidden");
    auto runs = checkpoint::find_tensor(list, lp + "runs");
    auto compressed = checkpoint::find_tensor(list, lp + "compressed");
    if (compressed.defined()) {
      if (compressed.dim() != 3) bad("l" + std::to_string(l) + ".compressed");
      m.layers[static_cast<size_t>(l)].compressed = compressed;
    }
    if (!hidden.defined()) continue;
    if (hidden.dim() != 3 || !runs.defined() || runs.dim() != 2 || runs.size(1) != 2 || runs.scalar_type() != torch::kLong)
      bad("l" + std::to_string(l));
    LayerMemory& lm = m.layers[static_cast<size_t>(l)];
    lm.hidden = hidden;
    int64_t total = 0, end = 0;
    auto r = runs.accessor<int64_t, 2>();
    for (int64_t i = 0; i < runs.size(0); ++i) {
      lm.runs.push_back({r[i][0], r[i][1]});
      // Oldest first, disjoint, and all before the next segment.
      if (r[i][1] <= 0 || r[i][0] < end || r[i][0] + r[i][1] > m.position) bad("l" + std::to_string(l) + ".runs");
      end = r[i][0] + r[i][1];
      total += r[i][1];
    }
    if (total != hidden.size(1)) bad("l" + std::to_string(l) + " (runs do not cover the memory)");
  }
  return m;
}

}  // namespace

Memory Memory::from_tensors(const checkpoint::TensorList& list, int64_t n_layer, const std::string& file) {
  if (!checkpoint::find_tensor(list, "c0.position").defined()) return memory_from(list, "", n_layer, file);
  std::vector<Memory> chunks;
  for (int c = 0; checkpoint::find_tensor(list, "c" + std::to_string(c) + ".position").defined(); ++c)
    chunks.push_back(memory_from(list, "c" + std::to_string(c) + ".", n_layer, file));
  try {
    return concat_rows(chunks);
  } catch (const c10::Error&) {
    XL_FAIL(kExitDataErr, file << ": malformed memory (its batch chunks do not fit together)");
  }
}

void Memory::to_tensors(checkpoint::TensorList* out) const {
  out->emplace_back("position", torch::tensor(position, torch::kLong));
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerMemory& lm = layers[l];
    XL_CHECK(lm.hidden.defined() || lm.kv.empty(), kExitSoftware, "a memory that keeps only projections cannot be saved");
    const std::string lp = "l" + std::to_string(l) + ".";
    if (lm.compressed.defined()) out->emplace_back(lp + "compressed", lm.compressed);
    if (!lm.hidden.defined()) continue;
    auto runs = torch::empty({static_cast<int64_t>(lm.runs.size()), 2}, torch::kLong);
    auto r = runs.accessor<int64_t, 2>();
    for (size_t i = 0; i < lm.runs.size(); ++i) {
      r[static_cast<int64_t>(i)][0] = lm.runs[i].start;
      r[static_cast<int64_t>(i)][1] = lm.runs[i].length;
    }
    out->emplace_back(lp + "hidden", lm.hidden);
    out->emplace_back(lp + "runs", runs);
  }
}

}  // namespace xl::model
