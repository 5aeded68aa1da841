#pragma once
// The backward of a variant by autograd through its forward (issue 31's default backward):
// the vector-Jacobian product dyᵀ·∂f/∂input for each named input, computed through the
// forward's own operations under the same precision policy. The forward's roundings and dtype
// casts are then the backward's too — ATen's backward formulas, a W-typed gradient where the
// forward reads a W-typed input — which is what the Hugging Face eager reference's backward
// is. Under the exact policy it is the fp64 VJP of the real function: the backward's oracle.
//
// Policy operations that are not differentiable in ATen (bit-level truncation, TF32 operand
// rounding) give no gradient through them; a variant that uses them needs an explicit
// backward (Variant::backward).
#include <map>
#include <string>
#include <vector>

#include "harness/kernels/registry.hpp"

namespace kcert::kernels {

// Gradients (registry.hpp) by input name. A name whose gradient autograd does not reach (the
// output does not depend on it) maps to an undefined tensor: the caller judges a missing
// gradient (an algebra FAIL with its own message), it is not an exception here.

// Runs `fn` with grad mode on, the inputs named in `wrt` as leaves that require grad (copies:
// the caller's tensors are untouched), and returns the VJP against `dy`. Throws
// std::invalid_argument when `wrt` is empty, names an input that is missing or not floating,
// or when dy's shape differs from the output's; the message names what.
Gradients autograd_vjp(const KernelFn& fn, const KernelInputs& inputs, const std::vector<std::string>& wrt,
                       const numerics::Precision& policy, const ParamMap& params, const torch::Tensor& dy);

}  // namespace kcert::kernels

namespace kcert::kernels {

// The variant's backward: its explicit one when it declares one, else autograd through its
// forward (autograd_vjp).
Gradients variant_vjp(const Variant& variant, const KernelInputs& inputs, const std::vector<std::string>& wrt,
                      const numerics::Precision& policy, const ParamMap& params, const torch::Tensor& dy);

}  // namespace kcert::kernels
