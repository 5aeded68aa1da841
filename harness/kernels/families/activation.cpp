// Activation family: elementwise GELU / SiLU, with the real LibTorch kernels and the
// formula rewrites the controls replay (G1, #10, #11, #34, #35), and the embedding
// normalizer's scale constant (G2), an elementwise multiply by a constant.
//
// Inputs: x [B, tokens, channels] per replicate (pre-activations; the catalog's probes use
// scale 3). Output like x. Bucket axes: channel (default), row.
//
// Backward (issue 31): the gradient dx, buckets as the output. Autograd of each forward,
// except the explicit backwards replaying a sigmoid / SiLU backward kernel (BN24, BP13).
#include <cmath>

#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::kernels {

namespace {

using numerics::Precision;

Variant variant(std::string name, std::string description, KernelFn fn, std::vector<ParamSpec> params = {}) {
  return builtin_variant(std::move(name), std::move(description), std::move(params), std::move(fn));
}

const std::vector<ParamSpec> kHiddenParam = {
    param::integer("hidden", 3072).at_least(1).doc("model width H; the embedding normalizer is sqrt(H) (3072: 55.4256, 55.5 in bf16)")};

torch::Tensor gelu_tanh_formula(const torch::Tensor& u) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * u * (1.0 + torch::tanh(k * (u + 0.044715 * u * u * u)));
}

// An explicit elementwise backward: dx = dy · f'(x), f' from `derivative` on the fp32 input
// and the policy; one rounding at the store.
Variant with_backward(Variant v, std::function<torch::Tensor(const torch::Tensor& u, const Precision&)> derivative) {
  v.backward = [derivative](const KernelInputs& in, const Precision& p, const ParamMap&, const torch::Tensor& dy,
                            const std::vector<std::string>& wrt) {
    Gradients g;
    for (const auto& name : wrt)
      if (name == "x") g["x"] = p.round_w(p.up(dy) * derivative(p.up(in.at("x")), p));
    return g;
  };
  return v;
}

torch::Tensor sigmoid_fp32(const KernelInputs& in, const Precision& p, const ParamMap&) {
  return p.round_w(torch::sigmoid(p.up(in.at("x"))));
}

std::vector<Variant> backward_variants() {
  std::vector<Variant> v;
  v.push_back(with_backward(
      variant("sigmoid_bwd_from_w_output",
              "sigmoid whose backward forms s·(1 - s) from the output saved in W: once s rounds to 1 (x > 6.25 in "
              "bf16) the gradient is exactly 0 (BN24: tenstorrent/tt-metal#55727)",
              sigmoid_fp32),
      [](const torch::Tensor& u, const Precision& p) {
        const auto s = p.up(p.round_w(torch::sigmoid(u)));
        return s * (1.0 - s);
      }));
  v.push_back(with_backward(
      variant("sigmoid_bwd_symmetric",
              "sigmoid whose backward is sigmoid(x)·sigmoid(-x) in fp32: no cancellation in the tails (the "
              "tt-metal#55727 fix)",
              sigmoid_fp32),
      [](const torch::Tensor& u, const Precision&) { return torch::sigmoid(u) * torch::sigmoid(-u); }));
  v.push_back(with_backward(
      variant("silu_bwd_kernel_fp32",
              "SiLU with a fused backward kernel: s·(1 + x·(1 - s)) in fp32, one rounding (BP13: tt-metal#25263's "
              "SiLU backward kernel against the composite)",
              [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                const auto u = p.up(in.at("x"));
                return p.round_w(u * torch::sigmoid(u));
              }),
      [](const torch::Tensor& u, const Precision&) {
        const auto s = torch::sigmoid(u);
        return s * (1.0 + u * (1.0 - s));
      }));
  return v;
}

std::vector<Variant> activation_variants() {
  std::vector<Variant> v = backward_variants();
  v.push_back(variant("sigmoid_fp32", "sigmoid on the upcast input, one rounding (a sigmoid gate or router)", sigmoid_fp32));
  v.push_back(variant("gelu_erf_aten_fp32", "ATen's exact (erf) GELU kernel on the upcast input, one rounding",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        return p.round_w(at::gelu(p.up(in.at("x"))));
                      }));
  v.push_back(variant("gelu_erf_formula_fp32", "0.5·u·(1 + erf(u/√2)) with at::erf in fp32, one rounding (#35)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto u = p.up(in.at("x"));
                        return p.round_w(0.5 * u * (1.0 + torch::erf(u * M_SQRT1_2)));
                      }));
  v.push_back(variant("gelu_tanh_formula_fp32",
                      "tanh-approximated GELU written out in fp32, one rounding (Gemma's trained activation)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        return p.round_w(gelu_tanh_formula(p.up(in.at("x"))));
                      }));
  v.push_back(variant("gelu_tanh_aten_w",
                      "ATen's tanh GELU kernel called on the W tensor: on LibTorch 1.13 it rounds its "
                      "intermediates to W (#11, positive catalog finding 3)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        // The real kernel on the real dtype; under the exact policy it is fp64.
                        return p.round_w(at::gelu(p.is_exact() ? in.at("x") : in.at("x").to(p.working_dtype()), "tanh"));
                      }));
  v.push_back(variant("silu_fp32", "u·sigmoid(u) in fp32, one rounding",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto u = p.up(in.at("x"));
                        return p.round_w(u * torch::sigmoid(u));
                      }));
  v.push_back(variant("silu_exp_form_fp32", "u / (1 + exp(-u)) in fp32, one rounding (#34)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto u = p.up(in.at("x"));
                        return p.round_w(u / (1.0 + torch::exp(-u)));
                      }));
  v.push_back(variant("silu_aten_w",
                      "ATen's SiLU kernel called on the W tensor: on LibTorch 1.13 every sub-step rounds to W (#10)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        return p.round_w(at::silu(p.is_exact() ? in.at("x") : in.at("x").to(p.working_dtype())));
                      }));
  v.push_back(variant("embed_scale_w_constant",
                      "embedding times the normalizer sqrt(H) built in W (`tensor(H**0.5, dtype=W)`, 55.5 for "
                      "H = 3072) and multiplied in W: Gemma's trained behaviour (G2 reference, gemma_pytorch#67)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
                        const double normalizer = std::sqrt(static_cast<double>(prm.integer("hidden")));
                        return p.round_w(p.up(in.at("x")) * p.constant_w(normalizer));
                      },
                      kHiddenParam));
  v.push_back(variant("embed_scale_fp32_constant",
                      "embedding times the exact fp32 sqrt(H), one rounding (G2 defect: transformers#29402, "
                      "litgpt#1031)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap& prm) {
                        const double normalizer = std::sqrt(static_cast<double>(prm.integer("hidden")));
                        const double c = p.is_exact() ? normalizer : static_cast<double>(static_cast<float>(normalizer));
                        return p.round_w(p.up(in.at("x")) * c);
                      },
                      kHiddenParam));
  return v;
}

}  // namespace

void register_activation_family(Registry& registry) {
  Family f;
  f.name = "activation";
  f.description = "elementwise activation (GELU, SiLU, sigmoid): x [tokens, channels]";
  f.bucket_axes = {"channel", "row"};
  f.probe_params = {
      param::integer("shape.tokens", 512).at_least(1).doc("tokens per replicate"),
      param::integer("shape.channels", 512).at_least(1).doc("channels"),
  };
  f.validate_probe = [](const ProbeContract& probe) { return check_outlier_count(probe, "shape.channels"); };
  f.row_separable = true;
  f.make_fixed = [](const ProbeContract&, std::uint64_t) { return KernelInputs{}; };
  f.make_replicate = [](const ProbeContract& probe, const KernelInputs&, std::uint64_t seed) {
    return token_channel_activations(probe, "shape.tokens", "shape.channels", seed);
  };
  f.bucket_ids = [](const std::string& axis, const ProbeContract&, at::IntArrayRef shape) {
    return token_channel_bucket_ids(axis, shape);
  };
  f.gradients = {input_gradient({"dx", "x", {"channel", "row"}, "", "gradient of the pre-activation, per token and channel"},
                                 token_channel_buckets())};
  for (auto& v : activation_variants()) {
    v.in_row_blocks = true;  // every forward here is row for row
    f.variants.emplace(v.schema.name, std::move(v));
  }
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
