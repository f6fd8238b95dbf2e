#include "xl/train/generators.h"

#include <torch/torch.h>

#include <mutex>

#include "xl/util/error.h"

namespace xl::train {
namespace {

// splitmix64: well-separated seeds for the streams from one user seed.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

torch::Tensor string_tensor(const std::string& s) {
  return torch::from_blob(const_cast<char*>(s.data()), {static_cast<int64_t>(s.size())}, torch::kUInt8).clone();
}

std::string tensor_string(const torch::Tensor& t) {
  auto c = t.contiguous();
  return std::string(reinterpret_cast<const char*>(c.data_ptr<uint8_t>()), static_cast<size_t>(c.numel()));
}

at::Generator dropout_generator(c10::DeviceType type) {
  return type == c10::kCPU ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(c10::Device(type));
}

bool have_cuda() { return torch::cuda::is_available(); }

}  // namespace

Generators Generators::seeded(uint64_t seed, int rank) {
  Generators g{Rng(mix(seed ^ 0x736b6970ULL)), Rng(mix(seed ^ 0x73636820ULL))};
  const uint64_t dropout_seed = mix(seed ^ 0x64726f70ULL ^ (static_cast<uint64_t>(rank) << 32));
  torch::manual_seed(dropout_seed);  // CPU, and every GPU when there are any
  return g;
}

void Generators::to_tensors(checkpoint::TensorList* out) const {
  out->emplace_back("skip", string_tensor(skip.state()));
  out->emplace_back("cross_head", string_tensor(cross_head.state()));
  {
    auto gen = dropout_generator(c10::kCPU);
    std::lock_guard<std::mutex> lock(gen.mutex());
    out->emplace_back("dropout_cpu", gen.get_state());
  }
  if (have_cuda()) {
    auto gen = dropout_generator(c10::kCUDA);
    std::lock_guard<std::mutex> lock(gen.mutex());
    out->emplace_back("dropout_cuda", gen.get_state());
  }
}

std::string Generators::rank_name(const std::string& name, int rank) {
  return rank == 0 ? name : name + ".r" + std::to_string(rank);
}

bool Generators::load(const checkpoint::TensorList& states, const std::string& file, int rank) {
  auto get = [&](const char* name) {
    auto t = checkpoint::find_tensor(states, name);
    XL_CHECK(t.defined(), kExitDataErr,
             file << ": checkpoint lacks the '" << name << "' generator state (written by an older xl? start a new phase from it with --init)");
    return t.to(torch::kUInt8);
  };
  auto malformed = [&](const char* name) { XL_FAIL(kExitDataErr, file << ": malformed '" << name << "' generator state"); };
  for (auto [rng, name] : {std::pair<Rng*, const char*>{&skip, "skip"}, {&cross_head, "cross_head"}}) {
    const std::string state = tensor_string(get(name));
    try {
      rng->set_state(state);
    } catch (const Error&) {
      malformed(name);
    }
  }
  auto restore = [&](c10::DeviceType type, const char* name, const torch::Tensor& state) {
    auto gen = dropout_generator(type);
    std::lock_guard<std::mutex> lock(gen.mutex());
    try {
      gen.set_state(state);
    } catch (const c10::Error&) {
      malformed(name);
    }
  };
  get("dropout_cpu");  // every xl checkpoint has rank 0's
  const std::string cpu = rank_name("dropout_cpu", rank), cuda = rank_name("dropout_cuda", rank);
  const auto cpu_state = checkpoint::find_tensor(states, cpu);
  if (!cpu_state.defined()) return false;
  restore(c10::kCPU, cpu.c_str(), cpu_state.to(torch::kUInt8));
  // A GPU run's dropout stream; a run resumed on another kind of device draws its masks afresh.
  const auto cuda_state = checkpoint::find_tensor(states, cuda);
  if (cuda_state.defined() && have_cuda()) restore(c10::kCUDA, cuda.c_str(), cuda_state.to(torch::kUInt8));
  return true;
}

Generators::Saved Generators::save() const {
  auto copy = [](c10::DeviceType type) {
    auto gen = dropout_generator(type);
    std::lock_guard<std::mutex> lock(gen.mutex());
    return gen.clone();
  };
  return {skip, cross_head, copy(c10::kCPU), have_cuda() ? copy(c10::kCUDA) : at::Generator()};
}

void Generators::put_back(const Saved& saved) {
  skip = saved.skip;
  cross_head = saved.cross_head;
  auto restore = [](c10::DeviceType type, const at::Generator& from) {
    auto gen = dropout_generator(type);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(from.get_state());
  };
  restore(c10::kCPU, saved.dropout_cpu);
  if (saved.dropout_cuda.defined()) restore(c10::kCUDA, saved.dropout_cuda);
}

}  // namespace xl::train
