#include "harness/kernels/vjp.hpp"

#include <stdexcept>

#include <torch/csrc/autograd/autograd.h>

namespace kcert::kernels {

Gradients autograd_vjp(const KernelFn& fn, const KernelInputs& inputs, const std::vector<std::string>& wrt,
                       const numerics::Precision& policy, const ParamMap& params, const torch::Tensor& dy) {
  if (wrt.empty()) throw std::invalid_argument("autograd_vjp: no input to differentiate with respect to");
  KernelInputs leaves = inputs;
  std::vector<torch::Tensor> wrt_tensors;
  for (const auto& name : wrt) {
    if (!inputs.has(name)) throw std::invalid_argument("autograd_vjp: no input named '" + name + "'");
    const auto& t = inputs.at(name);
    if (!t.is_floating_point()) {
      throw std::invalid_argument("autograd_vjp: input '" + name + "' is " + std::string(c10::toString(t.scalar_type())) +
                                  ", not floating: it has no gradient");
    }
    // detach().clone(): a leaf of this graph only, whatever the caller's tensor is part of.
    auto leaf = t.detach().clone().requires_grad_(true);
    leaves.set(name, leaf);
    wrt_tensors.push_back(leaf);
  }
  torch::AutoGradMode grad_on(true);
  const auto y = fn(leaves, policy, params);
  if (!y.defined() || y.sizes() != dy.sizes()) {
    throw std::invalid_argument("autograd_vjp: dy has shape " + c10::str(dy.sizes()) + ", the output " +
                                (y.defined() ? c10::str(y.sizes()) : std::string("is undefined")));
  }
  Gradients out;
  if (!y.requires_grad()) {
    // The output does not depend on any of them (or only through non-differentiable steps).
    for (const auto& name : wrt) out[name] = torch::Tensor();
    return out;
  }
  // dy in the output's dtype: a W-typed output receives a W-typed upstream gradient.
  const auto grads = torch::autograd::grad({y}, wrt_tensors, {dy.to(y.scalar_type())}, /*retain_graph=*/false,
                                           /*create_graph=*/false, /*allow_unused=*/true);
  for (std::size_t i = 0; i < wrt.size(); ++i) out[wrt[i]] = grads[i];
  return out;
}

Gradients variant_vjp(const Variant& variant, const KernelInputs& inputs, const std::vector<std::string>& wrt,
                      const numerics::Precision& policy, const ParamMap& params, const torch::Tensor& dy) {
  if (!variant.backward) return autograd_vjp(variant.fn, inputs, wrt, policy, params, dy);
  torch::NoGradGuard no_grad;  // a hand-written VJP is plain arithmetic
  auto out = variant.backward(inputs, policy, params, dy, wrt);
  for (const auto& name : wrt) out.try_emplace(name, torch::Tensor());
  return out;
}

}  // namespace kcert::kernels
