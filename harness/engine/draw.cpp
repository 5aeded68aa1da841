#include "harness/engine/draw.hpp"

#include <ATen/Parallel.h>

#include <vector>

#include "harness/stats/random.hpp"

namespace kcert::engine {

kernels::KernelInputs draw_replicates(const kernels::Family& family, const kernels::ProbeContract& probe,
                                      const kernels::KernelInputs& fixed, std::uint64_t seed, std::uint64_t first,
                                      std::int64_t count) {
  std::vector<kernels::KernelInputs> replicates(static_cast<std::size_t>(count));
  at::parallel_for(0, count, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t j = begin; j < end; ++j) {
      replicates[static_cast<std::size_t>(j)] =
          family.make_replicate(probe, fixed, stats::derive_seed(seed, first + static_cast<std::uint64_t>(j)));
    }
  });
  kernels::KernelInputs stacked;
  if (replicates.empty()) return stacked;
  for (const auto& [name, t] : replicates.front().tensors()) {
    std::vector<torch::Tensor> list;
    list.reserve(replicates.size());
    for (const auto& r : replicates) list.push_back(r.at(name));
    stacked.set(name, torch::stack(list));
  }
  return stacked;
}

kernels::KernelInputs to_inputs(const kernels::KernelInputs& in, torch::Device device, std::optional<torch::Dtype> dtype) {
  kernels::KernelInputs out;
  for (const auto& [name, t] : in.tensors()) {
    auto moved = t.to(device);
    if (dtype && moved.is_floating_point()) moved = moved.to(*dtype);
    out.set(name, moved);
  }
  return out;
}

kernels::KernelInputs merge(const kernels::KernelInputs& a, const kernels::KernelInputs& b) {
  kernels::KernelInputs out = a;
  for (const auto& [name, t] : b.tensors()) out.set(name, t);
  return out;
}

kernels::KernelInputs narrow_batch(const kernels::KernelInputs& batched, std::int64_t first, std::int64_t k) {
  kernels::KernelInputs out;
  for (const auto& [name, t] : batched.tensors()) out.set(name, t.narrow(0, first, k));
  return out;
}

kernels::KernelInputs select_batch(const kernels::KernelInputs& batched, const torch::Tensor& indices) {
  kernels::KernelInputs out;
  for (const auto& [name, t] : batched.tensors()) out.set(name, t.index_select(0, indices.to(t.device())));
  return out;
}

}  // namespace kcert::engine
