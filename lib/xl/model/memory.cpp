#include "xl/model/memory.h"

namespace xl::model {

int64_t LayerMemory::length() const { return hidden.defined() ? hidden.size(1) : 0; }

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

int64_t Memory::batch_size() const {
  for (const auto& l : layers)
    if (l.hidden.defined()) return l.hidden.size(0);
  return 0;
}

void Memory::append(LayerMemory* layer, const torch::Tensor& input, int64_t position, int64_t mem_len) {
  torch::NoGradGuard no_grad;
  const int64_t seg = input.size(1);
  if (mem_len <= 0) {  // careful: slicing [-0:] would keep everything
    *layer = LayerMemory();
    return;
  }
  torch::Tensor all = layer->length() > 0 ? torch::cat({layer->hidden, input.detach()}, 1) : input.detach();
  std::vector<MemoryRun> runs = layer->runs;
  if (!runs.empty() && runs.back().start + runs.back().length == position) runs.back().length += seg;
  else runs.push_back({position, seg});
  int64_t total = all.size(1);
  int64_t drop = std::max<int64_t>(0, total - mem_len);
  // Trim the oldest slots, run by run.
  int64_t left = drop;
  while (left > 0 && !runs.empty()) {
    int64_t take = std::min(left, runs.front().length);
    runs.front().start += take;
    runs.front().length -= take;
    left -= take;
    if (runs.front().length == 0) runs.erase(runs.begin());
  }
  layer->hidden = drop > 0 ? all.slice(1, drop).contiguous() : (layer->length() > 0 ? all : all.contiguous());
  if (layer->hidden.size(1) == 0) layer->hidden = torch::Tensor();
  layer->runs = std::move(runs);
}

double Memory::mean_gap() const {
  if (layers.empty()) return 0;
  double sum = 0;
  for (const auto& l : layers) sum += static_cast<double>(l.gap(position));
  return sum / static_cast<double>(layers.size());
}

double Memory::mean_context() const {
  if (layers.empty()) return 0;
  double sum = 0;
  for (const auto& l : layers)
    if (!l.runs.empty()) sum += static_cast<double>(position - l.runs.front().start);
  return sum / static_cast<double>(layers.size());
}

}  // namespace xl::model
