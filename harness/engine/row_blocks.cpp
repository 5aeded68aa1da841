#include "harness/engine/row_blocks.hpp"

#include <algorithm>
#include <atomic>
#include <vector>

#include "harness/engine/draw.hpp"

#include <ATen/Parallel.h>

namespace kcert::engine {

torch::Tensor evaluate_in_row_blocks(const kernels::KernelFn& fn, const kernels::KernelInputs& fixed,
                                     const kernels::KernelInputs& batched, const numerics::Precision& p,
                                     const kernels::ParamMap& params, std::int64_t block_elements) {
  const auto& tensors = batched.tensors();
  if (tensors.empty()) return {};
  const auto& first = tensors.begin()->second;
  if (first.dim() < 2) return {};
  const auto row_dims = first.sizes().slice(0, static_cast<std::size_t>(first.dim() - 1));
  std::int64_t widest = 1;
  for (const auto& [name, t] : tensors) {
    if (t.dim() != first.dim() || t.sizes().slice(0, row_dims.size()) != row_dims) return {};
    widest = std::max(widest, t.size(-1));
  }
  const auto rows = c10::multiply_integers(row_dims);
  const auto block = std::max<std::int64_t>(1, block_elements / widest);
  if (block >= rows) return {};
  // Each input as [rows, 1, ..., last] (a view of the batch), so a block is a narrow of it.
  std::vector<std::pair<std::string, torch::Tensor>> flat;
  for (const auto& [name, t] : tensors) {
    std::vector<std::int64_t> shape(static_cast<std::size_t>(t.dim()), 1);
    shape.front() = rows;
    shape.back() = t.size(-1);
    flat.emplace_back(name, t.reshape(shape));
  }
  const auto block_inputs = [&](std::int64_t start, std::int64_t n) {
    kernels::KernelInputs part;
    for (const auto& [name, t] : flat) part.set(name, t.narrow(0, start, n));
    return merge(fixed, part);
  };
  // One output row per input row, at the batch's rank: anything else is evaluated whole.
  const auto row_for_row = [&](const torch::Tensor& y, std::int64_t n) {
    return y.defined() && y.dim() == first.dim() && y.size(0) == n && y.numel() == n * y.size(-1);
  };
  // The first block alone gives the output's width and dtype.
  const auto y0 = fn(block_inputs(0, block), p, params);
  if (!row_for_row(y0, block)) return {};
  auto out = torch::empty({rows, y0.size(-1)}, y0.options());
  out.narrow(0, 0, block).copy_(y0.reshape({block, out.size(1)}));
  // The other blocks across the intra-op threads, each block on one thread: ATen runs the
  // operators inside a parallel region serially, so a thread's block stays in its own L2
  // and no operator pays a fork and join (which, on blocks this small, cost more than the
  // cache saved when the operators themselves were split across the threads).
  const auto blocks = (rows + block - 1) / block;
  std::atomic<bool> shaped{true};
  at::parallel_for(1, blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    for (auto b = b0; b < b1 && shaped; ++b) {
      const auto start = b * block, n = std::min(block, rows - start);
      const auto y = fn(block_inputs(start, n), p, params);
      if (!row_for_row(y, n) || y.size(-1) != out.size(1) || y.scalar_type() != out.scalar_type()) {
        shaped = false;
        return;
      }
      out.narrow(0, start, n).copy_(y.reshape({n, out.size(1)}));
    }
  });
  if (!shaped) return {};
  auto shape = row_dims.vec();
  shape.push_back(out.size(1));
  return out.view(shape);
}

}  // namespace kcert::engine
