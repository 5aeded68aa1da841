// GLU MLP family (SwiGLU): h = silu(x Wg^T) · (x Wu^T), with the gate/up fusion and
// activation cast points the controls replay (G3, #32).
//
// Inputs: x [B, tokens, hidden] per replicate; Wg, Wu [intermediate, hidden] fixed.
// Output [B, tokens, intermediate]. Bucket axes: channel (intermediate unit, the default), row.
#include <cmath>

#include "harness/kernels/probe.hpp"
#include "harness/kernels/registry.hpp"

namespace kcert::kernels {

namespace {

using numerics::Precision;

Variant variant(std::string name, std::string description, KernelFn fn) {
  return builtin_variant(std::move(name), std::move(description), {}, std::move(fn));
}

// A projection as a bf16 GEMM on the oneDNN path computes it: fp32 products and sums, one rounding.
torch::Tensor project(const torch::Tensor& x, const torch::Tensor& w, const Precision& p) {
  return p.round_w(torch::matmul(p.up(x), p.up(w).t()));
}

// Llama MLP cast points: silu in fp32, rounded to W, then a W multiply by the up projection.
torch::Tensor silu_then_mul(const torch::Tensor& g, const torch::Tensor& u, const Precision& p) {
  const auto a = p.round_w(torch::silu(p.up(g)));
  return p.round_w(p.up(a) * p.up(u));
}

std::vector<Variant> glu_variants() {
  std::vector<Variant> v;
  v.push_back(variant("llama_separate",
                      "Llama MLP: separate gate and up projections, silu rounded to W, then a W multiply",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        return silu_then_mul(project(in.at("x"), in.at("Wg"), p), project(in.at("x"), in.at("Wu"), p), p);
                      }));
  v.push_back(variant("fused_gate_up",
                      "Phi-3 structure: one projection by [Wg; Wu], chunked into gate and up, same activation (#32)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto gu = project(in.at("x"), torch::cat({in.at("Wg"), in.at("Wu")}, 0), p);
                        const auto parts = gu.chunk(2, -1);
                        return silu_then_mul(parts[0], parts[1], p);
                      }));
  v.push_back(variant("liger_fused_gate_up_silu_mul",
                      "Liger-Kernel's LigerPhi3SwiGLUMLP: one projection by [Wg; Wu] chunked into gate and up, "
                      "then its SiLU-mul Triton kernel: silu(a) = a·sigmoid(a) on the fp32 gate, times the W up "
                      "value promoted to fp32, one rounding at the store",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto gu = project(in.at("x"), torch::cat({in.at("Wg"), in.at("Wu")}, 0), p);
                        const auto parts = gu.chunk(2, -1);
                        const auto g = p.up(parts[0]);
                        return p.round_w(g * torch::sigmoid(g) * p.up(parts[1]));
                      }));
  v.push_back(variant("fused_act_mul_fp32",
                      "fused GLU epilogue: silu(g)·u in fp32 and one rounding (G3: mistral.rs#1867, TE#717)",
                      [](const KernelInputs& in, const Precision& p, const ParamMap&) {
                        const auto g = project(in.at("x"), in.at("Wg"), p), u = project(in.at("x"), in.at("Wu"), p);
                        return p.round_w(torch::silu(p.up(g)) * p.up(u));
                      }));
  return v;
}

KernelInputs make_fixed(const ProbeContract& probe, std::uint64_t seed) {
  const auto h = probe.params.integer("shape.hidden"), i = probe.params.integer("shape.intermediate");
  InputStream stream(seed);
  const double s = probe.params.number("weights.gain") / std::sqrt(static_cast<double>(h));
  KernelInputs fixed;
  fixed.set("Wg", (stream.normal({i, h}, torch::kFloat64) * s).to(numerics::to_dtype(probe.dtype)));
  fixed.set("Wu", (stream.normal({i, h}, torch::kFloat64) * s).to(numerics::to_dtype(probe.dtype)));
  return fixed;
}

}  // namespace

void register_glu_family(Registry& registry) {
  Family f;
  f.name = "glu";
  f.description = "SwiGLU MLP up-projection: x [tokens, hidden], Wg and Wu [intermediate, hidden]";
  f.bucket_axes = {"channel", "row"};
  f.probe_params = {
      param::integer("shape.tokens", 32).at_least(1).doc("tokens per replicate"),
      param::integer("shape.hidden", 1024).at_least(1).doc("hidden size"),
      param::integer("shape.intermediate", 2048).at_least(1).doc("intermediate size"),
      param::number("weights.gain", 1.0).at_least(0).doc("projection weights ~ N(0, gain²/hidden): pre-activations of order gain"),
  };
  f.validate_probe = [](const ProbeContract& probe) { return check_outlier_count(probe, "shape.hidden"); };
  f.make_fixed = make_fixed;
  f.make_replicate = [](const ProbeContract& probe, const KernelInputs&, std::uint64_t seed) {
    return token_channel_activations(probe, "shape.tokens", "shape.hidden", seed);
  };
  f.bucket_ids = [](const std::string& axis, const ProbeContract&, at::IntArrayRef shape) {
    return token_channel_bucket_ids(axis, shape);
  };
  for (auto& v : glu_variants()) f.variants.emplace(v.schema.name, std::move(v));
  registry.add_family(std::move(f));
}

}  // namespace kcert::kernels
