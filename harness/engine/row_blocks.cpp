#include "harness/engine/row_blocks.hpp"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "harness/engine/draw.hpp"

namespace kcert::engine {

namespace {

// ATen's vectorized loops compute an operator's last elements (fewer than two vectors) with its
// scalar function, which for exp, tanh, erf and the like can differ from the vector one in the
// last bit. Blocks of whole rows end where rows end; with every width a multiple of 64 (two
// vectors of the widest lane count, 32 bf16) no block has such a tail, so blocking moves no
// element between the two paths. Other widths are evaluated whole.
constexpr std::int64_t kWidthMultiple = 64;

}  // namespace

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
    if (t.size(-1) % kWidthMultiple != 0) return {};
    widest = std::max(widest, t.size(-1));
  }
  const auto rows = c10::multiply_integers(row_dims);
  // Two rows at least, so that a block's reductions never have a single output, which ATen
  // splits across threads outside a parallel region; inside one (where every block runs) they
  // are serial anyway, so the last block may hold one row.
  const auto block = std::max<std::int64_t>(2, block_elements / widest);
  if (block >= rows) return {};
  // Each input as [rows, 1, ..., last] (a view of the batch), so a block is a narrow of it.
  std::vector<std::pair<std::string, torch::Tensor>> flat;
  for (const auto& [name, t] : tensors) {
    std::vector<std::int64_t> shape(static_cast<std::size_t>(t.dim()), 1);
    shape.front() = rows;
    shape.back() = t.size(-1);
    flat.emplace_back(name, t.reshape(shape));
  }
  // Every block on one thread, inside the parallel region: ATen runs operators there serially,
  // so a thread's block stays in its own L2 and no operator pays a fork and join (which, on
  // blocks this small, cost more than the cache saved when the operators were split across
  // threads). The output is allocated by the first block to finish, from its width and dtype.
  const auto blocks = (rows + block - 1) / block;
  const at::ThreadLocalState caller;  // grad mode and the rest, as the caller runs
  std::mutex mutex;
  torch::Tensor out;
  bool row_for_row = true;
  at::parallel_for(0, blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
    at::ThreadLocalStateGuard state(caller);
    for (auto b = b0; b < b1; ++b) {
      const auto start = b * block, n = std::min(block, rows - start);
      kernels::KernelInputs part;
      for (const auto& [name, t] : flat) part.set(name, t.narrow(0, start, n));
      const auto y = fn(merge(fixed, part), p, params);
      {
        std::lock_guard<std::mutex> lock(mutex);
        // One output row per input row, at the batch's rank, the same width and dtype in every
        // block, a width without vector tails: anything else is evaluated whole.
        if (!row_for_row) return;
        if (!y.defined() || y.dim() != first.dim() || y.size(0) != n || y.numel() != n * y.size(-1) ||
            y.size(-1) % kWidthMultiple != 0 ||
            (out.defined() && (y.size(-1) != out.size(1) || y.scalar_type() != out.scalar_type()))) {
          row_for_row = false;
          return;
        }
        if (!out.defined()) out = torch::empty({rows, y.size(-1)}, y.options());
      }
      out.narrow(0, start, n).copy_(y.reshape({n, y.size(-1)}));
    }
  });
  if (!row_for_row) return {};
  auto shape = row_dims.vec();
  shape.push_back(out.size(1));
  return out.view(shape);
}

torch::Tensor evaluate_variant(const kernels::Family& family, const kernels::Variant& v, const kernels::KernelInputs& fixed,
                               const kernels::KernelInputs& batch, const numerics::Precision& p,
                               const kernels::ParamMap& params, torch::Device device) {
  if (family.row_separable && !family.selects && v.in_row_blocks && v.schema.origin == "builtin" && device.is_cpu()) {
    auto blocked = evaluate_in_row_blocks(v.fn, fixed, batch, p, params);
    if (blocked.defined()) return blocked;
  }
  return v.fn(merge(fixed, batch), p, params);
}

}  // namespace kcert::engine
