#pragma once
// Row-blocked evaluation of a row-separable family's kernel (issue 37). RMSNorm-type kernels
// make several elementwise passes over fp32 or fp64 intermediates the size of their input;
// over a whole batch those stream through memory, and every operator forks and joins the
// intra-op threads. Here each thread takes whole blocks of rows and runs the kernel on them
// alone (ATen runs operators inside a parallel region serially), so a block's intermediates
// stay in that core's L2. The output is the bits of the whole batch evaluated on one thread:
// each row is computed by the same ATen calls on the same row, at widths that are multiples of
// 64 (row_blocks.cpp says why), and it does not depend on the thread count. A whole batch on
// several threads gives those bits too wherever ATen's per-thread chunks end on a multiple of
// 64 elements (on two threads the controls' documents came out identical); where they do not,
// its exp, tanh or erf can differ in the last bit at a chunk's end, with the thread count
// (tests/engine/test_row_blocks.cpp checks every built-in variant of every row-separable
// family). docs/benchmarks.md, "Row-blocked evaluation", has the times.
#include <cstdint>

#include "harness/kernels/registry.hpp"
#include "harness/numerics/precision.hpp"
#include "harness/numerics/torch_api.hpp"

namespace kcert::engine {

// Elements of the widest per-replicate input in one block: 2^16 (256 KiB of an fp32
// intermediate, 512 KiB of fp64) was the best overall of 2^14, 2^15, 2^16 and 2^18 on five
// RMSNorm controls, on a 2-vCPU EPYC with 1 MiB of L2 per core: smaller blocks pay the
// operator calls more often, larger ones leave the cache.
inline constexpr std::int64_t kRowBlockElements = std::int64_t{1} << 16;

// `fn` on `fixed` plus `batched`, block by block of rows: every tensor of `batched` is
// [rows..., last] with the same leading (row) dimensions, and each block holds whole rows
// (two at least, but the last), given to the kernel with the same rank as the batch
// ([n, 1, ..., last]).
// The kernel's output must be one row per input row ([n, 1, ..., out_last]); it is stacked
// back to [rows..., out_last]. Returns an undefined tensor where blocking does not apply (the
// inputs' rows differ, a width is not a multiple of 64, one block would hold every row, or a
// block's output is not shaped row for row): the caller then evaluates the batch whole. A
// kernel's exception reaches the caller.
torch::Tensor evaluate_in_row_blocks(const kernels::KernelFn& fn, const kernels::KernelInputs& fixed,
                                     const kernels::KernelInputs& batched, const numerics::Precision& p,
                                     const kernels::ParamMap& params, std::int64_t block_elements = kRowBlockElements);

// One variant of `family` on `fixed` plus `batch`, the way the engine evaluates it: in row
// blocks where the family is row-separable (and does not select: its kernels' near-tie notes
// are one set per call), the variant is one of the family's own opted-in built-in variants
// (a plugin's or a Python file's rows are its own business, and a Python call per block would
// cost more than the cache saves), the device is the CPU and the batch allows; else whole.
torch::Tensor evaluate_variant(const kernels::Family& family, const kernels::Variant& v, const kernels::KernelInputs& fixed,
                               const kernels::KernelInputs& batch, const numerics::Precision& p,
                               const kernels::ParamMap& params, torch::Device device);

}  // namespace kcert::engine
