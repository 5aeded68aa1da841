#pragma once
// Drawing a batch of replicates' inputs, stacked along a leading batch dimension.
#include <cstdint>

#include <optional>

#include "harness/kernels/registry.hpp"

namespace kcert::engine {

// Replicates first .. first + count - 1 of a case, each from its own stream
// derive_seed(seed, replicate). The replicates are drawn in parallel across the intra-op
// threads: each has its own generator, so the inputs are the same bits for any thread count
// (the draw was 23 % of an RMSNorm run, single-threaded; issue 17).
kernels::KernelInputs draw_replicates(const kernels::Family& family, const kernels::ProbeContract& probe,
                                      const kernels::KernelInputs& fixed, std::uint64_t seed, std::uint64_t first,
                                      std::int64_t count);

// The inputs on `device`; floating ones converted to `dtype` when given (positions, masks and
// ids keep their type).
kernels::KernelInputs to_inputs(const kernels::KernelInputs& in, torch::Device device, std::optional<torch::Dtype> dtype);

// a's tensors with b's added (b's win on a shared name).
kernels::KernelInputs merge(const kernels::KernelInputs& a, const kernels::KernelInputs& b);

// The first k replicates of a batch.
kernels::KernelInputs narrow_batch(const kernels::KernelInputs& batched, std::int64_t first, std::int64_t k);

// The replicates of a batch at `indices` (an int64 tensor), in that order.
kernels::KernelInputs select_batch(const kernels::KernelInputs& batched, const torch::Tensor& indices);

}  // namespace kcert::engine
