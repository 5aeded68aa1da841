#pragma once
// How much memory a case needs, from its shapes alone, before anything is allocated. The
// engine sizes its batches with it and the commands refuse, at load, a case that cannot fit
// (issue 13: `tokens: 4000000` reached 5.9 GB and asked for 8 GB more; `tokens: 1e12` asked
// LibTorch for a petabyte). Free of LibTorch: shapes in, element counts out.
#include <cstdint>
#include <optional>
#include <string>

#include "harness/kernels/schema.hpp"

namespace kcert::kernels {

// Element counts of one replicate (without the batch dimension), and of the fixed inputs.
// Doubles: a hostile shape must not overflow the arithmetic that refuses it.
struct Footprint {
  double input = 0;    // the family's per-replicate input tensors, together
  double output = 0;   // one output
  double work = 0;     // the largest intermediate the kernels build (attention scores, ...)
  double fixed = 0;    // weights and tables, drawn once per case
};

// The footprint of a shipped family; nullopt for a family kcert does not know (a plugin's),
// whose batches are then sized from the tensors of its first replicate.
std::optional<Footprint> builtin_footprint(const std::string& family, const ProbeContract& probe);

// Bytes the engine holds for one replicate of a batch, and for the case's fixed part, when
// the outputs are `output_bytes` wide (2 for bf16/fp16, 4 for fp32). The factors count the
// copies the engine makes, not a guess at the allocator: inputs are drawn in fp32, stacked,
// and copied to W and to fp64 (4 + 4 + 4 + 8 = 20 bytes per element); outputs exist as ref
// and prod in W, the fp64 oracle, a second oracle for selecting families, and the sweep's
// fp64 views of ref and prod (2w + 8·oracles + 16); intermediates are fp64 under the oracle's
// policy, and kernels keep about two alive (16 bytes per element).
struct MemoryEstimate {
  double inputs = 0, outputs = 0, intermediates = 0;  // bytes per replicate, by part
  double fixed = 0;
  double per_call = 0;  // bytes once per kernel call, whatever its batch (a backward's autograd graph)
  double per_replicate() const { return inputs + outputs + intermediates; }
  double at_batch(double batch) const { return fixed + per_call + per_replicate() * batch; }
};
MemoryEstimate estimate_memory(const Footprint& f, int output_bytes, bool selects);

// A backward case (direction: backward; issue 53: it was estimated as its forward, and a
// router case measured 4.6 times its estimate). Per replicate of a batch the engine keeps the
// inputs (20 bytes per element, as forward), the upstream gradient dy (drawn in fp64, rounded
// to W, kept in fp64: 16 + w bytes per output element) and each side's gradient (ref and prod
// in W, one fp64 oracle, two for selecting families), concatenated once more at the batch's
// end, plus the sweep's fp64 views: 2·(2w + 8 per oracle) + 16 bytes per gradient element.
// Once per kernel call it holds one replicate's autograd graph in fp64 (the oracle's VJP: its
// forward's saved tensors and their gradients), 16 bytes per input, intermediate and output
// element. `gradient` is the gradient's elements per replicate; 0 (at load, before the gradient
// is known): the larger of the per-replicate inputs and the fixed weights, which bounds dx and
// dW alike. Measured against it at contract shapes (docs/testcases.md): 1.1-1.8 times.
MemoryEstimate estimate_backward_memory(const Footprint& f, int output_bytes, bool selects, double gradient = 0);

// "3.2 GiB", "512 MiB": sizes for messages.
std::string describe_bytes(double bytes);

}  // namespace kcert::kernels
